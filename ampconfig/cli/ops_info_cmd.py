"""``ampconfig ops-info``: build and inspect the built-in op info library (``ampconfig/ops_info/<target>.json``).

``probe`` measures which float dtypes the target's ONNX Runtime provider runs each op in, and in which of them
natively (one-node probe models, see :mod:`ampconfig.opinfo.probe_models` and
:func:`ampconfig.runner.kernels.measure_op`), and merges them with the built-in colour strategy
(:mod:`ampconfig.opinfo.colours`). ``import-table`` does the same from ONNX Runtime's published kernel table, for
targets that cannot be measured here. ``show`` prints entries.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ampconfig.cli.app import app, reporting_errors
from ampconfig.cli.options import count_between
from ampconfig.cli.output import print_json, print_warning, stderr, stdout
from ampconfig.errors import AmpconfigError
from ampconfig.files.atomic import write_text_atomic
from ampconfig.opinfo.colours import STRATEGY, StrategyEntry
from ampconfig.opinfo.library import (
    FLOAT_DTYPES,
    TARGETS,
    Colour,
    OpInfoEntry,
    OpsInfoFile,
    PrecisionReduce,
    load_ops_info,
    ops_info_path,
    parse_ops_info,
)
from ampconfig.settings.documents import read_text

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}

ops_info_app = typer.Typer(
    help=(
        "Build and inspect the op info library: per op type its list colour (white/black/gray/clear) and the "
        "float dtypes the target has kernels for.\n\n"
        "Examples:\n\n"
        "  ampconfig ops-info show MatMul Softmax --target cpu\n\n"
        "  ampconfig ops-info probe --target cpu --ops Relu,MatMul --output /tmp/cpu.json\n\n"
        "  ampconfig ops-info import-table OperatorKernels.md --target cuda"
    ),
    no_args_is_help=True,
)
app.add_typer(ops_info_app, name="ops-info")


def _subcommand(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        ops_info_app.command(name)(reporting_errors(func))
        return func

    return register


def _check_target(target: str) -> str:
    if target not in TARGETS:
        raise AmpconfigError(f"unknown target {target!r}", hint="valid targets: " + ", ".join(TARGETS))
    return target


def _selected_keys(ops: str | None) -> list[str]:
    if not ops:
        return list(STRATEGY)
    keys = [key.strip() for key in ops.split(",") if key.strip()]
    unknown = [key for key in keys if key not in STRATEGY]
    if unknown:
        raise AmpconfigError(
            f"not in the built-in strategy: {', '.join(unknown)}",
            hint="op keys are ONNX op types (MatMul) or domain::OpType (com.microsoft::FusedMatMul)",
        )
    return keys


def _ordered(dtypes: Iterable[str]) -> list[str]:
    wanted = set(dtypes)
    return [dtype for dtype in FLOAT_DTYPES if dtype in wanted]


def _entry(strategy: StrategyEntry, dtypes: Iterable[str], native: Iterable[str], source: str) -> OpInfoEntry:
    flags = {Colour.WHITE: "true", Colour.BLACK: "false"}
    flag = flags.get(strategy.colour)
    return OpInfoEntry(
        precision_reduce=PrecisionReduce(flag=flag) if flag else None,  # type: ignore[arg-type]
        clear=strategy.colour is Colour.CLEAR,
        dtypes=_ordered(dtypes),  # type: ignore[arg-type]
        native_dtypes=_ordered(native),  # type: ignore[arg-type]
        dtype_source=source,
        reference=strategy.reference,
    )


def _write_atomic(document: OpsInfoFile, path: Path) -> None:
    """Write via a temp file in the same folder + os.replace, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document.model_dump(mode="json", by_alias=True, exclude_none=True), indent=2) + "\n"
    write_text_atomic(path, text, what="op info file")


def _merge_existing(ops: dict[str, OpInfoEntry], path: Path, target: str, partial: bool) -> dict[str, OpInfoEntry]:
    """With --ops and an existing file of the same target at the output path, keep its other entries."""
    if not partial or not path.is_file():
        return ops
    existing = parse_ops_info(read_text(path, "op info file"), str(path))
    if existing.target != target:
        return ops
    merged = dict(existing.ops)
    merged.update(ops)
    return dict(sorted(merged.items()))


@_subcommand("probe")
def probe_command(
    target: Annotated[str, typer.Option("--target", "-t", help="Execution target: cpu or cuda.")] = "cpu",
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="File to write. Default: the packaged ampconfig/ops_info/<target>.json."),
    ] = None,
    ops: Annotated[
        str | None,
        typer.Option("--ops", help="Comma-separated op keys to probe (default: every op of the strategy)."),
    ] = None,
) -> None:
    """Measure which float dtypes the target runs each op in, and which natively; write its op info file.

    For every op (or those in --ops) and each of float32/float16/bfloat16, one-node probe models (ONNX's node
    test cases retyped as the rewrite retypes, else a model built from the schema) are loaded in ONNX Runtime
    with the target's provider alone and run on the test case's data (or random inputs where shapes are known).
    A dtype goes into `dtypes` when every probe that runs in float32 also runs in it, natively or through casts
    ORT inserts (ORT CPU's fp16 fallback); into `native_dtypes` when every one runs without inserted casts.
    Control-flow and sequence ops, which cannot be retyped, stay float32 only. Colours come from the built-in
    strategy.

    With --ops and an existing file of the same target at the output path, the other entries are kept.

    Examples:

      ampconfig ops-info probe --target cpu

      ampconfig ops-info probe --target cpu --ops Relu,MatMul --output /tmp/cpu.json
    """
    from ampconfig.runner.kernels import measure_op, onnxruntime_version, require_provider

    target = _check_target(target)
    provider = PROVIDERS[target]
    require_provider(provider)  # onnxruntime-gpu lists CUDA even where its libraries are missing
    keys = _selected_keys(ops)
    started = time.monotonic()
    entries: dict[str, OpInfoEntry] = {}
    float32_only: list[str] = []
    for key in keys:
        measured = measure_op(key, provider)
        source = "probe" if measured.probed else "not-probed"
        entries[key] = _entry(STRATEGY[key], measured.dtypes, measured.native_dtypes, source)
        if "float32" in measured.dtypes and not measured.low_dtype_probes:
            float32_only.append(key)
    path = output or ops_info_path(target)
    document = OpsInfoFile(
        target=target,  # type: ignore[arg-type]
        provider=provider,
        onnxruntime_version=onnxruntime_version(),
        generated_by=f"ampconfig ops-info probe --target {target}" + (f" --ops {ops}" if ops else ""),
        ops=_merge_existing(entries, path, target, partial=bool(ops)),
    )
    _write_atomic(document, path)
    if path.resolve() == ops_info_path(target).resolve():
        load_ops_info.cache_clear()
    _report(entries, path, time.monotonic() - started)
    if float32_only:
        stderr.print(
            f"float32 only, no probe model retypes to a low dtype (control flow, sequences, or a schema that "
            f"allows float32 only) ({len(float32_only)}): " + ", ".join(float32_only),
            markup=False,
        )


def _count(entries: dict[str, OpInfoEntry], field: str) -> str:
    def listed(entry: OpInfoEntry) -> list[str]:
        return getattr(entry, field) or []

    return ", ".join(f"{dtype} {sum(dtype in listed(e) for e in entries.values())}" for dtype in FLOAT_DTYPES)


def _report(entries: dict[str, OpInfoEntry], path: Path, seconds: float) -> None:
    not_probed = sum(entry.dtype_source == "not-probed" for entry in entries.values())
    stderr.print(
        f"wrote {path}: {len(entries)} ops in {seconds:.1f} s; runs in: {_count(entries, 'dtypes')}; "
        f"natively: {_count(entries, 'native_dtypes')}; not probed: {not_probed}",
        markup=False,
    )


@_subcommand("import-table")
def import_table_command(
    table: Annotated[Path, typer.Argument(help="Local copy of onnxruntime's docs/OperatorKernels.md.")],
    target: Annotated[str, typer.Option("--target", "-t", help="Execution target: cpu or cuda.")] = "cuda",
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="File to write. Default: the packaged ampconfig/ops_info/<target>.json."),
    ] = None,
    ort_version: Annotated[
        str, typer.Option("--ort-version", help="ONNX Runtime version the table documents.")
    ] = "1.31.1",
    opset: Annotated[
        int,
        typer.Option("--opset", help="Read the kernel rows in force at this opset.", callback=count_between(1, 1000)),
    ] = 23,
) -> None:
    """Write a target's op info from ONNX Runtime's published kernel table instead of measuring it.

    For targets this machine cannot run (CUDA without a GPU). dtype_source is 'kernel-table'; ops of the
    strategy the table does not list are 'not-probed'. The table lists registered kernels, so its dtypes are
    native ones (native_dtypes = dtypes; CUDA sessions run with CPU fallback disabled), but it can claim a dtype
    that a real session still refuses; prefer `probe` where the provider works.

    Example:

      ampconfig ops-info import-table OperatorKernels.md --target cuda
    """
    from ampconfig.runner.kernels import kernel_table_dtypes

    target = _check_target(target)
    provider = PROVIDERS[target]
    listed = kernel_table_dtypes(table, provider, opset)
    entries = {
        key: _entry(entry, listed.get(key, []), listed.get(key, []), "kernel-table" if key in listed else "not-probed")
        for key, entry in STRATEGY.items()
    }
    path = output or ops_info_path(target)
    document = OpsInfoFile(
        target=target,  # type: ignore[arg-type]
        provider=provider,
        onnxruntime_version=ort_version,
        generated_by=f"ampconfig ops-info import-table {table.name} --target {target} --opset {opset} "
        "(microsoft/onnxruntime docs/OperatorKernels.md)",
        ops=entries,
    )
    _write_atomic(document, path)
    if path.resolve() == ops_info_path(target).resolve():
        load_ops_info.cache_clear()
    _report(entries, path, 0.0)


@_subcommand("show")
def show_command(
    op: Annotated[list[str] | None, typer.Argument(help="Op keys to show (default: all).")] = None,
    target: Annotated[str, typer.Option("--target", "-t", help="Execution target: cpu or cuda.")] = "cpu",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
) -> None:
    """Print op info entries of the built-in library: colour, the dtypes the target runs the op in (natively, or
    emulated through casts ONNX Runtime inserts), where they come from.

    Examples:

      ampconfig ops-info show --target cpu

      ampconfig ops-info show MatMul com.microsoft::FusedMatMul --target cuda --json
    """
    library = load_ops_info(_check_target(target))
    keys = op or sorted(library.entries)
    missing = [key for key in keys if not library.knows(key)]
    for key in missing:
        print_warning(f"{key} is not in the {target} op info (it is painted gray)")
    shown = {key: library.entries[key] for key in keys if library.knows(key)}
    if as_json:
        print_json(
            {
                "target": library.target,
                "provider": library.provider,
                "onnxruntime_version": library.onnxruntime_version,
                "ops": {key: _json_entry(e) for key, e in shown.items()},
                "unknown": missing,
            }
        )
        return
    table = Table(title=f"{library.target} op info ({library.provider}, onnxruntime {library.onnxruntime_version})")
    for column in ("op", "colour", "dtypes", "native", "emulated", "source", "reference"):
        table.add_column(column, overflow="fold")
    for key, entry in shown.items():
        native, emulated = (_joined(part) for part in _native_and_emulated(entry))
        table.add_row(
            key, entry.colour.value, _joined(entry.dtypes), native, emulated, entry.dtype_source, entry.reference
        )
    stdout.print(table)


def _joined(dtypes: list[str] | None) -> str:
    return "?" if dtypes is None else ", ".join(dtypes) or "-"


def _native_and_emulated(entry: OpInfoEntry) -> tuple[list[str] | None, list[str] | None]:
    """The dtypes the target runs natively, and those it runs only through casts ONNX Runtime inserts; None
    for both when the source cannot tell."""
    if entry.native_dtypes is None:
        return None, None
    native = list(entry.native_dtypes)
    return native, [dtype for dtype in entry.dtypes if dtype not in native]


def _json_entry(entry: OpInfoEntry) -> dict[str, Any]:
    shown: dict[str, Any] = {"colour": entry.colour.value, **entry.model_dump(exclude_none=True)}
    emulated = _native_and_emulated(entry)[1]
    if emulated is not None:
        shown["emulated_dtypes"] = emulated
    return shown
