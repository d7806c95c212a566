"""JSON Schemas: generated from the models, valid draft 2020-12, checked in and in sync, usable by editors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.settings.json_schemas import SCHEMA_KINDS, generate_schema, packaged_schema_dir, schema_text
from tests.package_readings import packaged_ops_info

runner = CliRunner()
KINDS = list(SCHEMA_KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_generated_schema_is_valid_draft_2020_12(kind: str) -> None:
    schema = generate_schema(kind)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"https://ampconfig.dev/schemas/{SCHEMA_KINDS[kind].filename}"
    assert schema["title"] and schema["description"]
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("kind", KINDS)
def test_checked_in_schema_matches_the_models(kind: str) -> None:
    path = packaged_schema_dir() / SCHEMA_KINDS[kind].filename
    assert path.is_file(), f"{path} is missing: run `ampconfig schema --write`"
    assert path.read_text(encoding="utf-8") == schema_text(kind), (
        f"{path.name} drifted from the pydantic models: run `ampconfig schema --write`"
    )
    Draft202012Validator.check_schema(json.loads(path.read_text(encoding="utf-8")))


def test_every_config_field_is_described() -> None:
    schema = generate_schema("session-config")
    undocumented = [name for name, prop in schema["properties"].items() if not prop.get("description")]
    assert undocumented == []
    for definition in ("Tolerance", "RunOptions", "Mixlist", "ListEdit"):
        props = schema["$defs"][definition]["properties"]
        assert all(prop.get("description") for prop in props.values()), definition


def test_schemas_accept_valid_files_and_reject_invalid_ones() -> None:
    config = Draft202012Validator(generate_schema("session-config"))
    good = {
        "precision_mode": "allow_mix_precision",
        "target": "cuda",
        "modify_mixlist": {"black-list": {"to-add": ["Softmax", "com.microsoft::FusedMatMul"]}},
        "keep_dtype": ["OpType::Erf"],
        "tolerance": {"rel_l2": 0.01},
        "run": {"shapes": {"input_ids": [1, 128]}},
    }
    assert list(config.iter_errors(good)) == []
    assert list(config.iter_errors({"precision_mode": "fp16"}))  # a v2 name in the v1 key
    assert list(config.iter_errors({"precision_mode": "force_fp16", "warmpu": 1}))
    assert list(config.iter_errors({"run": {"shapes": {"x": [-1]}}}))
    assert list(config.iter_errors({"run": {"shapes": {"x": [0, 8]}}})) == []  # an empty dimension is a size
    mixlist = Draft202012Validator(generate_schema("mixlist"))
    assert list(mixlist.iter_errors({"white-list": {"to-remove": ["Conv"]}})) == []
    assert list(mixlist.iter_errors({"white-list": {"to_remove": ["Conv"]}}))
    assert list(mixlist.iter_errors({"white-list": {"to-add": ["Mat Mul"]}}))


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_packaged_op_info_matches_its_schema(target: str) -> None:
    path = packaged_ops_info(target)
    validator = Draft202012Validator(generate_schema("ops-info"))
    assert list(validator.iter_errors(json.loads(path.read_text(encoding="utf-8")))) == []


def test_cli_prints_one_schema_or_all() -> None:
    result = runner.invoke(app, ["schema", "mixlist"])
    assert result.exit_code == 0 and json.loads(result.stdout) == generate_schema("mixlist")
    result = runner.invoke(app, ["schema", "config"])
    assert json.loads(result.stdout) == generate_schema("session-config")
    result = runner.invoke(app, ["schema"])
    assert json.loads(result.stdout) == {kind: generate_schema(kind) for kind in KINDS}


def test_cli_writes_schema_files(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "one").mkdir()
    result = runner.invoke(app, ["schema", "--write", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    written = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert written == sorted(kind.filename for kind in SCHEMA_KINDS.values())
    assert "precision-lock.schema.json" in written
    assert (tmp_path / "out" / "mixlist.schema.json").read_text(encoding="utf-8") == schema_text("mixlist")
    result = runner.invoke(app, ["schema", "ops-info", "--write", str(tmp_path / "one")])
    assert [path.name for path in (tmp_path / "one").iterdir()] == ["ops-info.schema.json"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["schema", "nonsense"], "unknown schema kind 'nonsense'"),
        (["schema", "mixlist", "config"], "two schema kinds given"),
    ],
)
def test_cli_usage_errors(args: list[str], fragment: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and fragment in result.stderr and "Traceback" not in result.output


def test_cli_refuses_a_file_as_output_folder(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x", encoding="utf-8")
    result = runner.invoke(app, ["schema", "--write", str(file)])
    assert result.exit_code == 2 and "not a directory" in result.stderr
