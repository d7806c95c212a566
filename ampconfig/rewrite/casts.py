"""Making Cast nodes: the one way the rewrite and the CPU accuracy copy build and place a cast."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.dtypes import Dtype
from ampconfig.rewrite.names import NameAllocator
from ampconfig.rewrite.tensors import set_dtype


def new_value(like: ir.Value, dtype: Dtype, names: NameAllocator, name: str | None = None) -> ir.Value:
    """A value in ``dtype`` with no shape, named ``name`` or a fresh name derived from ``like``'s.

    No shape is copied from ``like``: a shape declared for one tensor is a claim about that tensor only, and ONNX
    Runtime's memory planner trusts a declared internal shape (two values declared ``[N]`` may share a buffer), so
    a claim the input made for a graph input or output, where it plans nothing, breaks a run when copied inside
    (docs/design.md §6). ONNX Runtime infers the new value's shape itself."""
    out = ir.Value(name=name or names.value(f"{like.name or 'value'}_{dtype.short}"))
    set_dtype(out, dtype)
    return out


def hand_over_declaration(previous: ir.Value, successor: ir.Value) -> None:
    """``successor`` takes the place (a graph output, a name) that ``previous`` held, and with it the shape
    declared for that place; ``previous``, now an internal value under another name, keeps none. An output's shape
    is a claim about the output only: left on the value that now feeds it, ONNX Runtime would plan memory by it."""
    successor.shape = previous.shape
    previous.shape = None


def new_cast(
    value: ir.Value,
    dtype: Dtype,
    names: NameAllocator,
    *,
    output_name: str | None = None,
    output: ir.Value | None = None,
) -> ir.Node:
    """A Cast of ``value`` to ``dtype`` (not yet in a graph) writing ``output``, else a new value named
    ``output_name`` or a fresh name."""
    base = value.name or "value"
    out = output if output is not None else new_value(value, dtype, names, output_name)
    return ir.Node(
        "",
        "Cast",
        [value],
        [ir.AttrInt64("to", dtype.data_type)],
        outputs=[out],
        name=names.node(f"Cast_{base}_to_{dtype.short}"),
    )


def owner_graph(value: ir.Value) -> ir.Graph:
    """The graph that owns ``value``: its producer's, else the graph it is an input or initializer of."""
    producer = value.producer()
    graph = producer.graph if producer is not None else value.graph
    assert isinstance(graph, ir.Graph), f"value {value.name} belongs to no graph"
    return graph


def insert_cast(cast: ir.Node) -> ir.Value:
    """Put ``cast`` right after its input's producer (first in the owning graph for an input or initializer):
    a graph in topological order stays so. Returns the cast's output."""
    value = cast.inputs[0]
    assert value is not None
    graph = owner_graph(value)
    producer = value.producer()
    if producer is not None:
        graph.insert_after(producer, cast)
    elif len(graph) > 0:
        graph.insert_before(next(iter(graph)), cast)
    else:
        graph.append(cast)
    return cast.outputs[0]
