"""Comparing two locks: which nodes changed dtype or rule (old -> new, with the cause), which were added or
removed, how the casts and the estimated time moved, what moved underneath (settings files, op info, model,
versions), and every other recorded value that differs, by its JSON path (:class:`FieldChange`). ``lock --check``
compares the lock on disk with one made now; ``diff`` two sets of settings.

Nodes are matched by scope and name. Pure data.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ampconfig.documents.lock_file import LockedNode, PrecisionLock, lock_data
from ampconfig.documents.parsing import JsonPath, format_json_path
from ampconfig.lock.causes import Attributor, Cause, SettingsSide, global_causes

#: The summary figures a comparison reports, in order.
SUMMARY_FIELDS = ("low_precision_nodes", "casts", "estimated_us", "estimated_float32_us")
#: A node's recorded fields, as the lock names them, in the order a report lists them.
NODE_FIELDS = ("op", "colour", "from", "dtype", "rule", "cause")
#: Parts of a lock compared elsewhere: the nodes one by one, the summary figures as figures, the proof as a whole
#: (kept while nothing drifted).
_COMPARED_APART: frozenset[JsonPath] = frozenset(
    {("nodes",), ("proof",), *(("summary", name) for name in SUMMARY_FIELDS)}
)


@dataclass(frozen=True)
class NodeChange:
    """One node whose decision differs: ``old`` is None for a node added, ``new`` None for one removed."""

    old: LockedNode | None
    new: LockedNode | None
    old_index: int | None
    new_index: int | None
    cause: Cause

    @property
    def node(self) -> LockedNode:
        node = self.new or self.old
        assert node is not None
        return node

    @property
    def kind(self) -> str:
        """added, removed, dtype (the dtype changed), rule (the rule did, not the dtype) or record (neither: the
        node's other recorded fields, its op, colour, original dtype or cause)."""
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        if self.old.dtype != self.new.dtype:
            return "dtype"
        return "rule" if self.old.rule != self.new.rule else "record"

    @property
    def fields(self) -> list[FieldChange]:
        """Each recorded field of a node on both sides that differs, at its JSON path in the old side's lock (the
        checked lock file, or the base of ``diff``)."""
        if self.old is None or self.new is None or self.old_index is None:
            return []
        was, now = _node_record(self.old), _node_record(self.new)
        return [
            FieldChange(("nodes", self.old_index, name), was[name], now[name], fails=True)
            for name in NODE_FIELDS
            if was[name] != now[name]
        ]

    def to_dict(self) -> dict[str, Any]:
        node = self.node
        return {
            "scope": node.scope,
            "name": node.name,
            "op": node.op,
            "change": self.kind,
            "json_path": f"$.nodes[{self.old_index}]" if self.old_index is not None else None,
            "old": _node_fields(self.old),
            "new": _node_fields(self.new),
            "fields": [change.to_dict() for change in self.fields],
            "cause": self.cause.to_dict(),
        }


def _node_record(node: LockedNode) -> dict[str, Any]:
    return node.model_dump(mode="json", by_alias=True)


def _node_fields(node: LockedNode | None) -> dict[str, Any] | None:
    if node is None:
        return None
    return {"op": node.op, "dtype": node.dtype, "rule": node.rule, "colour": node.colour, "cause": node.cause}


@dataclass(frozen=True)
class FieldChange:
    """A recorded value that differs between two locks: where it is in the old one, its old and new values (None
    where absent), and whether it fails a check. Tool versions, the format version and the schema reference do not
    (``--strict`` fails on them): they move when ampconfig or its dependencies are upgraded, not the decisions."""

    path: JsonPath
    old: Any
    new: Any
    fails: bool

    @property
    def json_path(self) -> str:
        return format_json_path(self.path)

    def to_dict(self) -> dict[str, Any]:
        return {"json_path": self.json_path, "old": self.old, "new": self.new, "fails": self.fails}


@dataclass(frozen=True)
class FileChange:
    """A settings file whose content (or presence) differs between the two locks."""

    setting: str  # "config", "modify_mixlist", "keep_dtype", "customize_dtypes"
    old: str | None  # path (or "inline") and short digest, None when absent
    new: str | None


@dataclass
class LockDiff:
    old: PrecisionLock
    new: PrecisionLock
    changes: list[NodeChange] = field(default_factory=list)
    moved: list[Cause] = field(default_factory=list)  # settings values, op info, model, versions
    files: list[FileChange] = field(default_factory=list)
    #: every other recorded value that differs (settings, files' digests, model identity, values, versions, ...)
    fields: list[FieldChange] = field(default_factory=list)

    @property
    def dtype_changed(self) -> list[NodeChange]:
        return [change for change in self.changes if change.kind == "dtype"]

    @property
    def rule_changed(self) -> list[NodeChange]:
        return [change for change in self.changes if change.kind == "rule"]

    @property
    def added(self) -> list[NodeChange]:
        return [change for change in self.changes if change.kind == "added"]

    @property
    def removed(self) -> list[NodeChange]:
        return [change for change in self.changes if change.kind == "removed"]

    def summary_delta(self) -> dict[str, tuple[Any, Any]]:
        """Every summary figure, old and new (unchanged ones too: a report shows casts and time either way)."""
        return {name: (getattr(self.old.summary, name), getattr(self.new.summary, name)) for name in SUMMARY_FIELDS}

    @property
    def model_changed(self) -> bool:
        old, new = self.old.model, self.new.model
        return old.structure_sha256 != new.structure_sha256 or old.weights_sha256 != new.weights_sha256

    @property
    def decisions_changed(self) -> bool:
        """A node's dtype or rule, a node added or removed, or a summary figure (what ``diff --exit-code`` fails
        on; a node's colour or cause alone is no other decision)."""
        summary = {name: pair for name, pair in self.summary_delta().items() if pair[0] != pair[1]}
        return any(change.kind != "record" for change in self.changes) or bool(summary)

    @property
    def record_changed(self) -> list[NodeChange]:
        return [change for change in self.changes if change.kind == "record"]

    @property
    def failing_fields(self) -> list[FieldChange]:
        return [change for change in self.fields if change.fails]

    @property
    def drifted(self) -> bool:
        """What ``lock --check`` fails on: a decision, a node's record, a summary figure, the model or any other
        recorded value changed (a setting, a settings file's digest, the values). Versions, the format version
        and the schema reference that moved alone are reported, not failed (``--strict`` fails them too)."""
        return self.decisions_changed or bool(self.record_changed) or self.model_changed or bool(self.failing_fields)

    def causes(self) -> list[tuple[Cause, list[NodeChange]]]:
        """Each distinct cause with the changes it explains, in order of first appearance."""
        grouped: dict[tuple[str, str, str | None, int | None], tuple[Cause, list[NodeChange]]] = {}
        for change in self.changes:
            grouped.setdefault(change.cause.key, (replace(change.cause, via=None), []))[1].append(change)
        return list(grouped.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "changed": [change.to_dict() for change in self.dtype_changed],
            "rule_changed": [change.to_dict() for change in self.rule_changed],
            "added": [change.to_dict() for change in self.added],
            "removed": [change.to_dict() for change in self.removed],
            "record_changed": [change.to_dict() for change in self.record_changed],
            "fields": [change.to_dict() for change in self.fields],
            "summary": {name: {"old": old, "new": new} for name, (old, new) in self.summary_delta().items()},
            "model": {
                "structure_changed": self.old.model.structure_sha256 != self.new.model.structure_sha256,
                "weights_changed": self.old.model.weights_sha256 != self.new.model.weights_sha256,
            },
            "moved": [cause.to_dict() for cause in self.moved],
            "files": [{"setting": item.setting, "old": item.old, "new": item.new} for item in self.files],
            "causes": [
                {**cause.to_dict(), "nodes": [change.node.name for change in changes]}
                for cause, changes in self.causes()
            ],
        }


def _walk(old: Any, new: Any, path: JsonPath) -> Iterator[tuple[JsonPath, Any, Any]]:
    """Each leaf (or object present on one side only) where ``old`` and ``new`` differ, with its path."""
    if path in _COMPARED_APART:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(key for key in new if key not in old)]:
            yield from _walk(old.get(key), new.get(key), (*path, key))
    elif old != new:
        yield path, old, new


def _fails(path: JsonPath, old: PrecisionLock, new: PrecisionLock, settled: Collection[JsonPath]) -> bool:
    """Whether a recorded value that differs fails a check (see :class:`FieldChange`)."""
    if path[0] in ("$schema", "format_version") or any(path[: len(prefix)] == prefix for prefix in settled):
        return False
    if path[:2] == ("values", "below_normal") and old.format_version == 1:
        return False  # format 1 recorded no spreads: the decisions say whether they matter
    if path == ("versions", "op_info", "sha256"):
        # The op info ships with ampconfig: at the same release of both, another digest is not an upgrade.
        was, now = old.versions, new.versions
        return was.ampconfig == now.ampconfig and was.op_info.onnxruntime == now.op_info.onnxruntime
    return path[0] != "versions"


def field_changes(old: PrecisionLock, new: PrecisionLock, settled: Collection[JsonPath] = ()) -> list[FieldChange]:
    """Every recorded value outside the nodes, the summary figures and the proof that differs, in the order of
    the lock. ``settled``: paths whose difference is explained and fails nothing (a ranges file that is gone)."""
    return [
        FieldChange(path, was, now, _fails(path, old, new, settled))
        for path, was, now in _walk(lock_data(old), lock_data(new), ())
    ]


def _file_label(record: Any) -> str | None:
    if record is None:
        return None
    where = "inline in the config" if getattr(record, "path", None) is None else record.path
    return f"{where} ({record.sha256[:12]})"


def _file_changes(old: PrecisionLock, new: PrecisionLock) -> list[FileChange]:
    changes = []
    for name in ("config", "modify_mixlist", "keep_dtype", "customize_dtypes"):
        was, now = getattr(old.settings, name), getattr(new.settings, name)
        if (was.sha256 if was else None) != (now.sha256 if now else None):
            changes.append(FileChange(name, _file_label(was), _file_label(now)))
    return changes


def compare_locks(
    old: PrecisionLock,
    new: PrecisionLock,
    side: SettingsSide | None = None,
    base: SettingsSide | None = None,
    *,
    settled: Collection[JsonPath] = (),
) -> LockDiff:
    """How ``new`` differs from ``old``. ``side`` holds the documents ``new`` was decided with (their lines name
    causes), ``base`` those of ``old`` where they are known; ``settled`` as for :func:`field_changes`."""
    old_at = {(node.scope, node.name): index for index, node in enumerate(old.nodes)}
    new_at = {(node.scope, node.name): index for index, node in enumerate(new.nodes)}
    pairs: list[tuple[LockedNode | None, LockedNode | None, int | None, int | None]] = []
    for key, index in new_at.items():  # in the new graph's order; removed nodes after, in the old order
        before = old_at.get(key)
        now = new.nodes[index]
        if before is None:
            pairs.append((None, now, None, index))
        elif old.nodes[before] != now:
            pairs.append((old.nodes[before], now, before, index))
    pairs.extend((old.nodes[index], None, index, None) for key, index in old_at.items() if key not in new_at)
    attributor = Attributor(old, new, side, base)
    causes = attributor.attribute([(was, now) for was, now, _, _ in pairs])
    changes = [
        NodeChange(was, now, old_index, new_index, cause)
        for (was, now, old_index, new_index), cause in zip(pairs, causes)
    ]
    moved, files = global_causes(old, new, side), _file_changes(old, new)
    return LockDiff(old, new, changes, moved, files, field_changes(old, new, settled))
