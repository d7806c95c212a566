"""``ampconfig ranges``: work with value ranges files. ``merge`` joins the shard files of one split of a data set
(``calibrate --shard K/N``, each on its own machine: a CI matrix job, a Ray task) exactly into one file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ampconfig.cli import options as shared
from ampconfig.cli.output import output_guard, print_result, stdout
from ampconfig.cli.typer_app import SubcommandGroup, app, register_command

ranges_app = typer.Typer(
    help=(
        "Work with value ranges files (ampconfig calibrate).\n\n"
        "Examples:\n\n"
        "  ampconfig ranges merge ranges-1.json ranges-2.json ranges-3.json -o ranges.json"
    ),
    no_args_is_help=True,
    cls=SubcommandGroup,
)
app.add_typer(ranges_app, name="ranges")


def merge(
    shards: Annotated[
        list[Path], typer.Argument(metavar="SHARD.json...", help="The shard files, one per shard of the split.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", metavar="RANGES.json", help="Where to write the merged file: atomically.")
    ],
    json_output: shared.JsonOutput = False,
) -> None:
    """Join the shard files of one split of a data set into one value ranges file, exactly: per value the lowest
    minimum and the highest maximum, its zeros, non-finite counts and exponent histogram added, so the merged file
    equals one `ampconfig calibrate --calibration-data DIR` over all the data (rewrite --ranges writes the same
    bytes from either); the data digest becomes the digest of the shards' digests.

    Each shard comes from `ampconfig calibrate MODEL --calibration-data DIR --shard K/N -o ranges-K.json` (the
    data files in sorted order, file i in shard i mod N + 1), on any machine. Refused (exit 2, the file named):
    a file that is not a shard, shards of another model (structure or weights), ampconfig, device or split, a
    shard given twice or missing, more or fewer files than the split's shards, two files of one data digest (a
    shard's file relabelled as another), a shard whose number contradicts its recorded data source.

    Example:

      ampconfig ranges merge ranges-1.json ranges-2.json ranges-3.json ranges-4.json -o ranges.json
    """
    from ampconfig.prove.calibration import write_merged

    with output_guard() as guard:
        for path in shards:
            guard.read("value ranges shard", path)
        destination = guard.output("value ranges (--output)", output)
        merged, written = write_merged(guard, destination, shards, output)
    summary: dict[str, Any] = {
        "output": str(written),
        "shards": len(shards),
        "samples": merged.data.samples,
        "values": len(merged.values),
        "data_sha256": merged.data.sha256,
    }
    if json_output:
        print_result(summary)
        return
    stdout.print(
        f"wrote {written}: {summary['values']} float values over {summary['samples']} samples, merged from "
        f"{summary['shards']} shards",
        markup=False,
    )


register_command(ranges_app, "merge", merge)
