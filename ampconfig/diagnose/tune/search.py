"""``tune``: find a small set of op types (mixlist ``black-list.to-add``) or nodes (keep_dtype) to keep in float32
so the rewritten model meets a tolerance, in as few model runs as possible.

The search is pure logic over an :class:`Evaluator` (the runner implements it with real ONNX Runtime runs and
counts every run; an evaluation whose decisions equal an earlier one's is answered from that one, without a run):

1. **Seeds**: range analysis of the fp32 calibration run (free: the same run as the reference) names the nodes
   whose values leave the low type's range.
2. **Ranked** (default): evaluate; while the tolerance is not met, pin the first bad node of the compare ranking
   (:mod:`ampconfig.diagnose.locate`) plus every lowered node that overflowed, and evaluate again. Then prune: drop each
   pin the search added (latest first) when the tolerance still holds without it, and each seed whose removal
   changes no node's dtype.
   **Bisect** (the baseline): binary search over the lowered nodes in topological order for the shortest prefix
   whose pinning meets the tolerance; its last node is a culprit; repeat below it until the pins alone pass.
3. **Express**: a group of pinned nodes of one op type becomes an op-type entry (``black-list.to-add`` in the
   mixed modes, ``OpType::X`` in keep_dtype otherwise) when that gives every node the same dtype as the node
   pins (so the model is identical); without a keep_dtype output, mixed modes must use op types (verified).

Not found (exit 1): the tolerance is missed even with every node the mode lowered pinned (the remaining error is
not the precision mode's: nodes without an fp32 kernel, inputs the tolerance cannot absorb), or the run budget
is spent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ampconfig.diagnose.locate import Localization
from ampconfig.settings.mixlist import Mixlist

DEFAULT_MAX_RUNS = 64
STRATEGIES = ("ranked", "bisect")


@dataclass(frozen=True)
class Candidate:
    """What one trial keeps in the original dtype: node names, mixlist black-list op types, keep_dtype op types."""

    pins: frozenset[str] = frozenset()
    black_ops: frozenset[str] = frozenset()
    keep_ops: frozenset[str] = frozenset()

    def with_pins(self, pins: Iterable[str]) -> Candidate:
        return Candidate(frozenset(pins), self.black_ops, self.keep_ops)


@dataclass
class Outcome:
    passed: bool
    worst_rel_l2: float  # the largest output rel L2 (inf when non-finite)
    localization: Localization | None
    low_nodes: int
    ran: bool  # False: an earlier run with the same decisions answered


class Evaluator(Protocol):
    runs: int

    def evaluate(self, candidate: Candidate) -> Outcome: ...

    def signature(self, candidate: Candidate) -> Hashable: ...

    def lowered_nodes(self) -> list[str]: ...

    def op_type_of(self, node: str) -> str: ...


@dataclass
class Step:
    what: str
    candidate: Candidate
    passed: bool
    worst_rel_l2: float
    ran: bool
    runs_so_far: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "pins": sorted(self.candidate.pins),
            "black_ops": sorted(self.candidate.black_ops),
            "keep_ops": sorted(self.candidate.keep_ops),
            "passed": self.passed,
            "worst_rel_l2": self.worst_rel_l2 if math.isfinite(self.worst_rel_l2) else str(self.worst_rel_l2),
            "ran": self.ran,
            "runs_so_far": self.runs_so_far,
        }


@dataclass
class SearchResult:
    strategy: str
    found: bool
    candidate: Candidate
    steps: list[Step] = field(default_factory=list)
    reason: str = ""


class _Recorder:
    """Evaluates candidates and records every step (what was tried, whether a run happened)."""

    def __init__(self, evaluator: Evaluator, max_runs: int) -> None:
        self.evaluator = evaluator
        self.max_runs = max_runs
        self.steps: list[Step] = []

    @property
    def exhausted(self) -> bool:
        return self.evaluator.runs >= self.max_runs

    def __call__(self, candidate: Candidate, what: str) -> Outcome:
        outcome = self.evaluator.evaluate(candidate)
        self.steps.append(Step(what, candidate, outcome.passed, outcome.worst_rel_l2, outcome.ran, self.evaluator.runs))
        return outcome


def _culprits(localization: Localization | None, pinned: frozenset[str]) -> list[str]:
    """The next nodes to pin: the first bad node, plus every lowered node that overflowed; else the top-ranked."""
    if localization is None:
        return []

    def lowered(name: str) -> bool:
        node = localization.by_name()[name]
        return node.dtype != node.original_dtype and name not in pinned

    picks: list[str] = []
    first = localization.first_bad
    if first is not None and lowered(first.name):
        picks.append(first.name)
    picks += [node.name for node in localization.overflowing() if lowered(node.name) and node.name not in picks]
    if picks:
        return picks
    return [node.name for node in localization.ranked() if lowered(node.name) and node.error > 0][:1]


def ranked_search(evaluator: Evaluator, seeds: Iterable[str] = (), max_runs: int = DEFAULT_MAX_RUNS) -> SearchResult:
    """Range seeds, then the compare ranking, then pruning (see the module docstring)."""
    record = _Recorder(evaluator, max_runs)
    seed_set = frozenset(seeds)
    pins = seed_set
    outcome = record(Candidate(pins), "range-analysis seeds" if pins else "rewrite as configured")
    added: list[str] = []
    while not outcome.passed:
        if record.exhausted:
            return SearchResult("ranked", False, Candidate(pins), record.steps, f"run budget of {max_runs} spent")
        picks = _culprits(outcome.localization, pins)
        if not picks:
            reason = "every node the mode lowered is pinned and the tolerance is still not met"
            return SearchResult("ranked", False, Candidate(pins), record.steps, reason)
        added += picks
        pins = pins | frozenset(picks)
        outcome = record(Candidate(pins), "pin " + ", ".join(picks))
    for name in reversed(added):
        if record.exhausted:
            break
        if record(Candidate(pins - {name}), f"prune {name}").passed:
            pins = pins - {name}
    for name in sorted(seed_set & pins):
        # A seed whose removal changes no dtype is redundant; proving it needs no run.
        if evaluator.signature(Candidate(pins - {name})) == evaluator.signature(Candidate(pins)):
            pins = pins - {name}
    return SearchResult("ranked", True, Candidate(pins), record.steps)


def bisect_search(evaluator: Evaluator, max_runs: int = DEFAULT_MAX_RUNS) -> SearchResult:
    """Binary search over the lowered nodes (topological order) for culprits: the baseline tune is measured by."""
    record = _Recorder(evaluator, max_runs)
    nodes = evaluator.lowered_nodes()
    if record(Candidate(), "rewrite as configured").passed:
        return SearchResult("bisect", True, Candidate(), record.steps)
    if not record(Candidate(frozenset(nodes)), "pin every lowered node").passed:
        reason = "every node the mode lowered is pinned and the tolerance is still not met"
        return SearchResult("bisect", False, Candidate(frozenset(nodes)), record.steps, reason)
    pins: frozenset[str] = frozenset()
    upper = len(nodes)  # invariant: pins + nodes[:upper] passes, pins alone fails
    while True:
        low, high = 0, upper
        while high - low > 1:
            if record.exhausted:
                return SearchResult("bisect", False, Candidate(pins), record.steps, f"run budget of {max_runs} spent")
            middle = (low + high) // 2
            if record(Candidate(pins | frozenset(nodes[:middle])), f"pin first {middle} of {upper}").passed:
                high = middle
            else:
                low = middle
        culprit = nodes[high - 1]
        pins = pins | {culprit}
        if record(Candidate(pins), f"pin {culprit}").passed:
            return SearchResult("bisect", True, Candidate(pins), record.steps)
        upper = high - 1


def express(
    evaluator: Evaluator,
    candidate: Candidate,
    *,
    mixed: bool,
    allow_node_pins: bool,
) -> tuple[Candidate, list[str]]:
    """Turn node pins into op-type entries where that changes no node's dtype; notes say what was done.

    Without ``allow_node_pins`` (no keep_dtype output) a mixed mode must express every pin as an op type; the
    caller verifies that candidate with a run.
    """
    notes: list[str] = []
    groups: dict[str, set[str]] = {}
    for name in sorted(candidate.pins):
        groups.setdefault(evaluator.op_type_of(name), set()).add(name)
    target = evaluator.signature(candidate)
    current = candidate
    for op, names in groups.items():
        if mixed:
            trial = Candidate(current.pins - names, current.black_ops | {op}, current.keep_ops)
        else:
            trial = Candidate(current.pins - names, current.black_ops, current.keep_ops | {op})
        if evaluator.signature(trial) == target:
            current = trial
            where = f"black-list.to-add {op}" if mixed else f"keep_dtype OpType::{op}"
            notes.append(f"{op}: {len(names)} node pin(s) written as {where} (the same dtype for every node)")
    if not allow_node_pins and current.pins:
        if not mixed:
            raise ValueError("node pins need a keep_dtype output outside the mixed modes")
        forced = sorted({evaluator.op_type_of(name) for name in current.pins})
        notes.append(
            "no keep_dtype output: op type(s) " + ", ".join(forced) + " added to black-list.to-add although that "
            "keeps more nodes in float32 than the node pins would"
        )
        current = Candidate(frozenset(), current.black_ops | set(forced), current.keep_ops)
    return current, notes


# ------------------------------------------------------------------------------------------------- the files


def mixlist_data(base: Mixlist | None, black_ops: Iterable[str]) -> dict[str, Any]:
    """The base mixlist with ``black_ops`` added to ``black-list.to-add``, as JSON data.

    An op added to the black list leaves ``white-list.to-add``, ``gray-list.to-add`` and ``black-list.to-remove``
    (those combinations with add-black are invalid); its ``white-list``/``gray-list`` removals stay (valid).
    """
    black = set(black_ops)
    data: dict[str, Any] = {}
    if base is not None and base.schema_ref is not None:
        data["$schema"] = base.schema_ref
    for key, attr in (("black-list", "black_list"), ("white-list", "white_list"), ("gray-list", "gray_list")):
        edit = getattr(base, attr) if base is not None else None
        to_add = list(edit.to_add) if edit is not None else []
        to_remove = list(edit.to_remove) if edit is not None else []
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
    return data


def keep_dtype_lines(base: Sequence[str], candidate: Candidate) -> list[str]:
    """keep_dtype entries: the base file's, then the node pins, then ``OpType::`` entries; no repeats."""
    lines = list(base)
    lines += sorted(candidate.pins)
    lines += [f"OpType::{op}" for op in sorted(candidate.keep_ops)]
    return list(dict.fromkeys(lines))


def check_writable_names(names: Iterable[str]) -> list[str]:
    """Node names the keep_dtype format cannot carry (a leading ``#`` reads as a comment; edges are stripped)."""
    return [name for name in names if not name or name.startswith("#") or name != name.strip() or "\n" in name]


def keep_dtype_text(lines: Sequence[str]) -> str:
    return "# written by ampconfig tune: nodes (and OpType:: entries) kept in their original dtype\n" + "".join(
        line + "\n" for line in lines
    )


def mixlist_text(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"
