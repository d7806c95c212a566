"""Making a precision lock: the decisions of one rewrite, with the settings, versions and model identity they came
from, as :class:`~ampconfig.documents.lock_file.PrecisionLock` data; and the flags that make the same decisions
again from a lock (what ``lock --check`` decides with).

Pure data in and out, except for reading the files it hashes. Paths are written relative to the lock's folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Container
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import onnx

from ampconfig.decide.measured_facts import MeasuredFacts
from ampconfig.decide.value_limits import ValueRanges, ValueSpread
from ampconfig.documents.format_tags import LOCK_FORMAT
from ampconfig.documents.lock_file import (
    LOCK_FORMAT_VERSION,
    ConfigFile,
    FileDigest,
    FlagSetting,
    LockedNode,
    LockedSpread,
    LockProof,
    LockSettings,
    LockSummary,
    LockValues,
    LockVersions,
    MarginSetting,
    ModelIdentity,
    ModeSetting,
    OpInfoVersion,
    OpNamesSetting,
    PrecisionLock,
    ProofData,
    ProofOutput,
    SettingsFile,
    SettingSource,
    TargetSetting,
)
from ampconfig.documents.mixlist_file import Mixlist
from ampconfig.engine.in_place import rewrite_with_options
from ampconfig.files.hashing import file_sha256, text_sha256
from ampconfig.files.paths import real_location, relative_path
from ampconfig.instrument.scopes import ModelValueNames
from ampconfig.model_io.identity import model_fingerprint
from ampconfig.model_io.ir_version import installed_onnxruntime
from ampconfig.model_io.models import OpenedModel, open_model
from ampconfig.opinfo.library import OpInfoLibrary, load_ops_info
from ampconfig.prove.accuracy import output_failures
from ampconfig.prove.outcome import RunReport
from ampconfig.rewrite.results import RewriteResult
from ampconfig.rewrite.tensors import Float16Encoder
from ampconfig.settings.json_schemas import schema_reference
from ampconfig.settings.resolve import DEFAULT_SOURCE, Flags, Settings
from ampconfig.version import __version__

#: Digits kept of each error a proof records: enough to compare, few enough that a rerun on the same machine
#: writes the same lock.
PROOF_DIGITS = 4


# ---------------------------------------------------------------------------------------------------- pieces
def lock_relative(lock_path: Path, recorded: str) -> Path:
    """A path the lock records, as a path to open: relative to the folder the lock really is in (a symbolic
    link's target: :func:`~ampconfig.files.paths.real_location`)."""
    path = Path(recorded)
    return path if path.is_absolute() else Path(os.path.normpath(real_location(lock_path).parent / path))


def setting_source(settings: Settings, name: str) -> SettingSource:
    """Where the resolver took a setting from, in the lock's three words."""
    source = settings.sources.get(name, DEFAULT_SOURCE)
    if source.startswith("config"):
        return "config"
    if source.startswith(DEFAULT_SOURCE):
        return "default"
    return "command line"


def op_info_sha256(library: OpInfoLibrary) -> str:
    """The op info's content, independent of how its file is formatted."""
    entries = {key: library.entries[key].as_json() for key in sorted(library.entries)}
    header = {"target": library.target, "provider": library.provider, "onnxruntime": library.onnxruntime_version}
    return text_sha256(json.dumps({"header": header, "ops": entries}, sort_keys=True))


def _mixlist_record(settings: Settings, lock_dir: Path) -> SettingsFile | None:
    mixlist = settings.modify_mixlist
    if mixlist is None:
        return None
    source = "config" if setting_source(settings, "modify_mixlist") == "config" else "command line"
    if isinstance(mixlist, Mixlist):  # written inline in the config
        content = json.dumps(mixlist.model_dump(by_alias=True, exclude_none=True), sort_keys=True)
        return SettingsFile(path=None, sha256=text_sha256(content), source=source)
    return SettingsFile(path=relative_path(mixlist, lock_dir), sha256=file_sha256(mixlist), source=source)


def _keep_dtype_record(settings: Settings, lock_dir: Path) -> SettingsFile | None:
    keep = settings.keep_dtype
    if keep is None:
        return None
    source = "config" if setting_source(settings, "keep_dtype") == "config" else "command line"
    if isinstance(keep, tuple):  # a list in the config
        return SettingsFile(path=None, sha256=text_sha256("\n".join(keep)), source=source)
    return SettingsFile(path=relative_path(keep, lock_dir), sha256=file_sha256(keep), source=source)


def _customize_record(settings: Settings, lock_dir: Path) -> SettingsFile | None:
    customize = settings.customize_dtypes
    path = customize if isinstance(customize, Path) else getattr(customize, "source", None)
    if path is None:
        return None
    source = "config" if setting_source(settings, "customize_dtypes") == "config" else "command line"
    return SettingsFile(path=relative_path(Path(path), lock_dir), sha256=file_sha256(Path(path)), source=source)


def lock_settings(settings: Settings, lock_dir: Path) -> LockSettings:
    config = settings.config
    return LockSettings(
        precision_mode=ModeSetting(
            value=settings.precision_mode.value, source=setting_source(settings, "precision_mode")
        ),
        target=TargetSetting(value=settings.target, source=setting_source(settings, "target")),
        keep_io_types=FlagSetting(value=settings.keep_io_types, source=setting_source(settings, "keep_io_types")),
        op_names=OpNamesSetting(value=settings.op_names, source=setting_source(settings, "op_names")),
        config=ConfigFile(path=relative_path(config, lock_dir), sha256=file_sha256(config)) if config else None,
        modify_mixlist=_mixlist_record(settings, lock_dir),
        keep_dtype=_keep_dtype_record(settings, lock_dir),
        customize_dtypes=_customize_record(settings, lock_dir),
        clamp_values=FlagSetting(value=settings.clamp_values, source=setting_source(settings, "clamp_values")),
        data_max=MarginSetting(value=settings.data_max, source=setting_source(settings, "data_max")),
    )


def lock_values(settings: Settings, result: RewriteResult, lock_dir: Path, model_values: Container[str]) -> LockValues:
    """The value ranges the decisions read: the ranges file or the data, and every value beyond the margin or below
    the normal range among ``model_values`` (a ranges file may name values the model lacks; they decide nothing,
    and a lock naming them is refused: :func:`~ampconfig.lock.check.run_check`)."""
    ranges = result.value_ranges
    if ranges is None:
        return LockValues(checked=False, source=None, ranges=None, data_sha256=None, beyond_margin={}, below_normal={})
    record = None
    if ranges.file is not None and settings.ranges is not None:
        source = "config" if setting_source(settings, "ranges") == "config" else "command line"
        record = SettingsFile(
            path=relative_path(settings.ranges, lock_dir),
            sha256=ranges.file_sha256 or file_sha256(settings.ranges),
            source=source,
        )
    return LockValues(
        checked=True,
        source=ranges.source if record is None else None,
        ranges=record,
        data_sha256=ranges.data_sha256,
        beyond_margin={
            key: peak for key, peak in ranges.beyond_margin(result.low_dtype).items() if key in model_values
        },
        below_normal={
            key: LockedSpread(zeros=spread.zeros, exponents={str(e): n for e, n in sorted(spread.exponents.items())})
            for key, spread in ranges.below_normal(result.low_dtype).items()
            if key in model_values
        },
    )


def recorded_ranges(lock: PrecisionLock, settings: Settings) -> ValueRanges | None:
    """What ``lock --check`` decides with when no ranges file is read today: the values the lock recorded (those
    beyond the margin and those that can decide by underflow decide; every other decided nothing), or None when
    the lock's decisions read none."""
    values = lock.values
    if values is None or not values.checked:
        return None
    # The source in the lock's own words, so that the lock made again records the same values.
    source = values.source or "the lock's recorded values"
    spreads = {
        key: ValueSpread(spread.zeros, 0, {int(e): n for e, n in spread.exponents.items()})
        for key, spread in (values.below_normal or {}).items()
    }
    return ValueRanges(
        dict(values.beyond_margin), source, settings.data_max, data_sha256=values.data_sha256, spreads=spreads
    )


def lock_versions(library: OpInfoLibrary) -> LockVersions:
    onnxruntime = installed_onnxruntime()
    return LockVersions(
        ampconfig=__version__,
        onnx=onnx.__version__,
        onnxruntime=onnxruntime[1] if onnxruntime else None,
        op_info=OpInfoVersion(
            target=library.target, onnxruntime=library.onnxruntime_version, sha256=op_info_sha256(library)
        ),
    )


def model_identity(settings: Settings, opened: OpenedModel, lock_dir: Path) -> ModelIdentity:
    fingerprint = model_fingerprint(opened.proto, opened.path)
    example = settings.example
    return ModelIdentity(
        path=None if example is not None else relative_path(settings.model_path, lock_dir),
        example=example,
        source=setting_source(settings, "model"),
        structure_sha256=fingerprint.structure_sha256,
        weights_sha256=fingerprint.weights_sha256,
        nodes=fingerprint.nodes,
        opsets=fingerprint.opsets,
    )


def locked_nodes(result: RewriteResult) -> list[LockedNode]:
    return [
        LockedNode(
            scope=decision.scope,
            name=decision.name,
            op=decision.op_type,
            colour=decision.colour,
            from_dtype=decision.original_dtype,
            dtype=decision.dtype,
            rule=decision.rule.value,
            cause=decision.cause,
        )
        for decision in result.decisions
    ]


def lock_summary(result: RewriteResult) -> LockSummary:
    cost = result.cost
    return LockSummary(
        nodes=len(result.decisions),
        low_precision_nodes=result.low_precision_nodes,
        low_dtype=result.low_dtype,
        casts=cost.casts if cost is not None else result.stats.casts_inserted,
        estimated_us=round(cost.kernel_us + cost.cast_us, 1) if cost is not None else 0.0,
        estimated_float32_us=round(cost.float32_kernel_us, 1) if cost is not None else 0.0,
    )


# ---------------------------------------------------------------------------------------------------- a lock
@dataclass(frozen=True)
class Decided:
    """A lock made now, with the rewrite it records and the op info that decided."""

    lock: PrecisionLock
    result: RewriteResult
    library: OpInfoLibrary


def build_lock(
    settings: Settings, opened: OpenedModel, result: RewriteResult, lock_path: Path, library: OpInfoLibrary
) -> PrecisionLock:
    """The lock of ``result``, the rewrite of ``opened`` with ``settings`` and ``library``, to be written at
    ``lock_path`` (the paths it records are relative to the folder that file really is in)."""
    lock_path = real_location(lock_path)
    lock_dir = lock_path.parent
    return PrecisionLock(
        schema_ref=schema_reference("lock", lock_path),
        format=LOCK_FORMAT,
        format_version=LOCK_FORMAT_VERSION,
        settings=lock_settings(settings, lock_dir),
        versions=lock_versions(library),
        model=model_identity(settings, opened, lock_dir),
        values=lock_values(settings, result, lock_dir, ModelValueNames.of(opened.proto)),
        summary=lock_summary(result),
        nodes=locked_nodes(result),
    )


def decide_lock(
    settings: Settings,
    lock_path: Path,
    *,
    opened: OpenedModel | None = None,
    float16_encoder: Float16Encoder | None = None,
    op_info: OpInfoLibrary | None = None,
    value_ranges: ValueRanges | None = None,
) -> Decided:
    """Decide the model of ``settings`` (``opened``, if the caller opened it already) with ``value_ranges`` and
    make its lock. ``op_info`` replaces the target's built-in op info."""
    opened = opened if opened is not None else open_model(settings.model_path)
    library = op_info if op_info is not None else load_ops_info(settings.target)
    options = replace(settings.rewrite_options, float16_encoder=float16_encoder, op_info=library)
    result = rewrite_with_options(opened, options, MeasuredFacts(value_ranges))
    return Decided(build_lock(settings, opened, result, lock_path, library), result, library)


# ---------------------------------------------------------------------------------------------------- proof
def _significant(value: float | None) -> float | None:
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return float(f"{value:.{PROOF_DIGITS}g}")


def lock_proof(
    settings: Settings, report: RunReport, inputs: list[dict[str, Any]], outputs: list[ProofOutput], lock_dir: Path
) -> LockProof:
    """What a run proved, for the lock: the tolerance, where it ran, the data and each output's error."""
    request = settings.inputs
    npz = request.npz
    return LockProof(
        device=report.device,
        providers=list(report.providers.get("rewritten", [])),
        tolerance=settings.tolerance,
        data=ProofData(
            npz=FileDigest(path=relative_path(npz, lock_dir), sha256=file_sha256(npz)) if npz else None,
            arrays={
                name: FileDigest(path=relative_path(path, lock_dir), sha256=file_sha256(path))
                for name, path in sorted(request.arrays.items())
            },
            shapes={name: list(dims) for name, dims in sorted(request.shapes.items())},
            seed=request.seed,
            inputs=inputs,
        ),
        outputs=outputs,
        passed=report.passed,
    )


def lock_of_run(settings: Settings, report: RunReport, lock_path: Path) -> PrecisionLock:
    """The lock of what ``run`` rewrote, with what it proved: the tolerance, the device, the data and each
    output's error (rounded to :data:`PROOF_DIGITS` significant digits)."""
    if report.rewrite is None:
        raise ValueError("the run report carries no rewrite")  # a bug: prove.run.build_report always sets it
    library = load_ops_info(settings.target)
    lock = build_lock(settings, open_model(settings.model_path), report.rewrite, lock_path, library)
    outputs = [
        ProofOutput(
            name=item.name,
            rel_l2=_significant(item.rel_l2),
            max_abs=_significant(item.max_abs),
            cosine=_significant(item.cosine),
            nonfinite=item.nonfinite,
            passed=not output_failures(item, settings.tolerance),
        )
        for item in report.outputs
    ]
    inputs = [
        {"name": item.name, "dtype": item.dtype, "shape": item.shape, "source": item.source} for item in report.inputs
    ]
    proof = lock_proof(settings, report, inputs, outputs, lock_path.parent)
    return lock.model_copy(update={"proof": proof})


# ---------------------------------------------------------------------------------------------------- again
#: A recorded setting's value, handed back only where the command line gave it.
Given = TypeVar("Given")


def flags_from_lock(lock: PrecisionLock, lock_path: Path) -> Flags:
    """The command line that decides as the lock's maker did, on today's files: what came from the command line
    is given again; what came from the config is left to the config (it may have changed); what was a default
    is left to today's defaults."""
    recorded = lock.settings
    model = lock.model

    def given(value: Given, source: str) -> Given | None:
        return value if source == "command line" else None

    def given_file(record: SettingsFile | None) -> Path | None:
        if record is None or record.source != "command line" or record.path is None:
            return None
        return lock_relative(lock_path, record.path)

    return Flags(
        model=lock_relative(lock_path, model.path) if model.path is not None and model.source != "config" else None,
        config=lock_relative(lock_path, recorded.config.path) if recorded.config is not None else None,
        precision_mode=given(recorded.precision_mode.value, recorded.precision_mode.source),
        modify_mixlist=given_file(recorded.modify_mixlist),
        keep_dtype=given_file(recorded.keep_dtype),
        customize_dtypes=given_file(recorded.customize_dtypes),
        target=given(recorded.target.value, recorded.target.source),
        keep_io_types=given(recorded.keep_io_types.value, recorded.keep_io_types.source),
        op_names=given(recorded.op_names.value, recorded.op_names.source),
        clamp_values=given(recorded.clamp_values.value, recorded.clamp_values.source)
        if recorded.clamp_values is not None
        else None,
        data_max=given(recorded.data_max.value, recorded.data_max.source) if recorded.data_max is not None else None,
        ranges=given_file(lock.values.ranges if lock.values is not None else None),
    )
