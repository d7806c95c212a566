"""customize_dtypes (issue 23): Ascend's file format, every error located, precedence over keep_dtype and the mode,
rule `customized` in explain, and a rewrite that stays valid and runs in ONNX Runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.documents.customize_dtypes_file import customize_problems, is_customize_text
from ampconfig.errors import Severity
from ampconfig.examples import example_path
from tests import exporter_models
from tests.graphs import make_model, tensor, weight

runner = CliRunner()

#: gpt2's first LayerNorm divide is float32 by deny propagation; its attention projection's bias Add is float16.
FORCE_LOW, FORCE_FP32 = "h0.ln_1.div", "h0.attn.c_proj.bias"
GPT2_CUSTOMIZE = f"""# customize_dtypes for the exporter-shaped GPT-2
{FORCE_LOW}::InputDtype:float16,float16,OutputDtype:float16
{FORCE_FP32}::InputDtype:float32,float32,OutputDtype:float32
"""


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpt2") / "gpt2.onnx"
    onnx.save(exporter_models.gpt2(), path)
    return path


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _explain(model: Path, *args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["explain", str(model), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _nodes(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["name"]: node for node in payload["nodes"]}


# ----------------------------------------------------------------------------------------------- the result
def test_a_node_forced_low_and_another_output_forced_float32(gpt2: Path, tmp_path: Path) -> None:
    plain = _nodes(_explain(gpt2))
    assert plain[FORCE_LOW]["dtype"] == "float32" and plain[FORCE_FP32]["dtype"] == "float16"
    custom = _write(tmp_path, "customize.cfg", GPT2_CUSTOMIZE)
    nodes = _nodes(_explain(gpt2, "--customize-dtypes", str(custom)))
    assert (nodes[FORCE_LOW]["dtype"], nodes[FORCE_LOW]["rule"]) == ("float16", "customized")
    assert (nodes[FORCE_FP32]["dtype"], nodes[FORCE_FP32]["rule"]) == ("float32", "customized")
    assert "line 2" in nodes[FORCE_LOW]["reason"] and "line 3" in nodes[FORCE_FP32]["reason"]

    out = tmp_path / "gpt2.custom.onnx"
    rewrite = runner.invoke(app, ["rewrite", str(gpt2), "-o", str(out), "--customize-dtypes", str(custom)])
    assert rewrite.exit_code == 0, rewrite.output
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    produced = {o: n for n in model.graph.node for o in n.output}
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info}
    assert types[produced_output(model, FORCE_LOW)] == TensorProto.FLOAT16
    assert types[produced_output(model, FORCE_FP32)] == TensorProto.FLOAT
    assert produced  # the rewritten model runs in ONNX Runtime on the CPU
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {"input_ids": np.arange(16, dtype=np.int64).reshape(1, 16) % 50})
    assert np.isfinite(logits).all()


def produced_output(model: onnx.ModelProto, node_name: str) -> str:
    return next(node.output[0] for node in model.graph.node if node.name == node_name)


def test_customize_dtypes_wins_over_keep_dtype_and_a_node_entry_over_its_op_type(gpt2: Path, tmp_path: Path) -> None:
    custom = _write(
        tmp_path,
        "c.cfg",
        "OpType::BatchMatMulV2:InputDtype:float32,float32,OutputDtype:float32\n"
        "h0.attn.qk::InputDtype:float16,float16,OutputDtype:float16\n",
    )
    keep = _write(tmp_path, "keep.cfg", "h0.attn.qk\n")
    payload = _explain(gpt2, "--customize-dtypes", str(custom), "--keep-dtype", str(keep))
    matmuls = {n["name"]: n for n in payload["nodes"] if n["op_type"] == "MatMul"}
    assert {n["rule"] for n in matmuls.values()} == {"customized"}
    assert matmuls["h0.attn.qk"]["dtype"] == "float16"  # its own line, over OpType:: and over keep_dtype
    assert {n["dtype"] for name, n in matmuls.items() if name != "h0.attn.qk"} == {"float32"}
    assert any("'OpType::BatchMatMulV2' (TensorFlow/Ascend) is ONNX 'MatMul'" in note for note in payload["notes"])


def test_the_config_key_and_validate(gpt2: Path, tmp_path: Path) -> None:
    _write(tmp_path, "customize.cfg", GPT2_CUSTOMIZE)
    config = _write(tmp_path, "s.yaml", "precision_mode: allow_mix_precision\ncustomize_dtypes: customize.cfg\n")
    nodes = _nodes(_explain(gpt2, "--config", str(config)))
    assert nodes[FORCE_LOW]["rule"] == nodes[FORCE_FP32]["rule"] == "customized"
    checked = runner.invoke(app, ["validate", str(config), "--format", "json"])
    assert checked.exit_code == 0, checked.output
    kinds = {Path(f["path"]).name: f["kind"] for f in json.loads(checked.stdout)["files"]}
    assert kinds == {"s.yaml": "config", "customize.cfg": "customize-dtypes"}


# ---------------------------------------------------------------------------------------- format errors
@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("node_a", "expected NodeName::InputDtype"),
        ("node_a::InputDtype:float16", "expected InputDtype:...,OutputDtype:..."),
        ("node_a::OutputDtype:float16,InputDtype:float16", "expected InputDtype:...,OutputDtype:..."),
        ("node_a::inputdtype:float16,OutputDtype:float16", "not Ascend's spelling"),
        ("node_a::InputDtype:float17,OutputDtype:float16", "unknown dtype 'float17'"),
        ("node_a::InputDtype:float16,,OutputDtype:float16", "empty dtype"),
        ("OpType::InputDtype:float16,OutputDtype:float16", "needs an op type"),
        ("optype::MatMul:InputDtype:float16,OutputDtype:float16", "not Ascend's op type prefix"),
        ("OpType::Mat Mul:InputDtype:float16,OutputDtype:float16", "is not an op type name"),
    ],
)
def test_format_errors_are_located(tmp_path: Path, line: str, words: str) -> None:
    custom = _write(tmp_path, "customize_dtypes.cfg", f"# header\n{line}\n")
    result = runner.invoke(app, ["validate", str(custom), "--format", "json"])
    assert result.exit_code == 1, result.output
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["line"] == 2 and words in problem["message"] + (problem["hint"] or "")


def test_repeats_and_ambiguous_op_types(tmp_path: Path) -> None:
    text = "a::InputDtype:float16,OutputDtype:float16\na::InputDtype:float32,OutputDtype:float32\n"
    entries, problems = customize_problems(text, "c.cfg")
    assert len(entries) == 1 and [p.severity for p in problems] == [Severity.WARNING] and problems[0].line == 2
    custom = _write(
        tmp_path,
        "c.cfg",
        "OpType::Sum:InputDtype:float16,OutputDtype:float16\nOpType::MatMulV2:InputDtype:float16,OutputDtype:float16\n",
    )
    result = runner.invoke(app, ["validate", str(custom)])
    assert result.exit_code == 1 and "ambiguous" in result.stdout
    assert runner.invoke(app, ["validate", str(custom), "--op-names", "tensorflow"]).exit_code == 0
    assert is_customize_text("# c\nx::InputDtype:float16,OutputDtype:float16") and not is_customize_text("node\n")


@pytest.mark.parametrize("first", ["MatMul", "BatchMatMulV2"])
def test_two_spellings_of_one_op_type_are_a_repeat(tmp_path: Path, first: str) -> None:
    """OpType::MatMul and OpType::BatchMatMulV2 (TensorFlow's name for it) with other dtypes: the second was
    dropped without a word (issue 31). A warning on its line, as a repeated node line, and the first wins."""
    second = "MatMul" if first == "BatchMatMulV2" else "BatchMatMulV2"
    custom = _write(
        tmp_path,
        "c.cfg",
        f"OpType::{first}:InputDtype:float16,float16,OutputDtype:float16\n"
        f"OpType::{second}:InputDtype:float32,float32,OutputDtype:float32\n",
    )
    result = runner.invoke(app, ["validate", str(custom), "--format", "json"])
    warnings = [p for p in json.loads(result.stdout)["problems"] if p["severity"] == "warning"]
    assert [(p["line"], p["file"]) for p in warnings] == [(2, str(custom))], warnings
    assert f"OpType::{second} customises ONNX MatMul, as OpType::{first} on line 1" in warnings[0]["message"]
    assert "with other dtypes: the first wins" in warnings[0]["message"]
    model = tmp_path / "m.onnx"
    nodes = [oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    onnx.save(make_model(nodes, [tensor("x", shape=[4, 4])], [tensor("y", shape=[4, 4])], [weight("w", 4, 4)]), model)
    explained = runner.invoke(
        app, ["explain", str(model), "-m", "allow_mix_precision", "--customize-dtypes", str(custom)]
    )
    assert explained.exit_code == 0 and "the first wins" in explained.output, explained.output
    payload = runner.invoke(
        app, ["explain", str(model), "-m", "allow_mix_precision", "--customize-dtypes", str(custom), "--json"]
    )
    (node,) = json.loads(payload.stdout)["nodes"]
    assert node["dtype"] == "float16" and "line 1" in node["reason"]


# ------------------------------------------------------------------------------------- errors on the model
def _erf_model(opset: int) -> onnx.ModelProto:
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        oh.make_node("Reshape", ["m", "shape"], ["r"], name="reshape"),
        oh.make_node("Erf", ["r"], ["e"], name="erf"),
        oh.make_node("Cast", ["e"], ["y"], name="cast", to=TensorProto.FLOAT),
    ]
    inits = [weight("w", 4, 4), onnx.numpy_helper.from_array(np.array([2, 8], dtype=np.int64), "shape")]
    return make_model(nodes, [tensor("x", shape=[4, 4])], [tensor("y", shape=[2, 8])], inits, opset=opset)


@pytest.mark.parametrize(
    ("line", "opset", "target", "words"),
    [
        ("mat::InputDtype:float16,float16,OutputDtype:float16", 13, "cuda", "no node named 'mat'"),
        ("mm::InputDtype:float16,OutputDtype:float16", 13, "cuda", "1 input dtype given, but the node has 2 inputs"),
        ("mm::InputDtype:float16,float16,OutputDtype:float16,float16", 13, "cuda", "2 output dtypes given"),
        ("mm::InputDtype:float16,float32,OutputDtype:float16", 13, "cuda", "must agree"),
        ("reshape::InputDtype:float16,float16,OutputDtype:float16", 13, "cuda", "input 1 ('shape') is int64"),
        ("erf::InputDtype:bfloat16,OutputDtype:bfloat16", 12, "cuda", "schema of Erf does not allow bfloat16"),
        ("erf::InputDtype:bfloat16,OutputDtype:bfloat16", 13, "cpu", "the cpu op info has no bfloat16 kernel"),
        ("cast::InputDtype:float16,OutputDtype:float16", 13, "cuda", "cannot be customised"),
        ("erf::InputDtype:int64,OutputDtype:int64", 13, "cuda", "cannot compute in int64"),
    ],
)
def test_entries_that_do_not_fit_the_model_are_located_errors(
    tmp_path: Path, line: str, opset: int, target: str, words: str
) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_erf_model(opset), model)
    custom = _write(tmp_path, "c.cfg", f"# first line\n{line}\n")
    out = tmp_path / "out.onnx"
    args = ["rewrite", str(model), "-o", str(out), "--customize-dtypes", str(custom), "--target", target, "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert error["file"] == str(custom) and error["line"] == 2
    assert words in error["message"] + (error["hint"] or ""), error
    assert not out.exists()


def test_a_missing_node_gets_a_suggestion_only_when_one_is_genuinely_close(tmp_path: Path) -> None:
    """A node name shares its op type with many ('/MatMul'): an unrelated name ending so is no slip of the keys
    (issue 31: 'did you mean attn.v/MatMul?' for a CJK name)."""
    hints = {}
    for name in ("注意力/MatMul", "attn.scores/Matmul"):
        custom = _write(tmp_path, "c.cfg", f"{name}::InputDtype:float32,float32,OutputDtype:float32\n")
        result = runner.invoke(app, ["explain", str(example_path()), "--customize-dtypes", str(custom), "--json"])
        assert result.exit_code == 2, result.output
        hints[name] = json.loads(result.stdout)["error"]["hint"]
    assert "did you mean" not in hints["注意力/MatMul"]
    assert "did you mean 'attn.scores/MatMul'?" in hints["attn.scores/Matmul"]


def test_an_op_type_no_node_has_only_warns(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(_erf_model(13), model)
    custom = _write(tmp_path, "c.cfg", "OpType::Conv2D:InputDtype:float16,float16,OutputDtype:float16\n")
    payload = _explain(model, "--customize-dtypes", str(custom))
    assert any("no node of op type 'Conv'" in warning for warning in payload["warnings"])
