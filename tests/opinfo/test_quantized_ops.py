"""The one list of quantized ops (``ampconfig/opinfo/quantized_ops.py``): the colour strategy keeps every contrib op
of it at its dtype, and the decisions' quantizers and quantization kinds come from it, so the two never disagree."""

from __future__ import annotations

from ampconfig.decide.quantized import QUANTIZERS
from ampconfig.opinfo.colours import STRATEGY
from ampconfig.opinfo.quantized_ops import MS_DOMAIN, QUANTIZED_OPS, Signal, quantized_keys


def test_each_op_is_listed_once() -> None:
    keys = [op.key for op in QUANTIZED_OPS]
    assert len(keys) == len(set(keys))


def test_the_strategy_keeps_exactly_the_lists_contrib_ops_as_quantized() -> None:
    quantized = {
        key for key, entry in STRATEGY.items() if entry.keeps_dtype and entry.keeps_dtype.startswith("quantized")
    }
    assert quantized == {op.key for op in QUANTIZED_OPS if op.domain == MS_DOMAIN}


def test_the_decisions_quantizers_are_the_lists_rounding_ops() -> None:
    assert quantized_keys(rounds=True) == QUANTIZERS
    ordered = {f"{MS_DOMAIN}::QOrdered{op}" for op in ("Attention", "Gelu", "LayerNormalization", "MatMul")}
    assert ordered | {f"{MS_DOMAIN}::QEmbedLayerNormalization", "QuantizeLinear", "QLinearMatMul"} <= QUANTIZERS
    # Dequantizers and weight-only matmuls read activations they do not round: their inputs may go low.
    assert not {"DequantizeLinear", f"{MS_DOMAIN}::MatMulNBits", f"{MS_DOMAIN}::QMoE"} & QUANTIZERS
    assert all(not op.rounds for op in QUANTIZED_OPS if op.signal in (Signal.WEIGHT_ONLY, Signal.INTEGER))
