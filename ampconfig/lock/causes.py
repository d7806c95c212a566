"""Why a decision changed: the settings line, the op info, the model or the version that moved it.

A :class:`SettingsSide` holds the documents one side of a comparison was decided with (the mixlist with its lines,
the keep_dtype entries with theirs, the config's key lines), so a cause can name the file and line a person
edits. ``lock --check`` knows only today's files (the lock keeps hashes, not contents); ``diff`` knows both sides.

Pure: documents and two locks in, :class:`Cause` values out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ampconfig.documents.customize_dtypes_file import CustomizeFile, load_customize_dtypes
from ampconfig.documents.keep_dtype_file import (
    KeepDtypeEntry,
    keep_dtype_list_problems,
    load_keep_dtype,
    read_keep_dtype_names,
)
from ampconfig.documents.lock_file import LockedNode, LockValues, PrecisionLock
from ampconfig.documents.mixlist_file import Mixlist, MixlistEntry, entries_by_op, load_mixlist
from ampconfig.documents.parsing import SourceMap
from ampconfig.documents.session_config import SessionConfig, load_session_config
from ampconfig.settings.resolve import Settings

#: How far a cause is followed from neighbour to neighbour before giving up.
MAX_CAUSE_STEPS = 64
#: Rules that read the op info's kernels and schemas: a change of one of them is the op info's, or the graph's.
_KERNEL_RULES = frozenset({"no_low_kernel", "schema_forbids", "no_origin_kernel", "op_keeps_dtype", "no_schema"})
#: What can move a node's own colour or kernel besides a settings file.
#: Rules the value ranges decide.
_VALUE_RULES = frozenset(
    {"range_exceeds", "range_underflows", "log_domain_precision", "integer_accumulator_bound"}
)  # data can move each: a measured peak narrows an accumulator's bound
_UNDERNEATH = ("op_info", "model_structure", "model_weights", "versions")


@dataclass(frozen=True)
class Cause:
    """What changed a decision: ``kind`` (mixlist, keep_dtype, customize_dtypes, config, op_info, model_structure,
    model_weights, versions, unknown), in words, and where to look (file and line) when it is a line of a file."""

    kind: str
    message: str
    file: str | None = None
    line: int | None = None
    via: str | None = None  # the changed neighbour the decision follows, when it is not the node's own cause

    @property
    def key(self) -> tuple[str, str, str | None, int | None]:
        """What groups changes by cause (whichever neighbour they came through)."""
        return (self.kind, self.message, self.file, self.line)

    def through(self, node: str) -> Cause:
        return Cause(self.kind, self.message, self.file, self.line, node)

    def location(self) -> str:
        if self.file is None:
            return ""
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "message": self.message, "file": self.file, "line": self.line, "via": self.via}


@dataclass(frozen=True)
class KeepLine:
    entry: KeepDtypeEntry
    file: str | None
    line: int | None


@dataclass
class SettingsSide:
    """The settings documents of one side, read for their lines (not to decide: the resolver did that)."""

    settings: Settings
    mixlist: Mixlist | None = None
    keep: list[KeepLine] = field(default_factory=list)
    config: SessionConfig | None = None
    customize: CustomizeFile | None = None

    @classmethod
    def read(cls, settings: Settings) -> SettingsSide:
        config = load_session_config(settings.config) if settings.config is not None else None
        mixlist = settings.modify_mixlist
        if isinstance(mixlist, Path):
            mixlist = load_mixlist(mixlist)
        given = settings.customize_dtypes
        customize = load_customize_dtypes(given, settings.op_names) if given is not None else None
        return cls(settings, mixlist, _keep_lines(settings, config), config, customize)

    def customize_cause(self, node: LockedNode, removed: bool = False) -> Cause | None:
        """The customize_dtypes line that names the node (or its op type), as a cause."""
        if self.customize is None:
            return None
        for entry in self.customize.entries:
            if entry.name == node.name or (entry.op_type is not None and entry.op_type == node.op):
                verb = "no longer sets" if removed else "sets"
                message = f"customize_dtypes entry {entry.target} {verb} its dtypes"
                return Cause("customize_dtypes", message, self.customize.source, entry.line)
        return None

    def mixlist_entries(self, op: str) -> list[MixlistEntry]:
        if self.mixlist is None:
            return []
        return entries_by_op(self.mixlist, self.settings.op_names).get(op, [])

    def mixlist_cause(self, op: str, removed: bool = False) -> Cause | None:
        """The mixlist line that names ``op`` (the first; an op's entries combine), as a cause."""
        entries = self.mixlist_entries(op)
        if not entries or self.mixlist is None:
            return None
        origin = self.mixlist.origin
        edits = " + ".join(f"{entry.edit.describe()} {entry.written}" for entry in entries)
        message = f"the base mixlist's {edits} is gone" if removed else f"mixlist {edits}"
        return Cause("mixlist", message, origin.file, origin.line_of(entries[0].path))

    def keep_cause(self, node: LockedNode, removed: bool = False) -> Cause | None:
        for item in self.keep:
            if item.entry.matches(node.name, node.op):
                verb = "no longer pins" if removed else "pins"
                return Cause("keep_dtype", f"keep_dtype entry {item.entry} {verb} it", item.file, item.line)
        return None

    def key_line(self, *keys: str) -> tuple[str | None, int | None]:
        """The config file and the line of the first of ``keys`` it sets (None, None without a config)."""
        if self.config is None or self.settings.config is None:
            return None, None
        lines = [self.config.source.lines.get((key,)) for key in keys]
        return str(self.settings.config), next((line for line in lines if line is not None), None)


def _keep_lines(settings: Settings, config: SessionConfig | None) -> list[KeepLine]:
    """The pins with their file and line; ``OpType::`` entries read as ONNX ops (TensorFlow/Ascend names mapped)."""
    keep = settings.keep_dtype
    if keep is None:
        return []
    if isinstance(keep, Path):
        found = [KeepLine(entry, str(keep), entry.line) for entry in load_keep_dtype(keep)]
    else:
        origin = config.source.nested(("keep_dtype",)) if config is not None else None
        entries, _ = keep_dtype_list_problems(list(keep), origin)
        file = str(settings.config) if settings.config is not None else None
        lines = [origin.line_of((index,)) if origin is not None else None for index in range(len(keep))]
        found = [KeepLine(entry, file, line) for entry, line in zip(entries, lines)]
    read: list[KeepLine] = []
    for item in found:
        mapped, _ = read_keep_dtype_names([item.entry], settings.op_names, SourceMap(item.file))
        read.extend(KeepLine(entry, item.file, item.line) for entry in mapped)
    return read


# ------------------------------------------------------------------------------------------- the global moves
def _short(digest: str) -> str:
    return digest[:12]


def global_causes(old: PrecisionLock, new: PrecisionLock, side: SettingsSide | None) -> list[Cause]:
    """What moved between two locks as a whole, most decisive first: the settings values, the op info, the
    model, the versions. A node change nothing more specific explains is put down to the first of these."""
    causes: list[Cause] = []
    before, after = old.settings, new.settings
    for name, keys in (
        ("precision_mode", ("precision_mode", "precision_mode_v2")),
        ("target", ("target",)),
        ("keep_io_types", ("keep_io_types",)),
        ("op_names", ("op_names",)),
    ):
        was, now = getattr(before, name).value, getattr(after, name).value
        if was != now:
            file, line = side.key_line(*keys) if side is not None else (None, None)
            if getattr(after, name).source != "config":
                file, line = None, None
            causes.append(Cause("config", f"{name.replace('_', ' ')} {was} -> {now}", file, line))
    for name, keys in (("clamp_values", ("clamp_values",)), ("data_max", ("data_max",))):
        was_setting, now_setting = getattr(before, name), getattr(after, name)
        was = was_setting.value if was_setting is not None else None
        now = now_setting.value if now_setting is not None else None
        if (was or None) != (now or None):
            file, line = side.key_line(*keys) if side is not None else (None, None)
            if now_setting is None or now_setting.source != "config":
                file, line = None, None
            causes.append(Cause("config", f"{name.replace('_', ' ')} {was} -> {now}", file, line))
    values = values_cause(old, new, side)
    if values is not None:
        causes.append(values)
    was_info, now_info = old.versions.op_info, new.versions.op_info
    if was_info.sha256 != now_info.sha256:
        release = (
            f"ONNX Runtime {was_info.onnxruntime} -> {now_info.onnxruntime}"
            if was_info.onnxruntime != now_info.onnxruntime
            else f"ONNX Runtime {now_info.onnxruntime}, content {_short(was_info.sha256)} -> {_short(now_info.sha256)}"
        )
        causes.append(Cause("op_info", f"op info for {now_info.target} changed ({release})"))
    if old.model.structure_sha256 != new.model.structure_sha256:
        causes.append(Cause("model_structure", "the model's graph structure changed", _model_file(new, side)))
    elif old.model.weights_sha256 != new.model.weights_sha256:
        causes.append(
            Cause("model_weights", "the model's weights changed (graph structure unchanged)", _model_file(new, side))
        )
    for name in ("ampconfig", "onnx", "onnxruntime"):
        was, now = getattr(old.versions, name), getattr(new.versions, name)
        if was != now:
            causes.append(Cause("versions", f"{name} {was} -> {now}"))
    return causes


def values_cause(old: PrecisionLock, new: PrecisionLock, side: SettingsSide | None) -> Cause | None:
    """What moved in the value ranges the decisions read: the ranges file's content, where the ranges came from,
    or the values beyond the margin."""
    was, now = old.values, new.values
    if was is None or now is None:
        return None
    file = str(side.settings.ranges) if side is not None and side.settings.ranges is not None else None
    was_file, now_file = was.ranges, now.ranges
    if was_file is not None and now_file is not None:
        if was_file.sha256 != now_file.sha256:
            return Cause(
                "ranges",
                f"the value ranges file changed ({_short(was_file.sha256)} -> {_short(now_file.sha256)})",
                file,
            )
        return None
    if (was_file is None) != (now_file is None) or was.checked != now.checked:
        return Cause(
            "ranges", f"the value ranges now come from {_values_origin(now)} (were {_values_origin(was)})", file
        )
    moved = was.beyond_margin != now.beyond_margin or (was.below_normal or {}) != (now.below_normal or {})
    if moved or was.data_sha256 != now.data_sha256:
        return Cause("ranges", "the recorded value ranges changed", file)
    return None


def _values_origin(values: LockValues) -> str:
    if values.ranges is not None:
        return f"the ranges file {values.ranges.path}"
    return f"data ({values.source})" if values.checked else "nothing: activations not checked"


def _model_file(lock: PrecisionLock, side: SettingsSide | None) -> str | None:
    if side is None or lock.model.example is not None:
        return None
    return str(side.settings.model_path)


# ------------------------------------------------------------------------------------------- one node at a time
@dataclass
class Attributor:
    """Finds the cause of each node change of one comparison."""

    old: PrecisionLock
    new: PrecisionLock
    side: SettingsSide | None  # today's (or the compared) settings
    base: SettingsSide | None = None  # the base side's settings, when known (``diff``)
    globals_: list[Cause] = field(default_factory=list)
    roots: dict[tuple[str, str], Cause] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.globals_ = global_causes(self.old, self.new, self.side)
        self.old_by_name = {(node.scope, node.name): node for node in self.old.nodes}
        self.new_by_name = {(node.scope, node.name): node for node in self.new.nodes}

    @property
    def settings_moved(self) -> list[Cause]:
        """The settings values that moved (mode, target, keep_io_types): they decide every node."""
        return [cause for cause in self.globals_ if cause.kind == "config"]

    def direct(self, old: LockedNode | None, new: LockedNode | None) -> Cause | None:
        """A cause that belongs to this node itself: a keep_dtype pin or a mixlist line naming its op type."""
        if self.settings_moved:
            return self.settings_moved[0]
        if old is None or new is None:
            return None
        for rule in ("customized", "keep_dtype"):  # Ascend's precedence: customize_dtypes over keep_dtype
            if new.rule == rule and old.rule != rule:
                return self._pinned(rule, new, removed=False)
            if old.rule == rule and new.rule != rule:
                return self._pinned(rule, old, removed=True)
        if {old.rule, new.rule} & _VALUE_RULES:
            found = next((cause for cause in self.globals_ if cause.kind == "ranges"), None)
            if found is not None:
                return found
        colour_moved = old.colour != new.colour
        if colour_moved or {old.rule, new.rule} & {"white_list", "black_list"}:
            found = self._mixlist(new.op, colour_moved)
            if found is not None:
                return found
        if colour_moved or {old.rule, new.rule} & _KERNEL_RULES:
            # The node's own colour or kernel moved, and no settings file says so: what moved underneath.
            return next((cause for cause in self.globals_ if cause.kind in _UNDERNEATH), None)
        return None

    def _pinned(self, rule: str, node: LockedNode, removed: bool) -> Cause:
        """The keep_dtype (rule ``keep_dtype``) or customize_dtypes (``customized``) line that pins the node now,
        or pinned it on the base side."""
        side = self.base if removed else self.side
        if side is not None:
            found = side.customize_cause(node, removed) if rule == "customized" else side.keep_cause(node, removed)
            if found is not None:
                return found
        verb = "is no longer" if removed else "is"
        if rule == "customized":
            file = self.side.customize.source if self.side is not None and self.side.customize else None
            return Cause("customize_dtypes", f"the node {verb} set by customize_dtypes", file)
        file = _keep_file(self.side) if self.side is not None else None
        return Cause("keep_dtype", f"the node {verb} pinned by keep_dtype", file)

    def _mixlist(self, op: str, colour_moved: bool) -> Cause | None:
        found = self.side.mixlist_cause(op) if self.side is not None else None
        if found is None and self.base is not None:
            found = self.base.mixlist_cause(op, removed=True)
        if found is not None:
            return found
        old_record, new_record = self.old.settings.modify_mixlist, self.new.settings.modify_mixlist
        mixlist_moved = (old_record.sha256 if old_record else None) != (new_record.sha256 if new_record else None)
        if colour_moved and mixlist_moved and self.side is not None:
            file = _mixlist_file(self.side)
            return Cause("mixlist", f"the mixlist no longer names {op}", file)
        return None

    def traced(self, old: LockedNode | None, new: LockedNode | None) -> Cause | None:
        """The cause of the first changed neighbour the node's decision leads back to (its ``cause``, then that
        node's ``cause``, ... in the new lock, then in the old one)."""
        for node, nodes in ((new, self.new_by_name), (old, self.old_by_name)):
            seen: set[tuple[str, str]] = set()
            steps = 0
            while node is not None and node.cause and steps < MAX_CAUSE_STEPS:
                key = (node.scope, node.cause)
                if key in seen:
                    break
                seen.add(key)
                if key in self.roots:
                    return self.roots[key].through(node.cause)
                node = nodes.get(key)
                steps += 1
        return None

    def structural(self) -> Cause:
        """The cause of a node added or removed: a moved setting (the mode decides which LayerNorms are folded),
        else the model's structure, else whatever moved."""
        for kind in ("config", "model_structure"):
            found = next((cause for cause in self.globals_ if cause.kind == kind), None)
            if found is not None:
                return found
        return self.fallback()

    def fallback(self) -> Cause:
        specific = {cause.key: cause for cause in self.roots.values()}
        if len(specific) == 1:
            return next(iter(specific.values())).through("its neighbours")
        if self.globals_:
            return self.globals_[0]
        return Cause(
            "unknown",
            "no recorded input changed: the lock's entry was edited, or the rules decide otherwise at the same "
            "ampconfig version",
        )

    def attribute(self, changes: Sequence[tuple[LockedNode | None, LockedNode | None]]) -> list[Cause]:
        """The cause of each (old, new) change, in order: direct causes first (they are the roots the others
        trace back to), then traced ones, then the fallback."""
        causes: list[Cause | None] = []
        for old, new in changes:
            cause = self.direct(old, new) if old is not None and new is not None else self.structural()
            causes.append(cause)
            node = new or old
            if cause is not None and node is not None:
                self.roots[(node.scope, node.name)] = cause
        return [
            cause if cause is not None else (self.traced(old, new) or self.fallback())
            for cause, (old, new) in zip(causes, changes)
        ]


def _keep_file(side: SettingsSide) -> str | None:
    keep = side.settings.keep_dtype
    if isinstance(keep, Path):
        return str(keep)
    return str(side.settings.config) if side.settings.config is not None else None


def _mixlist_file(side: SettingsSide) -> str | None:
    if side.mixlist is not None and side.mixlist.origin.file is not None:
        return side.mixlist.origin.file
    mixlist = side.settings.modify_mixlist
    if isinstance(mixlist, Path):
        return str(mixlist)
    return str(side.settings.config) if side.settings.config is not None else None
