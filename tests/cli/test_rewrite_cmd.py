"""``ampconfig rewrite``'s load check (issue 43): the written model has been loaded once in ONNX Runtime's worker, on
its target's provider at the default optimisation level, before it is reported written. A crash there (a real SIGSEGV
in the worker, injected from the tests: ``tests/faults``) goes to the safety net, which keeps the node that causes
it in float32 and names it; a crash no node explains is exit 2 with nothing written. On main, ``rewrite`` built no
session for a checker-clean input: the fault never fired and the float16 Transpose was written."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner, Result

from ampconfig.cli import app
from ampconfig.runner.sessions import cuda_unavailable_reason
from tests.worker_faults import fresh_worker, inject, reads_float32, transpose_model_file

__all__ = ["fresh_worker"]  # the fixture, used by name

runner = CliRunner()
CPU_FP16 = ["-m", "force_fp16", "--target", "cpu"]


def _rewrite(folder: Path, *options: str) -> tuple[Path, Path, Result]:
    """``rewrite`` of :func:`transpose_model` for the CPU in force_fp16, file to file: the input, the output path and
    what the command did."""
    model_path = transpose_model_file(folder)
    out = folder / "out.onnx"
    return model_path, out, runner.invoke(app, ["rewrite", str(model_path), "-o", str(out), *CPU_FP16, *options])


def test_a_crash_while_loading_the_rewrite_keeps_the_node_that_causes_it_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_worker: None
) -> None:
    inject(monkeypatch, "load:segv:lowered:Transpose")
    _, out, result = _rewrite(tmp_path, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["warnings"][0] == (
        "node transpose kept float32 (rule runtime_refuses): ONNX Runtime crashed (killed by SIGSEGV) while loading "
        "the rewritten model with it in float16"
    )
    assert summary["nodes_by_dtype"] == {"float16": 2, "float32": 1}
    written = onnx.load(out)
    assert reads_float32(written, "Transpose") and not reads_float32(written, "MatMul")


def test_a_crash_the_net_cannot_help_is_exit_2_located_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_worker: None
) -> None:
    inject(monkeypatch, "load:segv:any")
    model_path, _, result = _rewrite(tmp_path)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert (
        f"{model_path}: ONNX Runtime crashed (killed by SIGSEGV) while loading the rewritten model, and ampconfig "
        "could not find the nodes that cause it: keeping every node ampconfig lowered did not help, so nothing was "
        "written" in said
    )
    assert "--no-load-check" in result.output
    assert "Traceback" not in result.output
    assert sorted(tmp_path.iterdir()) == [model_path]


def test_no_load_check_writes_without_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_worker: None
) -> None:
    inject(monkeypatch, "load:segv:any")  # any session would crash: none is built
    _, out, result = _rewrite(tmp_path, "--no-load-check")
    assert result.exit_code == 0, result.output
    assert not reads_float32(onnx.load(out), "Transpose")


def test_a_target_whose_provider_is_absent_is_written_with_a_note(tmp_path: Path) -> None:
    model_path = transpose_model_file(tmp_path)
    if cuda_unavailable_reason() is None:
        pytest.skip("CUDA is usable here: the cuda target is load-checked")
    out = tmp_path / "out.onnx"
    result = runner.invoke(app, ["rewrite", str(model_path), "-o", str(out), "-m", "force_fp16", "--json"])
    assert result.exit_code == 0, result.output
    notes = [n for n in json.loads(result.stdout)["notes"] if "load-checked" in n]
    assert len(notes) == 1 and notes[0].startswith(
        "the written model was not load-checked: it runs on ONNX Runtime's CUDAExecutionProvider, which cannot be "
        "used here ("
    )
    assert onnx.load(out).graph.node
