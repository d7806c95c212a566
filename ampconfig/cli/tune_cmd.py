"""``ampconfig tune``: the fewest float32 nodes (node pins, or op types) that meet a tolerance, in few runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ampconfig.cli.options import SharedOptions, count_between, output_option, positive_finite
from ampconfig.cli.output import print_result, stdout
from ampconfig.cli.progress import shown, tune_progress
from ampconfig.cli.typer_app import command
from ampconfig.cli.workbench import workbench
from ampconfig.documents.numeric_limits import MAX_TUNE_RUNS
from ampconfig.errors import EXIT_CHECK_FAILED, EXIT_OK

DEFAULT_MAX_RUNS = 20  # ampconfig.diagnose.tune.workflow.DEFAULT_MAX_RUNS (not imported: ONNX Runtime loads late)
DEFAULT_MIN_LOW_FRACTION = 0.5
MIN_RUNS = 4  # ampconfig.diagnose.tune.workflow.MIN_RUNS, likewise

_HELP = """Find the fewest nodes to keep in float32 (or the least estimated latency, --objective latency) so the
rewritten model meets --tolerance, judged exactly as [bold]ampconfig run[/bold] judges.

The answer is node pins, written as a keep_dtype file (--keep-dtype-out). With -o the op types go into a
mixlist's black-list.to-add where that keeps at most 2 more nodes float32 than their pins (the report says
which); -o alone writes op types only, which can keep many more nodes float32.

--op-names ascend writes the files with Ascend's op names (MatMul as MatMul, BatchMatMul, BatchMatMulV2,
MatMulV2, ...), so a list tuned here can be handed to ATC; --op-names tensorflow, TensorFlow's; without it ONNX's.
It also says how the request's own mixlist and keep_dtype name their ops (docs/op-names.md).

--target (default cuda) says whose op info decides; --device (default auto: CUDA when a session really gets
it, else the CPU) says where the trials run, and the report says where they ran.

How: one fp32 run and one low-precision run with every intermediate exposed, plus one replay run, rank every
node's contribution to the output error; range analysis adds the nodes whose values overflow the low type. The
ranking's predicted prefix is judged in batches, bisected and pruned. Every model run is counted (at most
--max-runs, default 20) and the files are verified by one more run from the written files before they are
written. A progress line on stderr shows the step, runs used, current error and low nodes kept (off with --json
or when stderr is not a terminal).

Exit codes: 0 found, verified and written; 1 no useful answer (it would keep less than --min-low-fraction of
the mode's low-precision nodes), or none within --max-runs/--max-seconds, and nothing is written; 2 usage or
input error, including a tolerance even every lowered node kept float32 misses, and --max-runs below 6.

-o and --keep-dtype-out may not be the same file, nor any input of the call (model, its external data, config,
mixlist, keep_dtype file, .npz/.npy inputs): refused with exit 2 before any run. When tune fails after writing
one of them (exit 2), the file written is removed again (or gets its previous content back).

[bold]Examples[/bold]

  ampconfig tune model.onnx -m force_fp16 --tolerance 5e-3 --keep-dtype-out keep_dtype.cfg

  ampconfig tune model.onnx -m allow_mix_precision --inputs calib.npz --keep-dtype-out keep.cfg -o mixlist.json

  ampconfig tune model.onnx -m force_fp16 --device cuda --max-seconds 120 --objective latency --keep-dtype-out k.cfg

  ampconfig tune model.onnx -m allow_mix_precision --op-names ascend -o ops_info_atc.json
"""


# No command-wide GC pause: each of tune's rewrites leaves a discarded onnx-ir graph (cyclic, holding its converted
# weights) that only the collector frees. Measured on a 68 MB BERT-like model (15 runs): paused, peak RSS 1072 MB
# instead of 935 MB, and no time gain that stood out of the noise (13-20 s either way).
@command("tune", help=_HELP, pause_gc=False)
def tune(
    options: SharedOptions,
    *,
    keep_dtype_out: Annotated[
        Path | None,
        output_option("--keep-dtype-out", help="Write the node pins (keep_dtype file) here."),
    ] = None,
    mixlist_out: Annotated[
        Path | None,
        output_option("--output", "-o", help="Write a mixlist (op types; mixed modes only) here."),
    ] = None,
    objective: Annotated[
        str, typer.Option("--objective", metavar="nodes|latency", help="Fewest float32 nodes, or least latency.")
    ] = "nodes",
    min_low_fraction: Annotated[
        float,
        typer.Option("--min-low-fraction", help="Refuse answers keeping less of the low nodes than this."),
    ] = DEFAULT_MIN_LOW_FRACTION,
    max_runs: Annotated[
        int,
        typer.Option(
            "--max-runs", help="Most model runs tune may use.", callback=count_between(MIN_RUNS, MAX_TUNE_RUNS)
        ),
    ] = DEFAULT_MAX_RUNS,
    max_seconds: Annotated[
        float | None,
        typer.Option(
            "--max-seconds",
            help="Wall-time budget. A run is not started when it would end past it (each kind of run timed apart: "
            "the runs that expose every intermediate cost most on a GPU); when the sensitivity runs cannot fit, tune "
            "stops right after the fp32 runs and says what --max-seconds would.",
            callback=positive_finite("300"),
        ),
    ] = None,
    calibration_batch: Annotated[
        int | None,
        typer.Option(
            "--calibration-batch",
            help="Rank the nodes from the first N samples of the inputs only (the runs that expose every "
            "intermediate, their cost grows with the batch); every trial and the verification still run on all "
            "samples. Needs a first dimension every input shares. Default: all samples.",
            callback=count_between(1, 1 << 20),
        ),
    ] = None,
) -> None:
    with tune_progress(shown(options.json_output)) as (progress, sample_progress):
        from ampconfig.diagnose.reference_runs import prepare
        from ampconfig.diagnose.tune.workflow import TuneSettings, check_settings, declare_outputs
        from ampconfig.diagnose.tune.workflow import tune as run_tune

        settings = TuneSettings(
            mixlist_out=mixlist_out,
            keep_out=keep_dtype_out,
            objective=objective,
            min_low_fraction=min_low_fraction,
            max_runs=max_runs,
            max_seconds=max_seconds,
            range_check=options.range_check,
            data_max=options.flags.data_max,
            calibration_batch=calibration_batch,
        )
        # `bench.settings` are the settings every command resolves; `settings` are tune's own.
        with workbench(options, progress=False) as bench:
            request, guard = bench.settings, bench.guard
            # Refused before any input is generated or model run: bad settings, outputs that clash with inputs.
            check_settings(prepare(request, need_inputs=False, guard=guard), settings)
            outputs = declare_outputs(settings, guard)
            prepared = prepare(request, command="tune", progress=sample_progress)
            report = run_tune(prepared, settings, progress, guard, outputs, sample_progress=sample_progress)
        ran_on = prepared.device
        # Said plainly, as run says it: where the trials ran, and that the decisions are the target's.
        report.notes[:0] = [
            f"decided for target {request.target}; the models ran on {ran_on.device} (--device {ran_on.requested})",
            *ran_on.notes,
            *prepared.inputs.warnings,
        ]
    exit_code = EXIT_OK if report.succeeded else EXIT_CHECK_FAILED
    if options.json_output:
        from ampconfig.report.tune import tune_payload

        print_result(tune_payload(report, str(request.model_path)), exit_code)
    else:
        from ampconfig.report.tune import render_tune

        render_tune(report, stdout, request.tolerance.rel_l2)
    raise typer.Exit(exit_code)
