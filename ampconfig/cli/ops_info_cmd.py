"""``ampconfig ops-info``: build and inspect the built-in op info library (``ops_info/<target>.json``).

``probe`` measures which float dtypes the target's ONNX Runtime provider runs each op in, and in which of them
natively (one-node probe models, see :mod:`ampconfig.opinfo.probe_models` and
:func:`ampconfig.runner.kernels.measure_op`), and merges them with the built-in colour strategy
(:mod:`ampconfig.opinfo.colours`). ``import-table`` does the same from ONNX Runtime's published kernel table, for
targets that cannot be measured here. ``show`` prints entries.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ampconfig.cli.app import SubcommandGroup, app, register_command
from ampconfig.cli.options import count_between
from ampconfig.cli.output import output_guard, print_json, print_warning, stderr, stdout
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.targets import DEFAULT_TARGET, PROVIDERS, TARGETS
from ampconfig.report.tables import print_table

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads neither pydantic nor the op info library
    from ampconfig.files.guard import Destination, OutputGuard
    from ampconfig.opinfo.colours import StrategyEntry
    from ampconfig.opinfo.kernel_claims import AcrossOpsets
    from ampconfig.opinfo.library import OpInfoEntry, OpsInfoFile

OpInfoOutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        metavar="FILE",
        help="File to write (- is standard output). Default: ops_info/<target>.json of the source checkout "
        "ampconfig runs from (an installed package is never written to: give -o there).",
    ),
]
TargetOpt = Annotated[str, typer.Option("--target", "-t", metavar="cpu|cuda", help="Execution target: cpu or cuda.")]
ops_info_app = typer.Typer(
    help=(
        "Build and inspect the op info library: per op type its list colour (white/black/gray/clear) and the "
        "float dtypes the target has kernels for.\n\n"
        "Examples:\n\n"
        "  ampconfig ops-info show MatMul Softmax --target cpu\n\n"
        "  ampconfig ops-info probe --target cpu --ops Relu,MatMul --output /tmp/cpu.json\n\n"
        "  ampconfig ops-info import-table OperatorKernels.md --target cuda\n\n"
        "  ampconfig ops-info import-kernels kernels.json --target cuda"
    ),
    no_args_is_help=True,
    cls=SubcommandGroup,
)
app.add_typer(ops_info_app, name="ops-info")


def _subcommand(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        register_command(ops_info_app, name, func)
        return func

    return register


def _default_output(target: str) -> Path:
    """Where the op info commands write without -o: the checkout's ``ops_info/<target>.json``; never into an
    installed package."""
    from ampconfig.opinfo.library import ops_info_path, source_ops_info_path

    path = source_ops_info_path(target)
    if path is None:
        raise AmpconfigError(
            f"no -o given, and ampconfig runs from an installed package ({ops_info_path(target).parent}), which is "
            "never written to",
            hint="pass the file to write: -o FILE",
        )
    return path


def _check_target(target: str) -> str:
    if target not in TARGETS:
        raise AmpconfigError(f"unknown target {target!r}", hint="valid targets: " + ", ".join(TARGETS))
    return target


def _selected_keys(ops: str | None) -> list[str]:
    from ampconfig.opinfo.colours import STRATEGY

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
    from ampconfig.dtypes import FLOAT_DTYPES

    wanted = set(dtypes)
    return [dtype for dtype in FLOAT_DTYPES if dtype in wanted]


def _entry(
    key: str,
    strategy: StrategyEntry,
    dtypes: Iterable[str],
    native: Iterable[str] | None,
    source: str,
    target: str,
    ort_version: str,
    across: AcrossOpsets | None = None,
) -> OpInfoEntry:
    """One op's entry: its measured or published kernels, and the colour they give it on ``target``
    (:func:`ampconfig.opinfo.numerics.target_colour`)."""
    from ampconfig.opinfo.library import Colour, OpInfoEntry, PrecisionReduce
    from ampconfig.opinfo.numerics import target_colour

    dtypes, native = _ordered(dtypes), (None if native is None else _ordered(native))
    coloured = target_colour(key, strategy.colour, target, dtypes, native, ort_version)
    flag = {Colour.WHITE: "true", Colour.BLACK: "false"}.get(coloured.colour)
    by_opset = across.measured if across is not None else {}
    return OpInfoEntry(
        precision_reduce=PrecisionReduce(flag=flag) if flag else None,
        clear=coloured.colour is Colour.CLEAR,
        dtypes=dtypes,
        native_dtypes=native,
        dtype_source=source,
        reference=strategy.reference,
        accumulation=dict(coloured.accumulation) or None,
        accumulation_source=coloured.accumulation_source or None,
        colour_note=coloured.note or None,
        dtypes_by_opset={str(o): _ordered(r.dtypes) for o, r in by_opset.items()} if len(by_opset) > 1 else None,
        no_kernel_opsets=(across.no_kernel_opsets or None) if across is not None else None,
        note=(across.reason() or None) if across is not None else None,
        keeps_dtype=strategy.keeps_dtype,
    )


def _claimed_entry(
    key: str, strategy: StrategyEntry, across: AcrossOpsets, source: str, target: str, ort_version: str
) -> OpInfoEntry:
    """An entry from a multi-opset measurement; nothing measurable is 'not-probed' with its reason, never an
    empty claim that reads as "no kernel"."""
    if not across.known:
        return _entry(key, strategy, [], [], "not-probed", target, ort_version, across)
    return _entry(key, strategy, across.dtypes, across.native_dtypes, source, target, ort_version, across)


#: The role of the written op info file, as refusals name it.
OUTPUT_ROLE = "op info file (--output)"


def _write(document: OpsInfoFile, destination: Destination, guard: OutputGuard) -> None:
    """Through the guard: atomically, so a reader never sees half a file."""
    text = json.dumps(document.model_dump(mode="json", by_alias=True, exclude_none=True), indent=2) + "\n"
    guard.write_text(destination, text)


def _merge_existing(ops: dict[str, OpInfoEntry], path: Path, target: str, partial: bool) -> dict[str, OpInfoEntry]:
    """With --ops and an existing file of the same target at the output path, keep its other entries."""
    from ampconfig.opinfo.library import parse_ops_info
    from ampconfig.settings.documents import read_text

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
    target: Annotated[
        str,
        typer.Option(
            "--target",
            "-t",
            metavar="cpu|cuda",
            help="Execution target to measure: cpu or cuda. Probing runs every op, so the default is the target "
            "every machine has (cpu); --target cuda needs a GPU.",
        ),
    ] = "cpu",
    output: OpInfoOutputOpt = None,
    ops: Annotated[
        str | None,
        typer.Option("--ops", help="Comma-separated op keys to probe (default: every op of the strategy)."),
    ] = None,
    details: Annotated[
        Path | None,
        typer.Option("--details", help="Also write every probe verdict (op, opset, dtype, model, status, message)."),
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

    Each op is measured at opsets 13 and 17 and at its newest schema version (up to 23) the provider has a kernel
    for: ONNX Runtime serves an open-ended kernel registration only for the schema version it starts at, so an
    op can have a kernel at opset 17 and none at 22. `dtypes` holds at every measured opset with a kernel,
    `dtypes_by_opset` and `no_kernel_opsets` say what each opset gave. An op no float32 model could be measured
    for is 'not-probed' with the reason in `note`, never an empty claim.

    With --ops and an existing file of the same target at the output path, the other entries are kept.

    Examples:

      ampconfig ops-info probe --target cpu

      ampconfig ops-info probe --target cpu --ops Relu,MatMul --output /tmp/cpu.json
    """
    from ampconfig.runner.kernels import require_provider

    target = _check_target(target)
    provider = PROVIDERS[target]
    require_provider(provider)  # onnxruntime-gpu lists CUDA even where its libraries are missing
    keys = _selected_keys(ops)
    path = output or _default_output(target)
    with output_guard() as guard:
        destination = guard.output(OUTPUT_ROLE, path)  # checked before minutes of probing
        details_destination = guard.output("probe details (--details)", details) if details is not None else None
        _probe_and_write(target, provider, keys, ops, destination, details_destination, guard)


def _probe_and_write(
    target: str,
    provider: str,
    keys: list[str],
    ops: str | None,
    destination: Destination,
    details: Destination | None,
    guard: OutputGuard,
) -> None:
    from ampconfig.files.guard import same_file
    from ampconfig.opinfo.colours import STRATEGY
    from ampconfig.opinfo.library import OpsInfoFile, load_ops_info, ops_info_path
    from ampconfig.runner.kernels import measure_op_across_opsets, onnxruntime_version

    started = time.monotonic()
    entries: dict[str, OpInfoEntry] = {}
    float32_only: list[str] = []
    verdict_rows: list[dict[str, object]] = []
    version = onnxruntime_version()
    for key in keys:
        measured = measure_op_across_opsets(key, provider)
        entries[key] = _claimed_entry(key, STRATEGY[key], measured.across, "probe", target, version)
        if "float32" in entries[key].dtypes and not measured.low_dtype_probes:
            float32_only.append(key)
        verdict_rows += _verdict_rows(key, measured.measurements)
    path = destination.path
    document = OpsInfoFile(
        target=target,
        provider=provider,
        onnxruntime_version=version,
        generated_by=f"ampconfig ops-info probe --target {target}" + (f" --ops {ops}" if ops else ""),
        ops=_merge_existing(entries, path, target, partial=bool(ops)),
    )
    _write(document, destination, guard)
    if same_file(path, ops_info_path(target)):
        load_ops_info.cache_clear()
    if details is not None:
        guard.write_text(details, json.dumps(verdict_rows, indent=1) + "\n")
    _report(entries, path, time.monotonic() - started)
    if float32_only:
        stderr.print(
            f"float32 only, no probe model retypes to a low dtype (control flow, sequences, or a schema that "
            f"allows float32 only) ({len(float32_only)}): " + ", ".join(float32_only),
            markup=False,
        )


def _verdict_rows(key: str, measurements: Mapping[int, Any]) -> list[dict[str, object]]:
    return [
        {
            "op": key,
            "opset": opset,
            "dtype": dtype,
            "model": origin,
            "status": verdict.status.value,
            "ran": verdict.ran,
            "message": verdict.message,
        }
        for opset, measurement in sorted(measurements.items())
        for dtype, by_origin in measurement.verdicts.items()
        for origin, verdict in by_origin.items()
    ]


def _count(entries: dict[str, OpInfoEntry], field: str) -> str:
    from ampconfig.dtypes import FLOAT_DTYPES

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


def _table_source(key: str, listed: dict[str, list[str]]) -> str:
    return "kernel-table" if key in listed else "not-probed"


@_subcommand("import-table")
def import_table_command(
    table: Annotated[Path, typer.Argument(help="Local copy of onnxruntime's docs/OperatorKernels.md.")],
    target: TargetOpt = DEFAULT_TARGET,
    output: OpInfoOutputOpt = None,
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

    target = _check_target(target)
    provider = PROVIDERS[target]
    path = output or _default_output(target)
    with output_guard() as guard:
        guard.read("kernel table (TABLE)", table)
        destination = guard.output(OUTPUT_ROLE, path)
        _import_and_write(table, target, provider, ort_version, opset, destination, guard)


def _import_and_write(
    table: Path,
    target: str,
    provider: str,
    ort_version: str,
    opset: int,
    destination: Destination,
    guard: OutputGuard,
) -> None:
    from ampconfig.files.guard import same_file
    from ampconfig.opinfo.colours import STRATEGY
    from ampconfig.opinfo.library import OpsInfoFile, load_ops_info, ops_info_path
    from ampconfig.runner.kernels import kernel_table_dtypes

    listed = kernel_table_dtypes(table, provider, opset)
    entries = {
        key: _entry(
            key,
            entry,
            listed.get(key, []),
            listed.get(key, []),
            "kernel-table" if key in listed else "not-probed",
            target,
            ort_version,
        )
        for key, entry in STRATEGY.items()
    }
    path = destination.path
    document = OpsInfoFile(
        target=target,
        provider=provider,
        onnxruntime_version=ort_version,
        generated_by=f"ampconfig ops-info import-table {table.name} --target {target} --opset {opset} "
        "(microsoft/onnxruntime docs/OperatorKernels.md)",
        ops=entries,
    )
    _write(document, destination, guard)
    if same_file(path, ops_info_path(target)):
        load_ops_info.cache_clear()
    _report(entries, path, 0.0)


@_subcommand("import-ascend")
def import_ascend_command(
    ascend_file: Annotated[
        Path, typer.Argument(metavar="FILE", help="An Ascend ops-info JSON (aic-<soc>-ops-info.json), edited or not.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The op info file to write.", show_default=False)],
    target: Annotated[
        str, typer.Option("--target", "-t", metavar="cpu|cuda", help="Whose op info it starts from: cpu or cuda.")
    ] = DEFAULT_TARGET,
    op_names: Annotated[
        str,
        typer.Option("--op-names", metavar="ascend|tensorflow|onnx", help="Whose op type names FILE uses."),
    ] = "ascend",
    json_output: Annotated[bool, typer.Option("--json", help="Print what was mapped as one JSON object.")] = False,
) -> None:
    """Start a target's op info from an Ascend ops-info file: its list colours, on the target's kernels.

    Each op's "precision_reduce": {"flag": "true"} makes it white, "false" black, and no flag gray, as on
    Ascend; every other field is Ascend's kernel description and is ignored. Op names are read as Ascend's and
    mapped to ONNX op types (Conv2D -> Conv, MatMulV2 and BatchMatMulV2 -> MatMul; docs/op-names.md); the names
    with no ONNX op are reported and left out. The target's op info (dtypes, kernel facts) is kept; only the
    colours of the ops the file names change. Check the result with `ampconfig validate OUT`.

    Example:

      ampconfig ops-info import-ascend aic-ascend910-ops-info.json --target cuda -o cuda-from-ascend.json
    """
    from ampconfig.opinfo.library import Colour, ops_info_path, parse_ops_info
    from ampconfig.opinfo.op_names import OP_NAME_CHOICES
    from ampconfig.settings.ascend_ops_info import ascend_colours, with_ascend_colours
    from ampconfig.settings.documents import parse_document, read_text

    target = _check_target(target)
    if op_names not in OP_NAME_CHOICES:
        raise AmpconfigError(f"unknown --op-names {op_names!r}", hint="choices: " + ", ".join(OP_NAME_CHOICES))
    with output_guard() as guard:
        guard.read("Ascend ops-info file (FILE)", ascend_file)
        destination = guard.output(OUTPUT_ROLE, output)
        document = parse_document(read_text(ascend_file, "Ascend ops-info file"), str(ascend_file), "json")
        found = ascend_colours(document, op_names)
        errors = [problem for problem in found.problems if problem.severity.value == "error"]
        if errors:
            raise AmpconfigError(errors[0].message, file=errors[0].file, line=errors[0].line, problems=errors)
        base = parse_ops_info(read_text(ops_info_path(target), "op info file"), str(ops_info_path(target)))
        _write(with_ascend_colours(base, found, ascend_file.name), destination, guard)
    counts = {colour: sum(1 for c in found.colours.values() if c is colour) for colour in Colour}
    if json_output:
        print_json({"ok": True, "exit_code": 0, "output": str(output), "target": target, **found.to_dict()})
        return
    for problem in found.problems:
        print_warning(problem.format())
    stderr.print(
        f"wrote {output}: {target} op info with the colours of {len(found.colours)} ONNX ops from {ascend_file.name} "
        f"({counts[Colour.WHITE]} white, {counts[Colour.BLACK]} black, {counts[Colour.GRAY]} gray); "
        f"{len(found.unmapped)} Ascend op(s) unmapped" + (": " + ", ".join(found.unmapped) if found.unmapped else ""),
        markup=False,
    )


@_subcommand("import-kernels")
def import_kernels_command(
    dump: Annotated[Path, typer.Argument(help="Kernel registry dump (benchmarks/dump_kernels.py).")],
    target: TargetOpt = DEFAULT_TARGET,
    output: OpInfoOutputOpt = None,
    probe: Annotated[
        Path | None,
        typer.Option(
            "--probe",
            help="An op info file `ops-info probe` measured on the same target: its measured claims win.",
        ),
    ] = None,
) -> None:
    """Write a target's op info from a dump of ONNX Runtime's registered kernels.

    The dump is ORT's own kernel registry (op, domain, provider, version range, type constraints), written by
    `python benchmarks/dump_kernels.py DUMP.json` on a machine where it works (for cuda: one with the CUDA
    libraries; listing the registry crashes onnxruntime-gpu without them, so the script lists it in a child
    process). Per op, the dtypes registered kernels serve at opsets 13, 17 and the newest schema version with a
    kernel (ORT serves an open-ended registration only for the schema version it starts at); a dtype counts when
    one kernel accepts it for every type variable the rewrite moves. dtype_source is 'kernel-registry' and the
    file records the dump's ORT version. Registered kernels are native kernels. Strategy ops the dump does not
    list are 'not-probed'.

    With --probe, an op the probe measured (real sessions, run on data) keeps the probe's claim: a registered
    kernel can still refuse a dtype at run time (CUDA Resize reads a non-empty roi as float32). Ops the probe could
    not measure take the registry's claim, with the probe's reason in `note`.

    Example:

      python benchmarks/dump_kernels.py kernels.json && ampconfig ops-info import-kernels kernels.json --target cuda

      ampconfig ops-info import-kernels kernels.json --target cuda --probe cuda-probe.json
    """
    from ampconfig.files.guard import same_file
    from ampconfig.opinfo.colours import STRATEGY
    from ampconfig.opinfo.kernel_claims import AcrossOpsets
    from ampconfig.opinfo.library import OpsInfoFile, load_ops_info, ops_info_path
    from ampconfig.runner.kernel_dump import dump_claims, read_kernel_dump

    target = _check_target(target)
    provider = PROVIDERS[target]
    with output_guard() as guard:
        guard.read("kernel dump (DUMP)", dump)
        guard.read("measured op info (--probe)", probe)
        destination = guard.output(OUTPUT_ROLE, output or _default_output(target))
        loaded = read_kernel_dump(dump)
        claims = dump_claims(loaded, provider)
        missing = AcrossOpsets({}, note=f"the kernel dump lists no {provider} kernel for this op")
        version = loaded.onnxruntime_version or "unknown"
        entries = {
            key: _claimed_entry(key, entry, claims.get(key, missing), "kernel-registry", target, version)
            for key, entry in STRATEGY.items()
        }
        measured_by = ""
        if probe is not None:
            entries = _measured_first(entries, _read_probe(probe, target))
            measured_by = f"; claims measured by ampconfig ops-info probe ({probe.name}) where it could"
        path = destination.path
        document = OpsInfoFile(
            target=target,
            provider=provider,
            onnxruntime_version=version,
            generated_by=f"ampconfig ops-info import-kernels {dump.name} --target {target} "
            f"(onnxruntime {version} get_all_opkernel_def){measured_by}",
            ops=entries,
        )
        _write(document, destination, guard)
    if same_file(path, ops_info_path(target)):
        load_ops_info.cache_clear()
    _report(entries, path, 0.0)
    if loaded.onnxruntime_version is None:
        print_warning(f"{dump} does not say which onnxruntime it was dumped from; recorded as 'unknown'")


def _read_probe(path: Path, target: str) -> OpsInfoFile:
    from ampconfig.opinfo.library import parse_ops_info
    from ampconfig.settings.documents import read_text

    measured = parse_ops_info(read_text(path, "measured op info"), str(path))
    if measured.target != target:
        raise AmpconfigError(f"the --probe file is for target {measured.target!r}, not {target!r}", file=str(path))
    return measured


def _measured_first(registry: dict[str, OpInfoEntry], measured: OpsInfoFile) -> dict[str, OpInfoEntry]:
    """Per op, the probe's claim where it measured one (dtype_source 'probe' with dtypes), else the registry's,
    noting why the probe could not tell."""
    merged: dict[str, OpInfoEntry] = {}
    for key, entry in registry.items():
        probed = measured.ops.get(key)
        if probed is not None and probed.dtype_source == "probe" and probed.dtypes:
            merged[key] = probed.model_copy(
                update={k: getattr(entry, k) for k in ("precision_reduce", "clear", "reference", "keeps_dtype")}
            )
        elif probed is not None and probed.note:
            merged[key] = entry.model_copy(update={"note": f"registry claim; the probe could not tell: {probed.note}"})
        else:
            merged[key] = entry
    return merged


@_subcommand("apply-strategy")
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
    from ampconfig.files.guard import same_file
    from ampconfig.opinfo.library import load_ops_info, ops_info_path, parse_ops_info

    target = _check_target(target)
    path = file or _default_output(target)
    if not path.is_file():
        raise AmpconfigError("op info file not found", file=str(path))
    with output_guard() as guard:
        destination = guard.output("op info file (--file)", path)
        existing = parse_ops_info(path.read_text(encoding="utf-8"), str(path))
        if existing.target != target:
            raise AmpconfigError(f"the file is for target {existing.target!r}, not {target!r}", file=str(path))
        document = strategy_applied(existing)
        _write(document, destination, guard)
    if same_file(path, ops_info_path(target)):
        load_ops_info.cache_clear()
    gray = sorted(key for key, entry in document.ops.items() if entry.colour_note)
    stderr.print(
        f"wrote {path}: {len(document.ops)} ops, strategy re-applied, kernel claims kept; gray by kernel "
        f"numerics: {', '.join(gray) or 'none'}",
        markup=False,
    )


def strategy_applied(existing: OpsInfoFile) -> OpsInfoFile:
    """``existing`` coloured anew from the built-in tables, its kernel claims kept."""
    from ampconfig.opinfo.colours import STRATEGY

    entries: dict[str, OpInfoEntry] = {}
    for key, strategy in STRATEGY.items():
        old = existing.ops.get(key)
        dtypes, native = (old.dtypes, old.native_dtypes) if old is not None else ([], [])
        fresh = _entry(key, strategy, dtypes, native, "not-probed", existing.target, existing.onnxruntime_version)
        if old is not None:
            kept = old.model_dump(include={"dtype_source", "dtypes_by_opset", "no_kernel_opsets", "note"})
            fresh = fresh.model_copy(update={**kept, "native_dtypes": old.native_dtypes})
        else:
            fresh = fresh.model_copy(update={"note": "not in the file when the strategy was applied"})
        entries[key] = fresh
    suffix = "; strategy re-applied by ampconfig ops-info apply-strategy"
    generated_by = existing.generated_by if existing.generated_by.endswith(suffix) else existing.generated_by + suffix
    return existing.model_copy(update={"ops": entries, "generated_by": generated_by})


@_subcommand("show")
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

    from ampconfig.opinfo.library import load_ops_info

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
    print_table(stdout, table)


def _joined(dtypes: Sequence[str] | None) -> str:
    return "?" if dtypes is None else ", ".join(dtypes) or "-"


def _native_and_emulated(entry: OpInfoEntry) -> tuple[Sequence[str] | None, Sequence[str] | None]:
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
