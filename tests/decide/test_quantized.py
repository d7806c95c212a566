"""Quantized models (issue 29): the kinds are recognised, the nodes computing what a quantizer rounds keep their
dtype (rule quantizer_input), and explain and run say so. Real models: a pre-LN transformer block built with
onnx.helper and quantized by ONNX Runtime's own quantize_dynamic and quantize_static (QDQ)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto
from onnx import helper as oh
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.decide import pass_pipelines as pipeline
from ampconfig.decide.passes.quantizer_inputs import KeepQuantizerInputs
from ampconfig.decide.quantized import (
    INT32_BOUND,
    QuantizationKind,
    accumulator_bound,
    accumulator_values,
    quantization_kinds,
    quantizer_inputs,
    reduction_length,
)
from tests.graphs import make_model, session, tensor
from tests.quantized_models import block_inputs, dynamic_block, qdq_block

runner = CliRunner()
FAST = ["--warmup", "0", "--iterations", "1"]


def _json(args: list[str]) -> tuple[int, dict]:
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture(scope="module")
def blocks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("quantized_blocks")
    np.savez(folder / "x.npz", **block_inputs(0))
    return {"dynamic": (dynamic_block(folder), folder / "x.npz"), "QDQ": (qdq_block(folder), folder / "x.npz")}


def test_kinds_are_named_from_the_op_keys() -> None:
    assert quantization_kinds(["MatMul", "Add"]) == ()
    assert quantization_kinds(["QuantizeLinear", "DequantizeLinear", "MatMul"]) == (QuantizationKind.QDQ,)
    dynamic = ["DynamicQuantizeLinear", "MatMulInteger", "Cast", "Mul"]
    assert quantization_kinds(dynamic) == (QuantizationKind.DYNAMIC,)
    assert quantization_kinds(["MatMulInteger"]) == (QuantizationKind.QOPERATOR,)  # no dynamic quantizer feeds it
    assert quantization_kinds(["QLinearConv", "QuantizeLinear"]) == (QuantizationKind.QDQ, QuantizationKind.QOPERATOR)
    assert quantization_kinds(["DequantizeLinear", "MatMul"]) == (QuantizationKind.WEIGHT_ONLY,)
    assert quantization_kinds(["com.microsoft::DynamicQuantizeMatMul"]) == (QuantizationKind.DYNAMIC,)
    ordered = [
        "com.microsoft::QuantizeWithOrder",
        "com.microsoft::QOrderedMatMul",
        "com.microsoft::DequantizeWithOrder",
    ]
    assert quantization_kinds(ordered) == (QuantizationKind.QOPERATOR,)
    assert quantization_kinds(["com.microsoft::QEmbedLayerNormalization"]) == (QuantizationKind.QOPERATOR,)
    assert quantization_kinds(["com.microsoft::QMoE", "Softmax"]) == (QuantizationKind.WEIGHT_ONLY,)


def test_a_float_value_an_ordered_quantized_op_scales_by_keeps_its_dtype() -> None:
    """x -> Relu -> scale_X of com.microsoft::QOrderedGelu (int8 in, int8 out): the QOrdered ops are quantizers
    (the one list of opinfo/quantized_ops.py), so the Relu computing a scale of the integer grid is kept."""
    q = oh.make_tensor("q", TensorProto.INT8, [4], [1, 2, 3, 4])
    scale_y = oh.make_tensor("scale_y", TensorProto.FLOAT, [], [0.1])
    nodes = [
        oh.make_node("Relu", ["x"], ["scale_x"], name="relu"),
        oh.make_node("QOrderedGelu", ["q", "scale_x", "scale_y"], ["y"], name="gelu", domain="com.microsoft"),
    ]
    graph_proto = oh.make_graph(
        nodes, "ordered", [tensor("x", shape=[])], [tensor("y", TensorProto.INT8, shape=[4])], [q, scale_y]
    )
    model = oh.make_model(graph_proto, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("com.microsoft", 1)])
    graph = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model)).graph
    fed = {node.name: quantizer.name for node, quantizer in quantizer_inputs(graph).items()}
    assert fed == {"gelu": "gelu", "relu": "gelu"}


def test_the_walk_from_a_quantizer_stops_at_integers_and_constants() -> None:
    """x -> Relu -> Mul(scale) -> QuantizeLinear -> DequantizeLinear -> Sigmoid -> y: Relu and Mul feed the
    quantizer; the Sigmoid after the dequantization feeds none."""
    scale = oh.make_tensor("scale", TensorProto.FLOAT, [], [0.05])
    zero = oh.make_tensor("zero", TensorProto.INT8, [], [0])
    model = make_model(
        [
            oh.make_node("Relu", ["x"], ["r"], name="relu"),
            oh.make_node("Mul", ["r", "x"], ["m"], name="mul"),
            oh.make_node("QuantizeLinear", ["m", "scale", "zero"], ["q"], name="quant"),
            oh.make_node("DequantizeLinear", ["q", "scale", "zero"], ["d"], name="dequant"),
            oh.make_node("Sigmoid", ["d"], ["y"], name="sigmoid"),
        ],
        [tensor("x", shape=[4])],
        [tensor("y", shape=[4])],
        [scale, zero],
    )
    graph = ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model)).graph  # typed values
    fed = {node.name: quantizer.name for node, quantizer in quantizer_inputs(graph).items()}
    assert fed == {"quant": "quant", "mul": "quant", "relu": "quant"}


@pytest.mark.parametrize("kind", ["dynamic", "QDQ"])
def test_explain_names_the_quantizer_rule_and_the_kind(blocks: dict[str, tuple[Path, Path]], kind: str) -> None:
    model, _ = blocks[kind]
    code, payload = _json(["explain", str(model), "--json"])
    assert code == 0
    kept = [node for node in payload["nodes"] if node["rule"] == "quantizer_input"]
    quantizers = {node["name"] for node in payload["nodes"] if "QuantizeLinear" in node["op_type"]}
    assert len(kept) > 20 and all(node["cause"] in quantizers for node in kept)
    assert all(node["dtype"] == node["original_dtype"] == "float32" for node in kept)
    # The LayerNormalization and the attention before the first quantized MatMul are among them.
    assert {"l0.ln1", "l0.attn.softmax"} <= {node["name"] for node in kept}
    summary = payload["summary"]
    assert summary["quantized"]["kinds"] == [kind] and summary["quantized"]["kept_for_quantizers"] == len(kept)
    assert summary["quantized"]["low_precision_nodes"] == summary["low_precision_nodes"]
    assert f"quantized ({kind}" in summary["quantized_note"]
    text = runner.invoke(app, ["explain", str(model)]).output
    assert "quantizer_input" in text and f"the model is quantized ({kind}" in " ".join(text.split())


@pytest.mark.parametrize("kind", ["dynamic", "QDQ"])
def test_run_passes_a_quantized_block_and_says_it_is_quantized(blocks: dict[str, tuple[Path, Path]], kind: str) -> None:
    model, data = blocks[kind]
    code, report = _json(["run", str(model), "--inputs", str(data), "--json", *FAST])
    assert code == 0, report["failures"]
    note = next(note for note in report["notes"] if "the model is quantized" in note)
    assert f"({kind}," in note and f"{report['low_precision_nodes']} of {report['nodes']} node(s)" in note
    # On the CPU a QDQ model's Q/DQ pairs run as float ops in both models, as on CUDA (tests/runner/test_proof.py).
    float_qdq = any("QuantizeLinear/DequantizeLinear pairs" in note for note in report["notes"])
    assert float_qdq is (kind == "QDQ")


def test_without_the_rule_the_qdq_block_fails_and_run_says_why(
    blocks: dict[str, tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule is what passes the QDQ block: without it the mixed mode lowers nodes between quantizers and the
    re-quantized values miss the tolerance (rel-L2 0.024 at the time of writing); the failure says why."""
    model, data = blocks["QDQ"]
    steps = tuple(step for step in pipeline.MIXED.steps if not isinstance(step, KeepQuantizerInputs))
    monkeypatch.setattr(pipeline, "MIXED", pipeline.Pipeline("mixed without the quantizer rule", steps))
    code, report = _json(["run", str(model), "--inputs", str(data), "--json", *FAST])
    assert code == 1 and report["low_precision_nodes"] > 0
    note = next(note for note in report["notes"] if "the model is quantized" in note)
    assert "moves whole steps" in note and "quantizer_input" in note


def _accumulator_model(
    activation: int, activation_zero: int | str | None, weight_shape: list[int | str], op: str = "MatMulInteger"
) -> onnx.ModelProto:
    """``a`` (a graph input of type ``activation``) times an int8 weight ``w`` of ``weight_shape`` (an initializer of
    -128s where every dimension is known, else a graph input), by ``op``; ``activation_zero``: a constant zero point,
    None for none, "dynamic" for one a DynamicQuantizeLinear gives at run time (``a`` is then its output). The
    accumulator then goes through a Reshape, a Cast to float and an Add of a constant before the scale Mul."""
    nodes, inputs, initializers = [], [], [oh.make_tensor("w_zero", TensorProto.INT8, [], [0])]
    if activation_zero == "dynamic":
        nodes.append(oh.make_node("DynamicQuantizeLinear", ["x"], ["a", "a_scale", "a_zero"], name="quant"))
        inputs.append(tensor("x", shape=["n", "k"]))
    else:
        inputs.append(tensor("a", activation, ["n", "k"] if op == "MatMulInteger" else [1, 4, 8, 8]))
        if activation_zero is not None:
            initializers.append(oh.make_tensor("a_zero", activation, [], [activation_zero]))
    if all(isinstance(dim, int) for dim in weight_shape):
        size = int(np.prod(weight_shape))
        initializers.append(oh.make_tensor("w", TensorProto.INT8, weight_shape, [-128] * size))
    else:
        inputs.append(tensor("w", TensorProto.INT8, weight_shape))
    operands = ["a", "w", "a_zero" if activation_zero is not None else "", "w_zero"]
    initializers += [
        oh.make_tensor("flat", TensorProto.INT64, [1], [-1]),
        oh.make_tensor("offset", TensorProto.FLOAT, [], [-3.0]),
        oh.make_tensor("scale", TensorProto.FLOAT, [], [0.5]),
    ]
    nodes += [
        oh.make_node(op, operands, ["acc"], name="acc"),
        oh.make_node("Reshape", ["acc", "flat"], ["acc_flat"], name="flatten"),
        oh.make_node("Cast", ["acc_flat"], ["acc_float"], name="cast", to=TensorProto.FLOAT),
        oh.make_node("Add", ["acc_float", "offset"], ["shifted"], name="shift"),
        oh.make_node("Mul", ["shifted", "scale"], ["y"], name="scale_mul"),
    ]
    return make_model(nodes, inputs, [tensor("y", shape=["m"])], initializers)


def _graph(model: onnx.ModelProto) -> ir.Graph:
    return ir.serde.deserialize_model(onnx.shape_inference.infer_shapes(model)).graph


def _accumulator(graph: ir.Graph) -> ir.Node:
    return next(node for node in graph if node.name == "acc")


def test_the_bound_of_a_dynamic_matmul_is_255_by_128_by_the_weights_rows() -> None:
    """quantize_dynamic's pattern: uint8 activations less a zero point known only at run time (up to 255 steps),
    int8 weights less zero point 0 (up to 128), 64 rows of weights summed per output."""
    bound = accumulator_bound(_accumulator(_graph(_accumulator_model(TensorProto.UINT8, "dynamic", [64, 48]))))
    assert (bound.a.spread, bound.b.spread, bound.reduction) == (255, 128, 64)  # type: ignore[union-attr]
    assert bound.bound == 255 * 128 * 64
    assert "255 (uint8, a zero point known at run time) x 128 (int8, zero point 0) x 64" in bound.describe()


@pytest.mark.parametrize(
    ("activation", "zero", "spread"),
    [
        (TensorProto.UINT8, 128, 128),  # 0 - 128 or 255 - 128
        (TensorProto.UINT8, 3, 252),
        (TensorProto.UINT8, None, 255),
        (TensorProto.INT8, None, 128),
        (TensorProto.INT8, -128, 255),
    ],
)
def test_a_constant_zero_point_sets_the_spread(activation: int, zero: int | None, spread: int) -> None:
    bound = accumulator_bound(_accumulator(_graph(_accumulator_model(activation, zero, [16, 4]))))
    assert bound.a is not None and bound.a.spread == spread and bound.bound == spread * 128 * 16


def test_a_conv_sums_its_input_channels_per_group_times_its_kernel() -> None:
    model = _accumulator_model(TensorProto.UINT8, None, [6, 4, 3, 3], op="ConvInteger")
    assert reduction_length(_accumulator(_graph(model))) == 4 * 3 * 3


def test_an_unknown_reduction_length_leaves_int32s_own_bound() -> None:
    graph = _graph(_accumulator_model(TensorProto.UINT8, None, ["k", "m"]))
    bound = accumulator_bound(_accumulator(graph))
    assert bound.reduction is None and bound.bound == INT32_BOUND


def test_the_bound_is_reached() -> None:
    """Activations all 0 less zero point 255, weights all -128 less 0: every one of the K = 16 products is
    255 * 128, and ONNX Runtime's MatMulInteger gives exactly the bound."""
    model = _accumulator_model(TensorProto.UINT8, 255, [16, 4])
    model.graph.output.append(tensor("acc", TensorProto.INT32, None))
    computed = session(model).run(["acc"], {"a": np.zeros((2, 16), np.uint8)})[0]
    assert int(np.abs(computed).max()) == accumulator_bound(_accumulator(_graph(model))).bound == 255 * 128 * 16


def test_the_values_derived_from_an_accumulator_end_at_the_scale_multiply() -> None:
    """Through the Reshape and the Cast the bound is the accumulator's; the Add of -3 adds 3; the scale Mul's output
    is no longer the accumulator's."""
    graph = _graph(_accumulator_model(TensorProto.UINT8, None, [16, 4]))
    derived = {value.name: found.bound for value, found in accumulator_values(graph).items()}
    bound = 255 * 128 * 16
    assert derived == {"acc": bound, "acc_flat": bound, "acc_float": bound, "shifted": bound + 3}


def test_a_pad_without_a_pad_value_carries_the_bound() -> None:
    """Pad's pad value (input 2) is optional: a Pad of the accumulator with only its pads carries the bound."""
    weight = oh.make_tensor("w", TensorProto.INT8, [16, 4], [1] * 64)
    pads = oh.make_tensor("pads", TensorProto.INT64, [4], [0, 1, 0, 1])
    model = make_model(
        [
            oh.make_node("MatMulInteger", ["a", "w"], ["acc"], name="acc"),
            oh.make_node("Pad", ["acc", "pads"], ["padded"], name="pad"),
            oh.make_node("Cast", ["padded"], ["y"], name="cast", to=TensorProto.FLOAT),
        ],
        [tensor("a", TensorProto.UINT8, [2, 16])],
        [tensor("y", shape=[2, 6])],
        [weight, pads],
    )
    derived = {value.name: found.bound for value, found in accumulator_values(_graph(model)).items()}
    assert derived == dict.fromkeys(("acc", "padded", "y"), 255 * 128 * 16)
