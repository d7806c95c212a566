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
from ampconfig.decide.quantized import QuantizationKind, quantization_kinds, quantizer_inputs
from tests.graphs import make_model, tensor
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
