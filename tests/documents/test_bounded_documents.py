"""Bounded parsing (issue 10): hostile YAML, JSON and TOML are refused with a located error before the expensive
step, and ordinary documents, aliases included, still parse as before.

Limits: file size (MAX_DOCUMENT_BYTES), nesting depth (MAX_NESTING_DEPTH), keys + values + items with YAML aliases
counted where they are used (MAX_DOCUMENT_VALUES). The tests assert the mechanism (what is refused, where, and that
the alias expansion is never built), not wall-clock times.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.documents.bounded_yaml import compose_yaml
from ampconfig.documents.document_limits import MAX_DOCUMENT_VALUES, MAX_NESTING_DEPTH
from ampconfig.documents.parsing import document_format, parse_document, read_text, scan_json
from ampconfig.documents.session_config import load_session_config
from ampconfig.errors import AmpconfigError
from ampconfig.files.bounded import MAX_DOCUMENT_BYTES

runner = CliRunner()


def billion_laughs(levels: int = 9) -> str:
    """The classic alias bomb as a session config: 11 lines, under 1 KB, 9**10 (3.5e9) strings once expanded."""
    lines = ["precision_mode: force_fp16", "lol0: &lol0 [" + ", ".join(['"lol"'] * 9) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"lol{level}: &lol{level} [" + ", ".join([f"*lol{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def parse_error(text: str, fmt: str, source: str = "doc") -> AmpconfigError:
    with pytest.raises(AmpconfigError) as raised:
        parse_document(text, source, fmt)  # type: ignore[arg-type]
    return raised.value


# ------------------------------------------------------------------------------------------------ YAML aliases
def test_billion_laughs_is_refused_at_the_alias_before_it_is_expanded() -> None:
    text = billion_laughs()
    assert 700 < len(text.encode()) < 1200
    tracemalloc.start()
    try:
        error = parse_error(text, "yaml", "bomb.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "YAML alias *lol" in error.message and "refused before expanding it" in error.message
    assert error.file == "bomb.yaml"
    alias = error.message.split("*", 1)[1].split(" ", 1)[0]
    assert f"*{alias}," in text.splitlines()[error.line - 1]  # the line that uses the alias that overflows
    # Expanded, the document is billions of strings; refusing it allocated less than 1 MiB.
    assert peak < 1024 * 1024, peak


def test_composer_counts_aliases_without_building_them() -> None:
    """The composer itself refuses: no data is constructed and nothing walks the shared nodes."""
    with pytest.raises(AmpconfigError, match="expands the document beyond"):
        compose_yaml(billion_laughs(), "bomb.yaml")
    # PyYAML's own composer accepts the same text (it shares aliased nodes): the refusal is ours, not a YAML error.
    assert yaml.compose(billion_laughs(4), Loader=yaml.SafeLoader) is not None


def test_cli_refuses_billion_laughs_with_file_and_line(tmp_path: Path) -> None:
    bomb = tmp_path / "session.yaml"
    bomb.write_text(billion_laughs())
    for args in (["validate", str(bomb)], ["run", "--config", str(bomb)], ["rewrite", "--config", str(bomb)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert f"{bomb}:" in result.output and "YAML alias *lol" in result.output
        assert "internal error" not in result.output


@pytest.mark.parametrize(
    "text",
    [
        "precision_mode: force_fp16\nrun: &a\n  shapes: *a\n",  # a mapping that contains itself
        "a: &a [1, *a]\n",  # a list that contains itself
    ],
)
def test_recursive_alias_is_refused_with_its_line(text: str) -> None:
    error = parse_error(text, "yaml")
    assert "is inside the value it refers to" in error.message
    assert error.line == next(n for n, line in enumerate(text.splitlines(), 1) if "*a" in line)


def test_ordinary_aliases_and_merge_keys_still_work(tmp_path: Path) -> None:
    config = tmp_path / "s.yaml"
    config.write_text(
        "defaults: &shared {x: [2, 8]}\n"
        "precision_mode: force_fp16\n"
        "run:\n  shapes: *shared\n  seed: 3\n"
        "tolerance:\n  <<: {rel_l2: 0.05}\n"
    )
    document = parse_document(read_text(config, "config"), str(config), document_format(config))
    assert document.data["run"]["shapes"] == {"x": [2, 8]}
    assert document.data["tolerance"] == {"rel_l2": 0.05}
    assert document.source.line_of(("run", "seed")) == 5


@pytest.mark.parametrize(
    ("text", "fragment", "line"),
    [
        ("a: *nowhere\n", "refers to no anchor", 1),
        ("a: &x 1\nb: &x 2\n", "anchor &x is defined twice", 2),
        ("a: 1\n---\nb: 2\n", "more than one YAML document", 2),
    ],
)
def test_alias_and_document_mistakes_are_located(text: str, fragment: str, line: int) -> None:
    error = parse_error(text, "yaml")
    assert fragment in error.message and error.line == line


# ------------------------------------------------------------------------------------------------ nesting depth
def _nested_json(depth: int) -> str:
    return '{"a": ' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"


def _nested_yaml_block(depth: int) -> str:
    """``depth`` mappings: the document's, then one per key line."""
    levels = depth - 1
    return "".join(" " * level + f"k{level}:\n" for level in range(levels)) + " " * levels + "v: 1\n"


@pytest.mark.parametrize(
    ("fmt", "make"),
    [
        ("json", _nested_json),
        ("yaml", lambda depth: "a: " + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "\n"),
        ("yaml", _nested_yaml_block),
        ("toml", lambda depth: "a = " + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "\n"),
        ("toml", lambda depth: ".".join(f"k{level}" for level in range(depth)) + " = 1\n"),  # dotted keys
    ],
)
def test_nesting_depth_limit(fmt: str, make) -> None:  # type: ignore[no-untyped-def]
    parse_document(make(MAX_NESTING_DEPTH), "doc", fmt)  # type: ignore[arg-type]
    error = parse_error(make(MAX_NESTING_DEPTH + 1), fmt)
    assert "nesting too deep" in error.message and error.line is not None


@pytest.mark.parametrize("fmt", ["json", "yaml", "toml"])
def test_very_deep_nesting_is_located_not_a_recursion_error(fmt: str) -> None:
    """100,000 brackets: json.loads, PyYAML's composer and tomllib all raised RecursionError ("internal error")."""
    opening = {"json": '{"a": ', "yaml": "a: ", "toml": "a = "}[fmt]
    closing = "}" if fmt == "json" else "\n"
    text = opening + "[" * 100_000 + "]" * 100_000 + closing
    error = parse_error(text, fmt)
    assert "nesting too deep" in error.message and error.line == 1


# ------------------------------------------------------------------------------------------------ values and size
@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("json", json.dumps({f"k{index}": index for index in range(MAX_DOCUMENT_VALUES)}, indent=0)),
        ("yaml", "".join(f"k{index}: {index}\n" for index in range(MAX_DOCUMENT_VALUES // 2 + 1))),
        ("toml", "".join(f"k{index} = {index}\n" for index in range(MAX_DOCUMENT_VALUES + 1))),
    ],
)
def test_too_many_values_are_refused_with_the_line_where_the_limit_is_passed(fmt: str, text: str) -> None:
    error = parse_error(text, fmt)
    assert "too many values" in error.message
    assert error.line is not None and error.line > 1


def test_json_scan_stops_at_the_limit_and_finds_comments() -> None:
    scan = scan_json('{"url": "http://x#y", // one\n "b": 2 /* two\n */, "c": "/* not */"}\n# three\n', "m.json")
    assert scan.comments == [(1, "//"), (2, "/* */"), (4, "#")]
    with pytest.raises(AmpconfigError, match="too many values"):
        scan_json("[" + "1," * MAX_DOCUMENT_VALUES + "1]", "m.json")


def test_file_larger_than_the_limit_is_refused_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "session.yaml"
    big.write_bytes(b"# padding\n" * (MAX_DOCUMENT_BYTES // 10 + 1))
    with pytest.raises(AmpconfigError, match="too large") as raised:
        load_session_config(big)
    assert raised.value.file == str(big)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_device_is_refused_unread() -> None:
    """A device has no size up front and never ends: it is refused, not read (issue 31: only regular files)."""
    with pytest.raises(AmpconfigError, match="not a regular file") as raised:
        read_text(Path("/dev/zero"), "keep_dtype file")
    assert raised.value.file == "/dev/zero"


def test_a_million_key_yaml_is_refused_by_size_without_parsing(tmp_path: Path) -> None:
    """The issue's 1M-key YAML (205 s before): refused from its size, before any YAML is scanned."""
    path = tmp_path / "session.yaml"
    with path.open("w") as handle:
        for index in range(1_000_000):
            handle.write(f"k{index:07d}: {index}\n")
    assert path.stat().st_size > MAX_DOCUMENT_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(AmpconfigError, match=r"too large: [0-9,]+ bytes \(16\.1 MiB\)"):
            load_session_config(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024, peak  # the 16 MiB file was never read


@pytest.mark.parametrize("loader", [yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)])
def test_both_yaml_parsers_give_the_same_document_and_limits(
    monkeypatch: pytest.MonkeyPatch, loader: type, tmp_path: Path
) -> None:
    """libyaml is used when PyYAML has it; the pure-Python parser (PyYAML without libyaml) behaves the same."""
    monkeypatch.setattr("ampconfig.documents.bounded_yaml._YAML_LOADER", loader)
    text = "precision_mode: force_fp16\nrun:\n  shapes: {x: [1, 8]}\n  seed: 7\nkeep_dtype: [a, 'OpType::Erf']\n"
    document = parse_document(text, "s.yaml", "yaml")
    assert document.data == yaml.safe_load(text)
    assert document.source.line_of(("run", "seed")) == 4 and document.source.line_of(("keep_dtype", 1)) == 5
    assert "expands the document beyond" in parse_error(billion_laughs(), "yaml").message
    assert "nesting too deep" in parse_error("a: " + "[" * 1000 + "]" * 1000, "yaml").message
    assert "not valid YAML" in parse_error("a: [1,\n", "yaml").message
