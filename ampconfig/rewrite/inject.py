"""A copy of a rewritten model in which every chosen node reads exact values: each node's own rounding, alone.

``tune`` needs, for every node the rewrite lowers, the error that lowering THAT node adds when everything before it
is exact. Running the rewrite once per node would cost one model run per node; this copy answers for all of them
in one run: each chosen node's float inputs that other nodes produce become graph inputs, fed with the fp32
reference values (rounded to the input's dtype in the rewrite, as a low-precision store would round them), and
each chosen node's outputs become graph outputs. No chosen node then reads another node's error, so the
difference between a chosen node's output and its fp32 reference is its own rounding alone (inputs, weights,
compute and output), as if it were the only low-precision node.

Inputs a node reads through a Cast the rewrite inserted are traced back through that Cast. Nodes with subgraphs
(If, Loop, Scan) read outer values implicitly and are left as they are.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import onnx
from onnx import TensorProto

from ampconfig.rewrite.expose import expose_values, known_elem_types

#: Suffix of the graph input that feeds the reference value of a node input.
INJECTED_SUFFIX = "::reference"
_FEEDABLE = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16", TensorProto.DOUBLE: "float64"}


@dataclass
class InjectionModel:
    """The copy to run, the feed of each injected graph input, and where each chosen node's outputs are.

    ``feeds`` maps an injected graph input to ``(reference value name, numpy dtype name)``: feed the fp32
    reference value of that name converted to that dtype. ``outputs`` maps a chosen node to its output names
    in the copy, in the original node's output order.
    """

    model: onnx.ModelProto
    feeds: dict[str, tuple[str, str]] = field(default_factory=dict)
    outputs: dict[str, list[str]] = field(default_factory=dict)


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for attr in node.attribute)


def injection_model(
    rewritten: onnx.ModelProto,
    chosen: Collection[str],
    original_outputs: Mapping[str, Sequence[str]],
    reference_values: Mapping[str, Sequence[int]],
) -> InjectionModel:
    """The copy of ``rewritten`` in which each node named in ``chosen`` reads the reference values.

    ``original_outputs`` maps every main-graph node of the original model to its output names (the rewrite may
    rename the output of a node that produces a graph output); ``reference_values`` maps the values that can be
    fed (those the runs expose) to their shapes. An input whose source is not among them (a graph input, an
    initializer, an integer value) keeps its wiring.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(rewritten)
    graph = copy.graph
    types = known_elem_types(copy)
    producers = {output: node for node in graph.node for output in node.output if output}
    aliases = _original_names(graph, original_outputs)
    wanted = set(chosen)
    result = InjectionModel(copy)
    injected: dict[str, str] = {}  # rewritten value name -> graph input (or its Cast) that replaces it
    casts: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.name not in wanted or _has_subgraph(node):
            continue
        for slot, name in enumerate(node.input):
            source = _reference_source(name, producers, aliases, reference_values)
            if source is None or types.get(name) not in (*_FEEDABLE, TensorProto.BFLOAT16):
                continue
            if name not in injected:
                shape = reference_values[source]
                injected[name] = _inject(graph, result, casts, name, source, types[name], shape)
            node.input[slot] = injected[name]
        result.outputs[node.name] = list(node.output)
    for cast in casts:
        graph.node.insert(0, cast)  # reads only a graph input: the front keeps the graph sorted
    result.model = expose_values(copy, [name for names in result.outputs.values() for name in names if name])
    return result


def _original_names(graph: onnx.GraphProto, original_outputs: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Rewritten output name -> original value name, for the original nodes (positional)."""
    aliases: dict[str, str] = {}
    for node in graph.node:
        for rewritten, original in zip(node.output, original_outputs.get(node.name, ()), strict=False):
            if rewritten and original:
                aliases[rewritten] = original
    return aliases


def _reference_source(
    name: str,
    producers: Mapping[str, onnx.NodeProto],
    aliases: Mapping[str, str],
    reference_values: Mapping[str, Sequence[int]],
) -> str | None:
    """The reference value a node input carries: its own (original) name, or what an inserted Cast converts;
    None to keep the wiring."""
    producer = producers.get(name)
    if not name or producer is None:
        return None  # a graph input or an initializer: exact already
    if name not in aliases and producer.op_type == "Cast":  # a Cast the rewrite inserted
        source = producer.input[0]
        if source not in producers:
            return None  # it casts a graph input or an initializer
        name = source
    original = aliases.get(name)
    return original if original is not None and original in reference_values else None


def _inject(
    graph: onnx.GraphProto,
    result: InjectionModel,
    casts: list[onnx.NodeProto],
    name: str,
    source: str,
    elem_type: int,
    shape: Sequence[int],
) -> str:
    """Add the graph input for ``name``; a bfloat16 value (numpy has none) is fed as float32 and cast inside."""
    feed = name + INJECTED_SUFFIX
    if elem_type == TensorProto.BFLOAT16:
        graph.input.append(onnx.helper.make_tensor_value_info(feed, TensorProto.FLOAT, list(shape)))
        result.feeds[feed] = (source, "float32")
        rounded = feed + "::bfloat16"
        casts.append(onnx.helper.make_node("Cast", [feed], [rounded], name=rounded, to=TensorProto.BFLOAT16))
        return rounded
    graph.input.append(onnx.helper.make_tensor_value_info(feed, elem_type, list(shape)))
    result.feeds[feed] = (source, _FEEDABLE[elem_type])
    return feed
