"""The quantized ops ampconfig knows, listed once: the colour strategy keeps ONNX Runtime's contrib ones at their
dtype (:mod:`ampconfig.opinfo.colours`), and the decisions read which of them round float values to integers and
which kind of quantization each says a graph carries (:mod:`ampconfig.decide.quantized`).

Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

#: ONNX Runtime's contrib domain.
MS_DOMAIN = "com.microsoft"


class Signal(str, Enum):
    """What an op says about the quantization of a graph that holds it."""

    QDQ = "QDQ"  # a QuantizeLinear: QDQ pairs around float ops
    DYNAMIC = "dynamic"  # activations quantized at run time, or the float product of such integers
    QOPERATOR = "QOperator"  # an integer op with its scales (QLinearConv, QAttention...)
    INTEGER = "integer"  # integer math alone: QOperator, unless a dynamic quantizer feeds it
    WEIGHT_ONLY = "weight-only"  # integer weights dequantized for float math
    NONE = "none"  # quantized data of no integer kind (scaled float8)


@dataclass(frozen=True)
class QuantizedOp:
    """One quantized op: its domain ("" for ONNX's) and type, what it signals, and whether it is a quantizer: it
    rounds float values to integers, or its float scales set the integer grid its data is on, so what enters its
    float inputs must be the values it was calibrated on."""

    domain: str
    op_type: str
    signal: Signal
    rounds: bool

    @property
    def key(self) -> str:
        """The op key (``Op`` or ``domain::Op``), as op info and mixlists write it."""
        return f"{self.domain}::{self.op_type}" if self.domain else self.op_type


def _ops(domain: str, signal: Signal, rounds: bool, *op_types: str) -> tuple[QuantizedOp, ...]:
    return tuple(QuantizedOp(domain, op_type, signal, rounds) for op_type in op_types)


QUANTIZED_OPS: tuple[QuantizedOp, ...] = (
    *_ops("", Signal.QDQ, True, "QuantizeLinear"),
    *_ops("", Signal.DYNAMIC, True, "DynamicQuantizeLinear"),
    *_ops("", Signal.QOPERATOR, True, "QLinearConv", "QLinearMatMul"),
    *_ops("", Signal.INTEGER, False, "MatMulInteger", "ConvInteger"),
    *_ops("", Signal.WEIGHT_ONLY, False, "DequantizeLinear"),
    *_ops(MS_DOMAIN, Signal.QDQ, True, "QuantizeLinear"),
    *_ops(MS_DOMAIN, Signal.DYNAMIC, True, "DynamicQuantizeMatMul", "DynamicQuantizeLSTM"),
    *_ops(MS_DOMAIN, Signal.DYNAMIC, False, "MatMulIntegerToFloat"),
    *_ops(
        MS_DOMAIN,
        Signal.QOPERATOR,
        True,
        "QuantizeWithOrder",
        "QuantizeBFP",
        "QGemm",
        "QAttention",
        "QEmbedLayerNormalization",
        "QLinearAdd",
        "QLinearAveragePool",
        "QLinearConcat",
        "QLinearConv",
        "QLinearGlobalAveragePool",
        "QLinearLeakyRelu",
        "QLinearMul",
        "QLinearReduceMean",
        "QLinearSigmoid",
        "QLinearSoftmax",
        "QLinearWhere",
        "QOrderedAttention",
        "QOrderedGelu",
        "QOrderedLayerNormalization",
        "QOrderedLongformerAttention",
        "QOrderedMatMul",
    ),
    *_ops(MS_DOMAIN, Signal.INTEGER, False, "MatMulInteger16"),
    *_ops(
        MS_DOMAIN,
        Signal.WEIGHT_ONLY,
        False,
        "DequantizeLinear",
        "DequantizeWithOrder",
        "DequantizeBFP",
        "MatMulNBits",
        "MatMulBnb4",
        "MatMulFpQ4",
        "GatherBlockQuantized",
        "QMoE",  # int4/int8 expert weights with float scales; its float input is the activation, as MatMulNBits'
    ),
    *_ops(MS_DOMAIN, Signal.NONE, False, "GemmFloat8"),
)


def quantized_keys(*, signal: Signal | None = None, rounds: bool | None = None) -> frozenset[str]:
    """The op keys of the quantized ops with that signal and that answer to "is it a quantizer" (either, where
    None)."""
    return frozenset(
        op.key
        for op in QUANTIZED_OPS
        if (signal is None or op.signal is signal) and (rounds is None or op.rounds is rounds)
    )
