"""``ampconfig run``: rewrite a model, run it and its fp32 original in ONNX Runtime, compare, time, judge."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ampconfig.cli.options import SharedOptions, output_option
from ampconfig.cli.output import print_result, stderr, stdout
from ampconfig.cli.typer_app import command
from ampconfig.cli.workbench import workbench
from ampconfig.errors import EXIT_CHECK_FAILED, EXIT_OK, AmpconfigError

if TYPE_CHECKING:
    from ampconfig.diagnose.tune.forecast import FailedRunForecast, FixForecast
    from ampconfig.files.guard import Destination, OutputGuard
    from ampconfig.prove.outcome import RunReport
    from ampconfig.prove.request import Prepared
    from ampconfig.settings.resolve import Settings

_HELP = """Rewrite MODEL for a precision mode, run it and the fp32 original on the same inputs in ONNX
Runtime, and report accuracy (relative L2, max abs, cosine, non-finite values, arg-max agreement) and latency.

Flags override the session config (--config); the config alone is enough. With no MODEL and no model in the
config, the bundled example (a small transformer block) runs. Without --precision-mode or a mode in the config
the mode is [bold]allow_mix_precision[/bold].

Inputs come from --inputs FILE.npz or --input NAME=FILE.npy, else they are generated (seeded): floats
standard normal (bfloat16 too), token ids within the embedding table, strings from the keys of the LabelEncoder
or CategoryMapper that reads them; dynamic dimensions come from --shape (0 is an empty dimension), else the first
dimension is 1 and the others 16. Strings are NumPy text arrays (array.astype(str)), or for a rank-1 input a
text file of one string a line (--input NAME=FILE.txt). Values a file holds in another type (float64 for a
float32 input, float32 for a bfloat16 one) are converted, with a warning when that changes any; an integer the
input's type cannot hold is an error. --data
DIR|FILE runs a data set instead (a folder of .npz files, one sample each; one .npz with a leading sample axis; or
a Polygraphy JSON list of feeds): every sample is judged, the run passes when every sample meets the tolerance,
and each output reports its worst, p95 and median error and its worst sample.

The values decide too: the fp32 model runs once on the calibration samples first (--calibration-data, else the
first 8 samples of --data, else the inputs) and every node whose values pass the margin (--data-max, default half
the low type's largest value) stays float32 (rule range_exceeds; --no-range-check skips the run). A node reading
a constant beyond the low type's range stays float32 (rule value_out_of_range) unless --clamp-values, and every
clamp is a warning. ampconfig explain names each value.

--target (default cuda) says whose op info decides the dtypes; --device says where the models run: auto (the
default) is CUDA when a session really gets it (reported from the session), else the CPU, said in the output;
--device cuda fails instead of falling back. On the CPU, accuracy is measured on a copy that rounds every float16
value as float16 hardware stores it.

A model with external data (any model over 2 GB) runs from files: the rewritten model is kept in a temporary
folder, removed afterwards, and --output gets its weights in OUTPUT.data next to it.

No input is ever overwritten: an --output that is the same file as the model, its external data, the config,
the mixlist, the keep_dtype file or an --input/--inputs array file (however spelled) is refused with exit 2
before anything runs. -o - writes the model to standard output, the report then going to stderr; a FIFO or
character device such as /dev/null gets the model as a stream.

Exit codes: 0 tolerance met, 1 tolerance not met (or an output's shape changed: a detector's box count), 2
usage or input error.

[bold]Examples[/bold]

  ampconfig run                                       [dim]# the bundled example, allow_mix_precision[/dim]

  ampconfig run model.onnx --precision-mode force_fp16 --shape input_ids=1x128

  ampconfig run model.onnx --inputs batch.npz --tolerance 5e-3 --output model.fp16.onnx

  ampconfig run model.onnx --data samples/ --precision-mode force_fp16   [dim]# every .npz in samples/[/dim]

  ampconfig run --config session.yaml --device cuda --json

  ampconfig run model.onnx --target cpu --device cpu        [dim]# decide and run for the CPU[/dim]

  ampconfig run model.onnx --modify-mixlist mixlist.json --lock-out precision.lock.json
"""


def write_ranges(guard: OutputGuard, destination: Destination, report: RunReport, path: Path) -> str:
    """Write what the run measured as a ranges file (one it could not measure, a model too large for the
    calibration run, is exit 2)."""
    from ampconfig.prove.calibration import write_ranges_file

    calibration = report.calibration
    if calibration is None:
        raise AmpconfigError(
            "--ranges-out: the model's activations could not be measured (see the notes), so no ranges were written",
            file=report.model,
        )
    _, written = write_ranges_file(guard, destination, calibration, Path(report.model), path)
    return str(written)


@command("run", help=_HELP)
def run(
    options: SharedOptions,
    *,
    lock_out: Annotated[
        Path | None,
        output_option(
            "--lock-out",
            metavar="FILE",
            help="Also write a precision lock with the proof (tolerance, device, data, each output's error): "
            "see ampconfig lock.",
        ),
    ] = None,
    ranges_out: Annotated[
        Path | None,
        output_option(
            "--ranges-out",
            metavar="RANGES.json",
            help="Also write the value ranges the float32 model's calibration run measured (as ampconfig calibrate "
            "does): --ranges FILE then gives every other command the same decisions without running the model.",
        ),
    ] = None,
) -> None:
    from ampconfig.prove.run import execute  # ONNX Runtime: only when running
    from ampconfig.settings.declared_files import settings_role

    with workbench(options) as bench:
        settings, guard = bench.settings, bench.guard
        if settings.example is not None:
            stderr.print(f"no model given: running the bundled example {settings.example!r}", markup=False)
        output_role = settings_role(settings, "output model", "--output", "output")
        lock_file = guard.output("precision lock (--lock-out)", lock_out) if lock_out is not None else None
        ranges_file = guard.output("value ranges (--ranges-out)", ranges_out) if ranges_out is not None else None
        if ranges_out is not None and (settings.ranges is not None or not options.range_check):
            why = "--ranges gives them" if settings.ranges is not None else "--no-range-check skips the run"
            raise AmpconfigError(
                f"--ranges-out: no value ranges are measured ({why})",
                hint="drop --ranges-out, or let run measure the ranges (without --ranges and --no-range-check)",
            )
        forecast = _Forecast(settings, options.range_check)  # after a FAIL: where the error is, the fix
        report = execute(
            settings,
            bench.progress,
            guard,
            output_role,
            range_check=options.range_check,
            load_check=options.load_check,
            on_fail=forecast,
        )
        lacks = report.rewrite.metadata_note if report.rewrite is not None else None
        if report.output_path is not None and lacks:
            report.notes.append(lacks)  # what the model written lacks, and why
        if ranges_file is not None and ranges_out is not None:
            report.notes.append(f"wrote the value ranges {write_ranges(guard, ranges_file, report, ranges_out)}")
        if lock_file is not None and lock_out is not None:
            from ampconfig.documents.lock_file import lock_text  # the lock's format: only with --lock-out
            from ampconfig.lock.record import lock_of_run

            written = guard.write_text(lock_file, lock_text(lock_of_run(settings, report, lock_out)))
            report.notes.append(f"wrote the precision lock {written}")
    exit_code = EXIT_OK if report.passed else EXIT_CHECK_FAILED
    from ampconfig.report.run_report import render_run, run_payload  # the report's: only once there is one

    if options.json_output:
        print_result(run_payload(report, forecast.fix()), exit_code)
    else:
        render_run(report, stdout, forecast.fix())
    raise typer.Exit(exit_code)


class _Forecast:
    """``run``'s hook after a FAIL (:class:`~ampconfig.diagnose.tune.forecast.FailedRunForecast`), whose modules
    (tune's, diagnose/) are imported after a FAIL only: a run that passes never loads them."""

    def __init__(self, settings: Settings, range_check: bool) -> None:
        self.settings, self.range_check = settings, range_check
        self.failed: FailedRunForecast | None = None

    def __call__(self, prepared: Prepared, report: RunReport) -> None:
        from ampconfig.diagnose.tune.forecast import FailedRunForecast

        self.failed = FailedRunForecast(self.settings, self.range_check)
        self.failed(prepared, report)

    def fix(self) -> FixForecast | None:
        return self.failed.fix if self.failed is not None else None
