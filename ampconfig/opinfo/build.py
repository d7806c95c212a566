"""Building a target's op info file (``ops_info/<target>.json``) from kernel claims and the built-in strategy.

What ``ampconfig ops-info`` writes: an entry per op of the strategy (:mod:`ampconfig.opinfo.colours`), its dtypes
from a measurement (``probe``), ONNX Runtime's published kernel table (``import-table``) or its kernel registry
(``import-kernels``), coloured for the target (:func:`ampconfig.opinfo.numerics.target_colour`). Pure: the claims
come in as data, or from the ``measure`` function the caller passes (ONNX Runtime's probe lives in
:mod:`ampconfig.opinfo.kernels`); nothing here reads or writes a file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from ampconfig.dtypes import FLOAT_DTYPES
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.colours import STRATEGY, StrategyEntry
from ampconfig.opinfo.kernel_claims import AcrossOpsets
from ampconfig.opinfo.library import Colour, OpInfo
from ampconfig.opinfo.numerics import target_colour
from ampconfig.opinfo.ops_info_file import OpInfoEntry, OpsInfoFile, PrecisionReduce
from ampconfig.opinfo.targets import TargetName

FloatDtype = Literal["float32", "float16", "bfloat16"]
#: A target an op info file is for (:data:`ampconfig.opinfo.targets.TARGETS`, as :class:`OpsInfoFile` spells it).
_FLAGS: dict[Colour, Literal["true", "false"]] = {Colour.WHITE: "true", Colour.BLACK: "false"}


class Verdict(Protocol):
    """One probe model's verdict (:class:`ampconfig.opinfo.kernels.KernelVerdict`)."""

    @property
    def status(self) -> Enum: ...
    @property
    def ran(self) -> bool: ...
    @property
    def message(self) -> str: ...


class OpsetMeasurement(Protocol):
    """An op measured at one opset: per dtype, per probe model, its verdict."""

    @property
    def verdicts(self) -> Mapping[str, Mapping[str, Verdict]]: ...


class MeasuredOp(Protocol):
    """An op measured at several opsets (:func:`ampconfig.opinfo.kernels.measure_op_across_opsets`)."""

    @property
    def across(self) -> AcrossOpsets: ...
    @property
    def measurements(self) -> Mapping[int, OpsetMeasurement]: ...
    @property
    def low_dtype_probes(self) -> bool: ...


def selected_keys(ops: str | None) -> list[str]:
    """The strategy's op keys named in a comma-separated ``ops`` (all of them when empty), or an error naming the
    keys the strategy does not have."""
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


def ordered(dtypes: Iterable[str]) -> list[FloatDtype]:
    """The float dtypes among ``dtypes``, in the library's order (float32, float16, bfloat16)."""
    wanted = set(dtypes)
    return [cast(FloatDtype, dtype) for dtype in FLOAT_DTYPES if dtype in wanted]


def entry(
    key: str,
    strategy: StrategyEntry,
    dtypes: Iterable[str],
    native: Iterable[str] | None,
    source: str,
    target: str,
    ort_version: str,
    across: AcrossOpsets | None = None,
) -> OpInfoEntry:
    """One op's entry: its measured or published kernels, and the colour they give it on ``target``."""
    runs, natively = ordered(dtypes), (None if native is None else ordered(native))
    coloured = target_colour(key, strategy.colour, target, runs, natively, ort_version)
    flag = _FLAGS.get(coloured.colour)
    by_opset = across.measured if across is not None else {}
    accumulation: dict[Any, Any] = dict(coloured.accumulation)  # str keys; pydantic checks them as dtype names
    return OpInfoEntry(
        precision_reduce=PrecisionReduce(flag=flag) if flag else None,
        clear=coloured.colour is Colour.CLEAR,
        dtypes=runs,
        native_dtypes=natively,
        dtype_source=source,
        reference=strategy.reference,
        accumulation=accumulation or None,
        accumulation_source=coloured.accumulation_source or None,
        colour_note=coloured.note or None,
        dtypes_by_opset={str(o): ordered(r.dtypes) for o, r in by_opset.items()} if len(by_opset) > 1 else None,
        no_kernel_opsets=(across.no_kernel_opsets or None) if across is not None else None,
        note=(across.reason() or None) if across is not None else None,
        keeps_dtype=strategy.keeps_dtype,
    )


def claimed_entry(
    key: str, strategy: StrategyEntry, across: AcrossOpsets, source: str, target: str, ort_version: str
) -> OpInfoEntry:
    """An entry from a multi-opset measurement; nothing measurable is 'not-probed' with its reason, never an
    empty claim that reads as "no kernel"."""
    if not across.known:
        return entry(key, strategy, [], [], "not-probed", target, ort_version, across)
    return entry(key, strategy, across.dtypes, across.native_dtypes, source, target, ort_version, across)


def ops_info_text(document: OpsInfoFile) -> str:
    """The file's text: indented JSON, as the packaged files are written."""
    return json.dumps(document.model_dump(mode="json", by_alias=True, exclude_none=True), indent=2) + "\n"


# ------------------------------------------------------------------------------------------------------- probe
@dataclass
class Probed:
    """What ``ops-info probe`` measured: an entry per op, the ops no probe model could retype to a low dtype, and
    every probe verdict (op, opset, dtype, model, status, ran, message)."""

    entries: dict[str, OpInfoEntry] = field(default_factory=dict)
    float32_only: list[str] = field(default_factory=list)
    verdicts: list[dict[str, object]] = field(default_factory=list)


def probed(keys: Sequence[str], target: str, version: str, measure: Callable[[str], MeasuredOp]) -> Probed:
    """Each op of ``keys`` measured by ``measure`` (at several opsets), as entries for ``target``."""
    found = Probed()
    for key in keys:
        measured = measure(key)
        found.entries[key] = claimed_entry(key, STRATEGY[key], measured.across, "probe", target, version)
        if "float32" in found.entries[key].dtypes and not measured.low_dtype_probes:
            found.float32_only.append(key)
        found.verdicts += verdict_rows(key, measured.measurements)
    return found


def verdict_rows(key: str, measurements: Mapping[int, OpsetMeasurement]) -> list[dict[str, object]]:
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


def probe_document(
    found: Probed, target: TargetName, provider: str, version: str, ops: str | None, existing: OpsInfoFile | None
) -> OpsInfoFile:
    """The probed op info file; with ``ops`` (a partial probe), ``existing``'s other entries of the same target
    are kept."""
    entries = found.entries
    if ops and existing is not None and existing.target == target:
        entries = dict(sorted({**existing.ops, **entries}.items()))
    return OpsInfoFile(
        target=target,
        provider=provider,
        onnxruntime_version=version,
        generated_by=f"ampconfig ops-info probe --target {target}" + (f" --ops {ops}" if ops else ""),
        ops=entries,
    )


# ------------------------------------------------------------------------------------------------------ imports
def table_document(
    table_name: str, listed: Mapping[str, list[str]], target: TargetName, provider: str, ort_version: str, opset: int
) -> OpsInfoFile:
    """The op info file from ONNX Runtime's published kernel table (``listed``: dtypes per op key)."""
    entries = {
        key: entry(
            key,
            strategy,
            listed.get(key, []),
            listed.get(key, []),
            "kernel-table" if key in listed else "not-probed",
            target,
            ort_version,
        )
        for key, strategy in STRATEGY.items()
    }
    return OpsInfoFile(
        target=target,
        provider=provider,
        onnxruntime_version=ort_version,
        generated_by=f"ampconfig ops-info import-table {table_name} --target {target} --opset {opset} "
        "(microsoft/onnxruntime docs/OperatorKernels.md)",
        ops=entries,
    )


def registry_document(
    dump_name: str,
    claims: Mapping[str, AcrossOpsets],
    target: TargetName,
    provider: str,
    version: str,
    probe: tuple[Path, OpsInfoFile] | None = None,
) -> OpsInfoFile:
    """The op info file from a dump of ONNX Runtime's kernel registry (``claims`` per op key); with ``probe`` (an
    op info file ``ops-info probe`` measured, and its content), the probe's measured claims win
    (:func:`measured_first`)."""
    missing = AcrossOpsets({}, note=f"the kernel dump lists no {provider} kernel for this op")
    entries = {
        key: claimed_entry(key, strategy, claims.get(key, missing), "kernel-registry", target, version)
        for key, strategy in STRATEGY.items()
    }
    measured_by = ""
    if probe is not None:
        path, measured = probe
        if measured.target != target:
            raise AmpconfigError(f"the --probe file is for target {measured.target!r}, not {target!r}", file=str(path))
        entries = measured_first(entries, measured)
        measured_by = f"; claims measured by ampconfig ops-info probe ({path.name}) where it could"
    return OpsInfoFile(
        target=target,
        provider=provider,
        onnxruntime_version=version,
        generated_by=f"ampconfig ops-info import-kernels {dump_name} --target {target} "
        f"(onnxruntime {version} get_all_opkernel_def){measured_by}",
        ops=entries,
    )


def measured_first(registry: Mapping[str, OpInfoEntry], measured: OpsInfoFile) -> dict[str, OpInfoEntry]:
    """Per op, the probe's claim where it measured one (dtype_source 'probe' with dtypes), else the registry's,
    noting why the probe could not tell."""
    merged: dict[str, OpInfoEntry] = {}
    for key, registered in registry.items():
        probe = measured.ops.get(key)
        if probe is not None and probe.dtype_source == "probe" and probe.dtypes:
            kept = ("precision_reduce", "clear", "reference", "keeps_dtype")
            merged[key] = probe.model_copy(update={name: getattr(registered, name) for name in kept})
        elif probe is not None and probe.note:
            note = f"registry claim; the probe could not tell: {probe.note}"
            merged[key] = registered.model_copy(update={"note": note})
        else:
            merged[key] = registered
    return merged


def strategy_applied(existing: OpsInfoFile) -> OpsInfoFile:
    """``existing`` coloured anew from the built-in tables, its kernel claims kept; strategy ops it lacks are added
    as 'not-probed'."""
    entries: dict[str, OpInfoEntry] = {}
    for key, strategy in STRATEGY.items():
        old = existing.ops.get(key)
        dtypes, native = (old.dtypes, old.native_dtypes) if old is not None else ([], [])
        fresh = entry(key, strategy, dtypes, native, "not-probed", existing.target, existing.onnxruntime_version)
        if old is not None:
            kept = old.model_dump(include={"dtype_source", "dtypes_by_opset", "no_kernel_opsets", "note", "variants"})
            fresh = fresh.model_copy(update={**kept, "native_dtypes": old.native_dtypes})
        else:
            fresh = fresh.model_copy(update={"note": "not in the file when the strategy was applied"})
        entries[key] = fresh
    suffix = "; strategy re-applied by ampconfig ops-info apply-strategy"
    generated_by = existing.generated_by if existing.generated_by.endswith(suffix) else existing.generated_by + suffix
    return existing.model_copy(update={"ops": entries, "generated_by": generated_by})


def native_and_emulated(op: OpInfoEntry | OpInfo) -> tuple[list[str] | None, list[str] | None]:
    """The dtypes the target runs natively, and those it runs only through casts ONNX Runtime inserts; None for
    both when the source cannot tell."""
    if op.native_dtypes is None:
        return None, None
    native: list[str] = list(op.native_dtypes)
    return native, [dtype for dtype in op.dtypes if dtype not in native]
