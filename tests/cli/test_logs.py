"""``ampconfig -v``: Python logging of the ``ampconfig`` logger tree on stderr; stdout keeps its one JSON object."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from tests.graphs import transformer_block

runner = CliRunner()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("logging") / "block.onnx"
    onnx.save(transformer_block(), path)
    return path


def _info_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(("info: [ampconfig", "debug: [ampconfig"))]


def test_v_logs_each_stage_on_stderr_and_json_stays_one_object(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    args = ["run", str(model), "-m", "force_fp16", "--target", "cpu", "--device", "cpu", "--shape", "x=1x8x32"]
    result = runner.invoke(app, ["-v", *args, "--warmup", "0", "--iterations", "1", "-o", str(out), "--json"])
    assert result.exit_code in (0, 1), result.output
    payload = json.loads(result.stdout)  # stdout is exactly the one JSON object, nothing logged there
    assert payload["precision_mode"] == "force_fp16"
    lines = "\n".join(_info_lines(result.stderr))
    expected = [
        'setting precision_mode = "force_fp16"  (--precision-mode)',  # each setting with where it came from
        "setting iterations = 1  (--iterations)",
        "setting keep_io_types = true  (default)",
        "resolved settings: {",
        f"opened model {model}: 20 nodes in the main graph, opset ai.onnx 17, IR version 10, no external data",
        "decided 20 nodes for force_fp16 on target cpu:",  # the decision summary: nodes per dtype, casts
        "; casts: ",  # how many inserted and retargeted
        "device: cpu (asked for cpu)",
        "ONNX Runtime session on cpu: providers CPUExecutionProvider",
        f"wrote the output model (--output): {out}",
    ]
    for fragment in expected:
        assert fragment in lines, f"{fragment!r} not logged:\n{lines}"
    assert "pass FollowNeighbours" not in lines  # passes are -vv


def test_vv_adds_every_decision_pass(model: Path) -> None:
    result = runner.invoke(app, ["-vv", "lists", "--json"])
    assert result.exit_code == 0 and "debug: [ampconfig" not in result.stdout
    result = runner.invoke(app, ["-vv", "explain", str(model), "-m", "allow_mix_precision", "--json"])
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
    passes = [line for line in _info_lines(result.stderr) if "] pass " in line]
    names = [line.split("] pass ", 1)[1].split(" ", 1)[0] for line in passes]
    assert {"FixedVerdicts", "AssignColours", "PaintListed", "PropagateDeny", "FollowNeighbours"} <= set(names)
    decided = sum(int(line.split(" decided ", 1)[1].split(" ", 1)[0]) for line in passes)
    assert decided >= 20, passes  # every node is decided by some pass


def test_without_v_nothing_is_logged(model: Path) -> None:
    result = runner.invoke(app, ["explain", str(model), "-m", "force_fp16", "--json"])
    assert result.exit_code == 0
    json.loads(result.stdout)
    assert _info_lines(result.stderr) == []


def test_logging_is_handed_back_after_the_command(model: Path) -> None:
    """A library user's logging is theirs again once the command has ended."""
    runner.invoke(app, ["-vv", "lists", "--json"])
    logger = logging.getLogger("ampconfig")
    assert logger.handlers == [] and logger.level == logging.NOTSET and logger.propagate


def test_v_names_the_config_for_input_settings_taken_from_it(model: Path, tmp_path: Path) -> None:
    """Issue 31: -v said ``(default)`` for shapes from the config and ``data = null`` with run.data set."""
    import numpy as np

    samples = tmp_path / "samples"
    samples.mkdir()
    np.savez(samples / "a.npz", x=np.zeros((1, 8, 32), np.float32))
    with_data = tmp_path / "data.yaml"
    with_data.write_text(f"model: {model}\nrun:\n  data: samples\n  seed: 3\n")
    with_shapes = tmp_path / "shapes.yaml"
    with_shapes.write_text(f"model: {model}\nrun:\n  shapes: {{x: [1, 8, 32]}}\n")
    for config, fragments in (
        (with_data, [f'setting data = "{samples}"', "setting seed = 3"]),  # relative to the config
        (with_shapes, ['setting shapes = {"x": [1, 8, 32]}']),
    ):
        result = runner.invoke(app, ["-v", "explain", "--config", str(config), "-m", "force_fp16", "--json"])
        assert result.exit_code == 0, result.output
        lines = _info_lines(result.stderr)
        for fragment in fragments:
            line = next(line for line in lines if fragment in line)
            assert line.endswith(f"(config {config})"), line
        assert any(line.endswith("setting inputs = null  (default)") for line in lines)
    flagged = runner.invoke(app, ["-v", "explain", "--config", str(with_shapes), "--shape", "x=1x8x32", "--json"])
    assert f'setting shapes = {{"x": [1, 8, 32]}}  (--shape over config {with_shapes})' in flagged.stderr
