"""The graphs of an ONNX model as scopes (the main graph and every If/Loop/Scan body), and the keys the value ranges
and the debugging runs give their values.

A scope's **path** is the one the decisions report (:func:`ampconfig.decide.facts.iter_scopes`:
``<node>.<attribute>``, ``[i]`` for a graph list, joined by ``/``: ``Loop_1.body/If_2.else_branch``), so a value,
its node and the node's decision line up. A value's **key** (:func:`ampconfig.decide.value_ranges.value_key`, the
one definition) is its name in the main graph; inside a body, the scope's parts and its name, each with ``\\`` and
``/`` escaped, joined by ``/`` (``If_3.then_branch/x``, ``\\/m\\/If.then_branch/y``), made unique against the main
graph's names. Node names are unique across all scopes once the rewrite has named them
(:mod:`ampconfig.rewrite.names`), so a node is always known by its name alone.

Pure reads of an ``onnx.ModelProto``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import onnx

from ampconfig.decide.value_ranges import subgraph_key_path, value_key

log = logging.getLogger(__name__)

#: The control-flow ops whose bodies are scopes, and how a body's outputs leave it.
CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


@dataclass(eq=False)
class ProtoScope:
    """One graph of a model: its path, the node and attribute that own it (None for the main graph), its parent,
    and the names it defines (inputs, initializers, node outputs)."""

    graph: onnx.GraphProto
    path: str
    owner: onnx.NodeProto | None = None
    attribute: str = ""
    parent: ProtoScope | None = None
    defined: set[str] = field(default_factory=set)
    owner_index: int = -1  # the owner's position in the parent graph
    #: the path as value keys spell it (each part escaped), and the main graph's names (a key must differ from them)
    key_path: str = ""
    main_names: frozenset[str] = frozenset()

    @property
    def is_main(self) -> bool:
        return self.owner is None

    def key(self, name: str) -> str:
        """The key of a value this scope defines."""
        return value_key(self.key_path, name, self.main_names)

    def resolve(self, name: str) -> str | None:
        """The key of the value ``name`` refers to from inside this scope: its own, else an outer scope's."""
        scope: ProtoScope | None = self
        while scope is not None:
            if name in scope.defined:
                return scope.key(name)
            scope = scope.parent
        return None

    def loops_above(self) -> list[ProtoScope]:
        """The Loop and Scan bodies this scope is (or sits) in, innermost first."""
        found: list[ProtoScope] = []
        scope: ProtoScope | None = self
        while scope is not None and scope.owner is not None:
            if scope.owner.op_type in ("Loop", "Scan"):
                found.append(scope)
            scope = scope.parent
        return found


def _join(path: str, part: str) -> str:
    return f"{path}/{part}" if path else part


def _defined(graph: onnx.GraphProto) -> set[str]:
    names = {value.name for value in graph.input} | {init.name for init in graph.initializer}
    names |= {init.values.name for init in graph.sparse_initializer}
    names |= {output for node in graph.node for output in node.output if output}
    return names


def subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, str, onnx.GraphProto]]:
    """A node's graph attributes as (path part, attribute name, graph), in attribute order; the path part is
    ``<node>.<attribute>``, or ``<node>.<attribute>[i]`` for a list of graphs."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield f"{node.name}.{attr.name}", attr.name, attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for index, graph in enumerate(attr.graphs):
                yield f"{node.name}.{attr.name}[{index}]", attr.name, graph


def proto_scopes(model: onnx.ModelProto) -> list[ProtoScope]:
    """The main graph, then every subgraph, outer before inner (the order of the decisions)."""
    defined = _defined(model.graph)
    main = ProtoScope(model.graph, "", defined=defined)
    main_names = frozenset(defined)
    scopes, pending = [], [main]
    while pending:
        scope = pending.pop(0)
        scopes.append(scope)
        for index, node in enumerate(scope.graph.node):
            for part, attribute, graph in subgraphs(node):
                path = _join(scope.path, part)
                key_path = subgraph_key_path(scope.key_path, part)
                pending.append(
                    ProtoScope(graph, path, node, attribute, scope, _defined(graph), index, key_path, main_names)
                )
    return scopes


def has_subgraphs(model: onnx.ModelProto) -> bool:
    return any(True for node in model.graph.node for _ in subgraphs(node))


def leniently_inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the types ONNX's inference derives (lenient: no type check, no strict mode), or ``model``
    itself when inference fails: the values it states still count."""
    from ampconfig.model_io.models import INFERENCE_FAILURES

    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=False)
    except INFERENCE_FAILURES as exc:
        log.info("ONNX type inference failed, so only the types the model states are known: %s", exc)
        return model


def scope_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """The tensor type of every value key whose type the model states or ONNX's inference derives (stated first),
    in every scope."""
    inferred = leniently_inferred(model)
    types: dict[str, onnx.TypeProto] = {}
    for source in (model, inferred):
        for scope in proto_scopes(source):
            graph = scope.graph
            for value in (*graph.input, *graph.output, *graph.value_info):
                if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
                    types.setdefault(scope.key(value.name), value.type)
            for init in graph.initializer:
                if scope.key(init.name) not in types:
                    known = onnx.TypeProto()
                    known.tensor_type.elem_type = init.data_type
                    for dim in init.dims:
                        known.tensor_type.shape.dim.add().dim_value = dim
                    types[scope.key(init.name)] = known
    return types


def taken_names(scopes: list[ProtoScope]) -> set[str]:
    """Every value and node name of every scope (what a name added to the model must differ from)."""
    taken: set[str] = set()
    for scope in scopes:
        taken |= scope.defined | {value.name for value in scope.graph.output}
        taken |= {node.name for node in scope.graph.node if node.name}
    return taken


@dataclass(frozen=True)
class ModelValueNames:
    """The values a model defines, as value keys name them (``key in names``): the main graph's names, and in a
    body the value's own name, the key's last part. A body key's path spells its owner node's name, which
    ampconfig gives an unnamed node, so the path is not matched: a key naming no value of any body is caught, a
    body path spelled by another naming is not refused."""

    main: frozenset[str]
    bodies: frozenset[str]

    @classmethod
    def of(cls, model: onnx.ModelProto) -> ModelValueNames:
        scopes = proto_scopes(model)
        bodies = {name for scope in scopes[1:] for name in scope.defined}
        return cls(frozenset(scopes[0].defined), frozenset(bodies))

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if key in self.main:
            return True
        name = _last_key_part(key)
        return name is not None and name in self.bodies


def _last_key_part(key: str) -> str | None:
    """The value's own name in a body's key (after the last ``/`` no ``\\`` escapes, unescaped), None for a key
    with no such ``/`` (a main-graph name)."""
    cut, index = -1, 0
    while index < len(key):
        if key[index] == "\\":
            index += 2
            continue
        if key[index] == "/":
            cut = index
        index += 1
    if cut < 0:
        return None
    part, name, index = key[cut + 1 :], [], 0
    while index < len(part):
        if part[index] == "\\" and index + 1 < len(part):
            index += 1
        name.append(part[index])
        index += 1
    return "".join(name)
