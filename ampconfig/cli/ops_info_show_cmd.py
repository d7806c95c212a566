"""``ampconfig ops-info apply-strategy`` (colour an op info file anew from the built-in tables) and ``show`` (print
entries of the built-in library)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ampconfig.cli.ops_info_cmd import (
    TargetOpt,
    check_target,
    default_output,
    read_ops_info,
    subcommand,
    write_ops_info,
)
from ampconfig.cli.output import output_guard, print_result, print_warning, stderr, stdout
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.targets import DEFAULT_TARGET
from ampconfig.report.tables import print_table

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads neither pydantic nor the op info library
    from ampconfig.opinfo.library import OpInfo


@subcommand("apply-strategy")
def apply_strategy_command(
    target: TargetOpt = DEFAULT_TARGET,
    file: Annotated[
        Path | None,
        typer.Option("--file", "-f", help="Op info file to update. Default: the packaged <target>.json."),
    ] = None,
) -> None:
    """Colour an op info file anew from the built-in tables, without measuring anything.

    A packaged colour is derived: the reference lists' colour (ampconfig/opinfo/colours.py), gray on this target
    where an op's only danger is accumulation and the target's low-precision kernels sum in float32
    (ampconfig/opinfo/numerics.py, cited in `accumulation_source`). Colours, references, keeps_dtype and the
    accumulation facts come from those tables; kernel claims (dtypes, native_dtypes, dtype_source, per-opset data,
    notes) are kept. Strategy ops the file lacks are added as 'not-probed'. Run it after changing either table
    (the test suite fails while the packaged files and the tables disagree), or when the strategy changed and the
    target cannot be re-measured here (cuda without a GPU).

    Example:

      ampconfig ops-info apply-strategy --target cuda
    """
    from ampconfig.opinfo.build import strategy_applied

    target = check_target(target)
    path = file or default_output(target)
    if not path.is_file():
        raise AmpconfigError("op info file not found", file=str(path))
    with output_guard() as guard:
        destination = guard.output("op info file (--file)", path)
        existing = read_ops_info(path)
        if existing.target != target:
            raise AmpconfigError(f"the file is for target {existing.target!r}, not {target!r}", file=str(path))
        document = strategy_applied(existing)
        write_ops_info(document, destination, guard)
    gray = sorted(key for key, entry in document.ops.items() if entry.colour_note)
    stderr.print(
        f"wrote {path}: {len(document.ops)} ops, strategy re-applied, kernel claims kept; gray by kernel "
        f"numerics: {', '.join(gray) or 'none'}",
        markup=False,
    )


@subcommand("show")
def show_command(
    op: Annotated[list[str] | None, typer.Argument(help="Op keys to show (default: all).")] = None,
    target: TargetOpt = DEFAULT_TARGET,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
) -> None:
    """Print op info entries of the built-in library: colour, the dtypes the target runs the op in (natively, or
    emulated through casts ONNX Runtime inserts), where they come from.

    Examples:

      ampconfig ops-info show --target cpu

      ampconfig ops-info show MatMul com.microsoft::FusedMatMul --target cuda --json
    """
    from rich.table import Table

    from ampconfig.opinfo.build import native_and_emulated
    from ampconfig.opinfo.library import load_ops_info

    library = load_ops_info(check_target(target))
    keys = op or sorted(library.entries)
    missing = [key for key in keys if not library.knows(key)]
    for key in missing:
        print_warning(f"{key} is not in the {target} op info (it is painted gray)")
    shown = {key: library.entries[key] for key in keys if library.knows(key)}
    if as_json:
        ops = {key: _json_entry(entry, native_and_emulated(entry)[1]) for key, entry in shown.items()}
        facts = {"provider": library.provider, "onnxruntime_version": library.onnxruntime_version}
        print_result({"target": library.target, **facts, "ops": ops, "unknown": missing})
        return
    table = Table(title=f"{library.target} op info ({library.provider}, onnxruntime {library.onnxruntime_version})")
    for column in ("op", "colour", "dtypes", "native", "emulated", "source", "reference"):
        table.add_column(column, overflow="fold")
    for key, entry in shown.items():
        native, emulated = (_joined(part) for part in native_and_emulated(entry))
        table.add_row(
            key, entry.colour.value, _joined(entry.dtypes), native, emulated, entry.dtype_source, entry.reference
        )
    print_table(stdout, table)


def _joined(dtypes: Sequence[str] | None) -> str:
    return "?" if dtypes is None else ", ".join(dtypes) or "-"


def _json_entry(entry: OpInfo, emulated: list[str] | None) -> dict[str, Any]:
    shown: dict[str, Any] = {"colour": entry.colour.value, **entry.as_json(exclude_none=True)}
    if emulated is not None:
        shown["emulated_dtypes"] = emulated
    return shown
