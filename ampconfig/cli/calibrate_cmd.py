"""``ampconfig calibrate``: run the float32 model on data and write every float value's range to a file that every
deciding command reads with ``--ranges`` (the TensorRT calibration cache's place in ampconfig)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ampconfig.cli.options import SharedOptions, output_option
from ampconfig.cli.output import print_result, stderr, stdout
from ampconfig.cli.typer_app import command
from ampconfig.cli.workbench import workbench

_HELP = """Run the float32 MODEL on data and write every float value's range (min, max, largest magnitude,
non-finite and zero counts, binary-exponent histogram) to RANGES.json, with the model's structure hash, its
weights digest and the data's digest. Make it once; then
[bold]--ranges RANGES.json[/bold] (or the config's `ranges:`) gives rewrite, lock, diff, explain, run, compare and
tune the same decisions without running the model again: a node whose values pass the margin (--data-max, by
default half the low type's largest value) keeps float32 (rule range_exceeds). Commit it beside the config and
the lock: a lock records its digest, and lock --check names it when it changes.

The data: --data or --calibration-data (a folder of .npz files, one .npz with a leading sample axis, or a
Polygraphy JSON list of feeds; the first 8 samples of --data calibrate, all of --calibration-data), else
--inputs/--input, else inputs generated from --shape and --seed, as for run. Generated inputs are no substitute
for real ones: a model's values on noise say little about its values on data.

On many machines: --shard K/N measures shard K of N of the data set (--calibration-data, else all of --data: the
data files in sorted order, file i in shard i mod N + 1), and [bold]ampconfig ranges merge[/bold] joins the N
files into one that equals a calibration over all the data (a CI matrix job or a Ray task per shard).

[bold]Examples[/bold]

  ampconfig calibrate model.onnx --data samples/ -o ranges.json

  ampconfig rewrite model.onnx --ranges ranges.json -o model.mixed.onnx

  ampconfig lock model.onnx --ranges ranges.json -o model.lock.json

  ampconfig calibrate model.onnx --calibration-data samples/ --shard 2/4 -o ranges-2.json
"""


@command("calibrate", help=_HELP)
def calibrate(
    options: SharedOptions,
    *,
    ranges_path: Annotated[
        Path,
        output_option("--output", "-o", metavar="RANGES.json", help="Where to write the ranges: atomically."),
    ],
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            metavar="K/N",
            help="Measure only shard K of N of the data set (1-based; the data files in sorted order, file i in "
            "shard i mod N + 1), every sample of it; join the N files with ampconfig ranges merge.",
        ),
    ] = None,
) -> None:
    from ampconfig.prove.calibration import measured, parse_shard, write_ranges_file
    from ampconfig.prove.request import prepare

    part = parse_shard(shard) if shard is not None else None
    with workbench(options) as bench:
        settings = bench.settings
        destination = bench.guard.output("value ranges (--output)", ranges_path)
        prepared = prepare(settings, command="calibrate", guard=bench.guard, progress=bench.progress, shard=part)
        calibration = measured(prepared, bench.progress)
        ranges, written = write_ranges_file(bench.guard, destination, calibration, settings.model_path, ranges_path)
    nonfinite = sorted(key for key, value in ranges.values.items() if value.nonfinite)
    largest = sorted(((key, value.max_abs) for key, value in ranges.values.items()), key=lambda item: -item[1])[:3]
    warnings = list(prepared.inputs.warnings)
    summary: dict[str, Any] = {
        "model": str(settings.model_path),
        "output": str(written),
        "data": calibration.source,
        "samples": calibration.samples,
        "values": len(ranges.values),
        "nonfinite_values": nonfinite,
        "largest": largest,
        "warnings": warnings,
    }
    if options.json_output:
        print_result(summary)
        return
    for warning in warnings:
        stderr.print("warning: " + warning, markup=False)
    stdout.print(
        f"wrote {written}: {summary['values']} float values of {settings.model_path} on {calibration.source}",
        markup=False,
    )
    for key, value in largest:
        stdout.print(f"  largest |x|: {key} = {value:.6g}", markup=False)
    if nonfinite:
        stdout.print(f"  {len(nonfinite)} value(s) held inf or NaN", markup=False)
