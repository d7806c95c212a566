"""Quantized transformer blocks for the quantizer rule's tests (issue 29), quantized by ONNX Runtime's own
quantizer from a float block built here with onnx.helper.

- :func:`float_block`: a pre-LN transformer block on float input ``x [1, seq, hidden]``: LayerNormalization,
  Q/K/V MatMul + bias, scaled QK^T, Softmax, AV, output projection, residual Add, LayerNormalization, the Erf GELU
  MLP, residual Add, and a final LayerNormalization.
- :func:`dynamic_block`: that block through ``quantize_dynamic`` (int8 weights; each MatMul becomes
  DynamicQuantizeLinear + MatMulInteger + Cast + Mul by the two scales).
- :func:`qdq_block`: that block through ``quantize_static`` in QDQ format (QuantizeLinear/DequantizeLinear pairs
  around every quantized op), calibrated on a few seeded samples.

Opset 17, IR version 10; the quantized models are read back and given IR version 10 (ORT 1.31 refuses 14).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.graphs import IR_VERSION
from tests.transformer_stacks import StackBuilder, StackSize, attention, gelu_erf, layer_norm

BLOCK_SIZE = StackSize(layers=2, hidden=32, heads=4, ffn=64)
SEQ = 8


def block_inputs(seed: int = 0, size: StackSize = BLOCK_SIZE) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((1, SEQ, size.hidden)).astype(np.float32)}


def float_block(size: StackSize = BLOCK_SIZE, seed: int = 0) -> onnx.ModelProto:
    """x [1, SEQ, hidden] -> y [1, SEQ, hidden] (see the module's docstring)."""
    b = StackBuilder(seed)
    h = size.hidden
    zero_mask = b.const("mask.zero", np.zeros((1, 1, 1, SEQ)))
    x = "x"
    for layer in range(size.layers):
        p = f"l{layer}"
        normed = layer_norm(b, x, f"{p}.ln1", h, decomposed=False)
        q, k, v = (b.linear(normed, f"{p}.{n}", h, h) for n in ("query", "key", "value"))
        attn = attention(b, q, k, v, size, f"{p}.attn", ("add", zero_mask))
        x = b.node("Add", [attn, x], f"{p}.res1")
        normed = layer_norm(b, x, f"{p}.ln2", h, decomposed=False)
        ffn = b.linear(gelu_erf(b, b.linear(normed, f"{p}.fc1", h, size.ffn), f"{p}.gelu"), f"{p}.fc2", size.ffn, h)
        x = b.node("Add", [ffn, x], f"{p}.res2")
    layer_norm(b, x, "final_ln", h, decomposed=False)
    b.nodes[-1].output[0] = "y"
    shape = [1, SEQ, h]
    return b.model(
        "float_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )


def _read_back(path: Path) -> onnx.ModelProto:
    model = onnx.load(path)
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    onnx.save_model(model, path)
    return model


def dynamic_block(folder: Path, seed: int = 0) -> Path:
    """:func:`float_block` through ``quantize_dynamic`` (int8 weights), written to ``folder``; its path."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source, target = folder / "block_fp32.onnx", folder / "block_dynamic.onnx"
    onnx.save_model(float_block(seed=seed), source)
    quantize_dynamic(source, target, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
    _read_back(target)
    return target


class _Samples:
    """A tiny calibration reader: a few seeded inputs."""

    def __init__(self, count: int, seed: int) -> None:
        self._samples: Iterator[dict[str, np.ndarray]] = iter(block_inputs(seed + i) for i in range(count))

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._samples, None)


def qdq_block(folder: Path, seed: int = 0) -> Path:
    """:func:`float_block` through ``quantize_static`` in QDQ format (int8 activations and weights), calibrated
    on 4 seeded samples, written to ``folder``; its path."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(_Samples, CalibrationDataReader):
        pass

    source, target = folder / "block_fp32.onnx", folder / "block_qdq.onnx"
    onnx.save_model(float_block(seed=seed), source)
    quantize_static(
        source,
        target,
        Reader(4, seed + 100),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )
    _read_back(target)
    return target
