"""``ampconfig diff``: what a change of settings does to a model's decisions, before it is committed."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ampconfig.cli.lock_cmd import print_comparison
from ampconfig.cli.options import SharedOptions
from ampconfig.cli.typer_app import command
from ampconfig.errors import EXIT_CHECK_FAILED, EXIT_OK, AmpconfigError

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads none of the lock machinery
    from ampconfig.lock.diff import SidesDiff

DIFF_FORMATS = ("text", "markdown", "json", "html")
SIDES = ("base", "new")

_HELP = """Compare two sets of settings on one MODEL, without a lock: the nodes whose dtype or rule differs (base
-> new, each with its cause: the mixlist, keep_dtype or customize_dtypes line, the config key), the nodes added or
removed, and the casts and estimated time of both. This is the command to run before committing a mixlist edit.

The new side is MODEL with the usual settings (flags over --config over defaults); the base side is the same with
--base-config, --base-mixlist, --base-keep-dtype, --base-customize-dtypes or --base-precision-mode in place of
--config, --modify-mixlist, --keep-dtype, --customize-dtypes or --precision-mode. Or compare two lock files:
--base-lock A --lock B (no MODEL).

--run also runs both rewrites against the float32 model on the same inputs (--inputs/--input/--shape/--seed, as
for run; --device as for run) and adds each output's error on both sides. --format markdown/json/html prints the
comparison for a pull request, a script or a browser. Exit 0 (with --exit-code: 1 when a decision differs).

[bold]Examples[/bold]

  ampconfig diff model.onnx --base-mixlist old-mixlist.json --modify-mixlist mixlist.json

  git show HEAD:mixlist.json > base.json

  ampconfig diff model.onnx --base-mixlist base.json --modify-mixlist mixlist.json --run

  ampconfig diff model.onnx --base-config session.yaml --config session.new.yaml --format markdown

  ampconfig diff --base-lock main.lock.json --lock precision.lock.json
"""


@command("diff", help=_HELP)
def diff(
    options: SharedOptions,
    *,
    base_config: Annotated[Path | None, typer.Option("--base-config", help="The base side's session config.")] = None,
    base_mixlist: Annotated[Path | None, typer.Option("--base-mixlist", help="The base side's mixlist.")] = None,
    base_keep_dtype: Annotated[
        Path | None, typer.Option("--base-keep-dtype", help="The base side's keep_dtype file.")
    ] = None,
    base_customize_dtypes: Annotated[
        Path | None, typer.Option("--base-customize-dtypes", help="The base side's customize_dtypes file.")
    ] = None,
    base_precision_mode: Annotated[
        str | None, typer.Option("--base-precision-mode", metavar="MODE", help="The base side's precision mode.")
    ] = None,
    base_lock: Annotated[Path | None, typer.Option("--base-lock", help="A lock file as the base side.")] = None,
    lock: Annotated[Path | None, typer.Option("--lock", help="A lock file as the new side (with --base-lock).")] = None,
    run: Annotated[bool, typer.Option("--run", help="Also run both sides and add each output's error.")] = False,
    output_format: Annotated[str, typer.Option("--format", help=", ".join(DIFF_FORMATS) + ".")] = "text",
    exit_code: Annotated[bool, typer.Option("--exit-code", help="Exit 1 when a decision differs.")] = False,
) -> None:
    output_format = "json" if options.json_output else output_format
    if output_format not in DIFF_FORMATS:
        raise AmpconfigError(f"unknown --format {output_format!r}", hint="formats: " + ", ".join(DIFF_FORMATS))
    base_options: dict[str, Path | str | None] = {
        "config": base_config,
        "modify_mixlist": base_mixlist,
        "keep_dtype": base_keep_dtype,
        "customize_dtypes": base_customize_dtypes,
        "precision_mode": base_precision_mode,
    }
    base = {name: value for name, value in base_options.items() if value is not None}
    sides, subject = _sides(options, base, base_lock, lock, run)
    from ampconfig.lock.diff import run_both
    from ampconfig.report.lock import DIFF_TITLE, LOCKS_TITLE, Comparison

    runs = run_both(sides.base, sides.new, SIDES) if run and sides.base and sides.new else None
    title = LOCKS_TITLE if base_lock is not None else DIFF_TITLE  # settings compared on a model: no lock involved
    comparison = Comparison(sides.diff, subject, *SIDES, runs=runs, title=title, notes=sides.warnings)
    code = EXIT_CHECK_FAILED if exit_code and sides.diff.decisions_changed else EXIT_OK
    print_comparison(comparison, output_format, code)
    raise typer.Exit(code)


def _sides(
    options: SharedOptions, base_given: Mapping[str, Path | str], base_lock: Path | None, lock: Path | None, run: bool
) -> tuple[SidesDiff, str]:
    """The two sides compared, and what to call the comparison."""
    from ampconfig.lock.diff import diff_lock_files, diff_settings

    if (base_lock is None) != (lock is None):
        raise AmpconfigError("--base-lock and --lock go together", hint="ampconfig diff --base-lock A --lock B")
    if base_lock is not None and lock is not None:
        if base_given or options.flags.model is not None or run:
            raise AmpconfigError(
                "two lock files are compared as they are: no MODEL, --base-* or --run with them",
                hint="compare settings on a model instead: ampconfig diff MODEL --base-mixlist A --modify-mixlist B",
            )
        return diff_lock_files(base_lock, lock), f"{base_lock} -> {lock}"
    if not base_given:
        raise AmpconfigError(
            "nothing to compare: no base side given",
            hint="give --base-config, --base-mixlist, --base-keep-dtype, --base-customize-dtypes or "
            "--base-precision-mode (or --base-lock and --lock)",
        )
    from ampconfig.model_io.models import open_model
    from ampconfig.prove.calibration import decision_values, prepared_samples, with_margin

    new = options.settings()
    base = options.settings(replaced=base_given)
    # One measurement for both sides (the same model and data), each with its own margin.
    values = decision_values(new, open_model(new.model_path).proto, lambda: prepared_samples(new, command="diff"))
    ranges = (with_margin(values.ranges, base), values.ranges)
    return diff_settings(base, new, value_ranges=ranges), str(new.model_path)
