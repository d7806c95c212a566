"""``tune``'s search: which nodes to pin to float32 so the tolerance is met while the fewest nodes (or the least
estimated latency) leave low precision. Pure logic over an :class:`Evaluator` that judges candidates with real runs.

1. **Rank** (no run): each lowered node's pin removes the error contributions
   (:mod:`ampconfig.diagnose.sensitivity`) of the nodes it takes back to float32 (itself, and in the mixed modes
   the gray nodes that followed it) and costs those nodes (or their estimated latency). Pins are ranked by error
   energy removed per cost.
2. **Predict** (:class:`ErrorModel`): independent contributions add in quadrature, so pinning the first ``k`` of the
   ranking leaves an error of about ``scale * sqrt(remaining contributions**2)``; ``scale`` is read off the
   measured prefix nearest ``k`` (the all-low run first).
3. **Verify**: judge the smallest predicted prefix that meets the tolerance (with a safety margin); a miss refits
   the model and grows the prefix (at least doubling it); a pass bounds it, and shorter prefixes are judged only
   while the refitted model predicts one to pass: a run is spent to verify a prediction. Once a prefix it
   predicted to pass has missed, the model is not trusted: the search bisects between the longest failing and
   the shortest passing prefix instead.
4. **Prune**: unpin single pins the model predicts can go, one run each, until a predicted pass misses (and any
   pin, while the best answer keeps too few nodes low to be given).

Overflow seeds (range analysis: values that turn inf/NaN in low precision) are pinned in every candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

#: The first prediction aims below the tolerance by this factor: a miss costs a run, a pass only some pins.
SAFETY = 0.8


@dataclass(frozen=True)
class Candidate:
    """What one trial keeps in float32 beyond the request's own lists: node pins and black-listed op types."""

    pins: frozenset[str] = frozenset()
    black_ops: frozenset[str] = frozenset()


class TrialResult(Protocol):
    @property
    def passed(self) -> bool: ...

    @property
    def error(self) -> float: ...

    @property
    def low_nodes(self) -> int: ...


class Evaluator(Protocol):
    def trial(self, candidate: Candidate, step: str) -> TrialResult: ...

    def can_run(self, reserve: int = 0) -> bool: ...


@dataclass(frozen=True)
class RankedPin:
    """A pin candidate: the contribution of the node, the nodes its pin takes back to float32, their cost, and the
    nodes pinned with it (``along``: consumers that would amplify its output's rounding, see
    :func:`ampconfig.diagnose.tune.ranking.amplifying_consumers`)."""

    name: str
    contribution: float
    followers: frozenset[str]
    cost: float
    along: frozenset[str] = frozenset()

    @property
    def pins(self) -> frozenset[str]:
        """The node names this pin writes into a candidate."""
        return self.along | {self.name}

    def priority(self, contributions: Mapping[str, float]) -> float:
        energy = sum(_energy(contributions.get(name, 0.0)) for name in self.followers)
        return math.inf if math.isinf(energy) else energy / max(self.cost, 1e-12)


def _energy(contribution: float) -> float:
    return contribution * contribution


def rank_pins(
    contributions: Mapping[str, float],
    followers: Mapping[str, Collection[str]],
    costs: Mapping[str, float],
    along: Mapping[str, Collection[str]] | None = None,
) -> list[RankedPin]:
    """Every node of ``contributions`` as a :class:`RankedPin`, best error energy per cost first. A node pinned
    ``along`` with another adds its followers and its cost to that pin's."""
    together = along or {}
    pins = []
    for name, value in contributions.items():
        extra = frozenset(together.get(name, ())) - {name}
        taken = frozenset(followers.get(name, (name,))) | {name}
        for other in extra:
            taken |= frozenset(followers.get(other, (other,))) | {other}
        cost = costs.get(name, 1.0) + sum(costs.get(other, 1.0) for other in extra)
        pins.append(RankedPin(name, value, taken, cost, extra))
    return sorted(pins, key=lambda pin: (-pin.priority(contributions), -pin.contribution, pin.name))


@dataclass
class Step:
    """One judged candidate: what was tried, why (the prediction that chose it), and what the run measured."""

    what: str
    pins: int
    passed: bool
    error: float
    low_nodes: int
    why: str = ""
    predicted: float | None = None

    def predicted_pass(self, tolerance: float) -> bool:
        """Whether the model predicted this candidate to meet ``tolerance``."""
        return self.predicted is not None and self.predicted <= tolerance

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "why": self.why,
            "pins": self.pins,
            "predicted_rel_l2": None if self.predicted is None else _finite(self.predicted),
            "passed": self.passed,
            "worst_rel_l2": _finite(self.error),
            "low_nodes": self.low_nodes,
        }


def _finite(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


@dataclass
class SearchResult:
    found: bool
    candidate: Candidate | None
    error: float | None
    low_nodes: int | None
    steps: list[Step] = field(default_factory=list)
    reason: str = ""
    last_pins: frozenset[str] = frozenset()  # what the last judged candidate pinned


class ErrorModel:
    """The predicted output error of each prefix of a ranking, fitted to what was measured.

    Pinning the first ``k`` pins leaves the contributions they do not cover; independent contributions add in
    quadrature, so the error left is about ``scale * remaining(k)``. The scale is read off the measured prefix
    nearest to ``k`` (the all-low run is prefix 0): the estimate is exact where a run measured it, and the
    ranking's own shape carries it between (a contribution the sensitivity under- or over-estimated moves the
    scale only near where it sits)."""

    def __init__(
        self,
        ranking: Sequence[RankedPin],
        contributions: Mapping[str, float],
        seeds: Collection[str],
        start_error: float,
    ) -> None:
        self.ranking = list(ranking)
        self.contributions = dict(contributions)
        self.seeds = frozenset(seeds)
        self._remaining_cache: dict[int, float] = {}
        self.measured: dict[int, float] = {}  # prefix -> measured error
        if math.isfinite(start_error) and self.remaining(0) > 0:
            self.measured[0] = start_error

    def covered(self, k: int) -> set[str]:
        covered: set[str] = set(self.seeds)
        for pin in self.ranking[:k]:
            covered |= pin.followers
        return covered

    def remaining(self, k: int) -> float:
        """The quadrature sum of the contributions the first ``k`` pins leave low."""
        if k not in self._remaining_cache:
            covered = self.covered(k)
            energy = sum(
                _energy(v) for name, v in self.contributions.items() if name not in covered and math.isfinite(v)
            )
            self._remaining_cache[k] = math.sqrt(energy)
        return self._remaining_cache[k]

    def record(self, k: int, error: float) -> None:
        if math.isfinite(error):
            self.measured[k] = error

    def scale(self, k: int) -> tuple[float, int | None]:
        """The measured-over-predicted ratio of the measured prefix nearest ``k`` (ties: the longer one), and that
        prefix (None: nothing measured, scale 1)."""
        usable = [j for j in self.measured if self.remaining(j) > 0]
        if not usable:
            return 1.0, None
        nearest = min(usable, key=lambda j: (abs(j - k), -j))
        return self.measured[nearest] / self.remaining(nearest), nearest

    def predicted(self, k: int) -> float:
        if k in self.measured:
            return self.measured[k]
        return self.scale(k)[0] * self.remaining(k)

    def smallest(self, low: int, high: int, target: float) -> int | None:
        """The smallest prefix in ``[low, high]`` predicted to stay at or under ``target`` (None: none is)."""
        return next((k for k in range(low, high + 1) if self.predicted(k) <= target), None)

    def why(self, k: int, target: float) -> str:
        scale, nearest = self.scale(k)
        basis = (
            "no run measured yet"
            if nearest is None
            else ("the all-low run" if nearest == 0 else f"the measured top {nearest}")
        )
        return (
            f"predicted {self.predicted(k):.3g} <= {target:.3g}: the ranking's contributions left low "
            f"({self.remaining(k):.3g}, in quadrature) scaled by {scale:.3g}, fitted to {basis}"
        )


class PrefixSearch:
    """Steps 2-4 of the module docstring over one ranking."""

    def __init__(
        self,
        evaluator: Evaluator,
        ranking: Sequence[RankedPin],
        contributions: Mapping[str, float],
        seeds: Collection[str],
        tolerance: float,
        start_error: float,
        objective: Callable[[Candidate], float],
        wanted_low: float = 0.0,
    ) -> None:
        self.evaluator = evaluator
        #: the fewest low nodes an answer may keep (``--min-low-fraction``): below it, pruning explores
        self.wanted_low = wanted_low
        self.objective = objective  # lower is better: float32 nodes, or estimated latency
        self.ranking = list(ranking)
        self.contributions = dict(contributions)
        self.seeds = frozenset(seeds)
        self.tolerance = tolerance
        self.steps: list[Step] = []
        self.best: tuple[Candidate, float, int] | None = None  # candidate, error, low nodes
        self.model = ErrorModel(self.ranking, self.contributions, self.seeds, start_error)
        self.last_pins: frozenset[str] = frozenset()

    def predicted(self, k: int) -> float:
        return self.model.predicted(k)

    def first_prefix(self, known_failing: int | None = None) -> int:
        """The prefix the search judges first: the smallest predicted under the tolerance with the safety margin
        (the whole ranking when none is)."""
        low = 0 if known_failing is None else known_failing + 1
        found = self.model.smallest(low, len(self.ranking), self.tolerance * SAFETY)
        return len(self.ranking) if found is None else found

    # -- trials --------------------------------------------------------------------------------------------------
    def candidate(self, k: int) -> Candidate:
        return self._pinning(self.ranking[:k])

    def _pinning(self, pins: Iterable[RankedPin]) -> Candidate:
        return Candidate(self.seeds.union(*(pin.pins for pin in pins)))

    def _judge(self, candidate: Candidate, what: str, why: str = "", predicted: float | None = None) -> TrialResult:
        trial = self.evaluator.trial(candidate, what)
        self.steps.append(Step(what, len(candidate.pins), trial.passed, trial.error, trial.low_nodes, why, predicted))
        self.last_pins = candidate.pins
        if trial.passed and (self.best is None or self.objective(candidate) < self.objective(self.best[0])):
            self.best = (candidate, trial.error, trial.low_nodes)
        return trial

    def _judge_prefix(self, k: int, target: float, reason: str) -> TrialResult:
        predicted = self.predicted(k)
        why = f"{reason}; {self.model.why(k, target)}" if predicted <= target else reason
        what = f"pin {len(self.seeds) + k} node(s): top {k} of the ranking"
        trial = self._judge(self.candidate(k), what, why, predicted)
        self.model.record(k, trial.error)
        return trial

    def run(self, known_failing: int | None) -> SearchResult:
        """Find a short passing prefix, then prune. ``known_failing``: a prefix already judged failing.

        Grow: judge the smallest prefix predicted under the tolerance with the :data:`SAFETY` margin; a miss refits
        the model there and grows the prefix to at least twice its length. Shrink: while some prefix between the
        longest failing and the shortest passing one is predicted to pass, judge the shortest such prefix; a run
        is spent only where the refitted model expects a pass; once a predicted pass has missed, bisect instead.
        Then prune (:meth:`_prune`)."""
        count = len(self.ranking)
        low = -1 if known_failing is None else known_failing  # longest prefix known to fail
        high: int | None = None  # shortest prefix known to pass
        trusted = True  # no prefix the model predicted to pass has failed
        k = self.first_prefix(known_failing)
        reason = "the first guess: the smallest prefix predicted under the tolerance with the safety margin"
        target = self.tolerance * SAFETY
        while self.evaluator.can_run(reserve=1):
            trial = self._judge_prefix(k, target, reason)
            if trial.passed:
                high = k
            else:
                trusted = trusted and not self.steps[-1].predicted_pass(self.tolerance)
                low = k
                if k >= count:
                    return self._finish("every lowered node pinned and the tolerance is still missed")
            if high is None:
                grown = min(count, max(low + 1, 2 * low))
                guess = self.model.smallest(low + 1, count, target)
                k = max(grown, count if guess is None else guess)
                reason = f"top {low} missed: grow the prefix to at least twice its length, or to the refitted guess"
                continue
            if high - low <= 1:
                break
            if trusted:
                shrink = self.model.smallest(low + 1, high - 1, self.tolerance)
                if shrink is None:
                    break
                k, target = shrink, self.tolerance
                reason = f"top {high} passed: the shortest prefix the refitted model predicts to pass"
            else:
                k, target = (low + high) // 2, self.tolerance
                reason = f"top {high} passed, top {low} missed, and a prefix the model predicted to pass missed: bisect"
        if high is None:
            return self._finish("")
        self._prune(high, low)
        return self._finish("")

    def _prune(self, high: int, low: int) -> None:
        """Unpin, one at a time and least useful first, pins of the passing prefix (one run each, while runs are
        left): those whose removal the model predicts to stay under the tolerance, until one of them misses; and,
        while the best answer keeps fewer than :attr:`wanted_low` nodes low (it would be refused), the others too.
        A removal that leaves only pins of the longest failing prefix is not judged: it fails by the same
        reasoning."""
        kept = list(self.ranking[:high])
        failing = self.candidate(low).pins if low >= 0 else None
        error = self.model.predicted(high)
        scale, _ = self.model.scale(high)
        trusted = True
        for pin in sorted(kept, key=lambda pin: (pin.priority(self.contributions), pin.name)):
            if not self.evaluator.can_run(reserve=1):
                return
            remaining = [other for other in kept if other is not pin]
            pruned = self._pinning(remaining)
            if pruned == self._pinning(kept) or (failing is not None and pruned.pins <= failing):
                continue
            energy = sum(_energy(self.contributions.get(name, 0.0)) for name in pin.followers - pruned.pins)
            predicted = math.sqrt(error * error + scale * scale * energy)
            exploring = self.best is not None and self.best[2] < self.wanted_low
            if predicted <= self.tolerance and trusted:
                why = f"predicted {predicted:.3g} <= {self.tolerance:.3g}: the measured error, its contribution added"
            elif exploring:
                why = (
                    f"predicted {predicted:.3g}, but the best answer keeps {self.best[2] if self.best else 0} nodes "
                    f"low, fewer than the {self.wanted_low:g} asked for: a run spent to find more"
                )
            else:
                continue
            trial = self._judge(pruned, f"unpin {pin.name}", why, predicted)
            if trial.passed:
                kept, error = remaining, trial.error
            elif predicted <= self.tolerance:
                trusted = False  # the model missed here: it no longer chooses unpins

    def _finish(self, reason: str) -> SearchResult:
        if self.best is None:
            return SearchResult(False, None, None, None, self.steps, reason, self.last_pins)
        candidate, error, low_nodes = self.best
        return SearchResult(True, candidate, error, low_nodes, self.steps, last_pins=self.last_pins)
