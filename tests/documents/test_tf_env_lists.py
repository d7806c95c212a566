"""TensorFlow's list variables as a mixlist (issue 38, item 3): an env file is recognised from any line that sets
one of them, its other variables are ignored with a note each, and nothing else reads as such a file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.documents.mixlist_file import mixlist_from_text, mixlist_problems
from ampconfig.documents.tf_env_lists import is_tf_lists_text
from ampconfig.errors import Severity
from ampconfig.examples import example_path

runner = CliRunner()
DENY = "TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD"

#: What ``env > amp.env`` writes: the list variable anywhere among the others.
ENV_FILE = f"PATH=/usr/bin:/bin\nHOME=/home/trainer\nexport LANG=C.UTF-8\n{DENY}=MatMul\nPYTHONHASHSEED=0\n"


def test_a_list_variable_after_other_variables_is_read_and_the_others_are_notes() -> None:
    mixlist, problems = mixlist_from_text(ENV_FILE, "amp.env")
    assert problems == [] and mixlist is not None
    assert mixlist.black_list.to_add == ["MatMul"]
    findings = mixlist_problems(mixlist)
    notes = {(p.line, p.message) for p in findings if p.severity is Severity.NOTE}
    assert {line for line, message in notes if "ignored" in message} == {1, 2, 3, 5}
    assert (1, "PATH is not a TensorFlow list variable: ignored") in notes
    assert not [p for p in findings if p.severity is not Severity.NOTE]


@pytest.mark.parametrize(
    "text",
    [
        '{"black-list": {"to-add": ["MatMul"]}}\n',  # Ascend's JSON
        f'{{\n  "{DENY}": "MatMul"\n}}\n',  # JSON keys are quoted
        f"modify_mixlist:\n  {DENY}: MatMul\n",  # YAML
        f'precision_mode = "allow_mix_precision"\n[modify_mixlist]\n{DENY} = "MatMul"\n',  # TOML's table
        "PATH=/usr/bin\nHOME=/root\n",  # an env file without any list variable
        f"# {DENY}=MatMul\n",  # only a comment names it
    ],
)
def test_other_documents_are_not_read_as_list_variables(text: str) -> None:
    assert not is_tf_lists_text(text)


def test_a_misspelt_list_variable_among_others_is_still_an_error_at_its_line() -> None:
    mixlist, problems = mixlist_from_text(f"PATH=/usr/bin\n{DENY.replace('DENYLIST', 'DENYLST')}=Exp\n", "amp.env")
    assert mixlist is None
    errors = [p for p in problems if p.severity is Severity.ERROR]
    assert [(p.line, "did you mean" in (p.hint or "")) for p in errors] == [(2, True)]


def test_the_env_file_decides_through_the_cli_and_validates(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    shutil.copyfile(example_path(), model)
    env = tmp_path / "amp.env"
    env.write_text(ENV_FILE, encoding="utf-8")
    checked = runner.invoke(app, ["validate", str(env), "--format", "json"])
    assert checked.exit_code == 0, checked.output
    explained = runner.invoke(app, ["explain", str(model), "--modify-mixlist", str(env), "--json"])
    assert explained.exit_code == 0, explained.output
    payload = json.loads(explained.stdout)
    assert {node["dtype"] for node in payload["nodes"] if node["op_type"] == "MatMul"} == {"float32"}
    assert f"{env}:1: PATH is not a TensorFlow list variable: ignored" in payload["notes"]


def test_a_toml_config_with_an_inline_table_of_list_variables_stays_a_config(tmp_path: Path) -> None:
    config = tmp_path / "session.toml"
    config.write_text(f'precision_mode = "allow_mix_precision"\n[modify_mixlist]\n{DENY} = "MatMul"\n', "utf-8")
    result = runner.invoke(app, ["validate", str(config), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert [file["kind"] for file in json.loads(result.stdout)["files"]] == ["config"]
