"""``ampconfig run`` when ONNX Runtime crashes: a crash of the fp32 model is exit 2 naming the model and the phase;
a crash of the rewritten model (real SIGSEGVs in the worker, injected from the tests: ``tests/faults``) goes to the
safety net, which keeps the node that causes it in float32 and finishes the run; a crash of the accuracy copy
alone is measured again with graph optimisations off, and said."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from tests.engine.test_safety_net import _resize_model
from tests.worker_faults import fresh_worker, inject

__all__ = ["fresh_worker"]  # the fixture, used by name

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
    resize_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str, words: str, fresh_worker: None
) -> None:
    inject(monkeypatch, f"{phase}:segv:any")
    out = tmp_path / "out.onnx"
    result = runner.invoke(
        app, ["run", str(resize_path), "-m", "force_fp16", "--target", "cpu", "--no-range-check", "-o", str(out), *FAST]
    )
    assert result.exit_code == 2, result.output
    assert f"{resize_path}: ONNX Runtime crashed (killed by SIGSEGV) while {words} the fp32 model" in result.output
    assert "bug" not in result.output
    assert not out.exists()


@pytest.mark.parametrize("phase", ["load", "run"])
def test_a_crash_of_the_rewritten_model_keeps_the_node_that_causes_it(
    resize_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str, fresh_worker: None
) -> None:
    inject(monkeypatch, f"{phase}:segv:lowered:Resize")
    out = tmp_path / "out.onnx"
    result = runner.invoke(app, ["run", str(resize_path), "-m", "force_fp16", "--target", "cpu", "-o", str(out), *FAST])
    assert result.exit_code == 0, result.output
    assert "node resize kept float32 (rule runtime_refuses): ONNX Runtime crashed (killed by SIGSEGV)" in result.output
    written = onnx.load(out)
    resize = next(node for node in written.graph.node if node.op_type == "Resize")
    producer = {output: node for node in written.graph.node for output in node.output}[resize.input[0]]
    assert producer.op_type == "Cast"
    assert producer.attribute[0].i == onnx.TensorProto.FLOAT  # the Resize reads float32


def test_a_crash_of_the_accuracy_copy_is_measured_again_without_optimisations_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_worker: None
) -> None:
    # An optimiser crash: only at ONNX Runtime's default level, on the CPU accuracy copy only (the bundled
    # transformer block's copy wraps 24 nodes between float16 casts)
    inject(monkeypatch, "load:segv:optimised-rounding-copy")
    out = tmp_path / "out.onnx"
    result = runner.invoke(app, ["run", "-m", "allow_mix_precision", "-o", str(out), "--json", *FAST])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["passed"] and report["low_precision_nodes"] == report["nodes"]  # the rewrite kept its decisions
    said = [note for note in report["notes"] if "crashed" in note]
    assert said == [
        "ONNX Runtime crashed (killed by SIGSEGV) while loading the accuracy copy of the rewritten model with its "
        "graph optimisations on; the copy was measured again with them off (the rewritten model itself ran as it is)"
    ]
    assert onnx.load(out).graph.node  # written


def test_an_accuracy_copy_that_crashes_at_every_level_is_exit_2_located(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_worker: None
) -> None:
    inject(monkeypatch, "load:segv:rounding-copy")  # the fallback avoids nothing: it crashes there too
    out = tmp_path / "out.onnx"
    result = runner.invoke(app, ["run", "-m", "allow_mix_precision", "-o", str(out), *FAST])
    assert result.exit_code == 2, result.output
    assert "transformer_block.onnx: ONNX Runtime crashed (killed by SIGSEGV) while loading the accuracy copy" in (
        result.output
    )
    assert "with graph optimisations off (killed by SIGSEGV with them on)" in result.output
    assert not out.exists()


def test_run_says_when_the_written_model_could_not_be_loaded_where_it_will_run(tmp_path: Path) -> None:
    """Decided for cuda and run on the CPU: the proof's sessions do not load it where it will run, so the load
    check does, or says it could not (no CUDA here); --no-load-check says nothing."""
    from ampconfig.runner.sessions import cuda_unavailable_reason

    if cuda_unavailable_reason() is None:
        pytest.skip("CUDA is usable here: the cuda target is load-checked")
    out = tmp_path / "out.onnx"
    args = ["run", "-m", "allow_mix_precision", "--target", "cuda", "--device", "cpu", "-o", str(out), "--json"]
    checked = runner.invoke(app, [*args, *FAST])
    unchecked = runner.invoke(app, [*args, *FAST, "--no-load-check"])
    assert checked.exit_code == unchecked.exit_code == 0, checked.output + unchecked.output
    said = [note for note in json.loads(checked.stdout)["notes"] if "load-checked" in note]
    assert len(said) == 1 and "CUDAExecutionProvider, which cannot be used here" in said[0]
    assert not [note for note in json.loads(unchecked.stdout)["notes"] if "load-checked" in note]
