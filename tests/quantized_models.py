"""Quantized transformer blocks for the quantizer rule's tests (issue 29), quantized by ONNX Runtime's own
quantizer from a float block built here with onnx.helper.

- :func:`float_block`: a pre-LN transformer block on float input ``x [1, seq, hidden]``: LayerNormalization,
  Q/K/V MatMul + bias, scaled QK^T, Softmax, AV, output projection, residual Add, LayerNormalization, the Erf GELU
  MLP, residual Add, and a final LayerNormalization.
- :func:`dynamic_block`: that block through ``quantize_dynamic`` (int8 weights; each MatMul becomes
  DynamicQuantizeLinear + MatMulInteger + Cast + Mul by the two scales).
- :func:`qdq_block`: that block through ``quantize_static`` in QDQ format (QuantizeLinear/DequantizeLinear pairs
  around every quantized op), calibrated on a few seeded samples.
- :func:`dynamic_lstm_tagger` (issue 42): a spectrogram tagger (input projection, LSTM, per-frame head) through
  ``quantize_dynamic``: each MatMul becomes DynamicQuantizeLinear + MatMulInteger (int32) + Cast + Mul by the
  scales. On :func:`tagger_inputs` (non-negative magnitudes, so the activations quantize with zero point 0 and
  use the whole uint8 range) the projection's int32 accumulator reaches |x| = 191309, three times float16's max.
  :func:`accumulator_reads_in_low` walks a written model from every int32 accumulator to its scale multiply and
  names what computes or casts it in float16 there.

Opset 17, IR version 10; the quantized models are read back and given IR version 10 (ORT 1.31 refuses 14).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.graphs import IR_VERSION, weight
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


TAGGER_FRAMES, TAGGER_FEATURES, TAGGER_HIDDEN, TAGGER_CLASSES = 16, 64, 48, 12


def tagger_inputs(seed: int = 1) -> dict[str, np.ndarray]:
    """Spectrogram-like magnitudes: non-negative, so DynamicQuantizeLinear gives them zero point 0."""
    shape = (TAGGER_FRAMES, 1, TAGGER_FEATURES)
    return {"x": np.abs(np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)}


def float_tagger(seed: int = 0, head_mean: float = 0.1, head_outlier: float = 0.0) -> onnx.ModelProto:
    """x [frames, 1, features] -> MatMul + bias -> LSTM -> Squeeze -> MatMul + bias -> y [frames, 1, classes]. The
    projection's weights lean positive (mean 0.05), as a filter bank's over magnitudes do; the LSTM's input, output
    and cell gates are biased open (+3, +3, +2), so its states sit near +0.9 and quantize with zero point 0; the
    head's weights lean positive (``head_mean``): its products add up instead of cancelling. ``head_outlier`` is
    added to one head weight: int8 quantization scales every weight by the largest, so the others take few steps
    and the head's accumulator stays small."""
    f, h, c = TAGGER_FEATURES, TAGGER_HIDDEN, TAGGER_CLASSES
    projection = numpy_helper.to_array(weight("proj.w", f, h, seed=seed, scale=0.05)) + np.float32(0.05)
    head = numpy_helper.to_array(weight("head.w", h, c, seed=seed)) + np.float32(head_mean)
    head[0, 0] += np.float32(head_outlier)
    gate_bias = numpy_helper.to_array(weight("lstm.B", 1, 8 * h, seed=seed)).copy()
    for gate, bias in enumerate((3.0, 3.0, 0.0, 2.0)):  # ONNX's gate order: input, output, forget, cell
        gate_bias[0, gate * h : (gate + 1) * h] += np.float32(bias)
    initializers = [
        numpy_helper.from_array(projection.astype(np.float32), "proj.w"),
        weight("proj.b", h, seed=seed),
        weight("lstm.W", 1, 4 * h, h, seed=seed),
        weight("lstm.R", 1, 4 * h, h, seed=seed),
        numpy_helper.from_array(gate_bias.astype(np.float32), "lstm.B"),
        numpy_helper.from_array(head.astype(np.float32), "head.w"),
        weight("head.b", c, seed=seed),
        numpy_helper.from_array(np.array([1], np.int64), "axis.direction"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "proj.w"], ["proj"], name="proj"),
        helper.make_node("Add", ["proj", "proj.b"], ["proj.biased"], name="proj.bias"),
        helper.make_node("LSTM", ["proj.biased", "lstm.W", "lstm.R", "lstm.B"], ["lstm.y"], name="lstm", hidden_size=h),
        helper.make_node("Squeeze", ["lstm.y", "axis.direction"], ["frames"], name="squeeze"),
        helper.make_node("MatMul", ["frames", "head.w"], ["head"], name="head"),
        helper.make_node("Add", ["head", "head.b"], ["y"], name="head.bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "lstm_tagger",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [TAGGER_FRAMES, 1, f])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [TAGGER_FRAMES, 1, c])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def dynamic_lstm_tagger(folder: Path, seed: int = 0, head_mean: float = 0.1, head_outlier: float = 0.0) -> Path:
    """:func:`float_tagger` through ``quantize_dynamic`` (int8 weights, its MatMuls), written to ``folder``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    name = f"tagger_{seed}_{head_mean:g}_{head_outlier:g}"
    source, target = folder / f"{name}_fp32.onnx", folder / f"{name}_dynamic.onnx"
    onnx.save_model(float_tagger(seed, head_mean, head_outlier), source)
    quantize_dynamic(source, target, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
    _read_back(target)
    return target


#: The ops whose int32 output sums products of integers (the accumulators the written models are checked for).
ACCUMULATORS = frozenset({"MatMulInteger", "ConvInteger", "MatMulInteger16"})
_LOW_TYPES = frozenset({TensorProto.FLOAT16, TensorProto.BFLOAT16})


def accumulator_reads_in_low(model: onnx.ModelProto) -> list[str]:
    """The nodes of ``model`` (main graph) that cast a value derived from an int32 accumulator to a low float
    type, or compute on it in one, up to its scale multiply: the walk starts at every accumulator's output and
    follows each reader's outputs, and stops at the first Mul or Div (named too where it computes low)."""
    typed = onnx.shape_inference.infer_shapes(model)
    elem = {info.name: info.type.tensor_type.elem_type for info in typed.graph.value_info}
    for info in [*typed.graph.input, *typed.graph.output]:
        elem[info.name] = info.type.tensor_type.elem_type
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in typed.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    found: list[str] = []
    pending = [node.output[0] for node in typed.graph.node if node.op_type in ACCUMULATORS]
    seen: set[str] = set()
    while pending:
        value = pending.pop()
        for node in readers.get(value, []):
            if node.name in seen:
                continue
            seen.add(node.name)
            to = next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None
            if to in _LOW_TYPES or any(elem.get(name) in _LOW_TYPES for name in [*node.input, *node.output]):
                found.append(node.name)
            if node.op_type in ("Mul", "Div"):
                continue  # the scale multiply: from its output on the ordinary rules judge
            pending.extend(node.output)
    return sorted(found)
