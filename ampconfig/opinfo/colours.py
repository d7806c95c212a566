"""The built-in colour strategy: per op key, its list colour and the reference the choice follows.

Pure data. The colours start from two published CUDA mixed-precision lists and are merged into every target's
op info (``ampconfig ops-info probe``); the kernels a target has are measured separately.

- TF: TensorFlow's grappler AMP lists, ``tensorflow/core/grappler/optimizers/auto_mixed_precision_lists.h``
  (allow/white = always fp16, infer/gray, deny/black, clear).
- torch: PyTorch autocast's CUDA op lists (``docs/source/amp.rst``, "CUDA Ops that can autocast to float16" and
  "... to float32"; ops on neither list run in their input dtype).

Where the two disagree the strategy takes the choice that is safer for accuracy (black over gray, gray over
white) and the reference says so. Ops neither list names are decided by analogy, and the reference says that too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ampconfig.opinfo.library import Colour
from ampconfig.opinfo.quantized_ops import MS_DOMAIN, QUANTIZED_OPS

_TF = "TF AMP"
_TORCH = "torch autocast"


@dataclass(frozen=True)
class StrategyEntry:
    colour: Colour
    reference: str
    keeps_dtype: str | None = None  # packed/quantized ops: the node keeps its dtypes, for this reason


def _entries(colour: Colour, reference: str, *keys: str) -> dict[str, StrategyEntry]:
    return {key: StrategyEntry(colour, reference) for key in keys}


W, B, G, C = Colour.WHITE, Colour.BLACK, Colour.GRAY, Colour.CLEAR


def _kept(reason: str, *ops: str) -> dict[str, StrategyEntry]:
    reference = f"keeps its dtype: {reason}"
    return {f"{MS_DOMAIN}::{op}": StrategyEntry(G, reference, keeps_dtype=reason) for op in ops}


# Matrix ops: both references put matmul/conv/RNN cells in fp16 (TF allow list; torch fp16 list).
_WHITE: dict[str, StrategyEntry] = {
    **_entries(W, f"{_TF} allow MatMul/BatchMatMul; {_TORCH} fp16 matmul/mm/bmm", "MatMul"),
    **_entries(W, f"{_TF} allow MatMul; {_TORCH} fp16 linear/addmm", "Gemm"),
    **_entries(W, f"{_TF} allow Conv2D/Conv3D; {_TORCH} fp16 conv1d/2d/3d", "Conv"),
    **_entries(W, f"{_TF} allow Conv2DBackpropInput; {_TORCH} fp16 conv_transpose*", "ConvTranspose"),
    **_entries(W, f"{_TF} allow Einsum; {_TORCH} fp16 matmul family", "Einsum"),
    **_entries(
        W,
        f"{_TF} allow CudnnRNN/LSTMBlockCell/GRUBlockCell; {_TORCH} fp16 LSTMCell/GRUCell/RNNCell",
        "LSTM",
        "GRU",
        "RNN",
    ),
    **_entries(
        W,
        f"matrix op (QK^T and PV matmuls): {_TF} allow MatMul, {_TORCH} fp16 matmul/bmm",
        "Attention",
        "LinearAttention",
    ),
    **_entries(
        W,
        f"convolution variant: {_TF} allow Conv2D, {_TORCH} fp16 conv*",
        "DeformConv",
        "CausalConvWithState",
    ),
    # Contrib ops produced by ORT's transformer optimizer: fused forms of the matrix ops above.
    **_entries(
        W,
        f"fused attention replacing MatMul(QK^T) -> Softmax -> MatMul(PV) (ORT fusion_attention.py): the matmuls "
        f"dominate, {_TF} allow MatMul, {_TORCH} fp16 matmul/bmm; kernel accumulation: docs/cuda-kernels.md",
        "com.microsoft::Attention",
        "com.microsoft::MultiHeadAttention",
        "com.microsoft::GroupQueryAttention",
        "com.microsoft::DecoderMaskedMultiHeadAttention",
    ),
    **_entries(
        W,
        f"MatMul with Transpose/scale folded in (ORT MatMulScaleFusion/MatmulTransposeFusion): {_TF} allow "
        f"MatMul; {_TORCH} fp16 matmul",
        "com.microsoft::FusedMatMul",
        "com.microsoft::TransposeMatMul",
    ),
    **_entries(
        W,
        f"MatMul (+ bias) + FastGelu fused (ORT GemmFastGeluFusion), the matmul dominates: {_TF} allow MatMul; "
        f"{_TORCH} fp16 linear",
        "com.microsoft::GemmFastGelu",
    ),
    **_entries(
        W,
        f"fused/NHWC Conv: {_TF} allow Conv2D; {_TORCH} fp16 conv*",
        "com.microsoft::FusedConv",
        "com.microsoft::NhwcConv",
    ),
}

_SAFER_BLACK = "disagree, black is safer"

# Numerically dangerous: exp/log/pow, sum/product reductions, norms, softmax, losses.
_BLACK: dict[str, StrategyEntry] = {
    **_entries(B, f"{_TF} deny Exp; {_TORCH} fp32 exp", "Exp"),
    **_entries(B, f"{_TF} infer Log vs {_TORCH} fp32 log: {_SAFER_BLACK}", "Log"),
    **_entries(B, f"{_TF} deny Pow; {_TORCH} fp32 pow", "Pow"),
    **_entries(B, f"{_TF} infer Reciprocal vs {_TORCH} fp32 reciprocal: {_SAFER_BLACK}", "Reciprocal"),
    **_entries(B, f"{_TF} infer Softmax vs {_TORCH} fp32 softmax: {_SAFER_BLACK}", "Softmax"),
    **_entries(B, f"{_TF} infer LogSoftmax vs {_TORCH} fp32 log_softmax: {_SAFER_BLACK}", "LogSoftmax"),
    **_entries(B, f"{_TF} infer Softplus vs {_TORCH} fp32 softplus: {_SAFER_BLACK}", "Softplus"),
    **_entries(B, f"{_TF} deny Sum; {_TORCH} fp32 sum", "ReduceSum"),
    **_entries(B, f"{_TF} deny Mean; {_TORCH} fp32 sum (mean sums first)", "ReduceMean"),
    **_entries(B, f"{_TF} infer Prod vs {_TORCH} fp32 prod: {_SAFER_BLACK}", "ReduceProd"),
    **_entries(B, f"exp + sum: {_TF} deny Exp/Sum; {_TORCH} fp32 exp/sum (logsumexp)", "ReduceLogSumExp"),
    **_entries(B, f"log of a sum: {_TF} deny Sum; {_TORCH} fp32 log/sum", "ReduceLogSum"),
    **_entries(B, f"sum of squares: {_TF} deny L2Loss/Sum; {_TORCH} fp32 norm/sum", "ReduceSumSquare"),
    **_entries(B, f"{_TORCH} fp32 norm/dist; {_TF} deny Sum", "ReduceL1", "ReduceL2"),
    **_entries(B, f"{_TORCH} fp32 cumsum; running sum like {_TF} deny Sum", "CumSum"),
    **_entries(B, f"{_TORCH} fp32 cumprod; running product", "CumProd"),
    **_entries(B, f"{_TORCH} fp32 layer_norm; {_TF} keeps norm statistics fp32", "LayerNormalization"),
    **_entries(B, f"{_TORCH} fp32 group_norm", "GroupNormalization"),
    **_entries(
        B,
        f"norm statistics over a reduction, like {_TORCH} fp32 layer_norm/group_norm",
        "InstanceNormalization",
        "MeanVarianceNormalization",
        "RMSNormalization",
        "LRN",
    ),
    **_entries(B, f"{_TORCH} fp32 normalize/norm", "LpNormalization"),
    **_entries(B, f"p-norm pooling (pow + sum): {_TORCH} fp32 norm/pow", "LpPool", "GlobalLpPool"),
    **_entries(B, f"{_TF} deny SoftmaxCrossEntropyWithLogits; {_TORCH} fp32 cross_entropy", "SoftmaxCrossEntropyLoss"),
    **_entries(
        B,
        f"{_TORCH} fp32 nll_loss; {_TF} deny SparseSoftmaxCrossEntropyWithLogits",
        "NegativeLogLikelihoodLoss",
    ),
    **_entries(B, f"{_TORCH} fp32 acos/asin/cosh/sinh/tan", "Acos", "Asin", "Cosh", "Sinh", "Tan"),
    **_entries(
        B,
        f"log-based inverse hyperbolics, by analogy with {_TORCH} fp32 acos/asin/log",
        "Acosh",
        "Asinh",
        "Atanh",
    ),
    **_entries(B, f"product of many terms overflows fp16; by analogy with {_TORCH} fp32 prod", "Det"),
    **_entries(B, f"sums over the whole signal, like {_TF} deny Sum / {_TORCH} fp32 sum", "DFT", "STFT"),
    **_entries(B, f"softmax over logits, like {_TORCH} fp32 softmax", "Multinomial"),
    **_entries(B, "generated values lose integer exactness past 2048 in fp16; neither list names it", "Range"),
    **_entries(
        B,
        "min/max/scale statistics over the tensor decide the quantization; kept fp32 (neither list)",
        "DynamicQuantizeLinear",
        "QuantizeLinear",
    ),
    **_entries(B, "IoU on box coordinates loses precision in fp16; neither list names it", "NonMaxSuppression"),
    # Contrib norms/softmax from ORT's transformer optimizer.
    **_entries(
        B,
        f"residual Add + LayerNormalization fused (ORT fusion_skiplayernorm.py): {_TORCH} fp32 layer_norm",
        "com.microsoft::SkipLayerNormalization",
    ),
    **_entries(
        B,
        f"residual Add + RMS norm fused (ORT fusion_skiplayernorm.py, simplified): {_TORCH} fp32 layer_norm",
        "com.microsoft::SkipSimplifiedLayerNormalization",
    ),
    **_entries(
        B,
        f"word/position/segment Gather + Add + LayerNormalization fused (ORT fusion_embedlayer.py): "
        f"{_TORCH} fp32 layer_norm",
        "com.microsoft::EmbedLayerNormalization",
    ),
    **_entries(
        B,
        f"RMS norm (ORT's own op in the ONNX domain, from ORT's SimplifiedLayerNormFusion): {_TORCH} fp32 "
        "layer_norm/rms_norm",
        "SimplifiedLayerNormalization",
    ),
    **_entries(
        B,
        f"fused GroupNorm: {_TORCH} fp32 group_norm",
        "com.microsoft::GroupNorm",
        "com.microsoft::SkipGroupNorm",
    ),
    **_entries(
        B,
        f"bias + softmax: {_TF} infer Softmax vs {_TORCH} fp32 softmax: {_SAFER_BLACK}",
        "com.microsoft::BiasSoftmax",
    ),
}

_SAFER_GRAY = "disagree, gray is safer"

# Elementwise arithmetic: safe in fp16 unless fed by a black op (TF's infer list).
_GRAY: dict[str, StrategyEntry] = {
    **_entries(
        G,
        f"{_TF} infer Add/AddV2/Sub/Mul/RealDiv; {_TORCH} unlisted (input dtype)",
        "Add",
        "Sub",
        "Mul",
        "Div",
    ),
    **_entries(G, f"{_TF} infer AddN; {_TORCH} unlisted", "Sum", "Mean"),
    **_entries(G, f"{_TF} infer FloorDiv; {_TORCH} unlisted", "Mod"),
    **_entries(G, f"{_TF} infer Sqrt; {_TORCH} unlisted (only rsqrt is fp32)", "Sqrt"),
    **_entries(G, f"{_TF} infer Tanh; {_TORCH} unlisted", "Tanh"),
    **_entries(G, f"{_TF} infer Sigmoid; {_TORCH} unlisted", "Sigmoid"),
    **_entries(G, f"{_TF} infer Erf; {_TORCH} unlisted", "Erf"),
    **_entries(G, f"{_TF} infer Elu/Selu; {_TORCH} unlisted", "Elu", "Selu", "Celu"),
    **_entries(G, f"{_TF} infer LeakyRelu; {_TORCH} unlisted", "LeakyRelu"),
    **_entries(G, f"{_TF} infer Softsign; {_TORCH} unlisted", "Softsign"),
    **_entries(G, f"{_TORCH} fp16 prelu vs {_TF} infer LeakyRelu: {_SAFER_GRAY}", "PRelu"),
    **_entries(
        G,
        f"{_TF} infer FusedBatchNormV3 (inference BN is a per-channel affine); {_TORCH} unlisted",
        "BatchNormalization",
    ),
    **_entries(G, f"{_TF} infer AvgPool; {_TORCH} unlisted", "AveragePool", "GlobalAveragePool"),
    **_entries(
        G,
        f"activation built from infer-list ops ({_TF} infer Sigmoid/Tanh/Erf/Mul); {_TORCH} unlisted",
        "Gelu",
        "Swish",
        "SwiGLU",
        "HardSigmoid",
        "HardSwish",
        "Mish",
        "Shrink",
    ),
    **_entries(G, f"bounded trigonometry; {_TORCH} unlisted (only acos/asin/tan are fp32)", "Sin", "Cos", "Atan"),
    **_entries(
        G,
        f"weighted sums of neighbours; {_TF} clear lists only nearest-neighbour resize",
        "Resize",
        "Upsample",
        "GridSample",
        "RoiAlign",
        "AffineGrid",
        "Col2Im",
    ),
    **_entries(G, f"elementwise mul/add with cos/sin caches, {_TF} infer Mul/Add", "RotaryEmbedding"),
    **_entries(
        G,
        f"rotary position embedding fused from Slice/Mul/Add/Concat (ORT fusion_rotary_attention.py): elementwise "
        f"mul/add with cos/sin caches, {_TF} infer Mul/Add",
        "com.microsoft::RotaryEmbedding",
    ),
    **_entries(G, f"int * scale, {_TF} infer Mul; output precision follows consumers", "DequantizeLinear"),
    **_entries(
        G,
        "generated values; neither list names it, precision follows consumers",
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Bernoulli",
        "HannWindow",
        "HammingWindow",
        "BlackmanWindow",
        "MelWeightMatrix",
    ),
    # Contrib elementwise fusions.
    **_entries(
        G,
        f"Gelu subgraph fused (ORT fusion_gelu.py: Div/Erf/Add/Mul): {_TF} infer Erf/Mul; {_TORCH} unlisted",
        "com.microsoft::Gelu",
    ),
    **_entries(
        G,
        f"tanh-approximation Gelu, optionally with the bias Add, fused (ORT fusion_fastgelu.py): {_TF} infer "
        f"Tanh/Mul/Add; {_TORCH} unlisted",
        "com.microsoft::FastGelu",
    ),
    **_entries(
        G,
        f"bias Add + Erf Gelu fused (ORT fusion_biasgelu.py): {_TF} infer Add/Erf/Mul; {_TORCH} unlisted",
        "com.microsoft::BiasGelu",
    ),
    **_entries(
        G,
        f"x * Sigmoid(alpha * x) fused (ORT fusion_quickgelu.py): {_TF} infer Sigmoid/Mul; {_TORCH} unlisted",
        "com.microsoft::QuickGelu",
    ),
    **_entries(
        G,
        f"bias Add + Split + Gelu gate (GEGLU) fused (ORT fusion_bias_split_gelu.py, diffusion UNet): {_TF} infer "
        f"Add/Erf/Mul; {_TORCH} unlisted",
        "com.microsoft::BiasSplitGelu",
    ),
    **_entries(
        G,
        f"bias Add + residual Add fused (ORT fusion_bias_add.py, diffusion UNet): {_TF} infer Add/BiasAdd",
        "com.microsoft::BiasAdd",
    ),
}

_MOVE = f"data movement, {_TF} clear"
_NO_FLOAT_MATH = "computes on no float values"

# Numerically neutral: data movement, selection, comparisons, sign/rounding, integer and string ops.
_CLEAR: dict[str, StrategyEntry] = {
    **_entries(C, f"{_MOVE} Reshape/ExpandDims/Squeeze", "Reshape", "Squeeze", "Unsqueeze", "Flatten"),
    **_entries(C, f"{_MOVE} Transpose", "Transpose"),
    **_entries(C, f"{_MOVE} Concat/ConcatV2/Pack", "Concat"),
    **_entries(C, f"{_MOVE} Split/SplitV", "Split"),
    **_entries(C, f"{_MOVE} Slice/StridedSlice", "Slice"),
    **_entries(C, f"{_MOVE} Gather/GatherV2/GatherNd", "Gather", "GatherElements", "GatherND"),
    **_entries(C, f"{_MOVE} BroadcastTo/Tile", "Expand", "Tile"),
    **_entries(C, f"{_MOVE} Pad/PadV2/MirrorPad", "Pad", "CenterCropPad"),
    **_entries(C, f"{_MOVE} Identity/Snapshot", "Identity", "Dropout"),
    **_entries(C, f"{_MOVE} DepthToSpace/SpaceToDepth", "DepthToSpace", "SpaceToDepth"),
    **_entries(C, f"{_MOVE} ReverseSequence", "ReverseSequence"),
    **_entries(C, f"{_MOVE} Shape/Size/Rank", "Shape", "Size"),
    **_entries(C, f"{_MOVE} Select/SelectV2", "Where"),
    **_entries(C, f"{_MOVE} DynamicPartition/DynamicStitch", "Compress", "NonZero", "Unique"),
    **_entries(
        C,
        f"scatter is data movement, like {_TF} clear TensorListScatter",
        "ScatterElements",
        "ScatterND",
        "Scatter",
        "TensorScatter",
    ),
    **_entries(C, f"masking is data movement, like {_TF} clear ZerosLike/Select", "Trilu", "EyeLike"),
    **_entries(C, f"{_TF} clear OneHot", "OneHot"),
    **_entries(C, f"{_TF} clear Fill/OnesLike; constants take their consumer's dtype", "Constant", "ConstantOfShape"),
    **_entries(C, f"{_TF} clear Relu/Relu6", "Relu", "ThresholdedRelu"),
    **_entries(C, f"{_TF} clear MaxPool/MaxPoolV2", "MaxPool", "GlobalMaxPool", "MaxRoiPool", "MaxUnpool"),
    **_entries(C, f"{_TF} clear Max/Min (reductions) and Maximum/Minimum", "Max", "Min", "ReduceMax", "ReduceMin"),
    **_entries(C, f"{_TF} clear ArgMax/ArgMin/TopKV2", "ArgMax", "ArgMin", "TopK", "Hardmax"),
    **_entries(C, f"{_TF} clear Abs/Neg/Sign", "Abs", "Neg", "Sign"),
    **_entries(C, f"{_TF} clear Ceil/Floor/Round", "Ceil", "Floor", "Round"),
    **_entries(C, f"{_TF} clear ClipByValue", "Clip"),
    **_entries(C, f"{_TF} clear IsFinite/IsInf/IsNan", "IsInf", "IsNaN"),
    **_entries(
        C,
        f"{_TF} clear Equal/Greater/GreaterEqual/Less/LessEqual",
        "Equal",
        "Greater",
        "GreaterOrEqual",
        "Less",
        "LessOrEqual",
    ),
    **_entries(C, "a cast's dtypes are the rewrite's business, not the painting's", "Cast", "CastLike"),
    **_entries(
        C,
        f"control flow; {_TF} clear Switch/Merge/Enter/Exit (bodies are painted on their own)",
        "If",
        "Loop",
        "Scan",
        "SequenceMap",
    ),
    **_entries(
        C,
        f"containers, like {_TF} clear TensorList*",
        "Optional",
        "OptionalGetElement",
        "OptionalHasElement",
        "SequenceAt",
        "SequenceConstruct",
        "SequenceEmpty",
        "SequenceErase",
        "SequenceInsert",
        "SequenceLength",
        "SplitToSequence",
        "ConcatFromSequence",
    ),
    **_entries(
        C,
        f"{_NO_FLOAT_MATH} (bool/bitwise)",
        "And",
        "Or",
        "Xor",
        "Not",
        "BitShift",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitwiseNot",
        "BitCast",
    ),
    **_entries(
        C,
        f"{_NO_FLOAT_MATH} (integer compute)",
        "MatMulInteger",
        "ConvInteger",
        "QLinearConv",
        "QLinearMatMul",
    ),
    **_entries(
        C,
        f"{_NO_FLOAT_MATH} (strings, images, n-gram counts)",
        "StringConcat",
        "StringNormalizer",
        "StringSplit",
        "RegexFullMatch",
        "ImageDecoder",
        "TfIdfVectorizer",
    ),
}


_QUANTIZED = (
    "quantized: integer data with float scales/zero points fixed at quantization time; the float side's dtype "
    "is the quantizer's choice and retyping it would change the quantization"
)
_PACKED = (
    "packed (padding removed, rows indexed by token_offset/cumulative_sequence_length): it runs in the dtype the "
    "packing pipeline (RemovePadding/RestorePadding) was built for"
)

# Contrib ops ORT's optimizers and quantizers write that keep their dtype whatever the mode, and say why: every
# contrib op of the one list of quantized ops (opinfo/quantized_ops.py), and the packed ops.
_KEEPS_DTYPE: dict[str, StrategyEntry] = {
    **_kept(_QUANTIZED, *(op.op_type for op in QUANTIZED_OPS if op.domain == MS_DOMAIN)),
    **_kept(_PACKED, "PackedAttention", "PackedMultiHeadAttention"),
}


def _merge(*parts: dict[str, StrategyEntry]) -> Mapping[str, StrategyEntry]:
    merged: dict[str, StrategyEntry] = {}
    for part in parts:
        duplicated = merged.keys() & part.keys()
        if duplicated:  # a key in two lists is a bug in this table, not a choice
            raise ValueError(f"op keys coloured twice: {sorted(duplicated)}")
        merged.update(part)
    return MappingProxyType(dict(sorted(merged.items())))


#: The built-in strategy, keyed by op key (``Op`` or ``domain::Op``).
STRATEGY: Mapping[str, StrategyEntry] = _merge(_WHITE, _BLACK, _GRAY, _CLEAR, _KEEPS_DTYPE)


#: The matrix ops ``allow_fp32_to_fp16`` lowers (matmuls, convolutions, attention): where low precision pays most
#: and both references put them on the allow/fp16 list.
MATRIX_OPS = frozenset(
    {
        "MatMul",
        "Gemm",
        "Conv",
        "ConvTranspose",
        "Einsum",
        "Attention",
        "com.microsoft::Attention",
        "com.microsoft::MultiHeadAttention",
        "com.microsoft::GroupQueryAttention",
        "com.microsoft::PackedAttention",
        "com.microsoft::FusedMatMul",
        "com.microsoft::FusedConv",
        "com.microsoft::GemmFastGelu",
        "com.microsoft::NhwcConv",
    }
)
