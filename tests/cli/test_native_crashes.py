"""A float32 model on which ONNX Runtime aborts (a C++ assertion: SIGABRT) is a located exit 2 from every command
that runs it, with the JSON error object under ``--json``, and an exception from the API: the crash kills
ampconfig's worker process, never ampconfig or the API's caller. Nothing is written, nothing left behind."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.errors import AmpconfigError
from ampconfig.prove.calibration import calibrate_model
from tests.worker_faults import aborting_model, fresh_worker

__all__ = ["fresh_worker"]  # the fixture, used by name

runner = CliRunner()
FAST = ["--warmup", "1", "--iterations", "1"]

#: Each command that runs the float32 model, with the file it would write (relative to the test's folder).
COMMANDS: dict[str, tuple[list[str], str | None]] = {
    "run": (["run", "{model}", "-m", "force_fp16", "-o", "{out}/out.onnx", *FAST], "out.onnx"),
    "run --no-range-check": (["run", "{model}", "-m", "force_fp16", "--no-range-check", *FAST], None),
    "calibrate": (["calibrate", "{model}", "-o", "{out}/ranges.json"], "ranges.json"),
    "compare": (["compare", "{model}", "-m", "force_fp16"], None),
    "tune": (["tune", "{model}", "-m", "force_fp16", "--keep-dtype-out", "{out}/keep.cfg"], "keep.cfg"),
    "explain --range-check": (["explain", "{model}", "-m", "force_fp16", "--range-check"], None),
    "explain --compare": (["explain", "{model}", "-m", "force_fp16", "--compare"], None),
    "diff --run": (["diff", "{model}", "--base-precision-mode", "force_fp32", "-m", "force_fp16", "--run"], None),
    "lock --shape": (["lock", "{model}", "-m", "force_fp16", "--shape", "x=2,4", "-o", "{out}/l.json"], "l.json"),
    "rewrite --shape": (["rewrite", "{model}", "-m", "force_fp16", "--shape", "x=2,4", "-o", "{out}/r.onnx"], "r.onnx"),
}


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this process and its workers make temporary folders during the test (checked empty after)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_says_onnx_runtime_aborted_on_the_fp32_model(
    command: str, tmp_path: Path, private_tmp: Path, fresh_worker: None
) -> None:
    model = aborting_model(tmp_path / "aborts.onnx")
    out = tmp_path / "out"
    out.mkdir()
    words, written = COMMANDS[command]
    args = [word.format(model=model, out=out) for word in words]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert error["message"].startswith("ONNX Runtime crashed (killed by SIGABRT")
    assert "the fp32 model" in error["message"]
    assert error["file"] == str(model)
    assert written is None or not (out / written).exists()
    assert list(out.iterdir()) == []
    assert list(private_tmp.iterdir()) == []  # the worker's folder and the command's own: gone


def test_the_api_raises_and_its_caller_lives_on(tmp_path: Path, private_tmp: Path, fresh_worker: None) -> None:
    model = aborting_model(tmp_path / "aborts.onnx")
    with pytest.raises(AmpconfigError) as raised:
        calibrate_model(model, tmp_path / "ranges.json", shapes={"x": [2, 4]})
    assert "ONNX Runtime crashed (killed by SIGABRT" in raised.value.message
    assert not (tmp_path / "ranges.json").exists()
    assert list(private_tmp.iterdir()) == []
