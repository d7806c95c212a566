"""``ampconfig lock``: write a precision lock, or check one (``--check``) and update it (``--update``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ampconfig.cli.options import SharedOptions, output_option
from ampconfig.cli.output import output_guard, print_json, print_warning, say, stderr
from ampconfig.cli.typer_app import command
from ampconfig.cli.workbench import workbench
from ampconfig.errors import EXIT_CHECK_FAILED, EXIT_OK, AmpconfigError

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads none of the lock machinery
    from ampconfig.report.lock import Comparison

CHECK_FORMATS = ("text", "markdown", "github", "json")
LOCK_ROLE = "precision lock (--output)"
UPDATE_ROLE = "precision lock (--check --update)"

_HELP = """Write a precision lock of MODEL: every node's decision (scope, name, op type, dtype, rule, cause), the
settings it was decided with (mode, target, keep_io_types, op_names; the config, mixlist, keep_dtype and
customize_dtypes files as paths relative to the lock and content hashes), the versions that decide (ampconfig,
onnx, the op info and its ONNX Runtime release) and the model's identity (a hash of its graph apart from a hash of
its weights), with the low-precision count, the casts and the estimated time. Commit it next to the model: a change
of a decision is then a reviewable line in a diff. Settings resolve as for every command (flags over --config over
defaults); nothing runs (`ampconfig run --lock-out FILE` adds the proof).

The file is deterministic: the same tree gives the same bytes on any machine, from any working directory, and is
shaped for small diffs (one node per line, in graph order). Its schema: `ampconfig schema lock`.

--check LOCK decides again with the settings the lock records, on today's files, and compares. Exit 0 when the lock
records what is made today (versions and the format version that moved with an upgrade are notes; --strict fails on
them too). Exit 1 with the difference: each node whose dtype or rule changed, old -> new, with its cause (the
mixlist, keep_dtype or customize_dtypes line, the config key, the op info, the model's graph or weights), the nodes
added and removed, the change in casts and estimated time, and every other recorded value that differs (a node's
colour, a setting, a file's digest, the values) by its JSON path, old -> new. --format github prints annotations on
the lock's lines and on the settings lines responsible; --format markdown a summary for a pull request or
$GITHUB_STEP_SUMMARY; --json one object. --update rewrites the lock (never over an input; exit 0 once written). A
missing or unreadable lock, model or settings file is exit 2, naming it and the lock line that records it; so is
whatever in the lock ampconfig cannot have written (a NaN, an unknown target or colour, fields that contradict
each other, an op that is not the model's), at its JSON path.

[bold]Examples[/bold]

  ampconfig lock model.onnx --modify-mixlist mixlist.json -o precision.lock.json

  ampconfig lock --config session.yaml -o precision.lock.json

  ampconfig lock --check precision.lock.json --format github

  ampconfig lock --check precision.lock.json --format markdown >> "$GITHUB_STEP_SUMMARY"

  ampconfig lock --check precision.lock.json --update
"""


@command("lock", help=_HELP)
def lock(
    options: SharedOptions,
    *,
    lock_out: Annotated[
        Path | None,
        output_option("--output", "-o", metavar="FILE", help="Where to write the lock (never over an input)."),
    ] = None,
    check: Annotated[
        Path | None,
        typer.Option("--check", metavar="LOCK", help="Check this lock against today's files (settings from the lock)."),
    ] = None,
    update: Annotated[bool, typer.Option("--update", help="With --check: rewrite the lock when it changed.")] = False,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="With --check: also fail when only a version or the format version moved."),
    ] = False,
    output_format: Annotated[
        str, typer.Option("--format", help="With --check: " + ", ".join(CHECK_FORMATS) + ".")
    ] = "text",
) -> None:
    output_format = "json" if options.json_output else output_format
    if output_format not in CHECK_FORMATS:
        raise AmpconfigError(f"unknown --format {output_format!r}", hint="formats: " + ", ".join(CHECK_FORMATS))
    if check is None:
        if update or strict:
            raise AmpconfigError("--update and --strict go with --check LOCK", hint="ampconfig lock --check X --update")
        _write_lock(options, lock_out, output_format == "json")
        return
    given = options.flags.given() + (["--output"] if lock_out is not None else [])
    if given:
        raise AmpconfigError(
            f"--check takes its settings from the lock; also given: {', '.join(given)}",
            hint="check with the recorded settings, or write a new lock: ampconfig lock MODEL [settings] -o FILE",
        )
    raise typer.Exit(_check(check, update, strict, output_format))


def _write_lock(options: SharedOptions, lock_out: Path | None, as_json: bool) -> None:
    from ampconfig.documents.lock_file import lock_text
    from ampconfig.lock.record import decide_lock
    from ampconfig.model_io.models import open_model
    from ampconfig.prove.calibration import decision_values, not_checked, prepared_samples
    from ampconfig.report.lock import lock_payload, lock_summary_text, shown_path
    from ampconfig.settings.declared_files import declare_model

    with workbench(options) as bench:
        settings = bench.settings
        if lock_out is None:
            raise AmpconfigError("no output path given", hint="pass -o precision.lock.json (or --check LOCK)")
        destination = bench.guard.output(LOCK_ROLE, lock_out)  # refused before any work
        model = open_model(settings.model_path)
        declare_model(bench.guard, model)
        values = decision_values(
            settings,
            model.proto,
            lambda: prepared_samples(settings, command="lock", guard=bench.guard),
            progress=bench.progress,
        )
        decided = decide_lock(settings, lock_out, opened=model, value_ranges=values.ranges)
        decided.result.warnings.extend([*values.warnings, *not_checked(decided.result)])
        bench.guard.write_text(destination, lock_text(decided.lock))
    where = shown_path(lock_out) or str(lock_out)
    if as_json:
        print_json(lock_payload(decided.lock, where))
        return
    for warning in decided.result.warnings:
        print_warning(warning)
    stderr.print(lock_summary_text(decided.lock, where), markup=False)


def _check(path: Path, update: bool, strict: bool, output_format: str) -> int:
    from ampconfig.lock.check import prepare_check, run_check
    from ampconfig.report.lock import check_comparison
    from ampconfig.settings.declared_files import declare_inputs

    prepared = prepare_check(path)
    with output_guard() as guard:
        declare_inputs(guard, prepared.settings)
        destination = guard.output(UPDATE_ROLE, path) if update else None  # never over an input: refused first
        checked = run_check(prepared)
        failed = checked.diff.drifted or (strict and checked.stale)
        updated = destination is not None and checked.stale
        if updated and destination is not None:  # (updated implies a destination)
            guard.write_text(destination, checked.text)
    exit_code = EXIT_OK if updated or not failed else EXIT_CHECK_FAILED
    comparison = check_comparison(checked, failed=failed and not updated, updated=updated)
    print_comparison(comparison, output_format, exit_code)
    return exit_code


def print_comparison(comparison: Comparison, output_format: str, exit_code: int) -> None:
    """A comparison in the format asked for, on the results stream (``lock --check`` and ``diff``)."""
    from ampconfig.report.lock import comparison_payload, render_github, render_html, render_markdown, render_text

    if output_format == "json":
        print_json(comparison_payload(comparison, exit_code))
        return
    render = {"github": render_github, "markdown": render_markdown, "html": render_html}.get(output_format, render_text)
    say(render(comparison).rstrip("\n"), wrap=output_format == "text")
