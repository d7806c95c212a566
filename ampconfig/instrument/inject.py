"""A copy of a rewritten model in which every chosen node reads exact values: each node's own rounding, alone.

``tune`` needs, for every node the rewrite lowers, the error that lowering THAT node adds when everything before it
is exact. Running the rewrite once per node would cost one model run per node; this copy answers for all of them
in one run: each chosen node's float inputs that other nodes produce become graph inputs, fed with the fp32
reference values (rounded to the input's dtype in the rewrite, as a low-precision store would round them), and
each chosen node's outputs become graph outputs. No chosen node then reads another node's error, so the
difference between a chosen node's output and its fp32 reference is its own rounding alone (inputs, weights,
compute and output), as if it were the only low-precision node.

Inputs a node reads through a Cast the rewrite inserted are traced back through that Cast. A node inside an If
branch reads its injected values from the main graph (a body sees every outer value); a node inside a Loop body
reads, on iteration ``i``, slice ``i`` of the values its body's run exposed one slice per iteration
(:mod:`ampconfig.instrument.expose`), gathered inside the body. Nodes inside a Scan body or inside nested loops, and
nodes that own bodies themselves, are left as they are (not replayed).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto
from onnx import helper as oh

from ampconfig.instrument.expose import expose_keys
from ampconfig.instrument.scopes import ProtoScope, proto_scopes, scope_types, taken_names
from ampconfig.rewrite.names import fresh_name

#: Suffix of the graph input that feeds the reference value of a node input.
INJECTED_SUFFIX = "::reference"
_FEEDABLE: dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.FLOAT16: "float16",
    TensorProto.DOUBLE: "float64",
}


@dataclass
class InjectionModel:
    """The copy to run, the feed of each injected graph input, and where each chosen node's outputs are.

    ``feeds`` maps an injected graph input to ``(value key, numpy dtype name)``: feed the value of that key
    converted to that dtype. ``outputs`` maps each replayed node to the keys of its outputs; ``keys`` maps the
    copy's graph outputs to the keys of the values they carry (a main-graph value's output is its own name).
    """

    model: onnx.ModelProto
    feeds: dict[str, tuple[str, str]] = field(default_factory=dict)
    outputs: dict[str, list[str]] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for attr in node.attribute)


def injection_model(
    rewritten: onnx.ModelProto,
    chosen: Collection[str],
    original_outputs: Mapping[str, Sequence[str]],
    reference_values: Mapping[str, Sequence[int]],
    per_iteration: Collection[str] = (),
) -> InjectionModel:
    """The copy of ``rewritten`` in which each node named in ``chosen`` reads the reference values.

    ``original_outputs`` maps every main-graph node of the original model to its output names (the rewrite may
    rename the output of a node that produces a graph output); ``reference_values`` maps the value keys that can
    be fed (those the runs expose) to their shapes, and ``per_iteration`` says which of them came back one slice
    per Loop iteration. An input whose source is not among them (a graph input, an initializer, an integer value)
    keeps its wiring.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(rewritten)
    graph = copy.graph
    types = scope_types(copy)
    scopes = proto_scopes(copy)
    producers = {output: node for scope in scopes for node in scope.graph.node for output in node.output if output}
    aliases = _original_names(graph, original_outputs)
    wanted = set(chosen)
    stacked = set(per_iteration)
    result = InjectionModel(copy)
    injected: dict[tuple[str, str], str] = {}  # (value key, loop body path) -> the name that replaces it there
    front: list[onnx.NodeProto] = []  # main-graph Casts of injected bfloat16 inputs
    body_front: dict[str, list[onnx.NodeProto]] = {}  # per Loop body: the Gathers of each iteration's slice
    taken = taken_names(scopes)
    replayed: dict[str, list[str]] = {}
    for scope in scopes:
        loops = scope.loops_above()
        if len(loops) > 1 or (loops and loops[0].owner is not None and loops[0].owner.op_type != "Loop"):
            continue  # a Scan body or nested loops: not replayed
        loop = loops[0] if loops else None
        for node in scope.graph.node:
            if node.name not in wanted or _has_subgraph(node):
                continue
            plan = _node_feeds(scope, node, producers, aliases, reference_values, types, loop, stacked)
            if plan is None:
                continue
            for slot, key, elem_type in plan:
                where = (key, loop.path if loop is not None and _inside(key, loop) else "")
                if where not in injected:
                    feed = _inject(graph, result, front, key, elem_type, reference_values[key], taken)
                    if where[1] and loop is not None:
                        feed = _slice(loop, feed, body_front, taken)
                    injected[where] = feed
                node.input[slot] = injected[where]
            replayed[node.name] = [scope.key(name) for name in node.output if name]
    for cast in reversed(front):
        graph.node.insert(0, cast)  # reads only a graph input: the front keeps the graph sorted
    for loop_scope in scopes:
        for gather in reversed(body_front.get(loop_scope.path, [])):
            loop_scope.graph.node.insert(0, gather)
    exposed = expose_keys(copy, [key for keys in replayed.values() for key in keys])
    result.model = exposed.model
    result.keys = {name: key for name, key in exposed.keys.items()}
    result.keys.update({value.name: value.name for value in rewritten.graph.output})
    result.outputs = replayed
    return result


def _inside(key: str, loop: ProtoScope) -> bool:
    return key.startswith(loop.path + "/")


def _node_feeds(
    scope: ProtoScope,
    node: onnx.NodeProto,
    producers: Mapping[str, onnx.NodeProto],
    aliases: Mapping[str, str],
    reference_values: Mapping[str, Sequence[int]],
    types: Mapping[str, onnx.TypeProto],
    loop: ProtoScope | None,
    stacked: Collection[str],
) -> list[tuple[int, str, int]] | None:
    """(input slot, value key, element type) for each input of ``node`` to feed; None when a value inside its Loop
    body did not come back one slice per iteration (the node cannot be replayed)."""
    plan = []
    for slot, name in enumerate(node.input):
        if not name:
            continue
        key = _reference_source(scope, name, producers, aliases, reference_values)
        known = types.get(scope.resolve(name) or name)
        elem_type = known.tensor_type.elem_type if known is not None else 0
        if key is None or elem_type not in (*_FEEDABLE, TensorProto.BFLOAT16):
            continue
        if loop is not None and _inside(key, loop) and key not in stacked:
            return None
        plan.append((slot, key, elem_type))
    return plan


def _original_names(graph: onnx.GraphProto, original_outputs: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Rewritten output name -> original value name, for the original main-graph nodes (positional)."""
    aliases: dict[str, str] = {}
    for node in graph.node:
        for rewritten, original in zip(node.output, original_outputs.get(node.name, ()), strict=False):
            if rewritten and original:
                aliases[rewritten] = original
    return aliases


def _reference_source(
    scope: ProtoScope,
    name: str,
    producers: Mapping[str, onnx.NodeProto],
    aliases: Mapping[str, str],
    reference_values: Mapping[str, Sequence[int]],
) -> str | None:
    """The key of the reference value a node input carries: its own (original) name, or what an inserted Cast
    converts; None to keep the wiring (a graph input, an initializer, a value the runs did not expose)."""
    key = scope.resolve(name)
    if key is None:
        return None
    if key != name:  # a value of a body: a node output, or a body input (a Loop's carried state, a Scan slice)
        return key if key in reference_values and name not in _initializers(scope, name) else None
    producer = producers.get(name)
    if producer is None:
        return None  # a main-graph input or initializer: exact already
    if name not in aliases and producer.op_type == "Cast":  # a Cast the rewrite inserted
        source = producer.input[0]
        if source not in producers:
            return None  # it casts a graph input or an initializer
        name = source
    original = aliases.get(name, name if name in reference_values else None)
    return original if original is not None and original in reference_values else None


def _initializers(scope: ProtoScope, name: str) -> set[str]:
    """``name`` when it is an initializer of the scope that defines it (constants are exact: never fed)."""
    current: ProtoScope | None = scope
    while current is not None:
        if name in current.defined:
            return {init.name for init in current.graph.initializer if init.name == name}
        current = current.parent
    return set()


def _inject(
    graph: onnx.GraphProto,
    result: InjectionModel,
    front: list[onnx.NodeProto],
    key: str,
    elem_type: int,
    shape: Sequence[int],
    taken: set[str],
) -> str:
    """Add the graph input that feeds ``key``; a bfloat16 value (numpy has none) is fed as float32 and cast."""
    feed = fresh_name(key + INJECTED_SUFFIX, taken)
    if elem_type == TensorProto.BFLOAT16:
        graph.input.append(oh.make_tensor_value_info(feed, TensorProto.FLOAT, list(shape)))
        result.feeds[feed] = (key, "float32")
        rounded = fresh_name(feed + "::bfloat16", taken)
        front.append(oh.make_node("Cast", [feed], [rounded], name=rounded, to=TensorProto.BFLOAT16))
        return rounded
    graph.input.append(oh.make_tensor_value_info(feed, elem_type, list(shape)))
    result.feeds[feed] = (key, _FEEDABLE[elem_type])
    return feed


def _slice(loop: ProtoScope, stacked: str, body_front: dict[str, list[onnx.NodeProto]], taken: set[str]) -> str:
    """Inside the Loop body: this iteration's slice of a value fed one slice per iteration."""
    iteration = loop.graph.input[0].name
    name = fresh_name(stacked + "::this_iteration", taken)
    body_front.setdefault(loop.path, []).append(oh.make_node("Gather", [stacked, iteration], [name], name=name, axis=0))
    return name
