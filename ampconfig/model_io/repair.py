"""Input repair: the stale or contradictory value declarations real exporters leave behind, dropped or repaired,
each with a warning that names the value. Pure onnx/protobuf: ONNX Runtime is not involved here.

ONNX Runtime loads a model whose ``value_info`` disagrees with what its graph computes (it merges leniently and
logs "Error merging shape info"); ONNX's strict shape inference, part of ``check_model(full_check=True)``,
refuses it. PaddlePaddle exports, for one, declare rank-0 placeholder shapes for tensors of rank 4. Repaired:

- ``value_info`` entries whose element type, rank or a fixed dimension contradicts ONNX type inference:
  dropped (the inferred type is used);
- ``value_info`` entries declared more than once: the copies dropped (all of them when they disagree);
- ``value_info`` entries for a name nothing in the model produces: dropped;
- graph output shapes that are placeholders (rank 0 where the graph computes a tensor of rank >= 1, or a
  negative dimension): replaced by the inferred shape; a graph output without a shape (which the checker
  requires) gets the inferred one.
- nodes out of topological order (ONNX requires it, ONNX Runtime sorts the graph itself): sorted, in every scope.

A graph's inputs and outputs are the model's interface: their element types are never changed, an input's shape
never, an output's shape only when it is a placeholder. Any other contradiction there is kept and reported.
What the checker still says after the repair is a diagnostic for the caller (:func:`admit_input_model`), not a
refusal. The repairs are found and made on a light proto of the input (its graphs without the large weights,
:func:`~ampconfig.model_io.models.light_proto`); the admission step (:mod:`ampconfig.rewrite.steps.admit_input`) makes
the same repairs in the ``ir.Model`` that is rewritten. The caller's proto and the user's file are never modified.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import onnx
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from ampconfig.domains import is_default_domain
from ampconfig.model_io.models import (
    INFERENCE_FAILURES,
    checker_errors,
    inferred_types,
    strictly_inferred_types,
    value_types,
)

log = logging.getLogger(__name__)

_TENSOR_KINDS = ("tensor_type", "sparse_tensor_type")
_WRAPPER_KINDS = ("sequence_type", "optional_type")


@dataclass(frozen=True)
class Repair:
    """One repaired (or, with ``changed`` False, reported but kept) declaration of the value ``value`` (or, with
    ``subject`` "graph", a repair of the graph of that name)."""

    value: str
    action: str
    changed: bool = True
    subject: str = "value"

    def message(self) -> str:
        return f"{self.subject} {self.value!r}: {self.action}"


#: A graph's nodes in their new order (indices into its old one), or None where the order was kept; one per graph,
#: in the order :func:`sort_nodes` visits them (a graph, then the subgraphs of its nodes in their new order).
NodeOrders = tuple[tuple[int, ...] | None, ...]


@dataclass(frozen=True)
class AdmittedModel:
    """What admitting an input found on its light proto (``light``, repaired in place): the value types inference
    found, the repairs made, the checker complaints the repaired model still has (empty: it passes the full
    check), and the nodes' new order in each graph where they were sorted."""

    light: onnx.ModelProto
    types: dict[str, onnx.TypeProto]
    repairs: tuple[Repair, ...]
    checker_errors: tuple[str, ...]
    node_orders: NodeOrders = ()

    @property
    def warnings(self) -> list[str]:
        return [repair.message() for repair in self.repairs]

    @property
    def changed(self) -> bool:
        """Whether a repair changed the model (a declaration dropped or filled in, nodes sorted)."""
        return any(repair.changed for repair in self.repairs)


def admit_input_model(light: onnx.ModelProto) -> AdmittedModel:
    """Check the input's light proto as every output is checked, repairing its declarations (in ``light``) first
    where the check needs it.

    A model that passes ``check_model(full_check=True)`` costs what it always did (one check, one strict
    inference) plus a scan of its ``value_info``; only a model the check rejects is inferred again without its
    declarations, to find which ones contradict the graph."""
    repairs = tidy_declarations(light)
    types = strictly_inferred_types(light)
    errors: tuple[str, ...] = ()
    orders: list[tuple[int, ...] | None] = []
    if types is None:
        sorted_graphs = sort_nodes(light, orders)
        contradictions = repair_contradictions(light)
        repairs += sorted_graphs + contradictions
        if any(repair.changed for repair in repairs):
            types = strictly_inferred_types(light)
        if types is None:
            errors = tuple(checker_errors(light)) or ("the ONNX checker rejects the model",)
            types = inferred_types(light)
        if not sorted_graphs:
            orders = []
    return AdmittedModel(light, types, tuple(repairs), errors, tuple(orders))


# ------------------------------------------------------------------------------------------ the repairs


#: The ONNX ops with graph attributes (control flow); nodes of other domains may have them too.
SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and its subgraphs, depth first in node and attribute order (the same order for every copy).
    Only nodes that can hold a subgraph are looked into: reading every node's attributes from Python costs
    about as much as the rest of the admission on graphs of tens of thousands of nodes."""
    yield graph
    for node in graph.node:
        for subgraph in _subgraphs(node):
            yield from graphs(subgraph)


def tidy_declarations(model: onnx.ModelProto) -> list[Repair]:
    """Drop duplicate ``value_info`` entries and entries for names nothing produces, in place. No inference."""
    scopes = [graph for graph in graphs(model.graph) if graph.value_info]
    if not scopes:
        return []
    produced = _produced_names(model.graph)
    repairs: list[Repair] = []
    for graph in scopes:
        names = [entry.name for entry in graph.value_info]
        if len(set(names)) == len(names) and produced.issuperset(names):
            continue  # the common case: nothing to drop, nothing copied
        kept, dropped = _tidy(list(graph.value_info), produced)
        _replace(graph.value_info, kept)
        repairs.extend(dropped)
    return repairs


def _produced_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name a graph input, initializer or node output defines, in any scope."""
    names: set[str] = set()
    for scope in graphs(graph):
        names.update(value.name for value in scope.input)
        names.update(tensor.name for tensor in scope.initializer)
        names.update(sparse.values.name for sparse in scope.sparse_initializer)
        for node in scope.node:
            names.update(node.output)
    return names


def _tidy(entries: list[onnx.ValueInfoProto], produced: set[str]) -> tuple[list[onnx.ValueInfoProto], list[Repair]]:
    by_name: dict[str, list[onnx.ValueInfoProto]] = {}
    for entry in entries:
        by_name.setdefault(entry.name, []).append(entry)
    kept: list[onnx.ValueInfoProto] = []
    dropped: list[Repair] = []
    for name, same in by_name.items():
        if name not in produced:
            dropped.append(Repair(name, "value_info for a name nothing in the model produces: dropped"))
        elif len(same) == 1:
            kept.append(same[0])
        elif all(entry.type == same[0].type for entry in same[1:]):
            kept.append(same[0])
            dropped.append(Repair(name, f"declared {len(same)} times in value_info: the copies were dropped"))
        else:
            types = ", ".join(describe_type(entry.type) for entry in same)
            dropped.append(
                Repair(
                    name,
                    f"declared {len(same)} times in value_info with different types ({types}): all were dropped, "
                    "the inferred type is used",
                )
            )
    return kept, dropped


def sort_nodes(model: onnx.ModelProto, orders: list[tuple[int, ...] | None] | None = None) -> list[Repair]:
    """Put the nodes of every graph in topological order, in place, keeping the given order where it allows
    (ONNX Runtime sorts a graph itself before running it, so an unsorted model loads there; ONNX requires the
    order). A graph with a cycle is left as it is: ORT refuses it too. ``orders`` gets each graph's new order
    (see :data:`NodeOrders`), for the same sort to be made in another copy of the model."""
    repairs: list[Repair] = []
    _sort_graph(model.graph, frozenset(), repairs, [] if orders is None else orders)
    return repairs


def _sort_graph(
    graph: onnx.GraphProto, outer: frozenset[str], repairs: list[Repair], orders: list[tuple[int, ...] | None]
) -> None:
    nodes = list(graph.node)
    producer = {name: index for index, node in enumerate(nodes) for name in node.output if name}
    after: list[list[int]] = [[] for _ in nodes]  # the nodes that wait for each node
    waiting = [0] * len(nodes)
    for index, node in enumerate(nodes):
        for source in {producer[name] for name in _reads(node) if producer.get(name, index) != index}:
            after[source].append(index)
            waiting[index] += 1
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)  # the earliest node that can run: the given order where it is valid
        order.append(index)
        for follower in after[index]:
            waiting[follower] -= 1
            if waiting[follower] == 0:
                heapq.heappush(ready, follower)
    moved = len(order) == len(nodes) and order != sorted(order)
    orders.append(tuple(order) if moved else None)
    if moved:
        reordered = [_copy(nodes[index]) for index in order]  # copied before the field lets go of them
        del graph.node[:]
        graph.node.extend(reordered)
        action = "nodes were not in topological order: sorted (ONNX Runtime sorts them too)"
        repairs.append(Repair(graph.name, action, subject="graph"))
    known = outer | producer.keys() | {value.name for value in graph.input}
    for node in graph.node:
        for subgraph in _subgraphs(node):
            _sort_graph(subgraph, frozenset(known), repairs, orders)


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    if node.op_type not in SUBGRAPH_OPS and is_default_domain(node.domain):
        return
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def _reads(node: onnx.NodeProto) -> Iterator[str]:
    """The values a node reads: its inputs and what its subgraphs read from outside themselves (a superset is
    harmless: only values the same graph produces order the nodes)."""
    yield from node.input
    for subgraph in _subgraphs(node):
        for inner in graphs(subgraph):
            for inner_node in inner.node:
                yield from inner_node.input


def repair_contradictions(model: onnx.ModelProto) -> list[Repair]:
    """Repair, in place, the declarations that contradict what ONNX type inference finds for the graph.

    Inference runs on a copy without any ``value_info`` and without graph output shapes, so that no declaration
    can steer it; a value it cannot type is left as declared."""
    truth = _types_without_declarations(model)
    repairs: list[Repair] = []
    for graph in graphs(model.graph):
        repairs.extend(_repair_value_info(graph, truth))
        repairs.extend(_repair_outputs(graph, truth))
    return repairs


def _types_without_declarations(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    for graph in graphs(bare.graph):
        del graph.value_info[:]
        for output in graph.output:
            _clear_shapes(output.type)
    try:
        inferred = onnx.shape_inference.infer_shapes(bare, check_type=False, strict_mode=False, data_prop=False)
    except INFERENCE_FAILURES as exc:  # nothing can be judged, so nothing is repaired
        log.info("ONNX type inference failed, so no declaration is checked against it: %s", exc)
        return {}
    return value_types(inferred)


def _clear_shapes(type_proto: onnx.TypeProto) -> None:
    kind = type_proto.WhichOneof("value")
    if kind in _TENSOR_KINDS:
        getattr(type_proto, kind).ClearField("shape")
    elif kind in _WRAPPER_KINDS:
        _clear_shapes(getattr(type_proto, kind).elem_type)


def _repair_value_info(graph: onnx.GraphProto, truth: dict[str, onnx.TypeProto]) -> list[Repair]:
    kept: list[onnx.ValueInfoProto] = []
    repairs: list[Repair] = []
    for entry in graph.value_info:
        inferred = truth.get(entry.name)
        differs = contradiction(entry.type, inferred)
        if differs is None or inferred is None:
            kept.append(entry)
            continue
        placeholder = " (a rank-0 placeholder)" if _is_rank0_placeholder(entry.type, inferred) else ""
        repairs.append(
            Repair(
                entry.name,
                f"value_info declares {describe_type(entry.type)}{placeholder} but the graph computes "
                f"{describe_type(inferred)} ({differs} differs): dropped, the inferred type is used",
            )
        )
    if repairs:
        _replace(graph.value_info, kept)
    return repairs


def _repair_outputs(graph: onnx.GraphProto, truth: dict[str, onnx.TypeProto]) -> list[Repair]:
    repairs: list[Repair] = []
    for output in graph.output:
        inferred = truth.get(output.name)
        if inferred is not None and _fill_missing_shape(output.type, inferred):
            repairs.append(
                Repair(
                    output.name,
                    "graph output declares no shape (the ONNX checker requires one): the inferred shape "
                    f"{describe_type(inferred)} was filled in",
                )
            )
            continue
        differs = contradiction(output.type, inferred)
        if differs is None or inferred is None:
            continue
        declared = describe_type(output.type)
        if _placeholder_dims(output.type, inferred) is not None:
            _fill_placeholder_shape(output.type, inferred)
            repairs.append(
                Repair(
                    output.name,
                    f"graph output declares the placeholder shape {declared} where the graph computes "
                    f"{describe_type(inferred)}: its shape was replaced by the inferred one (its element type "
                    "is kept)",
                )
            )
        else:
            repairs.append(
                Repair(
                    output.name,
                    f"graph output declares {declared} but the graph computes {describe_type(inferred)} ({differs} "
                    "differs): kept, since a graph output is part of the model's interface; the ONNX checker's "
                    "complaint about it remains",
                    changed=False,
                )
            )
    return repairs


# ------------------------------------------------------------------------------------- comparing types


def contradiction(declared: onnx.TypeProto, inferred: onnx.TypeProto | None) -> str | None:
    """What of ``declared`` contradicts ``inferred`` (as strict inference would complain), or None. Unknown
    parts (no element type, no shape, a symbolic or absent dimension) contradict nothing."""
    if inferred is None:
        return None
    kind, inferred_kind = declared.WhichOneof("value"), inferred.WhichOneof("value")
    if kind is None or inferred_kind is None:
        return None
    if kind != inferred_kind:
        return "the kind of value"
    if kind in _WRAPPER_KINDS:
        return contradiction(getattr(declared, kind).elem_type, getattr(inferred, kind).elem_type)
    if kind not in _TENSOR_KINDS:
        return None
    mine, theirs = getattr(declared, kind), getattr(inferred, kind)
    if mine.elem_type and theirs.elem_type and mine.elem_type != theirs.elem_type:
        return "the element type"
    if not (mine.HasField("shape") and theirs.HasField("shape")):
        return None
    if len(mine.shape.dim) != len(theirs.shape.dim):
        return "the rank"
    for index, (dim, other) in enumerate(zip(mine.shape.dim, theirs.shape.dim)):
        if dim.HasField("dim_value") and other.HasField("dim_value") and dim.dim_value != other.dim_value:
            return f"dimension {index}"
    return None


def _tensor_shapes(
    declared: onnx.TypeProto, inferred: onnx.TypeProto
) -> tuple[onnx.TensorShapeProto, onnx.TensorShapeProto] | None:
    kind = declared.WhichOneof("value")
    if kind not in _TENSOR_KINDS or inferred.WhichOneof("value") != kind:
        return None
    mine, theirs = getattr(declared, kind), getattr(inferred, kind)
    if mine.elem_type and theirs.elem_type and mine.elem_type != theirs.elem_type:
        return None  # an element type is never a placeholder
    if not (mine.HasField("shape") and theirs.HasField("shape")):
        return None
    return mine.shape, theirs.shape


def _is_rank0_placeholder(declared: onnx.TypeProto, inferred: onnx.TypeProto) -> bool:
    shapes = _tensor_shapes(declared, inferred)
    return shapes is not None and not shapes[0].dim and bool(shapes[1].dim)


def _placeholder_dims(declared: onnx.TypeProto, inferred: onnx.TypeProto) -> list[int] | None:
    """The positions to take from ``inferred`` when ``declared``'s shape is a placeholder (all of them for a
    rank-0 placeholder, else the negative dimensions that contradict it), or None when it is not one."""
    shapes = _tensor_shapes(declared, inferred)
    if shapes is None:
        return None
    mine, theirs = shapes
    if not mine.dim:
        return list(range(len(theirs.dim))) if theirs.dim else None
    if len(mine.dim) != len(theirs.dim):
        return None
    conflicting = [
        index
        for index, (dim, other) in enumerate(zip(mine.dim, theirs.dim))
        if dim.HasField("dim_value") and other.HasField("dim_value") and dim.dim_value != other.dim_value
    ]
    if conflicting and all(mine.dim[index].dim_value < 0 for index in conflicting):
        return conflicting
    return None


def _fill_missing_shape(declared: onnx.TypeProto, inferred: onnx.TypeProto) -> bool:
    """Give a tensor type without a shape the inferred one (same kind, agreeing element type); True if it did."""
    kind = declared.WhichOneof("value")
    if kind not in _TENSOR_KINDS or inferred.WhichOneof("value") != kind:
        return False
    mine, theirs = getattr(declared, kind), getattr(inferred, kind)
    if mine.HasField("shape") or not theirs.HasField("shape"):
        return False
    if mine.elem_type and theirs.elem_type and mine.elem_type != theirs.elem_type:
        return False
    mine.shape.CopyFrom(theirs.shape)
    return True


def _fill_placeholder_shape(declared: onnx.TypeProto, inferred: onnx.TypeProto) -> None:
    positions = _placeholder_dims(declared, inferred)
    shapes = _tensor_shapes(declared, inferred)
    if positions is None or shapes is None:
        return
    mine, theirs = shapes
    if not mine.dim:
        mine.CopyFrom(theirs)
        return
    for index in positions:
        mine.dim[index].CopyFrom(theirs.dim[index])


def describe_type(type_proto: onnx.TypeProto) -> str:
    """A type in words: ``float[N,3,224,224]``, ``int64[]`` (rank 0), ``float (no shape)``."""
    kind = type_proto.WhichOneof("value")
    if kind in _WRAPPER_KINDS:
        return f"{kind.removesuffix('_type')}({describe_type(getattr(type_proto, kind).elem_type)})"
    if kind not in _TENSOR_KINDS:
        return kind.removesuffix("_type") if kind else "no type"
    tensor = getattr(type_proto, kind)
    elem = onnx.TensorProto.DataType.Name(tensor.elem_type).lower() if tensor.elem_type else "?"
    if not tensor.HasField("shape"):
        return f"{elem} (no shape)"
    dims = ",".join(
        str(dim.dim_value) if dim.HasField("dim_value") else (dim.dim_param or "?") for dim in tensor.shape.dim
    )
    return f"{elem}[{dims}]"


# ---------------------------------------------------------------------------------------- applying them


def _replace(field: RepeatedCompositeFieldContainer[onnx.ValueInfoProto], entries: list[onnx.ValueInfoProto]) -> None:
    copies = [onnx.ValueInfoProto.FromString(entry.SerializeToString()) for entry in entries]
    del field[:]  # the entries may be this field's own elements: copied first
    field.extend(copies)
