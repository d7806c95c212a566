"""TensorFlow and Ascend op type names, and the ONNX op type each one means (docs/op-names.md).

Ascend's ``modify_mixlist``, ``keep_dtype`` and ``customize_dtypes`` files name ops by their Ascend IR op type
(``Conv2D``, ``MatMulV2``, ``ReduceMeanD``); TensorFlow's auto-mixed-precision lists by their TensorFlow op type
(``Conv2D``, ``BatchMatMulV2``, ``Mean``). This table says which ONNX op type each of those names is, so such a
file works unchanged on the ONNX model of the same network.

Sources (read, not copied):

- TensorFlow: the op types of ``tensorflow/core/grappler/optimizers/auto_mixed_precision_lists.h`` (the allow,
  deny, infer and clear lists) and of ``tf.raw_ops``;
- Ascend: the Ascend IR op types of CANN's operator list (the names ATC's TensorFlow, Caffe and ONNX parsers
  produce, and the names the ``aic-<soc>-ops-info.json`` files carry), as the ATC documentation of
  ``--modify_mixlist`` requires ("the operator type must be OpType of the Ascend IR-defined operator").

Rules the table keeps (tested in tests/opinfo/test_op_names.py):

- each foreign name means exactly one ONNX op type, or none (``None``: no single ONNX op computes it, e.g.
  ``Xlog1py``; a list naming it moves nothing, and says so). One ONNX op may have several foreign names
  (``MatMulV2``, ``BatchMatMulV2`` -> ``MatMul``): writing an ONNX answer in a foreign vocabulary lists them all,
  and reading that back gives the same ONNX op (the round trip of docs/op-names.md);
- a foreign name spelled like an ONNX op type either means that op (``Relu``; such names are listed only where
  the vocabulary has other names for the same op, so the reverse direction is complete) or is **ambiguous**
  (TensorFlow's ``Max`` is a reduction, ONNX's ``Max`` is elementwise): it needs ``op_names`` to say which;
- names that are not in the table and are ONNX op types mean the ONNX op (ONNX names keep working).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Literal


class Vocabulary(str, Enum):
    """Whose op type names a file uses (``op_names`` in the session config, ``--op-names`` on the command line)."""

    TENSORFLOW = "tensorflow"
    ASCEND = "ascend"
    ONNX = "onnx"


OP_NAME_CHOICES: tuple[str, ...] = tuple(vocabulary.value for vocabulary in Vocabulary)
#: The vocabularies' names as a type (tests/test_typing.py checks they equal :data:`OP_NAME_CHOICES`).
VocabularyName = Literal["tensorflow", "ascend", "onnx"]

TF = frozenset({Vocabulary.TENSORFLOW})
ASCEND = frozenset({Vocabulary.ASCEND})
BOTH = frozenset({Vocabulary.TENSORFLOW, Vocabulary.ASCEND})


@dataclass(frozen=True)
class ForeignOp:
    """One TensorFlow or Ascend op type and the ONNX op key it means (None: no single ONNX op)."""

    name: str
    vocabularies: frozenset[Vocabulary]
    onnx: str | None
    note: str = ""

    @property
    def vocabulary_text(self) -> str:
        names = {Vocabulary.TENSORFLOW: "TensorFlow", Vocabulary.ASCEND: "Ascend"}
        return "/".join(names[v] for v in (Vocabulary.TENSORFLOW, Vocabulary.ASCEND) if v in self.vocabularies)


def _rows(vocabularies: frozenset[Vocabulary], onnx: str | None, *names: str, note: str = "") -> list[ForeignOp]:
    return [ForeignOp(name, vocabularies, onnx, note) for name in names]


# The table. Grouped by ONNX op; within a group, TensorFlow's names then Ascend IR's (D suffix: the variant whose
# shape-like inputs are attributes, V2/V3: later versions of the same op).
_TABLE: tuple[ForeignOp, ...] = (
    # convolutions
    *_rows(BOTH, "Conv", "Conv2D", "Conv3D"),
    *_rows(TF, "Conv", "DepthwiseConv2dNative"),
    *_rows(ASCEND, "Conv", "DepthwiseConv2D"),
    *_rows(BOTH, "ConvTranspose", "Conv2DBackpropInput", "Conv3DBackpropInputV2"),
    *_rows(TF, "ConvTranspose", "Conv3DBackpropInput"),
    *_rows(ASCEND, "ConvTranspose", "Conv2DBackpropInputD", "Conv2DTranspose", "Conv2DTransposeD", "Conv3DTranspose"),
    *_rows(ASCEND, "ConvTranspose", "Conv3DTransposeD", "Conv3DBackpropInputD"),
    # matrix products
    *_rows(BOTH, "MatMul", "MatMul", "BatchMatMul", "BatchMatMulV2"),
    *_rows(ASCEND, "MatMul", "MatMulV2", "BatchMatMulV3", "MatMulV3"),
    *_rows(ASCEND, "Gemm", "FullyConnection", note="Caffe's InnerProduct as ATC builds it"),
    # elementwise arithmetic
    *_rows(BOTH, "Add", "Add", "AddV2", "BiasAdd"),
    *_rows(TF, "Add", "BiasAddV1"),
    *_rows(ASCEND, "Add", "Bias", note="Caffe's Bias layer: adds a bias"),
    *_rows(BOTH, "Sum", "AddN", note="n-ary elementwise sum: ONNX Sum"),
    *_rows(BOTH, "Div", "Div", "RealDiv"),
    *_rows(BOTH, "Max", "Maximum", note="elementwise"),
    *_rows(BOTH, "Min", "Minimum", note="elementwise"),
    *_rows(TF, "Reciprocal", "Inv"),
    *_rows(BOTH, "Reciprocal", "Reciprocal"),
    *_rows(BOTH, "Clip", "ClipByValue", "Relu6", note="Relu6 is Clip(0, 6)"),
    *_rows(BOTH, "Where", "Select", "SelectV2", note="elementwise select"),
    *_rows(BOTH, "NonZero", "Where", note="TensorFlow's and Ascend's Where return the indices of true elements"),
    # reductions: TensorFlow's Mean/Sum/Max/Min/Prod are reductions; ONNX's Mean/Sum/Max/Min are elementwise
    *_rows(BOTH, "ReduceMean", "Mean"),
    *_rows(ASCEND, "ReduceMean", "ReduceMean", "ReduceMeanD"),
    *_rows(BOTH, "ReduceSum", "Sum"),
    *_rows(ASCEND, "ReduceSum", "ReduceSum", "ReduceSumD"),
    *_rows(BOTH, "ReduceMax", "Max"),
    *_rows(ASCEND, "ReduceMax", "ReduceMax", "ReduceMaxD"),
    *_rows(BOTH, "ReduceMin", "Min"),
    *_rows(ASCEND, "ReduceMin", "ReduceMin", "ReduceMinD"),
    *_rows(BOTH, "ReduceProd", "Prod"),
    *_rows(ASCEND, "ReduceProd", "ReduceProd", "ReduceProdD"),
    # normalisation and activations
    *_rows(BOTH, "Softmax", "Softmax"),
    *_rows(ASCEND, "Softmax", "SoftmaxV2"),
    *_rows(BOTH, "LogSoftmax", "LogSoftmax"),
    *_rows(ASCEND, "LogSoftmax", "LogSoftmaxV2"),
    *_rows(ASCEND, "LayerNormalization", "LayerNorm", "LayerNormV3"),
    *_rows(TF, "BatchNormalization", "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "_FusedBatchNormEx"),
    *_rows(ASCEND, "BatchNormalization", "BatchNorm", "BNInference", "BNInferenceD"),
    *_rows(ASCEND, "com.microsoft::FastGelu", "FastGelu", "FastGeluV2"),
    *_rows(ASCEND, "Swish", "Swish"),
    *_rows(BOTH, "LRN", "LRN"),
    # pooling
    *_rows(BOTH, "AveragePool", "AvgPool", "AvgPool3D"),
    *_rows(ASCEND, "AveragePool", "AvgPoolV2"),
    *_rows(BOTH, "MaxPool", "MaxPool", "MaxPoolV2", "MaxPool3D"),
    *_rows(ASCEND, "MaxPool", "MaxPoolV3"),
    # data movement
    *_rows(BOTH, "Concat", "Concat", "ConcatV2"),
    *_rows(ASCEND, "Concat", "ConcatD", "ConcatV2D"),
    *_rows(BOTH, "Split", "Split", "SplitV"),
    *_rows(ASCEND, "Split", "SplitD", "SplitVD"),
    *_rows(BOTH, "Slice", "Slice", "StridedSlice"),
    *_rows(ASCEND, "Slice", "SliceD", "StridedSliceD", "StridedSliceV2"),
    *_rows(BOTH, "Gather", "Gather", "GatherV2"),
    *_rows(ASCEND, "Gather", "GatherV2D"),
    *_rows(BOTH, "GatherND", "GatherNd"),
    *_rows(BOTH, "Unsqueeze", "ExpandDims"),
    *_rows(BOTH, "Expand", "BroadcastTo"),
    *_rows(ASCEND, "Expand", "BroadcastToD"),
    *_rows(BOTH, "Tile", "Tile"),
    *_rows(ASCEND, "Tile", "TileD"),
    *_rows(BOTH, "Pad", "Pad", "PadV2", "MirrorPad"),
    *_rows(ASCEND, "Pad", "PadD", "PadV3", "PadV3D"),
    *_rows(BOTH, "Transpose", "Transpose"),
    *_rows(ASCEND, "Transpose", "TransposeD"),
    *_rows(BOTH, "Resize", "ResizeBilinearV2", "ResizeNearestNeighborV2"),
    *_rows(TF, "Resize", "ResizeBilinear", "ResizeNearestNeighbor"),
    *_rows(BOTH, "ArgMax", "ArgMax"),
    *_rows(ASCEND, "ArgMax", "ArgMaxV2", "ArgMaxD"),
    *_rows(BOTH, "ArgMin", "ArgMin"),
    *_rows(ASCEND, "ArgMin", "ArgMinD"),
    *_rows(BOTH, "TopK", "TopK", "TopKV2"),
    *_rows(ASCEND, "TopK", "TopKD"),
    *_rows(BOTH, "OneHot", "OneHot"),
    *_rows(ASCEND, "OneHot", "OneHotD"),
    *_rows(BOTH, "Identity", "Identity", "Snapshot", "StopGradient", "PreventGradient"),
    # comparisons and logic
    *_rows(BOTH, "GreaterOrEqual", "GreaterEqual"),
    *_rows(BOTH, "LessOrEqual", "LessEqual"),
    *_rows(BOTH, "IsNaN", "IsNan"),
    *_rows(BOTH, "And", "LogicalAnd"),
    *_rows(BOTH, "Or", "LogicalOr"),
    *_rows(BOTH, "Not", "LogicalNot"),
    *_rows(TF, "SoftmaxCrossEntropyLoss", "SparseSoftmaxCrossEntropyWithLogits"),
    # no single ONNX op: the exporters write each as a small subgraph
    *_rows(BOTH, None, "Xlog1py", "Xdivy", "Xlogy", note="x * log1p(y) and the like: no single ONNX op"),
    *_rows(BOTH, None, "FloorDiv", "FloorMod", "TruncateDiv", "DivNoNan", note="ONNX writes Div and Floor"),
    *_rows(BOTH, None, "Rsqrt", "Square", "SquaredDifference", "Log1p", "Expm1", "Erfc", note="no single ONNX op"),
    *_rows(BOTH, None, "L2Loss", "SoftmaxCrossEntropyWithLogits", note="training losses"),
    *_rows(BOTH, None, "Pack", "Unpack", "Fill", "ZerosLike", "OnesLike", "NotEqual", "IsFinite", "ReverseV2"),
    *_rows(TF, None, "SaveV2", "CheckNumerics", "EnsureShape", "Enter", "Exit", "Merge", "Switch", "NextIteration"),
    *_rows(ASCEND, None, "Power", "Pooling", "Scale", note="no single ONNX op"),
)

#: Training ops (gradients and optimiser steps) have no op in an ONNX inference graph.
_TRAINING_OP = re.compile(r".*(Grad|GradV\d|GradGrad|GradGradV\d|BackpropFilter(V\d)?|Backprop(V\d)?)$")


@cache
def foreign_ops() -> Mapping[str, ForeignOp]:
    """The table by foreign name (each name once: the tests check it)."""
    return {row.name: row for row in _TABLE}


#: The names the table reads as another ONNX op than the ONNX op of the same name (tests/opinfo/test_op_names.py checks
#: this against ONNX's schemas). Kept as data so reading a name loads no onnx (`validate` stays light).
AMBIGUOUS: frozenset[str] = frozenset({"Max", "Min", "Mean", "Sum", "Where"})


@dataclass(frozen=True)
class OpName:
    """What one written op type name means: ``onnx`` is the ONNX op key (None: no single ONNX op); ``foreign`` is
    the table row when the name was read as a TensorFlow/Ascend name, None when it was read as an ONNX name."""

    written: str
    onnx: str | None
    foreign: ForeignOp | None = None

    @property
    def mapped(self) -> bool:
        """The name was translated to another ONNX name (a note says so)."""
        return self.foreign is not None and self.onnx != self.written

    def describe(self, prefix: str = "") -> str:
        """``'Conv2D' (TensorFlow/Ascend) is ONNX 'Conv'``: the mapping as the reports show it. ``prefix`` is how
        the file wrote it before the name (``OpType::``), quoted with it: ``'OpType::BatchMatMulV2' ...``."""
        assert self.foreign is not None
        written = prefix + self.written
        if self.onnx is None:
            return f"{written!r} ({self.foreign.vocabulary_text}) has no ONNX equivalent"
        return f"{written!r} ({self.foreign.vocabulary_text}) is ONNX {self.onnx!r}"


class AmbiguousOpName(ValueError):
    """A name that means one op in ONNX and another in TensorFlow/Ascend, read without ``op_names``."""

    def __init__(self, row: ForeignOp) -> None:
        self.row = row
        super().__init__(
            f"op type {row.name!r} is ambiguous: in {row.vocabulary_text} it is ONNX {row.onnx!r}"
            + (f" ({row.note})" if row.note else "")
            + f", in ONNX it is the op {row.name!r}"
        )

    @property
    def hint(self) -> str:
        return (
            "say whose names the file uses: `op_names: tensorflow`, `op_names: ascend` or `op_names: onnx` in the "
            "session config, or --op-names tensorflow|ascend|onnx"
        )


def read_op_name(written: str, vocabulary: Vocabulary | str | None = None) -> OpName:
    """What ``written`` (an op key, already normalised) means when a file uses ``vocabulary``'s names.

    ``None`` (the default) reads ONNX names as ONNX and TensorFlow/Ascend names through the table; a name that is
    both and means different ops raises :class:`AmbiguousOpName`. ``onnx`` reads every name as written.
    ``tensorflow``/``ascend`` read the table first, so ambiguous names take that vocabulary's meaning; names of
    the other foreign vocabulary are read through the table too (teams mix them), and ONNX names stay ONNX.
    """
    vocabulary = Vocabulary(vocabulary) if vocabulary is not None else None
    if vocabulary is Vocabulary.ONNX or "::" in written:
        return OpName(written, written)
    row = foreign_ops().get(written)
    if row is None:
        if _TRAINING_OP.match(written):  # no ONNX op is named so (tested)
            return OpName(written, None, ForeignOp(written, BOTH, None, "a training (gradient) op"))
        return OpName(written, written)
    if row.onnx == written:
        return OpName(written, written, row)
    if written in AMBIGUOUS:
        if vocabulary is None:
            raise AmbiguousOpName(row)
        if vocabulary not in row.vocabularies:
            return OpName(written, written)  # e.g. a name only TensorFlow reads otherwise, in an Ascend file
    return OpName(written, row.onnx, row)


def _foreign_only(written: str) -> bool:
    """A name only TensorFlow/Ascend use (Conv2D, MatMulV2, a gradient op): evidence that a file uses their names."""
    if "::" in written:
        return False
    row = foreign_ops().get(written)
    if row is None:
        return bool(_TRAINING_OP.match(written))
    return row.onnx != written and written not in AMBIGUOUS


def file_vocabulary(written: Iterable[str], setting: Vocabulary | str | None) -> Vocabulary | str | None:
    """Whose names one file uses: the setting when there is one; else ONNX's when the file names no
    TensorFlow/Ascend-only op, so an ONNX mixlist listing Max or Mean keeps working unchanged; else None, and an
    ambiguous name is an error that lists the choices."""
    if setting is not None:
        return setting
    return None if any(_foreign_only(name) for name in written) else Vocabulary.ONNX


def read_as_onnx_note(written: str, setting: Vocabulary | str | None) -> str | None:
    """The note for an ambiguous name read as ONNX's op because the file uses ONNX names (no setting said so)."""
    if setting is not None or written not in AMBIGUOUS:
        return None
    row = foreign_ops()[written]
    return (
        f"{written!r} is read as ONNX's op {written!r}: the file names no TensorFlow/Ascend-only op "
        f"(in {row.vocabulary_text} it would be ONNX {row.onnx!r}; say `op_names: {Vocabulary.TENSORFLOW.value}` "
        f"or `{Vocabulary.ASCEND.value}` for that)"
    )


def is_ambiguous(name: str) -> bool:
    """True for a name ONNX and TensorFlow/Ascend spell alike for different ops (Max, Min, Mean, Sum, Where)."""
    return name in AMBIGUOUS


def names_in(vocabulary: Vocabulary | str, onnx_key: str) -> tuple[str, ...]:
    """The names ``vocabulary`` has for the ONNX op ``onnx_key``, in table order; empty when it has none (the
    ONNX name then stands for itself). ``read_op_name`` maps each of them back to ``onnx_key``."""
    vocabulary = Vocabulary(vocabulary)
    if vocabulary is Vocabulary.ONNX:
        return (onnx_key,)
    return tuple(row.name for row in _TABLE if row.onnx == onnx_key and vocabulary in row.vocabularies)


def table_rows() -> tuple[ForeignOp, ...]:
    """Every row, in the table's order (docs/op-names.md prints them)."""
    return _TABLE
