"""``ampconfig validate``: check configs, mixlists, keep_dtype and op info files; every problem at once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ampconfig.cli.app import command
from ampconfig.cli.output import error_fields, print_json, say
from ampconfig.errors import EXIT_OK, EXIT_USAGE, AmpconfigError, Problem, Severity
from ampconfig.settings.values import FILE_KINDS

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads none of the settings machinery
    from ampconfig.settings.validate import ValidationReport

OUTPUT_FORMATS = ("text", "json", "github")


def format_text(problem: Problem) -> str:
    where = problem.location()
    line = (
        f"{where}: {problem.severity.value}: {problem.message}"
        if where
        else (f"{problem.severity.value}: {problem.message}")
    )
    return line + (f"\n    hint: {problem.hint}" if problem.hint else "")


def _escape_data(text: str) -> str:
    # GitHub workflow commands: https://docs.github.com/actions/reference/workflow-commands-for-github-actions
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(problem: Problem) -> str:
    properties = []
    if problem.file:
        properties.append(f"file={_escape_property(problem.file)}")
    if problem.line is not None:
        properties.append(f"line={problem.line}")
    if problem.json_path:
        properties.append(f"title={_escape_property(problem.json_path)}")
    message = problem.message + (f" ({problem.hint})" if problem.hint else "")
    head = "::notice" if problem.severity is Severity.NOTE else f"::{problem.severity.value}"
    return (f"{head} {','.join(properties)}" if properties else head) + f"::{_escape_data(message)}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _summary(report: ValidationReport) -> str:
    files = len(report.files)
    unusable = sum(file.unusable for file in report.files)
    counts = f"{_count(report.errors, 'error')}, {_count(report.warnings, 'warning')}"
    text = f"{_count(files, 'file')} checked: {counts}"
    return text + (f"; {unusable} could not be read or parsed" if unusable else "")


def _json_report(report: ValidationReport) -> dict[str, Any]:
    """The report with the fields every --json object has: ``ok``, ``exit_code``, and on exit 2 (a file could not
    be used) ``error``, the first problem of the first unusable file (:func:`~ampconfig.cli.output.error_payload`)."""
    payload: dict[str, Any] = {"ok": report.exit_code == EXIT_OK, "exit_code": report.exit_code, **report.to_dict()}
    unusable = [problem for file in report.files if file.unusable for problem in file.problems]
    if report.exit_code == EXIT_USAGE and unusable:
        payload["error"] = error_fields(unusable[0])
    return payload


@command("validate")
def validate(
    paths: Annotated[
        list[Path],
        typer.Argument(metavar="PATH...", help="Config, mixlist, keep_dtype or op info files.", show_default=False),
    ],
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind", help="Treat every file as this kind: " + ", ".join(FILE_KINDS) + ".", show_default=False
        ),
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="text, json (one JSON object) or github (workflow annotations).")
    ] = "text",
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="Decision target whose op info op types are checked against (default: the config's target, "
            "else cuda). Needs no GPU.",
            show_default=False,
        ),
    ] = None,
    op_names: Annotated[
        str | None,
        typer.Option(
            "--op-names",
            metavar="tensorflow|ascend|onnx",
            help="Whose op type names the files use (default: the config's op_names, else each name by the table "
            "of docs/op-names.md; names that mean different ops, such as Max or Mean, then need this).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Validate files and report every problem in one pass, with file, line and JSON path.

    The kind is detected from the suffix and content: .yaml/.yml/.toml configs; .json configs, mixlists
    (black-list/white-list/gray-list keys) and op info (ops + provider); .cfg/.txt keep_dtype files; TensorFlow's
    list variables (TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_*=..., any suffix) as a mixlist. A
    config's mixlist and keep_dtype files are checked too, and its settings are resolved as every command
    resolves them (the mode/mixlist pairing). Op types written the TensorFlow or Ascend way (Conv2D, MatMulV2)
    are read as their ONNX op, each shown as a note with its line. Nothing is run and no ONNX Runtime is loaded.

    Exit codes: 0 clean (warnings allowed), 1 problems found, 2 a file could not be read or parsed.
    """
    if output_format not in OUTPUT_FORMATS:
        raise AmpconfigError(f"unknown --format {output_format!r}", hint="formats: " + ", ".join(OUTPUT_FORMATS))
    from ampconfig.settings.validate import validate_paths

    report = validate_paths(paths, kind, target, op_names)
    if output_format == "json":
        print_json(_json_report(report))
    elif output_format == "github":
        for problem in report.problems:
            say(format_github(problem))
    else:
        for problem in report.problems:
            say(format_text(problem))
        say(_summary(report))
    raise typer.Exit(report.exit_code)
