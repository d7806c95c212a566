"""--help that teaches (issue 18): every command's help reads as prose (no paragraph wrapped mid-sentence), flags
show no value type (no ``--help <bool>``), options with a fixed set of values list them, and the exit codes and
``-o -`` are documented."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.documents.numeric_limits import FILE_KINDS
from ampconfig.precision_modes import V1_NAMES, V2_NAMES

runner = CliRunner()
WIDE = {"COLUMNS": "250", "TERMINAL_WIDTH": "250"}


def commands(group: object = None, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    group = group if group is not None else typer.main.get_command(app)
    yield path, group
    for name, command in sorted(getattr(group, "commands", {}).items()):
        yield from commands(command, (*path, name))


ALL = [path for path, _ in commands()]


def help_text(*path: str) -> str:
    result = runner.invoke(app, [*path, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", ALL, ids=lambda path: " ".join(path) or "ampconfig")
def test_help_shows_no_value_type_for_flags_and_no_broken_sentences(path: tuple[str, ...]) -> None:
    text = help_text(*path)
    assert "<bool>" not in text
    command = dict(commands())[path]
    for paragraph in (getattr(command, "help", None) or "").split("\n\n"):
        lines = paragraph.splitlines()
        if not any(line.startswith("  ") for line in lines):  # examples keep their lines; prose is one line
            assert len(lines) <= 1, f"wrapped mid-sentence: {paragraph!r}"


def test_options_with_fixed_values_list_them() -> None:
    validate = help_text("validate")
    assert "text|json|github" in validate and "|".join(FILE_KINDS) in validate
    assert "<str>" not in validate
    run = help_text("run")
    for mode in (*V1_NAMES, *V2_NAMES):
        assert mode in run, mode
    for command in ("explain", "compare"):
        text = help_text(command)
        assert "overflow fp32" not in text and "margin in the low type" in text


def test_exit_codes_and_stdout_are_documented() -> None:
    top = help_text()
    assert "3 internal error" in top and "2 usage or input error" in top and "- is standard output" in top
    for command in ("rewrite", "run"):
        assert "- is standard output" in help_text(command)
