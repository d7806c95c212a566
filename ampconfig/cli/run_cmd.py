"""``ampconfig run``: rewrite a model, run it and its fp32 original in ONNX Runtime, compare, time, judge."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ampconfig.cli.app import command
from ampconfig.cli.output import print_json, stderr, stdout
from ampconfig.errors import EXIT_CHECK_FAILED, EXIT_OK
from ampconfig.report import render_run, run_payload
from ampconfig.runner.timing import ProgressCallback

_HELP = """Rewrite MODEL for a precision mode, run it and the fp32 original on the same inputs in ONNX
Runtime, and report accuracy (relative L2, max abs, cosine, non-finite values, arg-max agreement) and latency.

Flags override the session config (--config); the config alone is enough. With no MODEL and no model in the
config, the bundled example (a small transformer block) runs. Without --precision-mode or a mode in the config
the mode is [bold]allow_mix_precision[/bold].

Inputs come from --inputs FILE.npz or --input NAME=FILE.npy, else they are generated (seeded): floats
standard normal, token ids within the embedding table; dynamic dimensions come from --shape, else the first
dimension is 1 and the others 16.

The device is CUDA when it really loads (reported from the session), else the CPU; --target cuda fails instead
of falling back.

Exit codes: 0 tolerance met, 1 tolerance not met, 2 usage or input error.

[bold]Examples[/bold]

  ampconfig run                                       [dim]# the bundled example, allow_mix_precision[/dim]

  ampconfig run model.onnx --precision-mode force_fp16 --shape input_ids=1x128

  ampconfig run model.onnx --inputs batch.npz --tolerance 5e-3 --output model.fp16.onnx

  ampconfig run --config session.yaml --target cuda --json
"""


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[ProgressCallback | None]:
    """A rich progress bar on stderr; yields the callback for the runner (None when disabled)."""
    if not enabled:
        yield None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )
    tasks: dict[str, int] = {}

    def update(label: str, done: int, total: int) -> None:
        if label not in tasks:
            tasks[label] = bar.add_task(f"timing {label}", total=total)
        bar.update(tasks[label], completed=done, total=total)

    with bar:
        yield update


@command("run", help=_HELP)
def run(
    model: Annotated[
        Path | None,
        typer.Argument(help="ONNX model (default: the config's model, else the bundled example)."),
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Session config (YAML/JSON/TOML).")] = None,
    precision_mode: Annotated[
        str | None,
        typer.Option(
            "--precision-mode",
            "-m",
            metavar="MODE",
            help="Precision mode (v1 or v2 name).",
            show_default="allow_mix_precision",
        ),
    ] = None,
    modify_mixlist: Annotated[
        Path | None, typer.Option("--modify-mixlist", help="modify_mixlist JSON (mixed modes only).")
    ] = None,
    keep_dtype: Annotated[
        Path | None, typer.Option("--keep-dtype", help="keep_dtype file: node names kept in their dtype.")
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            metavar="cpu|cuda",
            help="Execution target.",
            show_default="cuda if it loads, else cpu",
        ),
    ] = None,
    input_files: Annotated[
        list[str] | None,
        typer.Option("--input", metavar="NAME=FILE.npy", help="One input from a .npy file; repeat for more."),
    ] = None,
    inputs_npz: Annotated[Path | None, typer.Option("--inputs", help=".npz with one array per model input.")] = None,
    shapes: Annotated[
        list[str] | None,
        typer.Option("--shape", metavar="NAME=1x128", help="Shape of a generated input; repeat for more."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the rewritten model here (atomically).")
    ] = None,
    warmup: Annotated[int | None, typer.Option("--warmup", help="Untimed runs per model.", show_default="3")] = None,
    iterations: Annotated[
        int | None, typer.Option("--iterations", help="Timed runs per model.", show_default="20")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for generated inputs.", show_default="0")] = None,
    tolerance: Annotated[
        float | None,
        typer.Option("--tolerance", help="Largest relative L2 error per output.", show_default="0.01"),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    from ampconfig.runner.pipeline import RunFlags, execute, resolve_request  # ONNX Runtime: only when running

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
        output=output,
        warmup=warmup,
        iterations=iterations,
        seed=seed,
        tolerance=tolerance,
    )
    request = resolve_request(flags)
    if request.example is not None:
        stderr.print(f"no model given: running the bundled example {request.example!r}", markup=False)
    with _progress_bar(stderr.is_terminal and not json_output) as progress:
        report = execute(request, progress)
    if json_output:
        print_json(run_payload(report))
    else:
        render_run(report, stdout)
    raise typer.Exit(EXIT_OK if report.passed else EXIT_CHECK_FAILED)
