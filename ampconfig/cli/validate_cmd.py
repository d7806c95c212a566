"""``ampconfig validate``: check configs, mixlists, keep_dtype and op info files; every problem at once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ampconfig.cli.options import SharedOptions
from ampconfig.cli.output import error_fields, print_json, say
from ampconfig.cli.typer_app import command
from ampconfig.documents.numeric_limits import FILE_KINDS
from ampconfig.errors import EXIT_OK, EXIT_USAGE, AmpconfigError, Problem
from ampconfig.report.annotations import format_github

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


def _check_locks(report: ValidationReport) -> ValidationReport:
    """Each precision lock that parsed, decided again and compared (the model is read: this can take a while)."""
    if not any(file.kind == "lock" and not file.unusable for file in report.files):
        return report
    from ampconfig.lock.check import check_lock
    from ampconfig.report.lock import check_comparison, comparison_problems

    for file in report.files:
        if file.kind != "lock" or file.unusable:
            continue
        try:
            checked = check_lock(Path(file.path))
        except AmpconfigError as exc:
            file.unusable, file.problems = True, exc.as_problems()
            continue
        file.problems = comparison_problems(check_comparison(checked, failed=checked.diff.drifted))
    return report


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
    options: SharedOptions,
    *,
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="PATH...",
            help="Config, mixlist, keep_dtype, op info or precision lock files (with --touched: changed files).",
            show_default=False,
        ),
    ],
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind",
            metavar="|".join(FILE_KINDS),
            help="Treat every file as this kind (default: detected from the suffix and content).",
            show_default=False,
        ),
    ] = None,
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="|".join(OUTPUT_FORMATS),
            help="text, json (one JSON object, as --json) or github (workflow annotations).",
        ),
    ] = "text",
    touched: Annotated[
        bool,
        typer.Option(
            "--touched",
            help="PATHs are files a change touched: check the precision locks (*.lock.json under the current "
            "folder) that record one of them as model, config, mixlist or keep_dtype, or are one of them.",
        ),
    ] = False,
) -> None:
    """Validate files and report every problem in one pass, with file, line and JSON path.

    The kind is detected from the suffix and content: .yaml/.yml/.toml configs; .json configs, mixlists
    (black-list/white-list/gray-list keys) and op info (ops + provider); .cfg/.txt keep_dtype files; TensorFlow's
    list variables (TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_*=..., any suffix) as a mixlist. A
    config's mixlist, keep_dtype, customize_dtypes and ranges files are checked too, each as a file of its kind,
    the files it names for runs (model, run.inputs, data sets) for what they hold, and its settings are resolved as
    every command resolves them (the mode/mixlist pairing). Op types written the TensorFlow or Ascend way (Conv2D,
    MatMulV2) are read as their ONNX op, each shown as a note with its line. Nothing is run and no ONNX Runtime is
    loaded.

    A precision lock (*.lock.json, see ampconfig lock) is checked as `lock --check` checks it: decided again
    with the settings it records, on today's files; each changed decision is a problem on its line and on the
    settings line that caused it. With --touched (the ampconfig-lock pre-commit hook), PATHs are the files a
    commit changed, and the locks that record any of them are checked.

    Exit codes: 0 clean (warnings allowed), 1 problems found, 2 a file could not be read or parsed.
    """
    output_format = "json" if options.json_output else output_format
    if output_format not in OUTPUT_FORMATS:
        raise AmpconfigError(f"unknown --format {output_format!r}", hint="formats: " + ", ".join(OUTPUT_FORMATS))
    from ampconfig.settings.validate import validate_paths

    if touched:
        from ampconfig.lock.touched import touched_locks

        changed = len(paths)
        paths, kind = touched_locks(paths, Path.cwd()), "lock"
        if not paths and output_format == "text":
            say(f"no precision lock under {Path.cwd()} records any of the {_count(changed, 'changed file')}")
            raise typer.Exit(EXIT_OK)
    report = _check_locks(validate_paths(paths, kind, options.flags.target, options.flags.op_names))
    if output_format == "json":
        print_json(_json_report(report))
    elif output_format == "github":
        for problem in report.problems:
            say(format_github(problem), wrap=False)
    else:
        for problem in report.problems:
            say(format_text(problem))
        say(_summary(report))
    raise typer.Exit(report.exit_code)
