"""Every crossing between ONNX protos and onnx-ir models, with stand-ins for what onnx-ir cannot hold.

onnx-ir reads neither sparse tensors (a Constant's ``sparse_value``, a graph's ``sparse_initializer``) nor map
types (the ``seq(map(int64, tensor(float)))`` a ZipMap writes, in every scikit-learn classifier export). ONNX
Runtime runs such models, so ampconfig takes them: those parts cross into the IR as stand-ins, are kept exactly as
they are, and are put back when the model becomes a proto again.

- A node with an attribute onnx-ir cannot read (a sparse tensor, a type holding a map) keeps its op, inputs and
  outputs; that attribute is set aside, and the node carries :data:`STAND_IN_ATTRIBUTE` (an index into the set).
- A sparse initializer becomes a stand-in Constant, first in its graph, producing the same value.
- A type holding a map becomes a sequence of the map's key type, marked with :data:`_STAND_IN_DENOTATION`; the
  declared type is put back by value name (an undeclared stand-in type is dropped again).

Decisions keep every stand-in node and every node that reads a stand-in's value at its dtype (``decide/facts.py``).
What is set aside lives in the model's ``meta`` (never serialised); only :func:`to_proto` and the savers here
put it back, so every conversion goes through this module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

import onnx
import onnx_ir as ir
from google.protobuf.message import Message

from ampconfig.errors import AmpconfigError

M = TypeVar("M", bound=Message)

#: The attribute that marks a stand-in node; its value indexes the parts set aside.
STAND_IN_ATTRIBUTE = "ampconfig_stand_in"
_STAND_IN_DENOTATION = "ampconfig_stand_in"
_STASH_KEY = "ampconfig.stand_ins"

_SPARSE_ATTRIBUTES = (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS)
_TYPE_ATTRIBUTES = (onnx.AttributeProto.TYPE_PROTO, onnx.AttributeProto.TYPE_PROTOS)


class StandIn(str, Enum):
    """What a stand-in node stands in for."""

    SPARSE = "sparse tensor"
    MAP = "map type"


@dataclass
class _SetAside:
    """One stand-in node's original parts: the attributes onnx-ir cannot read, or a whole sparse initializer."""

    kind: StandIn
    attributes: list[onnx.AttributeProto] = field(default_factory=list)
    sparse_initializer: onnx.SparseTensorProto | None = None


@dataclass
class _Stash:
    nodes: list[_SetAside] = field(default_factory=list)
    types: dict[str, onnx.TypeProto] = field(default_factory=dict)  # declared types holding a map, by value name

    def __bool__(self) -> bool:
        return bool(self.nodes or self.types)


# ------------------------------------------------------------------------------------------------ proto -> IR
def _holds_map(type_proto: onnx.TypeProto) -> bool:
    kind = type_proto.WhichOneof("value")
    if kind == "map_type":
        return True
    if kind == "sequence_type":
        return _holds_map(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return _holds_map(type_proto.optional_type.elem_type)
    return False


def _stand_in_type(type_proto: onnx.TypeProto) -> onnx.TypeProto:
    """A type onnx-ir reads in place of one holding a map: not a tensor, so no decision retypes what touches it."""
    key_type = _first_map(type_proto).map_type.key_type
    stand_in = onnx.helper.make_sequence_type_proto(onnx.helper.make_tensor_type_proto(key_type, None))
    stand_in.denotation = _STAND_IN_DENOTATION
    return stand_in


def _first_map(type_proto: onnx.TypeProto) -> onnx.TypeProto:
    while type_proto.WhichOneof("value") != "map_type":
        kind = type_proto.WhichOneof("value")
        type_proto = getattr(type_proto, kind).elem_type
    return type_proto


def _unreadable(attribute: onnx.AttributeProto) -> StandIn | None:
    if attribute.type in _SPARSE_ATTRIBUTES:
        return StandIn.SPARSE
    if attribute.type == onnx.AttributeProto.TYPE_PROTO and _holds_map(attribute.tp):
        return StandIn.MAP
    if attribute.type == onnx.AttributeProto.TYPE_PROTOS and any(_holds_map(tp) for tp in attribute.tps):
        return StandIn.MAP
    return None


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def _needs_stand_ins(graph: onnx.GraphProto) -> bool:
    if graph.sparse_initializer:
        return True
    if any(_holds_map(value.type) for value in (*graph.input, *graph.output, *graph.value_info)):
        return True
    for node in graph.node:
        for attribute in node.attribute:
            # One look at the type first: most attributes (ints, floats, strings) need nothing (25k nodes: 0.1 s).
            if attribute.type not in _MAYBE_STAND_IN:
                continue
            if _unreadable(attribute) is not None:
                return True
            subgraphs = ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
            if any(_needs_stand_ins(subgraph) for subgraph in subgraphs):
                return True
    return False


#: The attribute types :func:`_needs_stand_ins` looks into: the sparse ones, type protos, subgraphs, and an unset
#: type (an old model's attribute, read by its fields).
_MAYBE_STAND_IN = frozenset(
    {
        *_SPARSE_ATTRIBUTES,
        onnx.AttributeProto.TYPE_PROTO,
        onnx.AttributeProto.TYPE_PROTOS,
        onnx.AttributeProto.GRAPH,
        onnx.AttributeProto.GRAPHS,
        onnx.AttributeProto.UNDEFINED,
    }
)


def _stand_in_node(stash: _Stash, set_aside: _SetAside) -> onnx.AttributeProto:
    stash.nodes.append(set_aside)
    return onnx.helper.make_attribute(STAND_IN_ATTRIBUTE, len(stash.nodes) - 1)


def _set_aside(graph: onnx.GraphProto, stash: _Stash, source: str | None) -> None:
    for entries in (graph.input, graph.output, graph.value_info):
        for value in entries:
            if _holds_map(value.type):
                stash.types.setdefault(value.name, _copied(value.type))
                value.type.CopyFrom(_stand_in_type(value.type))
    for node in graph.node:
        kinds = [_unreadable(attribute) for attribute in node.attribute]
        if any(kind is not None for kind in kinds):
            kind = StandIn.SPARSE if StandIn.SPARSE in kinds else StandIn.MAP
            kept = [_copied(attribute) for attribute, k in zip(node.attribute, kinds) if k is None]
            aside = _SetAside(
                kind, [_copied(attribute) for attribute, k in zip(node.attribute, kinds) if k is not None]
            )
            for attribute in aside.attributes:
                for sparse in (
                    *([attribute.sparse_tensor] if attribute.HasField("sparse_tensor") else []),
                    *attribute.sparse_tensors,
                ):
                    _refuse_external(sparse, source)
            del node.attribute[:]
            node.attribute.extend([*kept, _stand_in_node(stash, aside)])
        for subgraph in _subgraphs(node):
            _set_aside(subgraph, stash, source)
    stand_ins = []
    for sparse in graph.sparse_initializer:
        _refuse_external(sparse, source)
        marker = _stand_in_node(stash, _SetAside(StandIn.SPARSE, sparse_initializer=_copied(sparse)))
        name = sparse.values.name
        stand_in = onnx.helper.make_node("Constant", [], [name], name=f"{name} (sparse initializer)")
        stand_in.attribute.append(marker)
        stand_ins.append(stand_in)
        # ONNX Runtime reads a sparse initializer as the dense tensor it describes: so is its value typed here.
        graph.value_info.append(onnx.helper.make_tensor_value_info(name, sparse.values.data_type, sparse.dims))
    if stand_ins:
        nodes = [*stand_ins, *graph.node]
        del graph.node[:]
        graph.node.extend(nodes)
        del graph.sparse_initializer[:]


def _refuse_external(sparse: onnx.SparseTensorProto, source: str | None) -> None:
    """A sparse tensor is carried through as a proto: its values must be in the model, not in a data file whose
    location would no longer be next to the output."""
    for what, part in (("values", sparse.values), ("indices", sparse.indices)):
        if part.data_location == onnx.TensorProto.EXTERNAL:
            raise AmpconfigError(
                f"sparse tensor {sparse.values.name!r} keeps its {what} in an external data file, which ampconfig "
                "cannot carry into a rewritten model",
                file=source,
                hint="save the model with its sparse tensors inline (onnx.save without save_as_external_data)",
            )


def move_into(model: ir.Model, source: ir.Model) -> None:
    """Give ``model`` ``source``'s graph (and with it its opsets), functions, IR version and meta (what the
    bridge keeps of its graph: stand-ins; ``source`` is not used after)."""
    model.graph = source.graph
    model.functions.clear()
    model.functions.update(source.functions)
    model.ir_version = source.ir_version
    model.meta.clear()
    model.meta.update(source.meta)


def to_ir(proto: onnx.ModelProto, *, source: str | None = None) -> ir.Model:
    """The IR of ``proto`` (never modified), with stand-ins for the parts onnx-ir cannot hold. What onnx-ir still
    cannot read is a located :class:`AmpconfigError` naming ``source``."""
    stash = _Stash()
    if _needs_stand_ins(proto.graph):
        proto = _copied(proto)
        _set_aside(proto.graph, stash, source)
    try:
        model = ir.serde.deserialize_model(proto)
    except (ir.serde.SerdeError, NotImplementedError, ValueError, TypeError) as exc:
        raise AmpconfigError(
            f"ampconfig cannot represent part of this model: {_root_cause(exc)}",
            file=source,
            hint="ONNX Runtime may run it, but ampconfig's graph library (onnx-ir) cannot read that part",
        ) from None
    if stash:
        model.meta[_STASH_KEY] = stash
    return model


def _copied(message: M) -> M:
    """A detached copy: parts set aside must outlive the fields they are taken out of."""
    copy = type(message)()
    copy.CopyFrom(message)
    return copy


def _root_cause(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def release_mapped(tensor: ir.TensorProtocol | None) -> None:
    """Unmap a tensor read from a file once its values were used: its pages leave the process's memory (the page
    cache keeps them, and the tensor maps the file again if it is read again)."""
    if isinstance(tensor, ir.ExternalTensor):
        tensor.release()


class _FolderExternalTensor(ir.ExternalTensor):
    """An external tensor read only from inside its model's folder, by ampconfig's own check rather than onnx-ir's.

    onnx-ir checks containment only against a non-empty ``base_dir`` and then also refuses a data file with a
    second hard link; ONNX Runtime reads one, and so does ampconfig: a hard link inside the folder reads nothing the
    folder does not hold, and whoever can make one there can write the data file itself. So ``base_dir`` stays
    empty (onnx-ir's documented way for a caller that controls the paths itself: it then checks nothing), the
    location stays the relative one the model names (what is written back), and :attr:`path`, which onnx-ir opens
    for every read, joins the folder and the location after checking that the result stays inside the folder
    (no ``..`` out, no symlink out). Only public attributes of onnx-ir's class are used or replaced."""

    def __init__(self, tensor: ir.ExternalTensor, folder: str) -> None:
        super().__init__(
            tensor.location,
            tensor.offset,
            tensor.length,
            tensor.dtype,
            shape=tensor.shape,
            name=tensor.name,
            doc_string=tensor.doc_string,
            metadata_props=dict(tensor.metadata_props),
        )
        self.folder = folder
        self.meta.update(tensor.meta)

    @property
    def path(self) -> str:
        """The data file: the location inside the model's folder, checked each time it is asked for."""
        path = os.path.join(self.folder, self.location)
        folder = os.path.realpath(self.folder)
        if os.path.commonpath([folder, os.path.realpath(path)]) != folder:
            raise AmpconfigError(
                f"external data of tensor {self.name!r} ({self.location!r}) points outside the model's folder "
                f"({os.path.realpath(path)}); refused",
                hint="external data must live next to the model (ONNX requires relative locations)",
            )
        return path


def external_data_folder(tensor: ir.ExternalTensor) -> str:
    """The folder ``tensor``'s location is relative to: its model's (:func:`attach_external_data`), else onnx-ir's
    ``base_dir`` (a model :func:`onnx_ir.load` read)."""
    return tensor.folder if isinstance(tensor, _FolderExternalTensor) else os.fspath(tensor.base_dir)


def _in_folder(tensor: ir.TensorProtocol, folder: str) -> ir.TensorProtocol:
    return _FolderExternalTensor(tensor, folder) if isinstance(tensor, ir.ExternalTensor) else tensor


def attach_external_data(model: ir.Model, folder: str) -> None:
    """Point ``model``'s external tensors (initializers and tensor attributes, in every graph) at ``folder``, the
    model's own, which they are read from lazily and never outside of."""
    for graph in model.graphs():
        for value in graph.initializers.values():
            if value.const_value is not None:
                value.const_value = _in_folder(value.const_value, folder)
        for node in graph:
            for name, attribute in list(node.attributes.items()):
                if attribute.is_ref():
                    continue
                if attribute.type == ir.AttributeType.TENSOR:
                    node.attributes[name] = ir.AttrTensor(name, _in_folder(attribute.value, folder))
                elif attribute.type == ir.AttributeType.TENSORS:
                    node.attributes[name] = ir.AttrTensors(name, [_in_folder(t, folder) for t in attribute.value])


def ir_shape(shape: ir.ShapeProtocol) -> ir.Shape:
    """``shape`` as an ``ir.Shape``: itself for every onnx-ir tensor (their shapes are ``ir.Shape`` behind
    ``TensorProtocol.shape``), else a copy, a symbolic dimension by its name."""
    if isinstance(shape, ir.Shape):
        return shape
    return ir.Shape([dim if isinstance(dim, int) else dim.value for dim in shape])


def stand_in_type(model: ir.Model, name: str, type_proto: onnx.TypeProto) -> ir.TypeProtocol | None:
    """The IR type of value ``name`` of ``model`` from an (inferred) ``type_proto``: a stand-in for a type holding
    a map, put back by :func:`to_proto`."""
    if not _holds_map(type_proto):
        return ir.serde.deserialize_type_proto_for_type(type_proto)
    stash = model.meta.get(_STASH_KEY)
    if stash is None:
        stash = model.meta[_STASH_KEY] = _Stash()
    stash.types.setdefault(name, _copied(type_proto))
    return ir.serde.deserialize_type_proto_for_type(_stand_in_type(type_proto))


_GRAPHS_KEY = "ampconfig.graphs"


def model_graphs(model: ir.Model) -> list[ir.Graph]:
    """The main graph and every subgraph. onnx-ir's ``Model.graphs()`` walks every node each time (20 ms on 25k
    nodes); ampconfig never adds or removes subgraphs, so the walk is done once per model and kept in its
    (unserialised) ``meta``, for the decisions, the rewrite and the save."""
    cached = model.meta.get(_GRAPHS_KEY)
    if cached is None:
        cached = list(model.graphs())
        model.meta[_GRAPHS_KEY] = cached
    return cached


def sparse_initializer_stand_ins(model: ir.Model) -> set[ir.Node]:
    """The stand-in nodes of ``model`` that hold a whole sparse initializer: nodes its proto's graphs do not have
    (a sparse Constant's stand-in takes that Constant's place instead)."""
    stash = model.meta.get(_STASH_KEY)
    if stash is None or not stash.nodes:
        return set()
    return {
        node
        for graph in model.graphs()
        for node in graph
        if STAND_IN_ATTRIBUTE in node.attributes
        and stash.nodes[node.attributes[STAND_IN_ATTRIBUTE].value].sparse_initializer is not None
    }


def stand_in_nodes(model: ir.Model) -> dict[ir.Node, StandIn]:
    """Every stand-in node of ``model`` (every graph) with what it stands in for. Empty, with no walk over the
    nodes, for a model that has none (almost every model); a per-node question looks its node up here. A
    snapshot: the rewrite adds no stand-ins, but a caller that removes one asks again."""
    stash = model.meta.get(_STASH_KEY)
    if stash is None or not stash.nodes:
        return {}
    return {
        node: stash.nodes[node.attributes[STAND_IN_ATTRIBUTE].value].kind
        for graph in model.graphs()
        for node in graph
        if STAND_IN_ATTRIBUTE in node.attributes
    }


# ------------------------------------------------------------------------------------------------ IR -> proto
def to_proto(model: ir.Model) -> onnx.ModelProto:
    """``model`` as a proto, every stand-in replaced by what it stood in for."""
    proto = ir.serde.serialize_model(model)
    put_back(proto, model)
    return proto


def put_back(proto: onnx.ModelProto, model: ir.Model) -> None:
    """Replace, in ``proto`` (serialised from ``model``), every stand-in by the part it stood in for."""
    stash = model.meta.get(_STASH_KEY)
    if stash:
        _put_back(proto.graph, stash)


def _put_back(graph: onnx.GraphProto, stash: _Stash) -> None:
    nodes, restored = [], set()
    for node in graph.node:
        for subgraph in _subgraphs(node):
            _put_back(subgraph, stash)
        marker = next((a for a in node.attribute if a.name == STAND_IN_ATTRIBUTE), None)
        if marker is None:
            nodes.append(node)
            continue
        aside = stash.nodes[marker.i]
        if aside.sparse_initializer is not None:
            graph.sparse_initializer.append(aside.sparse_initializer)
            restored.add(aside.sparse_initializer.values.name)
            continue
        kept = [attribute for attribute in node.attribute if attribute.name != STAND_IN_ATTRIBUTE]
        del node.attribute[:]
        node.attribute.extend([*kept, *aside.attributes])
        nodes.append(node)
    if len(nodes) != len(graph.node):
        del graph.node[:]
        graph.node.extend(nodes)
    for entries in (graph.input, graph.output):
        for value in entries:
            if value.type.denotation == _STAND_IN_DENOTATION and value.name in stash.types:
                value.type.CopyFrom(stash.types[value.name])
    declared = [
        value
        for value in graph.value_info
        if value.name not in restored and (value.type.denotation != _STAND_IN_DENOTATION or value.name in stash.types)
    ]
    for value in declared:
        if value.type.denotation == _STAND_IN_DENOTATION:
            value.type.CopyFrom(stash.types[value.name])
    if len(declared) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(declared)


def save_ir(model: ir.Model, path: str | os.PathLike[str], **options: object) -> None:
    """:func:`onnx_ir.save` (``options`` are its own), with every stand-in put back in the file written."""
    ir.save(model, path, **options)  # type: ignore[arg-type]  # onnx-ir's own keyword arguments, passed through
    if model.meta.get(_STASH_KEY):
        proto = onnx.load(os.fspath(path), load_external_data=False)
        put_back(proto, model)
        onnx.save(proto, os.fspath(path))
