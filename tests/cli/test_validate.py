"""`ampconfig validate`: kinds, every problem in one pass, output formats and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from ampconfig.cli import app
from ampconfig.precision_modes import V1_NAMES, V2_ALIASES, parse_mode
from ampconfig.settings.validate import validate_paths
from tests.package_readings import packaged_ops_info

runner = CliRunner()


def validate(*args: str | Path) -> Result:
    result = runner.invoke(app, ["validate", *map(str, args)])
    assert "Traceback" not in result.output
    assert "internal error" not in result.output
    return result


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


GOOD_MIXLIST = '{\n  "black-list": {"to-add": ["Softmax"]},\n  "white-list": {"to-remove": ["Conv"]}\n}\n'
BAD_MIXLIST = '{\n  "black-list": {"to-add": ["MatMul"]},\n  "white-list": {"to-add": ["MatMul"]}\n}\n'


def test_clean_files_exit_0(tmp_path: Path) -> None:
    write(tmp_path, "mixlist.json", GOOD_MIXLIST)
    write(tmp_path, "keep.cfg", "node_a\nOpType::Erf\n")
    config = write(
        tmp_path,
        "session.yaml",
        "precision_mode: allow_mix_precision\nmodify_mixlist: mixlist.json\nkeep_dtype: keep.cfg\n",
    )
    result = validate(config)
    assert result.exit_code == 0, result.output
    assert "3 files checked: 0 errors, 0 warnings" in result.stdout


def test_config_problems_and_its_mixlist_in_one_pass(tmp_path: Path) -> None:
    write(tmp_path, "mixlist.json", BAD_MIXLIST)
    config = write(
        tmp_path,
        "session.yaml",
        "precision_mode: allow_mix_precision\nmodify_mixlist: mixlist.json\nrun:\n  warmpu: 2\ntarget: gpu\n",
    )
    result = validate(config)
    assert result.exit_code == 1
    out = result.stdout
    assert f"{config}:4: $.run.warmpu: error: unknown key 'warmpu'" in out
    assert "hint: did you mean 'warmup'?" in out
    assert f"{config}:5: $.target: error:" in out
    mixlist = tmp_path / "mixlist.json"
    assert f"{mixlist}:2: $.black-list.to-add[0]: error: invalid mixlist combination for op 'MatMul'" in out
    assert "2 files checked: 3 errors" in out


@pytest.mark.parametrize("mode", [*V1_NAMES, *V2_ALIASES])
def test_every_mode_and_mixlist_pairing(tmp_path: Path, mode: str) -> None:
    write(tmp_path, "mixlist.json", GOOD_MIXLIST)
    key = "precision_mode" if mode in V1_NAMES else "precision_mode_v2"
    config = write(tmp_path, "s.yaml", f"{key}: {mode}\nmodify_mixlist: mixlist.json\n")
    result = validate(config)
    if parse_mode(mode).accepts_mixlist:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 1
        assert f"{config}:2: $.modify_mixlist: error: precision mode '{parse_mode(mode).value}' does not accept" in (
            result.stdout
        )


def test_inline_mixlist_problems_point_into_the_config(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "s.yaml",
        "precision_mode: allow_mix_precision\nmodify_mixlist:\n  gray-list:\n    to-remove: [Erf]\n",
    )
    result = validate(config)
    assert result.exit_code == 1
    assert f"{config}:4: $.modify_mixlist.gray-list.to-remove[0]: error: invalid mixlist combination" in result.stdout


def test_v1_and_v2_together_and_unknown_mode(tmp_path: Path) -> None:
    both = write(tmp_path, "both.yaml", "precision_mode: force_fp16\nprecision_mode_v2: fp16\n")
    unknown = write(tmp_path, "unknown.json", '{"precision_mode": "force_fp8"}')
    result = validate(both, unknown)
    assert result.exit_code == 1
    assert f"{both}:2: $.precision_mode_v2: error: precision_mode and precision_mode_v2 are both given" in result.stdout
    assert f"{unknown}:1: $.precision_mode: error: unknown precision mode 'force_fp8'" in result.stdout


def test_config_without_mode_is_a_warning_only(tmp_path: Path) -> None:
    result = validate(write(tmp_path, "s.toml", 'target = "cpu"\n'))
    assert result.exit_code == 0
    assert "warning: no precision mode" in result.stdout


def test_missing_model_and_inputs_are_findings(tmp_path: Path) -> None:
    config = write(tmp_path, "s.yaml", "precision_mode: force_fp16\nmodel: m.onnx\nrun:\n  inputs: in.npz\n")
    result = validate(config)
    assert result.exit_code == 1
    assert f"{config}:2: $.model: error: model file" in result.stdout and "does not exist" in result.stdout
    assert f"{config}:4: $.run.inputs: error: inputs file" in result.stdout


@pytest.fixture
def model_and_npz(tmp_path: Path) -> tuple[Path, Path]:
    """A real ONNX model and a real .npz in ``tmp_path``: files a config may name in the wrong place."""
    import numpy as np
    import onnx

    from tests.graphs import FLOAT, make_model, tensor

    model = tmp_path / "m.onnx"
    onnx.save(
        make_model([onnx.helper.make_node("Relu", ["x"], ["y"])], [tensor("x", FLOAT, [2])], [tensor("y", FLOAT, [2])]),
        model,
    )
    npz = tmp_path / "in.npz"
    np.savez(npz, x=np.zeros(2, np.float32))
    return model, npz


@pytest.mark.parametrize(
    ("setting", "value", "line", "json_path", "fragment"),
    [
        (
            "ranges",
            "m.onnx",
            2,
            "$.ranges",
            "ranges names a file that cannot be used: holds an ONNX model, not a value",
        ),
        ("modify_mixlist", "m.onnx", 2, "$.modify_mixlist", "holds an ONNX model, not a mixlist file"),
        ("keep_dtype", "in.npz", 2, "$.keep_dtype", "holds a zip archive (an .npz), not a keep_dtype file"),
        ("customize_dtypes", "m.onnx", 2, "$.customize_dtypes", "holds an ONNX model, not a customize_dtypes file"),
        ("model", "s.yaml", 2, "$.model", "s.yaml' holds YAML, not an ONNX model"),
        ("model", "in.npz", 2, "$.model", "holds a zip archive (an .npz), not an ONNX model"),
        ("run:\n  inputs", "m.npz", 3, "$.run.inputs", "holds an ONNX model, not an .npz of input arrays"),
        ("run:\n  data", "m.onnx", 3, "$.run.data", "holds an ONNX model, not a folder of .npz files"),
        ("run:\n  calibration_data", "s.yaml", 3, "$.run.calibration_data", None),  # a JSON/YAML may be feeds
    ],
)
def test_each_config_path_must_name_a_file_of_its_kind(
    tmp_path: Path,
    model_and_npz: tuple[Path, Path],
    setting: str,
    value: str,
    line: int,
    json_path: str,
    fragment: str | None,
) -> None:
    """A config whose ranges named a .onnx model validated (issue 38), and rewrite then stopped with exit 2:
    validate reads each path's first bytes and says what the file holds instead."""
    model, _ = model_and_npz
    (tmp_path / "m.npz").write_bytes(model.read_bytes())  # a model under an .npz name
    config = write(tmp_path, "s.yaml", f"precision_mode: allow_mix_precision\n{setting}: {value}\n")
    result = runner.invoke(app, ["validate", str(config), "--json"])
    payload = json.loads(result.stdout)
    at_key = [p for p in payload["problems"] if p["json_path"] == json_path and p["file"] == str(config)]
    if fragment is None:
        assert result.exit_code == 0 and at_key == [], result.stdout
        return
    assert result.exit_code in (1, 2) and not payload["ok"]
    assert len(at_key) == 1 and at_key[0]["line"] == line and at_key[0]["severity"] == "error", at_key
    assert fragment in at_key[0]["message"]


def test_a_config_naming_files_of_the_right_kind_validates(tmp_path: Path, model_and_npz: tuple[Path, Path]) -> None:
    config = write(
        tmp_path,
        "s.yaml",
        "precision_mode: allow_mix_precision\nmodel: m.onnx\nrun:\n  inputs: in.npz\n  data: in.npz\n",
    )
    result = validate(config)
    assert result.exit_code == 0, result.output


def test_validate_takes_json_as_every_command_does(tmp_path: Path) -> None:
    write(tmp_path, "mixlist.json", BAD_MIXLIST)
    config = write(tmp_path, "s.yaml", "precision_mode: allow_mix_precision\nmodify_mixlist: mixlist.json\n")
    as_json = runner.invoke(app, ["validate", str(config), "--json"])
    as_format = runner.invoke(app, ["validate", "--format", "json", str(config)])
    assert as_json.exit_code == as_format.exit_code == 1
    assert json.loads(as_json.stdout) == json.loads(as_format.stdout)
    missing = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml"), "--json"])
    assert missing.exit_code == 2
    assert json.loads(missing.stdout)["error"]["message"] == "file not found"


def test_keep_dtype_file_and_list_problems(tmp_path: Path) -> None:
    keep = write(tmp_path, "keep_dtype.cfg", "ok\noptype::Relu\nOpType::NotAnOnnxOp\n")
    config = write(tmp_path, "s.yaml", "precision_mode: force_fp16\nkeep_dtype:\n  - a\n  - 'OpType::'\n")
    result = validate(keep, config)
    assert result.exit_code == 1
    assert f"{keep}:2: error: 'optype::' is not Ascend's op type prefix" in result.stdout
    assert f"{keep}:3: warning: op type 'NotAnOnnxOp' is unknown" in result.stdout
    assert f"{config}:4: $.keep_dtype[1]: error: `OpType::` with no op type" in result.stdout


def test_github_format(tmp_path: Path) -> None:
    mixlist = write(
        tmp_path, "mixlist.json", '{\n  "black-list": {"to-add": ["Matmul"]},\n  "gray-list": {"to-remove": ["Add"]}\n}'
    )
    result = runner.invoke(app, ["validate", "--format", "github", str(mixlist)])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert f"::error file={mixlist},line=3,title=$.gray-list.to-remove[0]::invalid mixlist combination" in lines[1]
    assert lines[0].startswith(f"::warning file={mixlist},line=2,title=$.black-list.to-add[0]::op type 'Matmul'")
    assert all(line.startswith(("::error ", "::warning ")) for line in lines)


def test_github_format_escapes_newlines_and_commas(tmp_path: Path) -> None:
    odd = write(tmp_path, "a,b.yaml", "precision_mode: force_fp16\nx: 1\n")
    result = runner.invoke(app, ["validate", "--format", "github", str(odd)])
    assert f"file={str(odd).replace(',', '%2C')},line=2" in result.stdout


def test_json_format_is_one_object_with_counts(tmp_path: Path) -> None:
    write(tmp_path, "mixlist.json", BAD_MIXLIST)
    config = write(tmp_path, "s.yaml", "precision_mode: allow_mix_precision\nmodify_mixlist: mixlist.json\n")
    result = runner.invoke(app, ["validate", "--format", "json", str(config)])
    assert result.exit_code == 1
    payload = json.loads(result.stdout)
    assert set(payload) == {"ok", "exit_code", "files", "problems", "errors", "warnings"}
    assert payload["ok"] is False and payload["exit_code"] == 1
    assert [entry["kind"] for entry in payload["files"]] == ["config", "mixlist"]
    assert payload["files"][1]["referenced_by"] == str(config)
    assert payload["errors"] == 1 == sum(p["severity"] == "error" for p in payload["problems"])
    (error,) = [p for p in payload["problems"] if p["severity"] == "error"]
    assert error["line"] == 2 and error["json_path"] == "$.black-list.to-add[0]"


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("m.json", '{"black-list": {"to-add": ["MatMul"]},}', "not valid JSON"),
        ("mixlist.json", '{\n# no\n"black-list": {}}', "2: error: comments are not allowed in JSON (# comment)"),
        ("s.yaml", "precision_mode: [\n", "not valid YAML"),
        ("s.yaml", "", "file is empty"),
        ("k.cfg", b"node\xff\n", "not UTF-8"),
        ("s.ini", "x=1", "cannot tell what kind of file '.ini' is"),
        ("other.json", '{"something": 1}', "cannot tell whether this JSON file is"),
    ],
)
def test_unusable_files_exit_2(tmp_path: Path, name: str, content: str | bytes, fragment: str) -> None:
    result = validate(write(tmp_path, name, content))
    assert result.exit_code == 2
    assert fragment in result.stdout


def test_missing_file_and_directory_exit_2_and_other_files_are_still_checked(tmp_path: Path) -> None:
    good = write(tmp_path, "mixlist.json", GOOD_MIXLIST)
    bad = write(tmp_path, "bad_mixlist.json", BAD_MIXLIST)
    result = validate(tmp_path / "missing.yaml", tmp_path, good, bad)
    assert result.exit_code == 2
    assert f"{tmp_path / 'missing.yaml'}: error: file not found" in result.stdout
    assert f"{tmp_path}: error: file is a directory, not a file" in result.stdout
    assert "invalid mixlist combination for op 'MatMul'" in result.stdout
    assert "4 files checked" in result.stdout and "2 could not be read or parsed" in result.stdout


def test_missing_referenced_mixlist_exits_2_and_points_at_the_key(tmp_path: Path) -> None:
    config = write(tmp_path, "s.yaml", "precision_mode: allow_mix_precision\nmodify_mixlist: nope.json\n")
    result = validate(config)
    assert result.exit_code == 2
    assert f"{tmp_path / 'nope.json'}: error: mixlist file not found" in result.stdout
    assert f"{config}:2: $.modify_mixlist: error: modify_mixlist names a file that cannot be used" in result.stdout


def test_kind_option_overrides_detection(tmp_path: Path) -> None:
    pins = write(tmp_path, "pins.json", "node_a\nOpType::Softmax\n")
    assert validate("--kind", "keep-dtype", pins).exit_code == 0
    assert validate(pins).exit_code == 2
    result = validate("--kind", "nonsense", pins)
    assert result.exit_code == 2 and "unknown file kind 'nonsense'" in result.output


def test_bad_format_and_target_options_exit_2(tmp_path: Path) -> None:
    mixlist = write(tmp_path, "mixlist.json", GOOD_MIXLIST)
    assert "unknown --format 'xml'" in validate("--format", "xml", mixlist).output
    result = validate("--target", "tpu", mixlist)
    assert result.exit_code == 2 and "unknown target 'tpu'" in result.output


def test_json_config_and_ops_info_detection(tmp_path: Path) -> None:
    config = write(tmp_path, "settings.json", '{"precision_mode": "force_fp32", "target": "cpu"}')
    ops = write(
        tmp_path,
        "lib.json",
        '{"target": "cpu", "provider": "CPUExecutionProvider", "onnxruntime_version": "1.31.1",\n'
        ' "ops": {"MatMul": {"precision_reduce": {"flag": "maybe"}}}}',
    )
    report = validate_paths([config, ops])
    assert [file.kind for file in report.files] == ["config", "ops-info"]
    (problem,) = report.problems
    assert problem.line == 2 and problem.json_path == "$.ops.MatMul.precision_reduce.flag"
    assert report.exit_code == 1


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_packaged_op_info_validates(target: str) -> None:
    result = validate(packaged_ops_info(target))
    assert result.exit_code == 0, result.stdout


def test_mixlist_is_checked_against_the_targets_op_info(tmp_path: Path) -> None:
    packaged_ops_info("cpu")
    # Softmax is black in the cpu op info: removing it from white changes nothing, and validate says so.
    mixlist = write(tmp_path, "mixlist.json", '{"white-list": {"to-remove": ["Softmax"]}}')
    result = validate("--target", "cpu", mixlist)
    assert result.exit_code == 0
    assert "white-list to-remove of 'Softmax' changes nothing" in result.stdout
