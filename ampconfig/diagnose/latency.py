"""Estimated latency of a model and of its rewrites, from the kernel cost model (:mod:`ampconfig.opinfo.costs`)
and the sizes one fp32 run saw. For comparing precision choices of one model (``tune``), not a benchmark.

A node costs its kernel at its dtype on its largest output (matrix ops by their multiply-adds); every Cast the
rewrite inserted costs a Cast of its input's size. Nodes inside subgraphs are not counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from ampconfig.decide.decisions import NodeDecision
from ampconfig.opinfo.costs import cast_us, kernel_us
from ampconfig.opinfo.library import op_key


def value_shapes(model: onnx.ModelProto, values: Mapping[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """Shape of every value a run exposed, and of every initializer."""
    shapes = {name: tuple(int(d) for d in np.shape(array)) for name, array in values.items()}
    for init in model.graph.initializer:
        shapes.setdefault(init.name, tuple(int(d) for d in init.dims))
    return shapes


def _elements(shape: tuple[int, ...] | None) -> int:
    return math.prod(shape) if shape is not None else 1


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(attr.i) for attr in node.attribute if attr.name == name), default)


def node_flops(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, float]:
    """Floating-point operations (2 x multiply-adds) of the main graph's matrix nodes whose shapes are known."""
    flops: dict[str, float] = {}
    for node in model.graph.node:
        out = shapes.get(node.output[0]) if node.output else None
        inputs = [shapes.get(name) for name in node.input]
        if out is None or not inputs or inputs[0] is None:
            continue
        a = inputs[0]
        w = inputs[1] if len(inputs) > 1 else None
        if node.op_type == "MatMul" and len(a) >= 1:
            flops[node.name] = 2.0 * _elements(out) * a[-1]
        elif node.op_type == "Gemm" and len(a) == 2:
            flops[node.name] = 2.0 * _elements(out) * (a[0] if _attribute(node, "transA", 0) else a[1])
        elif node.op_type == "Conv" and w is not None and len(w) >= 2:
            flops[node.name] = 2.0 * _elements(out) * math.prod(w[1:])
        elif node.op_type == "ConvTranspose" and w is not None and len(w) >= 2:
            flops[node.name] = 2.0 * _elements(a) * math.prod(w[1:])
        elif node.op_type in ("LSTM", "GRU", "RNN") and w is not None and len(inputs) > 2 and inputs[2] is not None:
            steps_batch = a[0] * a[1] if len(a) == 3 else 1
            r = inputs[2]
            flops[node.name] = 2.0 * steps_batch * w[0] * w[1] * (w[2] + r[2])
    return flops


def estimate_us(
    model: onnx.ModelProto,
    decisions: Sequence[NodeDecision],
    shapes: Mapping[str, tuple[int, ...]],
    flops: Mapping[str, float],
    original_outputs: Mapping[str, Sequence[str]],
) -> float:
    """Estimated microseconds of one run of ``model`` (the original or a rewrite of it) on one GPU.

    ``decisions`` give each original node's dtype (for the original model pass decisions whose dtype is the
    original dtype); ``original_outputs`` the original output names of each node (a rewrite may rename one).
    """
    dtypes = {d.name: d.dtype for d in decisions if not d.scope}
    aliases = {
        rewritten: original
        for node in model.graph.node
        for rewritten, original in zip(node.output, original_outputs.get(node.name, ()), strict=False)
    }
    total = 0.0
    for node in model.graph.node:
        if node.name in original_outputs:
            largest = max((_elements(shapes.get(name)) for name in original_outputs[node.name]), default=1)
            total += kernel_us(op_key(node.domain, node.op_type), dtypes.get(node.name), largest, flops.get(node.name))
        elif node.op_type == "Cast":  # inserted by the rewrite (or by the CPU rounding copy)
            source = aliases.get(node.input[0], node.input[0])
            total += cast_us(_elements(shapes.get(source)))
    return total


def original_us(
    model: onnx.ModelProto,
    decisions: Sequence[NodeDecision],
    shapes: Mapping[str, tuple[int, ...]],
    flops: Mapping[str, float],
) -> float:
    """Estimated microseconds of the original model (every node in its original dtype)."""
    original = [
        NodeDecision(d.name, d.op_type, d.scope, d.colour, d.original_dtype, d.original_dtype, d.rule, d.reason)
        for d in decisions
    ]
    outputs = {node.name: list(node.output) for node in model.graph.node}
    return estimate_us(model, original, shapes, flops, outputs)
