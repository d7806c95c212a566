"""``lock --check``: decide again with the settings a lock records, on today's files, and compare.

:func:`prepare_check` reads the lock and resolves its settings (the resolver every command uses, from the flags
the lock records) without deciding anything, so a caller can declare its outputs first; :func:`run_check`
decides and compares. A lock, model or settings file that is missing or unreadable is a located AmpconfigError
(exit 2) that also names the lock's line that records it; so is a lock that cannot have come from ampconfig for
this very model (a node's op that is not the model's, a value the model lacks): :func:`model_contradictions`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import onnx

from ampconfig.decide.ranges_input import read_ranges
from ampconfig.decide.value_limits import ValueRanges
from ampconfig.documents.lock_file import LockDocument, PrecisionLock, load_lock, lock_data, lock_text
from ampconfig.documents.parsing import JsonPath
from ampconfig.errors import AmpconfigError, Problem
from ampconfig.files.hashing import file_sha256
from ampconfig.files.paths import path_kind, resolve_path
from ampconfig.instrument.scopes import ModelValueNames
from ampconfig.lock.causes import SettingsSide
from ampconfig.lock.drift import FieldChange, LockDiff, compare_locks
from ampconfig.lock.record import Decided, decide_lock, flags_from_lock, lock_relative, recorded_ranges
from ampconfig.model_io.models import open_model
from ampconfig.opinfo.library import OpInfoLibrary
from ampconfig.rewrite.tensors import Float16Encoder
from ampconfig.settings.resolve import Settings, require_model, resolve

#: Where a lock whose ranges file is gone differs from the lock made now, as it should: the values came from the
#: lock itself (said in a note), not from the file it names.
_RANGES_GONE: tuple[JsonPath, ...] = (("values", "ranges"), ("values", "source"))
#: What a lock that names what the model does not have is told.
_NOT_THIS_MODELS_HINT = (
    "ampconfig records the model as it reads it, and the model's graph is the one the lock's structure_sha256 "
    "names: restore the lock from version control, or write it again: ampconfig lock MODEL [settings] -o FILE"
)


@dataclass(frozen=True)
class PreparedCheck:
    path: Path
    lock: PrecisionLock
    document: LockDocument
    settings: Settings


@dataclass(frozen=True)
class LockCheck:
    """A lock and the same lock made now, compared."""

    path: Path
    lock: PrecisionLock
    document: LockDocument  # the lock file as parsed: its source map gives each node's line
    decided: Decided
    diff: LockDiff
    settings: Settings
    #: what the check said besides the decisions (a ranges file gone, decided with the lock's recorded values)
    notes: tuple[str, ...] = ()

    @property
    def current(self) -> PrecisionLock:
        """The lock as ``--update`` writes it: made now, with the recorded proof while nothing drifted (the proof
        holds for the same decisions on the same model and data)."""
        fresh = self.decided.lock
        keep_proof = self.lock.proof is not None and not self.diff.drifted
        return fresh.model_copy(update={"proof": self.lock.proof}) if keep_proof else fresh

    @property
    def stale(self) -> bool:
        """Whether the lock file differs from the one ``--update`` would write (settings files and versions
        included: what ``--strict`` fails on)."""
        return lock_data(self.lock) != lock_data(self.current)

    @property
    def text(self) -> str:
        return lock_text(self.current)


def _recorded_where(document: LockDocument, *path: str | int) -> str:
    line = document.source.line_of(tuple(path))
    where = document.source.file or "the lock"
    return f"{where}:{line}" if line is not None else where


def prepare_check(path: Path) -> PreparedCheck:
    """Read the lock and resolve the settings it records; nothing is decided yet."""
    lock, document = load_lock(path)
    flags = flags_from_lock(lock, path)
    try:
        settings = resolve(flags)
        require_model(settings)
    except AmpconfigError as exc:
        raise _with_lock_line(exc, path, lock, document) from None
    _require_the_locked_model(lock, document, settings)
    return PreparedCheck(path, lock, document, settings)


def _require_the_locked_model(lock: PrecisionLock, document: LockDocument, settings: Settings) -> None:
    """A lock of a named model is never checked against the bundled example: when today's config no longer names
    a model, the resolver falls back to the example, and the check would report (and ``--update`` record) a
    different model. Exit 2: the lock cannot be checked until its model is named again."""
    recorded = lock.model.path
    if recorded is None or settings.example is None:
        return
    config = f" {settings.config}" if settings.config is not None else ""
    problem = document.source.problem(
        f"the lock was made for the model {recorded!r} (from the {lock.model.source}), but today's config{config} "
        f"names no model: the check would judge the bundled example {settings.example!r} instead",
        ("model", "path"),
        hint="name the model in the config again, or write a new lock: ampconfig lock MODEL [settings] -o FILE",
    )
    raise AmpconfigError(problem.message, file=document.file, line=problem.line, hint=problem.hint, problems=[problem])


def _with_lock_line(
    exc: AmpconfigError, lock_path: Path, lock: PrecisionLock, document: LockDocument
) -> AmpconfigError:
    """Say where the lock records the file that failed (the error itself names the file)."""
    if exc.file is None:
        return exc
    failed = resolve_path(exc.file)
    settings = lock.settings
    recorded = {
        ("model", "path"): lock.model.path,
        ("settings", "config", "path"): settings.config.path if settings.config else None,
        ("settings", "modify_mixlist", "path"): settings.modify_mixlist.path if settings.modify_mixlist else None,
        ("settings", "keep_dtype", "path"): settings.keep_dtype.path if settings.keep_dtype else None,
        ("settings", "customize_dtypes", "path"): settings.customize_dtypes.path if settings.customize_dtypes else None,
        ("values", "ranges", "path"): lock.values.ranges.path if lock.values and lock.values.ranges else None,
    }
    for json_path, recorded_path in recorded.items():
        if recorded_path is not None and resolve_path(lock_relative(lock_path, recorded_path)) == failed:
            note = f"recorded in {_recorded_where(document, *json_path)}"
            hint = f"{exc.hint}; {note}" if exc.hint else note
            return replace(exc, hint=hint, problems=[replace(problem, hint=hint) for problem in exc.problems])
    return exc


def run_check(
    prepared: PreparedCheck,
    *,
    float16_encoder: Float16Encoder | None = None,
    op_info: OpInfoLibrary | None = None,
) -> LockCheck:
    """Decide with the prepared settings and compare with the lock."""
    settings = prepared.settings
    try:
        opened = open_model(settings.model_path)
        # The ranges file when one is given today and is there, else the values the lock recorded (every value
        # that decided: beyond the margin, or below the normal range): the model never runs.
        notes: tuple[str, ...] = ()
        ranges: ValueRanges | None
        ranges_gone = settings.ranges is not None and path_kind(settings.ranges) == "missing"
        if settings.ranges is not None and not ranges_gone:
            ranges = read_ranges(settings.ranges, opened.proto, settings.data_max, model_path=opened.path)
        else:
            ranges = recorded_ranges(prepared.lock, settings)
            if ranges_gone:
                notes = (
                    f"the value ranges file {settings.ranges} the lock names is gone: decided with the values the "
                    "lock recorded (those beyond the margin and those below the normal range)",
                )

        decided = decide_lock(
            settings,
            prepared.path,
            opened=opened,
            float16_encoder=float16_encoder,
            op_info=op_info,
            value_ranges=ranges,
        )
        side = SettingsSide.read(prepared.settings)
        proof_data = proof_data_changes(prepared.lock, prepared.path)
    except AmpconfigError as exc:
        raise _with_lock_line(exc, prepared.path, prepared.lock, prepared.document) from None
    problems = model_contradictions(prepared.lock, prepared.document, decided.lock, opened.proto)
    if problems:
        raise AmpconfigError(problems[0].message, file=prepared.document.file, problems=problems)
    diff = compare_locks(prepared.lock, decided.lock, side, settled=_RANGES_GONE if ranges_gone else ())
    diff.fields.extend(proof_data)
    return LockCheck(prepared.path, prepared.lock, prepared.document, decided, diff, prepared.settings, notes)


def model_contradictions(
    lock: PrecisionLock, document: LockDocument, now: PrecisionLock, model: onnx.ModelProto
) -> list[Problem]:
    """What the lock says of its model that the model it names contradicts: a node's op that is not the op of the
    model's node of that name, a value key that names no value of the model. Judged only when the model's graph
    is the one the lock was made for (its structure digest): a re-exported model differs from its lock, and that
    is drift. ``now`` is the lock made now from ``model`` (the nodes as ampconfig names them)."""
    if lock.model.structure_sha256 != now.model.structure_sha256:
        return []
    problems = []
    ops = {(node.scope, node.name): node.op for node in now.nodes}
    for index, node in enumerate(lock.nodes):
        op = ops.get((node.scope, node.name))
        if op is not None and op != node.op:
            where = f" in {node.scope!r}" if node.scope else ""
            problems.append(
                document.source.problem(
                    f"the model's node {node.name!r}{where} has op {op}, not {node.op}",
                    ("nodes", index, "op"),
                    hint=_NOT_THIS_MODELS_HINT,
                )
            )
    values = lock.values
    if values is not None:
        names = ModelValueNames.of(model)
        for section, keys in (("beyond_margin", values.beyond_margin), ("below_normal", values.below_normal or {})):
            for key in keys:
                if key not in names:
                    problems.append(
                        document.source.problem(
                            f"the model has no value {key!r}", ("values", section, key), hint=_NOT_THIS_MODELS_HINT
                        )
                    )
    return problems


def proof_data_changes(lock: PrecisionLock, lock_path: Path) -> list[FieldChange]:
    """Each input file of the recorded proof that is there today and no longer has the recorded digest: the proof
    ran on other data (a file that is gone is not judged: inputs need not travel with the lock)."""
    if lock.proof is None:
        return []
    data = lock.proof.data
    records: list[tuple[JsonPath, str, str]] = [
        (("proof", "data", "arrays", name, "sha256"), record.path, record.sha256)
        for name, record in data.arrays.items()
    ]
    if data.npz is not None:
        records.insert(0, (("proof", "data", "npz", "sha256"), data.npz.path, data.npz.sha256))
    changes = []
    for json_path, recorded, digest in records:
        file = lock_relative(lock_path, recorded)
        if path_kind(file) == "file" and (now := file_sha256(file)) != digest:
            changes.append(FieldChange(json_path, digest, now, fails=True))
    return changes


def check_lock(
    path: Path, *, float16_encoder: Float16Encoder | None = None, op_info: OpInfoLibrary | None = None
) -> LockCheck:
    """:func:`prepare_check` and :func:`run_check` in one."""
    return run_check(prepare_check(path), float16_encoder=float16_encoder, op_info=op_info)
