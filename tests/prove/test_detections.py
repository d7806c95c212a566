"""A detector head whose box count changes under float16 (tests/value_models.nms_head): an accuracy failure
(exit 1) with both shapes in the report, in run, compare and tune alike, never a usage error (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from tests.value_models import nms_head

runner = CliRunner()
FAST = ["--warmup", "1", "--iterations", "2"]


@pytest.fixture
def nms_path(tmp_path: Path) -> Path:
    path = tmp_path / "nms.onnx"
    onnx.save_model(nms_head(), path)
    return path


def test_run_fails_with_exit_1_and_both_shapes(nms_path: Path) -> None:
    result = runner.invoke(app, ["run", str(nms_path), "-m", "force_fp16", "--json", *FAST])
    assert result.exit_code == 1, result.output
    payload = json.loads(result.stdout)
    by_name = {item["name"]: item for item in payload["outputs"]}
    assert by_name["selected"]["shape"] == [4, 3] and by_name["selected"]["rewritten_shape"] == [0, 3]
    assert by_name["kept_boxes"]["rewritten_shape"] == [0, 4]
    assert any("shape [0, 3] in the rewritten model, [4, 3] in the fp32 reference" in f for f in payload["failures"])


def test_run_table_shows_both_shapes(nms_path: Path) -> None:
    result = runner.invoke(app, ["run", str(nms_path), "-m", "force_fp16", *FAST], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "[4, 3] -> [0, 3]" in result.stdout and "FAIL" in result.stdout


def test_float32_scores_pass(nms_path: Path, tmp_path: Path) -> None:
    keep = tmp_path / "keep.cfg"
    keep.write_text("score_add\nscore_matmul\nscore_transpose\n")
    result = runner.invoke(app, ["run", str(nms_path), "-m", "force_fp16", "--keep-dtype", str(keep), *FAST])
    assert result.exit_code == 0, result.output


def test_compare_fails_with_exit_1(nms_path: Path) -> None:
    result = runner.invoke(app, ["compare", str(nms_path), "-m", "force_fp16", "--json"])
    assert result.exit_code == 1, result.output
    payload = json.loads(result.stdout)
    assert "rewritten_shape" in json.dumps(payload)


def test_tune_finds_the_pins_that_keep_the_boxes(nms_path: Path, tmp_path: Path) -> None:
    """The logits (1e-6 times the features: every one below float16's normal range) keep their producer and their
    reader float32 by the underflow rule (issue 36); tune pins what is left, the scores' Transpose."""
    keep = tmp_path / "keep.cfg"
    result = runner.invoke(app, ["tune", str(nms_path), "-m", "force_fp16", "--keep-dtype-out", str(keep), "--json"])
    assert result.exit_code == 0, result.output
    assert keep.read_text().splitlines()[1:] == ["score_transpose"]
    explained = runner.invoke(app, ["explain", str(nms_path), "-m", "force_fp16", "--range-check", "--json"])
    rules = {node["name"]: node["rule"] for node in json.loads(explained.stdout)["nodes"]}
    assert rules["score_matmul"] == rules["score_add"] == "range_underflows"
