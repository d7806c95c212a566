"""``ampconfig diff``: two sets of settings on one model (or two lock files), compared as a lock check compares,
without a lock on disk; optionally with the error of both sides on the same inputs.

Both sides are resolved by the one settings resolver from the same flags, the base side with its ``--base-*``
values in place of the others, so they read the same model with the same inputs (``run.inputs``, ``--shape``,
and whatever else the resolver learns to feed a run).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ampconfig.decide.value_limits import ValueRanges
from ampconfig.documents.lock_file import PrecisionLock, load_lock
from ampconfig.errors import AmpconfigError
from ampconfig.files.hashing import file_sha256
from ampconfig.files.paths import path_kind
from ampconfig.lock.causes import SettingsSide
from ampconfig.lock.check import prepare_check
from ampconfig.lock.drift import LockDiff, compare_locks
from ampconfig.lock.record import decide_lock, lock_relative
from ampconfig.model_io.models import open_model
from ampconfig.prove.accuracy import output_failures
from ampconfig.rewrite.tensors import Float16Encoder
from ampconfig.settings.resolve import Settings

#: Where in-memory locks of ``diff`` pretend to live: paths they record are relative to the working directory.
_HERE = Path("diff.lock.json")


@dataclass(frozen=True)
class SidesDiff:
    diff: LockDiff
    base: Settings | None
    new: Settings | None
    #: what deciding the sides said about the values they read (a ranges file's coverage), each once
    warnings: list[str] = field(default_factory=list)


def diff_settings(
    base: Settings,
    new: Settings,
    *,
    float16_encoder: Float16Encoder | None = None,
    value_ranges: tuple[ValueRanges | None, ValueRanges | None] = (None, None),
) -> SidesDiff:
    """Decide the model with both settings (and each side's value ranges) and compare; causes name lines of both
    sides' files."""
    opened = open_model(new.model_path)
    base_opened = opened if base.model_path == new.model_path else open_model(base.model_path)
    base_ranges, new_ranges = value_ranges
    old = decide_lock(base, _HERE, opened=base_opened, float16_encoder=float16_encoder, value_ranges=base_ranges)
    now = decide_lock(new, _HERE, opened=opened, float16_encoder=float16_encoder, value_ranges=new_ranges)
    diff = compare_locks(old.lock, now.lock, SettingsSide.read(new), SettingsSide.read(base))
    values = _ranges_warnings(old.result.warnings) + _ranges_warnings(now.result.warnings)
    return SidesDiff(diff, base, new, list(dict.fromkeys(values)))


def _ranges_warnings(warnings: list[str]) -> list[str]:
    """The warnings about the value ranges a side decided with (what a ranges file does not cover)."""
    return [warning for warning in warnings if "ranges file" in warning]


def _side_of(lock: PrecisionLock, path: Path) -> SettingsSide | None:
    """The settings a lock records, read for their lines, when today's files are still the ones it recorded."""
    settings = lock.settings
    records = [settings.config, settings.modify_mixlist, settings.keep_dtype, settings.customize_dtypes]
    for record in records:
        if record is None or record.path is None:
            continue
        file = lock_relative(path, record.path)
        try:
            if path_kind(file) != "file" or file_sha256(file) != record.sha256:
                return None
        except OSError:  # unreadable: its lines cannot be named either
            return None
    try:
        return SettingsSide.read(prepare_check(path).settings)
    except AmpconfigError:
        return None


def diff_lock_files(base: Path, new: Path) -> SidesDiff:
    """Two lock files compared; causes name settings lines where the files they record are unchanged."""
    old_lock, _ = load_lock(base)
    new_lock, _ = load_lock(new)
    base_side, new_side = _side_of(old_lock, base), _side_of(new_lock, new)
    diff = compare_locks(old_lock, new_lock, new_side, base_side)
    return SidesDiff(diff, base_side.settings if base_side else None, new_side.settings if new_side else None)


def _error_fields(item: Any, settings: Settings) -> dict[str, Any]:
    return {
        "rel_l2": item.rel_l2,
        "max_abs": item.max_abs,
        "cosine": item.cosine,
        "passed": not output_failures(item, settings.tolerance),
    }


def run_both(base: Settings, new: Settings, labels: tuple[str, str]) -> dict[str, Any]:
    """Each side rewritten and run against the float32 model on the same inputs (one timed run each: only the
    error is wanted). Nothing is written."""
    from ampconfig.prove.run import execute  # ONNX Runtime: only when asked to run

    reports = [execute(replace(side, output=None, warmup=0, iterations=1)) for side in (base, new)]
    outputs = []
    for base_item, new_item in zip(reports[0].outputs, reports[1].outputs):
        outputs.append(
            {
                "name": new_item.name,
                labels[0]: _error_fields(base_item, base),
                labels[1]: _error_fields(new_item, new),
            }
        )
    return {"device": reports[1].device, "outputs": outputs}
