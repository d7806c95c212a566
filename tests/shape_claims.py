"""The shapes a written model declares that its input did not declare for the same tensor (docs/design.md §6).

A declared shape is a claim ONNX Runtime trusts: its memory planner lets values declared with the same shape share
a buffer, so a shape copied from a graph output or from another tensor onto a new one (``[N]`` on a value that
holds 24 elements) fails a run the input survives. What counts as the input's own declaration:

- an internal value (``value_info``): a shape the input declared for a value of that name, or, for an
  initializer, its own tensor's dimensions (onnx-ir declares every initializer so);
- a graph input or output: the declaration the input made at the same position of the graph of the same name
  (a subgraph's output is a new Cast's when the rewrite keeps its dtype, under a new name).
"""

from __future__ import annotations

from collections import defaultdict

import onnx

from ampconfig.model_io.repair import graphs

Shape = tuple[int | str | None, ...]


def declared_shape(type_proto: onnx.TypeProto) -> Shape | None:
    """The shape a tensor type declares (a dimension as its value, its symbol, or None), or None for no shape."""
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    return tuple(
        dim.dim_value if dim.HasField("dim_value") else dim.dim_param if dim.HasField("dim_param") else None
        for dim in type_proto.tensor_type.shape.dim
    )


def added_shape_claims(original: onnx.ModelProto, written: onnx.ModelProto) -> list[str]:
    """Every shape ``written`` declares that ``original`` did not declare for that tensor, in words."""
    internal: dict[str, set[Shape | None]] = defaultdict(set)
    boundary: dict[tuple[str, str, int], set[Shape | None]] = defaultdict(set)
    for graph in graphs(original.graph):
        for entry in graph.value_info:
            internal[entry.name].add(declared_shape(entry.type))
        for kind, entries in (("input", graph.input), ("output", graph.output)):
            for position, entry in enumerate(entries):
                boundary[graph.name, kind, position].add(declared_shape(entry.type))
    added: list[str] = []
    for graph in graphs(written.graph):
        own = {tensor.name: tuple(tensor.dims) for tensor in graph.initializer}
        for entry in graph.value_info:
            shape = declared_shape(entry.type)
            if shape is None or shape in internal.get(entry.name, ()) or shape == own.get(entry.name):
                continue
            added.append(f"graph {graph.name!r}: value {entry.name!r} declared {list(shape)}")
        for kind, entries in (("input", graph.input), ("output", graph.output)):
            for position, entry in enumerate(entries):
                shape = declared_shape(entry.type)
                if shape not in boundary.get((graph.name, kind, position), {None} if shape is None else set()):
                    added.append(f"graph {graph.name!r}: {kind} {position} ({entry.name!r}) declared {shape}")
    return added
