"""The forms of a tune answer: node pins (a keep_dtype file, the default) and op types (a mixlist's
``black-list.to-add``), and the files' text.

An op type replaces its node pins only where that costs little: black-listing it keeps every node of that type
float32 (and, by deny propagation, gray nodes downstream of them), so it goes into the mixlist only when it keeps
at most :data:`OP_TYPE_SLACK` more nodes float32 than its pins do. Deciding that needs rewrites, not runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ampconfig.diagnose.tune.search import Candidate
from ampconfig.documents.mixlist_file import Mixlist, mixlist_entries
from ampconfig.rewrite.results import RewriteResult
from ampconfig.settings.write_op_names import mixlist_in

#: "A few nodes": an op type goes into the mixlist when it keeps at most this many more nodes float32 than the
#: node pins it replaces.
OP_TYPE_SLACK = 2

Decide = Callable[[Candidate], RewriteResult]


@dataclass(frozen=True)
class OpTypeChoice:
    """One op type among the pins, and whether the mixlist carries it instead of its node pins."""

    op_type: str
    pins: tuple[str, ...]
    extra_fp32: int  # nodes it keeps float32 beyond its pins (deny propagation included)
    in_mixlist: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "op_type": self.op_type,
            "node_pins": list(self.pins),
            "extra_fp32_nodes": self.extra_fp32,
            "in_mixlist": self.in_mixlist,
        }


def _by_op_type(pins: Iterable[str], op_type_of: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    groups: dict[str, list[str]] = {}
    for name in sorted(pins):
        groups.setdefault(op_type_of[name], []).append(name)
    return {op: tuple(names) for op, names in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))}


def op_types_within_slack(
    decide: Decide, candidate: Candidate, op_type_of: Mapping[str, str], slack: int = OP_TYPE_SLACK
) -> tuple[Candidate, list[OpTypeChoice]]:
    """Move each op type of the pins into the black list when it keeps at most ``slack`` more nodes float32."""
    current = candidate
    choices: list[OpTypeChoice] = []
    for op, names in _by_op_type(candidate.pins, op_type_of).items():
        trial = Candidate(current.pins - set(names), current.black_ops | {op})
        extra = decide(current).low_precision_nodes - decide(trial).low_precision_nodes
        taken = extra <= slack
        choices.append(OpTypeChoice(op, names, extra, taken))
        if taken:
            current = trial
    return current, choices


def all_op_types(
    decide: Decide, candidate: Candidate, op_type_of: Mapping[str, str]
) -> tuple[Candidate, list[OpTypeChoice]]:
    """Every pin as its op type (a mixlist without a keep_dtype file): what it costs is in the choices."""
    groups = _by_op_type(candidate.pins, op_type_of)
    result = Candidate(frozenset(), candidate.black_ops | set(groups))
    before = decide(candidate).low_precision_nodes
    choices = []
    for op, names in groups.items():
        alone = Candidate(candidate.pins - set(names), candidate.black_ops | {op})
        choices.append(OpTypeChoice(op, names, before - decide(alone).low_precision_nodes, True))
    return result, choices


# ------------------------------------------------------------------------------------------------- the files


def mixlist_data(
    base: Mixlist | None,
    black_ops: Iterable[str],
    op_names: str | None = None,
    write_names: str | None = None,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    """The base mixlist with ``black_ops`` (ONNX op keys) added to ``black-list.to-add``, as JSON data whose op
    types are written in ``write_names``' vocabulary (None: ONNX's); ``op_names`` is how the base names its ops.

    An op added to the black list leaves ``white-list.to-add``, ``gray-list.to-add`` and ``black-list.to-remove``
    (those combinations with add-black are invalid); its ``white-list``/``gray-list`` removals stay (valid).
    """
    black = set(black_ops)
    data: dict[str, Any] = {}
    if base is not None and base.schema_ref is not None:
        data["$schema"] = base.schema_ref
    entries = mixlist_entries(base, op_names) if base is not None else []
    for key in ("black-list", "white-list", "gray-list"):
        to_add = list(dict.fromkeys(e.op for e in entries if e.edit.list_key == key and e.edit.is_add))
        to_remove = list(dict.fromkeys(e.op for e in entries if e.edit.list_key == key and not e.edit.is_add))
        if key == "black-list":
            to_add += sorted(black - set(to_add))
            to_remove = [op for op in to_remove if op not in black]
        else:
            to_add = [op for op in to_add if op not in black]
        entry: dict[str, list[str]] = {}
        if to_add or key == "black-list":
            entry["to-add"] = to_add
        if to_remove:
            entry["to-remove"] = to_remove
        if entry:
            data[key] = entry
    written, found = mixlist_in(data, write_names)
    if warnings is not None:
        warnings.extend(found)
    return written


def keep_dtype_lines(base: Sequence[str], pins: Iterable[str]) -> list[str]:
    """keep_dtype entries: the base file's, then the node pins (sorted); no repeats."""
    return list(dict.fromkeys([*base, *sorted(pins)]))


def unwritable_names(names: Iterable[str]) -> list[str]:
    """Node names the keep_dtype format cannot carry (a leading ``#`` reads as a comment; edges are stripped)."""
    return [name for name in names if not name or name.startswith("#") or name != name.strip() or "\n" in name]


def keep_dtype_text(lines: Sequence[str]) -> str:
    return "# written by ampconfig tune: nodes kept in their original dtype\n" + "".join(line + "\n" for line in lines)


def mixlist_text(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"
