"""``ampconfig run`` on models with external data (and models too large for one in-memory proto): ONNX Runtime
loads every model from a file, the rewrite from a private temporary folder that is removed afterwards; commands
that still need in-memory copies refuse large models with exit 2 instead of a protobuf traceback."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.errors import AmpconfigError
from ampconfig.model_io import models as model_io
from ampconfig.runner import sessions
from tests.worker_faults import fresh_worker, inject, left_behind

__all__ = ["fresh_worker"]  # the fixture, used by name

FAST = ["--warmup", "0", "--iterations", "1", "--target", "cpu"]
runner = CliRunner()


def _model(nodes_extra: bool = False) -> onnx.ModelProto:
    """x [batch, 64] -> MatMul(w0) -> Relu -> MatMul(w1) -> y (+ z, a second input of any batch, when asked)."""
    rng = np.random.default_rng(3)
    weights = [
        numpy_helper.from_array((rng.standard_normal((64, 64)) / 8).astype(np.float32), f"w{i}") for i in range(2)
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["a"], name="fc0"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("MatMul", ["b", "w1"], ["y" if not nodes_extra else "c"], name="fc1"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])]
    if nodes_extra:  # two independent dynamic batch sizes: fine to the input checks, an error inside ORT
        nodes.append(helper.make_node("Add", ["c", "z"], ["y"], name="add"))
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["other", 64]))
    graph = helper.make_graph(
        nodes, "ext", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 64])], weights
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _save_external(folder: Path, model: onnx.ModelProto | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(
        _model() if model is None else model,
        path,
        save_as_external_data=True,
        location="model.weights",
        size_threshold=0,
    )
    return path


def _save_inline(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "inline.onnx"
    onnx.save(_model(), path)
    return path


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder every tempfile call uses during the test (empty at the start)."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def _run_json(*args: str, exit_code: int = 0) -> dict:
    result = runner.invoke(app, ["run", *args, *FAST, "--json"])
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("mode", ["force_fp16", "allow_mix_precision"])
def test_run_on_external_data_model(tmp_path: Path, private_tmp: Path, mode: str) -> None:
    source = _save_external(tmp_path / "in")
    before = _snapshot(source.parent)
    out = tmp_path / "out" / "rewritten.onnx"
    out.parent.mkdir()
    payload = _run_json(str(source), "--precision-mode", mode, "--output", str(out))
    assert payload["passed"] is True and payload["low_precision_nodes"] > 0
    for output in payload["outputs"]:
        assert all(math.isfinite(output[key]) for key in ("rel_l2", "max_abs", "cosine"))
        assert 0 < output["rel_l2"] < 1e-2  # float16 rounding is measured, not skipped
    assert any("external data" in note for note in payload["notes"])
    assert payload["output"] == str(out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["rewritten.onnx", "rewritten.onnx.data"]
    onnx.checker.check_model(str(out), full_check=True)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": np.ones((2, 64), np.float32)})
    assert y.shape == (2, 64) and np.isfinite(y).all()
    assert _snapshot(source.parent) == before  # the input model and its data are untouched
    assert not left_behind(private_tmp)  # the temporary copies are gone


def test_file_path_matches_in_memory_path(tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model over the in-memory limit runs from files and reports exactly what the in-memory run reports."""
    source = _save_inline(tmp_path)
    in_memory = _run_json(str(source), "--precision-mode", "force_fp16")
    monkeypatch.setattr(model_io, "IN_MEMORY_LIMIT", 1024)
    out = tmp_path / "o.onnx"
    from_files = _run_json(str(source), "--precision-mode", "force_fp16", "-o", str(out))
    assert any("too large for one in-memory protobuf" in note for note in from_files["notes"])
    assert not any("protobuf" in note for note in in_memory["notes"])
    assert from_files["outputs"] == in_memory["outputs"]
    assert from_files["passed"] is True
    onnx.checker.check_model(str(out), full_check=True)
    assert not left_behind(private_tmp)


def test_failed_run_leaves_nothing_behind(tmp_path: Path, private_tmp: Path) -> None:
    source = _save_external(tmp_path / "in", _model(nodes_extra=True))
    out = tmp_path / "o.onnx"
    result = runner.invoke(
        app, ["run", str(source), "-m", "force_fp16", "--shape", "x=2x64", "--shape", "z=3x64", "-o", str(out), *FAST]
    )
    assert result.exit_code == 2, result.output
    assert "failed to run the fp32 model" in result.stderr
    assert not out.exists() and not (tmp_path / "o.onnx.data").exists()
    assert not left_behind(private_tmp)


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        (["compare"], "not supported by compare"),
        (["explain", "--range-check"], "not supported by explain"),
        (["tune", "--keep-dtype-out", "KEEP"], "not supported by tune"),
    ],
)
def test_commands_that_run_in_memory_refuse_large_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], needle: str
) -> None:
    source = _save_external(tmp_path / "in")
    monkeypatch.setattr(model_io, "IN_MEMORY_LIMIT", 1024)
    args = [arg.replace("KEEP", str(tmp_path / "keep.cfg")) for arg in command]
    result = runner.invoke(app, [*args, str(source), "-m", "force_fp16", "--target", "cpu"])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and "ampconfig run" in result.stderr
    assert not (tmp_path / "keep.cfg").exists()


def test_explain_without_runs_rewrites_a_large_model_from_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _save_external(tmp_path / "in")
    monkeypatch.setattr(model_io, "IN_MEMORY_LIMIT", 1024)
    result = runner.invoke(app, ["explain", str(source), "-m", "force_fp16", "--target", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    assert "fc0" in result.stdout and "float16" in result.stdout


def test_compare_runs_a_small_external_data_model_in_memory(tmp_path: Path) -> None:
    source = _save_external(tmp_path / "in")
    result = runner.invoke(app, ["compare", str(source), "-m", "force_fp16", "--target", "cpu", "--json"])
    assert result.exit_code == 0, result.output


def test_sessions_refuse_protos_over_the_protobuf_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "PROTOBUF_LIMIT", 16)
    with pytest.raises(AmpconfigError, match="too large") as caught:
        sessions.create_session(_model(), "cpu")
    assert caught.value.hint and "external data" in caught.value.hint


def test_a_crash_of_the_accuracy_copy_of_an_external_data_model_is_a_verdict_that_leaves_nothing(
    tmp_path: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch, fresh_worker: None
) -> None:
    """The measuring copy (its weights beside it in the run's temporary folder) crashes ONNX Runtime's optimiser:
    the run still gives its verdict, measured with the optimisations off, and every temporary folder is gone."""
    rng = np.random.default_rng(5)
    weight = numpy_helper.from_array((rng.standard_normal((64, 64)) / 8).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("MatMul", ["r", "w"], ["y"], name="fc")],
        "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    source = _save_external(tmp_path / "in", model)
    inject(monkeypatch, "load:segv:optimised-rounding-copy")
    args = ["run", str(source), "-m", "force_fp16", "--warmup", "0", "--iterations", "1", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["passed"] is True and payload["low_precision_nodes"] == 2
    said = "ONNX Runtime crashed (killed by SIGSEGV) while loading the accuracy copy"
    assert any(note.startswith(said) for note in payload["notes"])
    assert any("external data" in note for note in payload["notes"])
    assert not left_behind(private_tmp)
