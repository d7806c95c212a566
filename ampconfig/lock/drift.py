"""Comparing two locks: which nodes changed dtype or rule (old -> new, with the cause), which were added or
removed, how the casts and the estimated time moved, and what moved underneath (settings files, op info, model,
versions). ``lock --check`` compares the lock on disk with one made now; ``diff`` two sets of settings.

Nodes are matched by scope and name. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ampconfig.lock.causes import Attributor, Cause, SettingsSide, global_causes
from ampconfig.settings.lock_file import LockedNode, PrecisionLock

#: The summary figures a comparison reports, in order.
SUMMARY_FIELDS = ("low_precision_nodes", "casts", "estimated_us", "estimated_float32_us")


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
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        return "dtype" if self.old.dtype != self.new.dtype else "rule"

    def to_dict(self) -> dict[str, Any]:
        node = self.node
        return {
            "scope": node.scope,
            "name": node.name,
            "op": node.op,
            "change": self.kind,
            "old": _node_fields(self.old),
            "new": _node_fields(self.new),
            "cause": self.cause.to_dict(),
        }


def _node_fields(node: LockedNode | None) -> dict[str, Any] | None:
    if node is None:
        return None
    return {"dtype": node.dtype, "rule": node.rule, "colour": node.colour, "cause": node.cause}


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
        summary = {name: pair for name, pair in self.summary_delta().items() if pair[0] != pair[1]}
        return bool(self.changes) or bool(summary)

    @property
    def drifted(self) -> bool:
        """What ``lock --check`` fails on: a decision, a summary figure or the model changed. A settings file or
        a version that moved without changing any of them is reported, not failed (``--strict`` fails it too)."""
        return self.decisions_changed or self.model_changed

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


def _decided_alike(old: LockedNode, new: LockedNode) -> bool:
    return old.dtype == new.dtype and old.rule == new.rule


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
    old: PrecisionLock, new: PrecisionLock, side: SettingsSide | None = None, base: SettingsSide | None = None
) -> LockDiff:
    """How ``new`` differs from ``old``. ``side`` holds the documents ``new`` was decided with (their lines name
    causes), ``base`` those of ``old`` where they are known."""
    old_at = {(node.scope, node.name): index for index, node in enumerate(old.nodes)}
    new_at = {(node.scope, node.name): index for index, node in enumerate(new.nodes)}
    pairs: list[tuple[LockedNode | None, LockedNode | None, int | None, int | None]] = []
    for key, index in new_at.items():  # in the new graph's order; removed nodes after, in the old order
        before = old_at.get(key)
        now = new.nodes[index]
        if before is None:
            pairs.append((None, now, None, index))
        elif not _decided_alike(old.nodes[before], now):
            pairs.append((old.nodes[before], now, before, index))
    pairs.extend((old.nodes[index], None, index, None) for key, index in old_at.items() if key not in new_at)
    attributor = Attributor(old, new, side, base)
    causes = attributor.attribute([(was, now) for was, now, _, _ in pairs])
    changes = [
        NodeChange(was, now, old_index, new_index, cause)
        for (was, now, old_index, new_index), cause in zip(pairs, causes)
    ]
    return LockDiff(old, new, changes, global_causes(old, new, side), _file_changes(old, new))
