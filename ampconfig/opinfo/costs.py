"""A small latency model of ONNX Runtime CUDA kernels: what a node costs in float32 and in float16, and a Cast.

Source: the per-kernel measurements in ``shared/data/h100-op-costs.json`` (H100, ONNX Runtime 1.31.1 CUDA EP,
graph optimizations off, IOBinding, median of 200; per-kernel time = (t17 - t1) / 16 over chains of 1 and 17
identical nodes; float32 with TF32 on). The tables below are that file's rows reduced to three op classes:

- elementwise: the mean of Add, Mul, Tanh, Erf, Sqrt, Pow, Div and Relu at each measured size;
- normalization: the mean of LayerNormalization and Softmax (the reductions are costed like them);
- matrix: MatMul ``[M, 768] x [768, 768]``, by floating-point operations (Conv, Gemm, Einsum and the attention
  ops are costed by their multiply-adds the same way).

Between measured sizes the cost is interpolated linearly, below the smallest it is the smallest (launch-bound),
beyond the largest it grows along the last segment (bandwidth- or compute-bound). The file's own note: its Cast
row looks low, so a Cast is costed like an elementwise float32 node of its size. bfloat16 is costed as float16.
Ops that only relabel a buffer (Reshape, Squeeze, ...) cost nothing.

These are estimates for one GPU, good for comparing precision choices of one model with each other (``tune``'s
latency objective and its report), not a prediction of a model's latency on another machine.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence

#: (elements, microseconds) per dtype; see the module docstring for where each number comes from.
ELEMENTWISE_US: dict[str, tuple[tuple[float, float], ...]] = {
    "float32": ((49152, 5.93), (786432, 5.87), (3145728, 8.59), (12582912, 40.92)),
    "float16": ((49152, 5.87), (786432, 5.72), (3145728, 7.56), (12582912, 26.44)),
}
NORMALIZATION_US: dict[str, tuple[tuple[float, float], ...]] = {
    "float32": ((49152, 5.92), (786432, 6.49), (3145728, 11.09), (12582912, 46.78)),
    "float16": ((49152, 5.92), (786432, 6.92), (3145728, 12.37), (12582912, 37.98)),
}
#: (floating-point operations, microseconds): MatMul [512|4096|16384, 768] x [768, 768], 2*M*768*768 FLOPs.
MATRIX_US: dict[str, tuple[tuple[float, float], ...]] = {
    "float32": ((603979776, 10.48), (4831838208, 32.23), (19327352832, 78.55)),
    "float16": ((603979776, 11.59), (4831838208, 12.62), (19327352832, 33.92)),
}

MATRIX_OPS = frozenset(
    {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "Attention", "com.microsoft::Attention", "LSTM", "GRU", "RNN"}
)
NORMALIZATION_OPS = frozenset(
    {
        "LayerNormalization",
        "Softmax",
        "LogSoftmax",
        "BatchNormalization",
        "InstanceNormalization",
        "GroupNormalization",
        "RMSNormalization",
        "ReduceMean",
        "ReduceSum",
        "ReduceSumSquare",
        "ReduceMax",
        "ReduceMin",
        "ReduceL2",
        "GlobalAveragePool",
        "com.microsoft::SkipLayerNormalization",
        "com.microsoft::SimplifiedLayerNormalization",
    }
)
#: Ops that hand on the same buffer with another shape: no kernel runs.
FREE_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Constant"})


def _interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    sizes = [size for size, _ in points]
    if x <= sizes[0]:
        return points[0][1]
    index = min(bisect.bisect_left(sizes, x), len(points) - 1)
    (x0, y0), (x1, y1) = points[index - 1], points[index]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _table_dtype(dtype: str | None) -> str:
    return "float16" if dtype in ("float16", "bfloat16") else "float32"


@functools.lru_cache(maxsize=4096)  # asked twice per node: a graph has few distinct (op, dtype, size) triples
def kernel_us(op_type: str, dtype: str | None, elements: int, flops: float | None = None) -> float:
    """Estimated microseconds of one node of ``op_type`` computing in ``dtype`` on ``elements`` output elements
    (``flops``: its multiply-adds x 2, for the matrix ops; without it a matrix op is costed as elementwise)."""
    if op_type in FREE_OPS:
        return 0.0
    key = _table_dtype(dtype)
    if op_type in MATRIX_OPS and flops:
        return _interpolate(MATRIX_US[key], flops)
    table = NORMALIZATION_US if op_type in NORMALIZATION_OPS else ELEMENTWISE_US
    return _interpolate(table[key], max(elements, 1))


def cast_us(elements: int) -> float:
    """Estimated microseconds of one Cast between float32 and a low type (costed as an elementwise fp32 node)."""
    return _interpolate(ELEMENTWISE_US["float32"], max(elements, 1))
