"""The precision lock read strictly (issue 38): whatever in a lock cannot have come from ampconfig (a value out of
range or of no known name, fields that contradict each other, a format from a newer release) is an exit 2 of
``lock --check`` and ``validate``, located at its JSON path and line, and nothing is written, ``--update`` or not.
Edits ampconfig could have written are drift (tests/lock/test_check.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ampconfig.documents.lock_file import LOCK_FORMAT_VERSION, LOCK_READ_VERSIONS, parse_lock
from tests.lock_trees import Tree, checked_tree, cli, copy_tree, edit_lock, files_of

Edit = Callable[[dict[str, Any]], object]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    return checked_tree(tmp_path_factory.mktemp("checked_lock"))


@pytest.fixture
def tree(pristine: Tree, tmp_path: Path) -> Tree:
    return copy_tree(pristine, tmp_path)


def _node(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(node for node in data["nodes"] if node["name"] == name)


def _set(section: Callable[[dict[str, Any]], dict[str, Any]], **values: object) -> Edit:
    return lambda data: section(data).update(values)


def _values(data: dict[str, Any]) -> dict[str, Any]:
    return data["values"]


def _settings(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda data: data["settings"][name]


def _unchecked_with_the_file(data: dict[str, Any]) -> None:
    data["values"].update(checked=False, data_sha256=None, beyond_margin={})  # the ranges record stays


def _unchecked_with_a_zeroed_digest(data: dict[str, Any]) -> None:
    data["values"].update(checked=False, data_sha256=None, beyond_margin={})
    data["values"]["ranges"]["sha256"] = "0" * 64


def _without_config(data: dict[str, Any]) -> None:
    data["settings"]["config"] = None


def _second_mm0(data: dict[str, Any]) -> None:
    _node(data, "mm1")["name"] = "mm0"


def _format_2_without_spreads(data: dict[str, Any]) -> None:
    del data["values"]["below_normal"]


def _format_1_with_spreads(data: dict[str, Any]) -> None:
    data["format_version"] = 1


#: The edit, the JSON path the error names and words of its message (the id says what was done): every kind the
#: issue lists that cannot have come from ampconfig, and the other pairs the format has.
REFUSED = [
    pytest.param(
        _set(lambda d: _values(d)["beyond_margin"], y=float("nan")),
        "$.values.beyond_margin.y",
        "finite number, got number NaN",
        id="beyond_margin NaN",
    ),
    pytest.param(
        _set(lambda d: _values(d)["beyond_margin"], y=-1),
        "$.values.beyond_margin.y",
        "greater than 0, got integer -1",
        id="beyond_margin -1",
    ),
    pytest.param(
        _set(lambda d: _values(d)["beyond_margin"], y=float("inf")),
        "$.values.beyond_margin.y",
        "finite number, got number Infinity",
        id="beyond_margin Infinity",
    ),
    pytest.param(
        _unchecked_with_the_file,
        "$.values.checked",
        '"checked": false says no value was checked',
        id="checked false with a ranges digest",
    ),
    pytest.param(
        _unchecked_with_a_zeroed_digest,
        "$.values.checked",
        "a value ranges file at $.values.ranges",
        id="checked false with a zeroed digest",
    ),
    pytest.param(
        _set(_values, ranges=None),
        "$.values.source",
        "neither the value ranges file nor the data",
        id="checked true from nowhere",
    ),
    pytest.param(_set(_settings("target"), value="tpu"), "$.settings.target.value", "'cpu' or 'cuda'", id="target tpu"),
    pytest.param(
        _set(_settings("op_names"), value="klingon"),
        "$.settings.op_names.value",
        "'tensorflow', 'ascend' or 'onnx'",
        id="op_names klingon",
    ),
    pytest.param(
        _set(lambda d: _node(d, "mm0"), colour="purple"),
        "$.nodes[0].colour",
        "'white', 'black', 'gray' or 'clear'",
        id="a made-up colour",
    ),
    pytest.param(
        _set(lambda d: _node(d, "mm0"), rule="because"), "$.nodes[0].rule", 'got string "because"', id="a made-up rule"
    ),
    pytest.param(
        _set(lambda d: _node(d, "mm0"), dtype="float8"), "$.nodes[0].dtype", 'got string "float8"', id="a made-up dtype"
    ),
    pytest.param(
        _set(lambda d: _node(d, "mm0"), **{"from": None}),
        "$.nodes[0].colour",
        'computed in no float type ("from": null)',
        id="a colour without a float",
    ),
    pytest.param(_second_mm0, "$.nodes[3].name", "a second node named 'mm0'", id="a second node of one name"),
    pytest.param(
        _set(lambda d: d["summary"], estimated_us=float("inf")),
        "$.summary.estimated_us",
        "finite number",
        id="estimated time Infinity",
    ),
    pytest.param(
        _set(_settings("data_max"), value=0, source="command line"),
        "$.settings.data_max.value",
        "greater than 0",
        id="a margin of 0",
    ),
    pytest.param(
        _set(_settings("op_names"), source="command line"),
        "$.settings.op_names.source",
        "a null value is one nobody gave",
        id="a given setting without a value",
    ),
    pytest.param(
        _set(_settings("op_names"), value="onnx"),
        "$.settings.op_names.value",
        '"source": "default" means nobody gave it',
        id="a default with a value",
    ),
    pytest.param(
        _set(_settings("modify_mixlist"), path=None, source="command line"),
        "$.settings.modify_mixlist.source",
        "a list written inline",
        id="an inline list from the command line",
    ),
    pytest.param(
        _without_config,
        "$.settings.precision_mode.source",
        "the lock records no config",
        id="settings from a config the lock lacks",
    ),
    pytest.param(
        _set(lambda d: d["model"], example="transformer_block"),
        "$.model.example",
        "names both the model",
        id="the example and a model",
    ),
    pytest.param(
        _set(lambda d: d["versions"]["op_info"], target="cpu"),
        "$.versions.op_info.target",
        "the op info that decided is the target's",
        id="another target's op info",
    ),
    pytest.param(
        _format_2_without_spreads,
        "$.values.below_normal",
        "lock format 2 always records below_normal",
        id="format 2 without spreads",
    ),
    pytest.param(
        _format_1_with_spreads,
        "$.values.below_normal",
        "below_normal came with lock format 2",
        id="format 1 with spreads",
    ),
]


@pytest.mark.parametrize(("edit", "json_path", "said"), REFUSED)
def test_a_lock_ampconfig_cannot_have_written_is_refused_at_its_json_path(
    tree: Tree, edit: Edit, json_path: str, said: str
) -> None:
    edit_lock(tree.lock, edit)
    before = files_of(tree.root)
    for options in ((), ("--update",), ("--strict",)):
        code, payload = tree.check(*options)
        assert code == 2 and payload["exit_code"] == 2, payload
        error = payload["error"]
        assert error["json_path"] == json_path and said in error["message"], error
        assert error["file"] == str(tree.lock) and error["line"] is not None and error["hint"], error
        assert files_of(tree.root) == before  # nothing written, not even by --update
    text = cli("lock", "--check", tree.lock)
    assert text.exit_code == 2 and f"{json_path}: " in text.stderr and said in text.stderr, text.output
    validated = cli("validate", tree.lock)
    assert validated.exit_code == 2 and json_path in validated.stdout, validated.output
    assert files_of(tree.root) == before


def test_the_lock_as_written_reads_and_the_checked_tree_passes(tree: Tree) -> None:
    """The base every refusal above starts from is a lock ampconfig wrote, which passes: each refusal is the edit's."""
    lock, _ = parse_lock(tree.lock.read_text(encoding="utf-8"), str(tree.lock))
    assert lock.values is not None and lock.values.checked and lock.values.ranges is not None
    assert set(lock.values.beyond_margin) == {"y"}
    assert [node.name for node in lock.nodes][:4] == ["mm0", "add0", "relu0", "mm1"]
    assert tree.check("--strict")[0] == 0


def test_every_contradiction_names_all_the_files_problems(tree: Tree) -> None:
    """Problems in different records are all listed (each record's rule reports its first)."""

    def two_flaws(data: dict[str, Any]) -> None:
        data["settings"]["target"]["value"] = "tpu"
        _node(data, "relu0")["colour"] = "purple"

    edit_lock(tree.lock, two_flaws)
    code, payload = tree.check()
    assert code == 2
    assert {problem["json_path"] for problem in payload["problems"]} == {"$.settings.target.value", "$.nodes[2].colour"}


def test_a_newer_format_is_said_as_newer_never_as_edited(tree: Tree) -> None:
    newest = max(LOCK_READ_VERSIONS)
    assert newest == LOCK_FORMAT_VERSION
    edit_lock(tree.lock, lambda data: data.update(format_version=newest + 1, unknown_section={"new": True}))
    before = files_of(tree.root)
    code, payload = tree.check("--update")
    assert code == 2 and files_of(tree.root) == before
    error = payload["error"]
    expected = f"precision lock written by a newer ampconfig (format {newest + 1}; this one reads up to {newest})"
    assert error["message"] == expected and error["json_path"] == "$.format_version", error
    assert "upgrade ampconfig" in error["hint"] and "edit" not in json.dumps(error), error
