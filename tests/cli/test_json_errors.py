"""``--json`` prints exactly one JSON object on stdout, an error object included when the exit code is 2
(issue 10): ``{"ok": false, "exit_code": 2, "error": {"message", "file", "line", "json_path", "hint"},
"problems": [...]}``, for an input error, a refused option value and a command-line usage error alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
import typer
from typer.testing import CliRunner, Result

from ampconfig.cli import app
from ampconfig.cli.typer_app import json_in_arguments, reporting_errors
from tests.graphs import make_model, tensor, weight

runner = CliRunner()
ERROR_FIELDS = {"message", "file", "line", "json_path", "hint"}


def one_json_error(result: Result) -> dict[str, Any]:
    """The single JSON object on stdout of a command that exited 2, checked for the error shape."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    payload = json.loads(result.stdout)  # raises on anything but exactly one JSON value
    assert isinstance(payload, dict)
    assert payload["ok"] is False and payload["exit_code"] == 2
    assert set(payload["error"]) == ERROR_FIELDS and payload["error"]["message"]
    assert payload["problems"] and payload["problems"][0]["message"] == payload["error"]["message"]
    return payload["error"]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    nodes = [onnx.helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), onnx.helper.make_node("Relu", ["h"], ["y"])]
    built = make_model(nodes, [tensor("x", shape=["n", 8])], [tensor("y", shape=["n", 8])], [weight("w", 8, 8)])
    path = tmp_path / "model.onnx"
    onnx.save(built, path)
    return path


MODEL_COMMANDS = ["run", "rewrite", "explain", "compare", "tune"]


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_missing_model_gives_an_error_object_naming_the_file(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "missing.onnx"
    extra = ["-o", str(tmp_path / "out.onnx")] if command == "rewrite" else []
    error = one_json_error(runner.invoke(app, [command, str(missing), "-m", "force_fp16", *extra, "--json"]))
    assert error["file"] == str(missing) and "not found" in error["message"] and error["hint"]


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_bad_config_line_and_json_path_are_in_the_error_object(tmp_path: Path, model: Path, command: str) -> None:
    config = tmp_path / "session.yaml"
    config.write_text("precision_mode: force_fp16\nrun:\n  warmup: -3\n")
    extra = ["-o", str(tmp_path / "out.onnx")] if command == "rewrite" else []
    error = one_json_error(runner.invoke(app, [command, str(model), "--config", str(config), *extra, "--json"]))
    assert (error["file"], error["line"], error["json_path"]) == (str(config), 3, "$.run.warmup")


@pytest.mark.parametrize(
    ("command", "option"),
    [
        ("run", "--seed=-1"),
        ("run", "--tolerance=nan"),
        ("explain", "--threshold=-1"),
        ("compare", "--data-max=inf"),
        ("tune", "--max-runs=0"),
    ],
)
def test_refused_option_value_gives_an_error_object_naming_the_flag(model: Path, command: str, option: str) -> None:
    error = one_json_error(runner.invoke(app, [command, str(model), option, "--json"]))
    assert error["message"].startswith(option.split("=")[0] + " must be")


@pytest.mark.parametrize("command", [*MODEL_COMMANDS, "lists", "ops-info show"])
def test_usage_error_gives_an_error_object(model: Path, command: str) -> None:
    args = [*command.split(), "--no-such-option", "--json"]
    result = runner.invoke(app, args)
    error = one_json_error(result)
    assert "--no-such-option" in error["message"]
    assert error["hint"] == f"see `ampconfig {command} --help`"


def test_lists_and_ops_info_show_input_errors() -> None:
    error = one_json_error(runner.invoke(app, ["lists", "--precision-mode", "fp8", "--json"]))
    assert "unknown precision mode 'fp8'" in error["message"]
    error = one_json_error(runner.invoke(app, ["ops-info", "show", "--target", "tpu", "--json"]))
    assert "unknown target 'tpu'" in error["message"] and "cpu" in error["hint"]


def test_validate_json_has_the_same_fields(tmp_path: Path) -> None:
    broken = tmp_path / "mixlist.json"
    broken.write_text('{"black-list": {"to-add": ["MatMul"]},}')
    result = runner.invoke(app, ["validate", "--format", "json", str(broken)])
    assert result.exit_code == 2
    payload = json.loads(result.stdout)
    assert payload["ok"] is False and payload["exit_code"] == 2
    assert payload["error"]["file"] == str(broken) and "not valid JSON" in payload["error"]["message"]
    # A usage error of validate itself (no file checked) is the plain error object.
    error = one_json_error(runner.invoke(app, ["validate", "--format", "json", "--kind", "nope", str(broken)]))
    assert "unknown file kind 'nope'" in error["message"]
    clean = tmp_path / "ok.json"
    clean.write_text('{"black-list": {"to-add": ["Erf"]}}')
    payload = json.loads(runner.invoke(app, ["validate", "--format=json", str(clean)]).stdout)
    assert payload["ok"] is True and payload["exit_code"] == 0 and "error" not in payload


def test_without_json_stdout_stays_empty_on_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["rewrite", str(tmp_path / "missing.onnx"), "-m", "force_fp16", "-o", "x.onnx"])
    assert result.exit_code == 2 and result.stdout == ""


@pytest.mark.parametrize(
    ("args", "wanted"),
    [
        (["run", "--json"], True),
        (["validate", "--format", "json", "x"], True),
        (["validate", "--format=json", "x"], True),
        (["validate", "--format", "github", "json"], False),
        (["run", "--", "--json"], False),  # after `--` it is an argument, not the flag
        (["run"], False),
    ],
)
def test_json_is_detected_from_the_command_line(args: list[str], wanted: bool) -> None:
    assert json_in_arguments(args) is wanted


def test_an_unexpected_exception_still_prints_one_json_error(capsys: pytest.CaptureFixture[str]) -> None:
    """The last-resort "internal error" path keeps the JSON promise too."""

    def broken(json_output: bool = False) -> None:
        raise RuntimeError("boom")

    with pytest.raises(typer.Exit) as exited:
        reporting_errors(broken)(json_output=True)
    assert exited.value.exit_code == 3  # an internal error has its own code: 2 is the user's usage or input
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert payload["exit_code"] == 3
    assert payload["error"]["message"] == "internal error: RuntimeError: boom"
    assert "this is a bug" in payload["error"]["hint"] and "internal error" in captured.err


def _success_lines(model: Path, tmp_path: Path) -> dict[str, list[str]]:
    """A command line of every command with JSON output that runs to its end on the fixture's model (one of them
    failing its check)."""
    lock = tmp_path / "model.lock.json"
    fast = ["--warmup", "0", "--iterations", "1"]
    lines = {
        "run": ["run", str(model), "-m", "force_fp16", *fast],
        "run (tolerance missed)": ["run", str(model), "-m", "force_fp16", *fast, "--tolerance", "1e-12"],
        "rewrite": ["rewrite", str(model), "-m", "force_fp16", "-o", str(tmp_path / "out.onnx")],
        "explain": ["explain", str(model), "-m", "force_fp16"],
        "compare": ["compare", str(model), "-m", "force_fp16"],
        "tune": ["tune", str(model), "-m", "force_fp16", "--tolerance", "0.5", "--keep-dtype-out", str(tmp_path / "k")],
        "lists": ["lists", "-m", "force_fp16"],
        "lock": ["lock", str(model), "-m", "force_fp16", "-o", str(lock)],
        "lock --check": ["lock", "--check", str(lock)],
        "diff": ["diff", str(model), "--base-precision-mode", "force_fp32", "-m", "force_fp16"],
        "ops-info show": ["ops-info", "show", "MatMul"],
    }
    return {
        **{name: [*line, "--json"] for name, line in lines.items()},
        "validate": ["validate", str(lock), "--format", "json"],
    }


def test_every_json_object_carries_ok_and_exit_code(tmp_path: Path, model: Path) -> None:
    """One envelope for every object (issue 31): a command that ran to its end says ``ok`` and ``exit_code`` as
    the error object does, and they agree with the process's exit code."""
    codes = set()
    for name, line in _success_lines(model, tmp_path).items():
        result = runner.invoke(app, line)
        codes.add(result.exit_code)
        payload = json.loads(result.stdout)
        assert payload["exit_code"] == result.exit_code, (name, result.output)
        assert payload["ok"] is (result.exit_code == 0), name
        assert list(payload)[:2] == ["ok", "exit_code"], name
    assert codes == {0, 1}  # a check that failed (exit 1) says so too
