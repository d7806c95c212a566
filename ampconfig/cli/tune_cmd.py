"""``ampconfig tune``: find the op types (mixlist) or nodes (keep_dtype) to keep in float32 for a tolerance."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from ampconfig.cli.app import command
from ampconfig.cli.options import (
    ConfigOpt,
    DataMaxOpt,
    InputFilesOpt,
    InputsOpt,
    JsonOpt,
    KeepDtypeOpt,
    MixlistOpt,
    ModelArg,
    ModeOpt,
    SeedOpt,
    ShapesOpt,
    TargetOpt,
    ThresholdOpt,
    ToleranceOpt,
    count_between,
)
from ampconfig.cli.output import print_json, stdout
from ampconfig.diagnose.locate import DEFAULT_THRESHOLD
from ampconfig.diagnose.tune.search import DEFAULT_MAX_RUNS
from ampconfig.errors import EXIT_CHECK_FAILED, EXIT_OK
from ampconfig.settings.values import MAX_TUNE_RUNS

if TYPE_CHECKING:
    from ampconfig.diagnose.tune.workflow import TuneReport

_HELP = """Find a small set of op types (written as black-list.to-add in a mixlist, -o) or nodes (a keep_dtype file,
--keep-dtype-out) to keep in float32 so the rewritten model meets --tolerance (relative L2 per output).

Range analysis of one fp32 calibration run seeds the search with the nodes whose values leave the low type's
range; then each run pins the first bad node of the compare ranking (and every lowered node that overflowed)
until the tolerance holds, and unnecessary pins are pruned. Node pins become op-type entries where that changes
no node's dtype. The files are written atomically, checked by validate, and verified by one more run that
rewrites from them. Every model run is counted and printed. --strategy bisect runs the plain bisection over nodes
instead (the baseline).

Only the mixed modes accept a mixlist: for other modes pass --keep-dtype-out (-o is refused). Without
--keep-dtype-out a mixed mode writes op types only. --modify-mixlist/--keep-dtype are the starting point and are
merged into the written files.

-o and --keep-dtype-out may not be the same file, nor any input of the call (model, its external data, config,
mixlist, keep_dtype file, .npz/.npy inputs): refused with exit 2 before any run. When tune fails after writing
one of them (exit 2), the file written is removed again (or gets its previous content back).

Exit codes: 0 found and verified; 1 not found (the tolerance is missed even with every node the mode lowered
kept in its original dtype, or --max-runs spent; nothing is written); 2 usage or input error.

[bold]Examples[/bold]

  ampconfig tune model.onnx -m allow_mix_precision --tolerance 1e-2 -o mixlist.json

  ampconfig tune model.onnx -m allow_mix_precision --inputs calib.npz -o mixlist.json --keep-dtype-out keep.cfg

  ampconfig tune model.onnx -m force_fp16 --tolerance 5e-3 --keep-dtype-out keep_dtype.cfg
"""


@command("tune", help=_HELP)
def tune(
    model: ModelArg = None,
    config: ConfigOpt = None,
    precision_mode: ModeOpt = None,
    modify_mixlist: MixlistOpt = None,
    keep_dtype: KeepDtypeOpt = None,
    target: TargetOpt = None,
    inputs_npz: InputsOpt = None,
    input_files: InputFilesOpt = None,
    shapes: ShapesOpt = None,
    seed: SeedOpt = None,
    tolerance: ToleranceOpt = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the mixlist JSON here.")] = None,
    keep_dtype_out: Annotated[
        Path | None, typer.Option("--keep-dtype-out", help="Write the keep_dtype file here.")
    ] = None,
    range_check: Annotated[
        bool,
        typer.Option("--range-check/--no-range-check", help="Seed the search with range analysis."),
    ] = True,
    data_max: DataMaxOpt = None,
    strategy: Annotated[
        str, typer.Option("--strategy", metavar="ranked|bisect", help="Search: compare ranking, or bisection.")
    ] = "ranked",
    max_runs: Annotated[
        int,
        typer.Option(
            "--max-runs", help="Most model runs the search may use.", callback=count_between(2, MAX_TUNE_RUNS)
        ),
    ] = DEFAULT_MAX_RUNS,
    threshold: ThresholdOpt = DEFAULT_THRESHOLD,
    json_output: JsonOpt = False,
) -> None:
    from ampconfig.diagnose.calibrate import prepare
    from ampconfig.diagnose.tune.workflow import check_outputs
    from ampconfig.diagnose.tune.workflow import tune as run_tune
    from ampconfig.files.guard import OutputGuard
    from ampconfig.prove.request_files import declare_inputs
    from ampconfig.prove.run import RunFlags, resolve_request

    flags = RunFlags(
        model=model,
        config=config,
        precision_mode=precision_mode,
        modify_mixlist=modify_mixlist,
        keep_dtype=keep_dtype,
        target=target,
        inputs_npz=inputs_npz,
        input_files=list(input_files or []),
        shapes=list(shapes or []),
        seed=seed,
        tolerance=tolerance,
    )
    request = resolve_request(flags)
    with OutputGuard() as guard:
        declare_inputs(guard, request, flags)
        prepared = prepare(request, need_inputs=False, guard=guard)
        check_outputs(prepared, output, keep_dtype_out, guard)  # before any input is generated or model run
        prepared = prepare(request, command="tune")
        report: TuneReport = run_tune(
            prepared,
            mixlist_out=output,
            keep_out=keep_dtype_out,
            strategy=strategy,
            range_check=range_check,
            data_max=data_max,
            threshold=threshold,
            max_runs=max_runs,
            guard=guard,
        )
    if json_output:
        print_json({"model": str(request.model_path), "tolerance": request.tolerance.to_dict(), **report.to_dict()})
    else:
        _render(report, request.tolerance.rel_l2)
    raise typer.Exit(EXIT_OK if report.succeeded else EXIT_CHECK_FAILED)


def _render(report: TuneReport, tolerance: float) -> None:
    table = Table(title=f"search ({report.strategy})", title_justify="left")
    for header in ("step", "tried", "passed", "worst rel L2", "run"):
        table.add_column(header, overflow="fold")
    for index, step in enumerate(report.search.steps, start=1):
        worst = step.worst_rel_l2
        table.add_row(
            str(index),
            step.what,
            "yes" if step.passed else "no",
            f"{worst:.3g}" if math.isfinite(worst) else str(worst),
            f"#{step.runs_so_far}" if step.ran else "cached",
        )
    stdout.print(table)
    if report.range is not None:
        kept = report.range.overflow_nodes
        stdout.print(f"range analysis: {len(kept)} node(s) out of range: " + (", ".join(kept) or "none"))
    candidate = report.candidate
    stdout.print("black-list.to-add: " + (", ".join(sorted(candidate.black_ops)) or "-"))
    stdout.print("keep_dtype nodes: " + (", ".join(sorted(candidate.pins)) or "-"))
    if candidate.keep_ops:
        stdout.print("keep_dtype op types: " + ", ".join(sorted(candidate.keep_ops)))
    for path in (report.mixlist_path, report.keep_dtype_path):
        if path:
            stdout.print(f"wrote {path}")
    for note in report.notes:
        stdout.print(Text("note: " + note, style="dim"))
    for error in report.validation_errors:
        stdout.print(Text("validate: " + error, style="red"))
    stdout.print(f"model runs: {report.runs}")
    if report.succeeded:
        stdout.print(
            Text.assemble(
                ("FOUND", "bold green"),
                f"  verified from the written files: worst rel L2 {report.verified_rel_l2:.3g} <= {tolerance:g}; "
                f"{report.low_nodes_after} of the mode's {report.low_nodes_before} low-precision nodes kept low",
            )
        )
    elif report.found:
        stdout.print(Text.assemble(("FAIL", "bold red"), "  the written files did not verify"))
    else:
        stdout.print(Text.assemble(("NOT FOUND", "bold red"), f"  {report.search.reason}; nothing written"))
