"""How each target's low-precision kernels compute, and the per-target colour that follows from it.

TensorFlow's and PyTorch's lists keep norms and softmax in float32 because their statistics are long sums, which
float16 accumulates badly. That is a statement about a kernel, not about an op: where the target's float16 kernel
already sums in float32 and rounds only its output, the op is safe in float16 and its black colour only costs a
pair of casts around it. So, as Ascend's ops-info is per SoC, the colour is per target: a black op whose danger
is accumulation (:data:`ACCUMULATING_OPS`) is gray on a target whose low kernels accumulate in float32, by a fact
cited below or because the target has no native low kernel (ONNX Runtime then computes it in float32 between the
casts it inserts). Ops whose danger is range (Exp, Pow, sums that can exceed 65504) keep their colour; their nodes
are judged one by one (:mod:`ampconfig.decide.hazards`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ampconfig.dtypes import Dtype
from ampconfig.opinfo.library import Colour

#: Black ops whose danger in low precision is a long sum inside the kernel (norm statistics, softmax
#: denominators), not the range of their output, which is normalised.
ACCUMULATING_OPS = frozenset(
    {
        "LayerNormalization",
        "SimplifiedLayerNormalization",
        "RMSNormalization",
        "GroupNormalization",
        "InstanceNormalization",
        "MeanVarianceNormalization",
        "Softmax",
        "LogSoftmax",
        "com.microsoft::SkipLayerNormalization",
        "com.microsoft::SkipSimplifiedLayerNormalization",
        "com.microsoft::EmbedLayerNormalization",
        "com.microsoft::BiasSoftmax",
        "com.microsoft::GroupNorm",
        "com.microsoft::SkipGroupNorm",
    }
)


@dataclass(frozen=True)
class Accumulation:
    """The dtype a target's low-precision kernel for an op sums in, and where that is stated."""

    dtype: Dtype
    source: str
    since_onnxruntime: str | None = None  # first ONNX Runtime release where this holds, where it changed

    def holds_for(self, onnxruntime_version: str | None) -> bool:
        """Whether the fact holds for that ONNX Runtime release (an unknown release: only if it always held)."""
        if self.since_onnxruntime is None:
            return True
        return onnxruntime_version is not None and _release(onnxruntime_version) >= _release(self.since_onnxruntime)


def _release(version: str) -> tuple[int, ...]:
    numbers = []
    for part in version.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        numbers.append(int(digits) if digits else 0)
    return tuple(numbers)


_ORT = "onnxruntime/core/providers"
_LAYER_NORM_CUDA = Accumulation(
    Dtype.FLOAT32,
    f"{_ORT}/cuda/nn/layer_norm.cc (opset 17+; onnxruntime/contrib_ops/cuda/layer_norm.cc before) registers "
    "LayerNorm<T, float, T> for float16/bfloat16: mean and variance are computed in float (U), only the output is "
    "rounded (layer_norm_impl.cu)",
)
_SKIP_NORM_CUDA = Accumulation(
    Dtype.FLOAT32,
    "onnxruntime/contrib_ops/cuda/bert/skip_layer_norm_impl.cu sums mean and variance in float since ONNX Runtime "
    "1.27.0 (microsoft/onnxruntime#28682, fixing #29034; earlier releases summed in the activation dtype, and rows "
    "of large magnitude overflowed)",
    since_onnxruntime="1.27.0",
)
_SOFTMAX_CUDA = Accumulation(
    Dtype.FLOAT32,
    f"{_ORT}/cuda/math/softmax_warpwise_impl.cuh and softmax_impl.cu sum in AccumulationType<half> = float",
)

#: Per target and op key: how its native low-precision kernels accumulate (float16 and bfloat16 alike).
KERNEL_ACCUMULATION: Mapping[str, Mapping[str, Accumulation]] = {
    "cuda": {
        "LayerNormalization": _LAYER_NORM_CUDA,
        "SimplifiedLayerNormalization": _LAYER_NORM_CUDA,
        "Softmax": _SOFTMAX_CUDA,
        "LogSoftmax": _SOFTMAX_CUDA,
        "com.microsoft::SkipLayerNormalization": _SKIP_NORM_CUDA,
        "com.microsoft::SkipSimplifiedLayerNormalization": _SKIP_NORM_CUDA,
        "com.microsoft::EmbedLayerNormalization": _SKIP_NORM_CUDA,
    },
    "cpu": {
        "LayerNormalization": Accumulation(
            Dtype.FLOAT32,
            f"{_ORT}/cpu/nn/layer_norm_impl.cc converts float16 inputs to float before the mean and variance",
        ),
        "SimplifiedLayerNormalization": Accumulation(
            Dtype.FLOAT32,
            f"{_ORT}/cpu/nn/layer_norm_impl.cc (simplified=true) converts float16 inputs to float first",
        ),
    },
}

_EMULATED = Accumulation(
    Dtype.FLOAT32,
    "no native low-precision kernel: ONNX Runtime computes it in float32 between the casts it inserts",
)


def accumulation(
    target: str, key: str, dtype: Dtype, native_dtypes: Iterable[str] | None, onnxruntime_version: str | None
) -> Accumulation | None:
    """How ``target`` sums when it runs op ``key`` in the low ``dtype`` with that ONNX Runtime release; None when
    not known."""
    if native_dtypes is not None and dtype not in set(native_dtypes):
        return _EMULATED
    fact = KERNEL_ACCUMULATION.get(target, {}).get(key)
    return fact if fact is not None and fact.holds_for(onnxruntime_version) else None


@dataclass(frozen=True)
class TargetColour:
    colour: Colour
    note: str  # why the target's colour differs from the reference lists' ("" when it does not)
    accumulation: Mapping[str, str]  # low dtype -> the dtype its kernel sums in, where known
    accumulation_source: str


def target_colour(
    key: str,
    reference_colour: Colour,
    target: str,
    dtypes: Iterable[str],
    native_dtypes: Iterable[str] | None,
    onnxruntime_version: str | None,
) -> TargetColour:
    """The colour op ``key`` has on ``target``: the reference lists' colour, except that an accumulating black op
    is gray where every low dtype the target runs it in sums in float32 with that ONNX Runtime release."""
    if key not in ACCUMULATING_OPS:
        return TargetColour(reference_colour, "", {}, "")
    native = list(native_dtypes) if native_dtypes is not None else None
    low = [Dtype(d) for d in dtypes if Dtype(d).is_low]
    found = {dtype: accumulation(target, key, dtype, native, onnxruntime_version) for dtype in low}
    known = {dtype.value: acc.dtype.value for dtype, acc in found.items() if acc is not None}
    sources = sorted({acc.source for acc in found.values() if acc is not None})
    source = "; ".join(sources)
    safe = bool(low) and all(acc is not None and acc.dtype is Dtype.FLOAT32 for acc in found.values())
    if reference_colour is Colour.BLACK and safe:
        dtypes_text = "/".join(dtype.value for dtype in low)
        note = f"gray on {target}, not black: its {dtypes_text} kernels accumulate in float32 (accumulation_source)"
        return TargetColour(Colour.GRAY, note, known, source)
    return TargetColour(reference_colour, "", known, source)
