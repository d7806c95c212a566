"""``ampconfig run`` when ONNX Runtime crashes: a crash of the fp32 model is exit 2 naming the model and the phase;
a crash of the rewritten model (real SIGSEGVs, from the crash guard's test hook, in its child process) goes to the
safety net, which keeps the node that causes it in float32 and finishes the run."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.runner.crash_guard import TEST_CRASH_VARIABLE
from tests.prove.test_safety_net import _resize_model

FAST = ["--warmup", "1", "--iterations", "1"]
runner = CliRunner()


@pytest.fixture
def resize_path(tmp_path: Path) -> Path:
    path = tmp_path / "resize.onnx"
    # linear: the CPU op info keeps a cubic Resize float32 (a variant), so it would never be lowered to crash
    onnx.save_model(_resize_model("linear"), path)
    return path


@pytest.mark.parametrize(("phase", "words"), [("load", "loading"), ("run", "running")])
def test_a_crash_of_the_fp32_model_is_exit_2_naming_the_model_and_the_phase(
    resize_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str, words: str
) -> None:
    monkeypatch.setenv(TEST_CRASH_VARIABLE, phase)
    out = tmp_path / "out.onnx"
    result = runner.invoke(app, ["run", str(resize_path), "-m", "force_fp16", "--target", "cpu", "-o", str(out), *FAST])
    assert result.exit_code == 2, result.output
    assert f"{resize_path}: ONNX Runtime crashed (killed by SIGSEGV) while {words} the fp32 model" in result.output
    assert "bug" not in result.output
    assert not out.exists()


def test_a_crash_of_the_rewritten_model_keeps_the_node_that_causes_it(
    resize_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TEST_CRASH_VARIABLE, "load:Resize:float16")
    out = tmp_path / "out.onnx"
    result = runner.invoke(app, ["run", str(resize_path), "-m", "force_fp16", "--target", "cpu", "-o", str(out), *FAST])
    assert result.exit_code == 0, result.output
    assert "node resize kept float32 (rule runtime_refuses): ONNX Runtime crashed (killed by SIGSEGV)" in result.output
    written = onnx.load(out)
    resize = next(node for node in written.graph.node if node.op_type == "Resize")
    producer = {output: node for node in written.graph.node for output in node.output}[resize.input[0]]
    assert producer.op_type == "Cast"
    assert producer.attribute[0].i == onnx.TensorProto.FLOAT  # the Resize reads float32
