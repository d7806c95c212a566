"""`ampconfig lists`: the op info of a target merged with a mixlist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from ampconfig.cli import app
from ampconfig.opinfo.library import load_ops_info
from tests.package_readings import packaged_ops_info

runner = CliRunner()


def lists(*args: str | Path) -> Result:
    result = runner.invoke(app, ["lists", *map(str, args)])
    assert "Traceback" not in result.output and "internal error" not in result.output
    return result


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mixlist.json"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_json_without_mixlist_is_the_op_info(target: str) -> None:
    packaged_ops_info(target)
    result = lists("--precision-mode", "allow_mix_precision", "--target", target, "--json")
    assert result.exit_code == 0
    payload = json.loads(result.stdout)
    assert list(payload) == ["ok", "exit_code", "white", "black", "gray", "clear"]
    assert (payload.pop("ok"), payload.pop("exit_code")) == (True, 0)
    assert payload == load_ops_info(target).lists().as_dict()
    assert payload["white"] and payload["black"]


def test_mixlist_moves_ops_and_warnings_go_to_stderr(tmp_path: Path) -> None:
    base = load_ops_info("cpu").lists()
    white_op, black_op = "MatMul", "Exp"
    assert (base.colour_of(white_op).value, base.colour_of(black_op).value) == ("white", "black")
    mixlist = write(
        tmp_path,
        json.dumps(
            {
                "black-list": {"to-add": [white_op]},
                "white-list": {"to-add": [black_op], "to-remove": ["Relu"]},
            }
        ),
    )
    # Relu is clear, not white: removing it from the white list changes nothing and warns.
    result = lists("--precision-mode", "mixed_float16", "--modify-mixlist", mixlist, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert white_op in payload["black"] and white_op not in payload["white"]
    assert black_op in payload["white"] and black_op not in payload["black"]
    assert "Relu" in payload["clear"]
    assert "white-list to-remove of 'Relu' changes nothing" in result.stderr


@pytest.mark.parametrize("mode", ["force_fp16", "force_fp32", "must_keep_origin_dtype", "origin", "allow_fp32_to_bf16"])
def test_mixlist_with_a_non_mixed_mode_exits_2(tmp_path: Path, mode: str) -> None:
    mixlist = write(tmp_path, '{"black-list": {"to-add": ["MatMul"]}}')
    result = lists("--precision-mode", mode, "--modify-mixlist", mixlist, "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)  # --json: the error object, and nothing else, on stdout
    assert error["ok"] is False and error["exit_code"] == 2
    assert "does not accept a modify_mixlist" in error["error"]["message"]
    assert error["error"]["file"] == str(mixlist)
    assert "does not accept a modify_mixlist" in result.stderr


def test_invalid_mixlist_exits_2_naming_the_op_and_file(tmp_path: Path) -> None:
    mixlist = write(tmp_path, '{\n"black-list": {"to-add": ["MatMul"], "to-remove": ["MatMul"]}\n}')
    result = lists("--precision-mode", "allow_mix_precision", "--modify-mixlist", mixlist)
    assert result.exit_code == 2
    assert f"error: {mixlist}:2: $.black-list.to-add[0]: invalid mixlist combination for op 'MatMul'" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--precision-mode", "fp8"], "unknown precision mode 'fp8'"),
        (["--precision-mode", "force_fp16", "--target", "tpu"], "unknown target 'tpu'"),
        (["--precision-mode", "allow_mix_precision", "--modify-mixlist", "/nonexistent/m.json"], "not found"),
    ],
)
def test_usage_errors_exit_2(args: list[str], fragment: str) -> None:
    result = lists(*args)
    assert result.exit_code == 2 and fragment in result.stderr


def test_text_output() -> None:
    result = lists("--precision-mode", "force_fp16")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("precision mode force_fp16, target cuda")  # the one default target
    assert "not a mixed mode" in lines[1]
    assert [line.split(" ")[0] for line in lines[2:]] == ["white", "black", "gray", "clear"]
    assert "MatMul" in lines[2]
