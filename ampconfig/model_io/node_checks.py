"""Which nodes ONNX's full checker rejects, found by structure rather than by reading its messages.

The checker's verdict on a whole model is one exception whose text names nodes in prose that changes between
ONNX releases. Here a node is judged on its own: its *piece* is a small model holding just that node, its inputs as
graph inputs of the types they have in the model (or the small initializers and Constant nodes that feed it, whose
values shape inference reads), its outputs as graph outputs of the types the model declares for them. The full
checker on the piece runs the node's schema check and its strict type and shape inference against those
declarations, which is what the whole-model check does for that node. Many nodes are checked in one piece model
(each node's values renamed apart) and a rejected batch is halved until the nodes it rejects are found: k rejected
nodes among n cost about 2k·log2(n/k) checker calls on small models, not one whole-model check per node.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field

import onnx

from ampconfig.domains import is_default_domain
from ampconfig.model_io.models import inferred_types, value_types

#: The exceptions the checker and strict inference raise for a model they reject.
_REFUSALS = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError)

#: Nodes checked together in one piece model before a rejected batch is halved.
BATCH_NODES = 512


def passes_checker(proto: onnx.ModelProto) -> bool:
    """Whether ``check_model(full_check=True)`` accepts ``proto`` (a light proto: see ``light_proto``)."""
    return checker_complaint(proto) is None


def checker_complaint(proto: onnx.ModelProto) -> str | None:
    """The full checker's complaint as it says it (first line, for people to read; never parsed), or None."""
    try:
        onnx.checker.check_model(proto, full_check=True)
    except _REFUSALS as exc:
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__
    return None


def passes_structural_check(proto: onnx.ModelProto) -> bool:
    """Whether the checker without type and shape inference accepts ``proto``."""
    try:
        onnx.checker.check_model(proto)
    except (onnx.checker.ValidationError, ValueError):
        return False
    return True


@dataclass(frozen=True)
class _Located:
    graph: onnx.GraphProto
    node: onnx.NodeProto


class NodePieces:
    """The nodes of one (light) model by name, with what a piece of each needs: value types (declared, and those
    best-effort inference finds), which values are declared, small initializers and Constant producers."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self._model = model
        self._declared = value_types(model)
        self._types = {**inferred_types(model), **self._declared}
        self._nodes: dict[str, _Located] = {}
        self._initializers: dict[str, onnx.TensorProto] = {}
        self._constants: dict[str, onnx.NodeProto] = {}
        self._fragments: dict[str, onnx.GraphProto | None] = {}
        for graph in _graphs(model.graph):
            self._initializers.update((tensor.name, tensor) for tensor in graph.initializer)
            for node in graph.node:
                if node.name:
                    self._nodes.setdefault(node.name, _Located(graph, node))
                if node.op_type == "Constant" and is_default_domain(node.domain) and len(node.output) == 1:
                    self._constants[node.output[0]] = node

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    @property
    def model(self) -> onnx.ModelProto:
        return self._model

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self._nodes)}

    @property
    def names(self) -> list[str]:
        """Every named node, in graph order (subgraphs after their graph)."""
        return list(self._nodes)

    def rejected(self, names: Iterable[str]) -> list[str]:
        """The nodes among ``names`` whose piece the full checker rejects (nodes it cannot build a piece for, such
        as one reading a value of no known type, are not judged), in the order given."""
        wanted = [name for name in dict.fromkeys(names) if name in self._nodes]
        alone = [name for name in wanted if _has_subgraph(self._nodes[name].node)]
        together = [name for name in wanted if name not in set(alone)]
        found = {name for name in alone if self._piece_rejected([name])}
        for start in range(0, len(together), BATCH_NODES):
            found.update(self._bisect(together[start : start + BATCH_NODES]))
        return [name for name in wanted if name in found]

    def passing(self, names: Iterable[str]) -> set[str]:
        """The nodes among ``names`` whose piece the full checker accepts (a node it cannot judge is not one)."""
        judged = [name for name in names if name in self._nodes and self._fragment(name) is not None]
        return set(judged) - set(self.rejected(judged))

    def complaint(self, name: str) -> str | None:
        """What the checker says about node ``name``'s piece (for the message), or None."""
        piece = self._piece([name], own_names=True)
        return None if piece is None else checker_complaint(piece)

    def _bisect(self, names: list[str]) -> Iterator[str]:
        if not names or not self._piece_rejected(names):
            return
        if len(names) == 1:
            yield names[0]
            return
        half = len(names) // 2
        yield from self._bisect(names[:half])
        yield from self._bisect(names[half:])

    def _piece_rejected(self, names: list[str]) -> bool:
        piece = self._piece(names)
        return piece is not None and not passes_checker(piece)

    def _piece(self, names: list[str], *, own_names: bool = False) -> onnx.ModelProto | None:
        """One model of the nodes ``names``, each with its values renamed apart by its index in the model (a node
        with a subgraph, always checked alone, and any node where ``own_names``, keeps its names); None when no
        node's values have known types."""
        piece = onnx.ModelProto(ir_version=self._model.ir_version)
        piece.opset_import.extend(self._model.opset_import)
        piece.functions.extend(self._model.functions)
        graph = piece.graph
        graph.name = "piece"
        any_shape = False
        for name in names:
            fragment = self._fragment(name, own_names=own_names)
            if fragment is None:
                continue  # not judged (when its batch is halved down to it, there is no piece)
            graph.initializer.extend(fragment.initializer)
            graph.input.extend(value for value in fragment.input if value.name != _ANY_SHAPE)
            graph.node.extend(fragment.node)
            graph.value_info.extend(fragment.value_info)
            if not any_shape and any(value.name == _ANY_SHAPE for value in fragment.input):
                graph.input.append(_any_shape())
                any_shape = True
        return piece if graph.node else None

    def _fragment(self, name: str, *, own_names: bool = False) -> onnx.GraphProto | None:
        """Node ``name`` with what feeds it, as the parts of a graph (made once per node, then only copied)."""
        keep = own_names or _has_subgraph(self._nodes[name].node)
        if not keep and name in self._fragments:
            return self._fragments[name]
        fragment = self._make_fragment(self._nodes[name].node, "" if keep else f"{self._index[name]}:")
        if not keep:
            self._fragments[name] = fragment
        return fragment

    def _make_fragment(self, node: onnx.NodeProto, prefix: str) -> onnx.GraphProto | None:
        inputs = [name for name in dict.fromkeys(node.input) if name]
        if not prefix:
            inputs += [name for name in _outer_references(node) if name not in inputs]
        fragment = onnx.GraphProto()
        for name in inputs:
            if name in self._initializers:
                tensor = fragment.initializer.add()
                tensor.CopyFrom(self._initializers[name])
                tensor.name = prefix + name
            elif name in self._constants:
                constant = fragment.node.add()
                constant.CopyFrom(self._constants[name])
                constant.output[0] = prefix + name
            elif name in self._types:
                _feed_value(fragment, prefix + name, self._types[name])
            else:
                return None
        copy = fragment.node.add()
        copy.CopyFrom(node)
        if prefix:
            copy.input[:] = [prefix + name if name else name for name in node.input]
            copy.output[:] = [prefix + name if name else name for name in node.output]
        # Declared as value_info, as in the model: strict inference holds the node's result to them, and (unlike a
        # graph output) a value_info may leave the shape unknown.
        for name in (name for name in node.output if name):
            if name in self._declared:
                fragment.value_info.append(onnx.helper.make_value_info(prefix + name, self._declared[name]))
        return fragment


#: The piece's input that gives laundered values (see :func:`_feed_value`) a shape of unknown rank.
_ANY_SHAPE = "piece:any_shape"


def _any_shape() -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(_ANY_SHAPE, onnx.TensorProto.INT64, [None])


def _feed_value(feeds: onnx.GraphProto, name: str, value_type: onnx.TypeProto) -> None:
    """``name`` as a value of ``value_type`` in the piece. A graph input's tensor type must have a shape, so a
    tensor of unknown rank is a flat input reshaped by a shape of unknown length: same element type, rank unknown
    to inference, as in the model."""
    tensor = value_type.tensor_type if value_type.HasField("tensor_type") else None
    if tensor is None or tensor.HasField("shape"):
        feeds.input.append(onnx.helper.make_value_info(name, value_type))
        return
    flat = f"{name}:flat"
    feeds.input.append(onnx.helper.make_tensor_value_info(flat, tensor.elem_type, [None]))
    if _ANY_SHAPE not in {value.name for value in feeds.input}:
        feeds.input.append(_any_shape())
    feeds.node.append(onnx.helper.make_node("Reshape", [flat, _ANY_SHAPE], [name], name=f"{name}:reshape"))


@dataclass(frozen=True)
class OutputCheck:
    """The checker's verdict on a rewritten model, against its input."""

    #: The first complaint the input did not have, as the checker words it (shown, never parsed); None: valid.
    complaint: str | None = None
    #: The changed nodes the checker rejects on their own, each with what it says about it: keeping their dtype
    #: is the repair.
    rejected: dict[str, str] = field(default_factory=dict)
    #: Whether every new complaint was traced to a node in ``rejected`` (else no repair can be trusted to fix it).
    located: bool = False


def check_output(
    output: onnx.ModelProto,
    changed: Collection[str],
    reference: Callable[[], NodePieces],
    *,
    input_passes: bool = True,
) -> OutputCheck:
    """Judge ``output`` (a light proto of a rewrite) by the full checker against its input, and trace what it
    rejects to nodes.

    ``reference``: the pieces of the (named) input, built only when the output has a complaint. ``input_passes``:
    the checker accepts the input, so any complaint about the output is new, and is traced to the changed nodes
    whose piece fails in the output and passed in the input (a piece that fails in both says nothing about the
    rewrite). Otherwise the input has complaints of its own, and a complaint is new when the output fails a stage
    of the check the input passes (structure, then inference), or a node's piece fails that passed in the input
    or is new to the output (an inserted Cast); a node whose piece cannot be built in the input (a value of no
    known type) is given the benefit of the doubt. ``changed``: the nodes whose dtype the rewrite changed, the only
    ones a repair may keep as they were."""
    if input_passes:
        complaint = checker_complaint(output)
        return OutputCheck() if complaint is None else _traced(complaint, NodePieces(output), changed, reference())
    known = reference()
    if passes_structural_check(known.model) and not passes_structural_check(output):
        return _traced(checker_complaint(output) or "rejected", NodePieces(output), changed, known)
    pieces = NodePieces(output)
    failing = pieces.rejected(pieces.names)
    passed = known.passing(failing)  # a node the input's check could not judge has no complaint to call new
    new = [name for name in failing if name not in known or name in passed]
    if not new:
        return OutputCheck()
    said = {name: pieces.complaint(name) or "rejected" for name in new}
    wanted = set(changed)
    return OutputCheck(
        f"node {new[0]}: {said[new[0]]}",
        {name: said[name] for name in new if name in wanted},
        located=all(name in wanted for name in new),
    )


def _traced(complaint: str, pieces: NodePieces, changed: Collection[str], known: NodePieces) -> OutputCheck:
    """The complaint, with the changed nodes whose piece the checker rejects in the output but not in the input."""
    failing = pieces.rejected(changed)
    passed = known.passing(failing)
    rejected = {name: pieces.complaint(name) or complaint for name in failing if name not in known or name in passed}
    return OutputCheck(complaint, rejected, located=bool(rejected))


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _graphs(subgraph)


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(attribute.HasField("g") or attribute.graphs for attribute in node.attribute)


def _outer_references(node: onnx.NodeProto) -> list[str]:
    """The values a node's subgraphs read from outside themselves (the node's own scope or above)."""
    found: dict[str, None] = {}
    for attribute in node.attribute:
        for subgraph in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
            defined = {value.name for value in subgraph.input} | {tensor.name for tensor in subgraph.initializer}
            for inner in subgraph.node:
                for name in (*inner.input, *_outer_references(inner)):
                    if name and name not in defined:
                        found.setdefault(name)
                defined.update(inner.output)
    return list(found)
