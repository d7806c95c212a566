"""``tune``'s search: which nodes to pin to float32 so the tolerance is met while the fewest nodes (or the least
estimated latency) leave low precision. Pure logic over an :class:`Evaluator` that judges candidates with real runs.

1. **Rank** (no run): each lowered node's pin removes the error contributions
   (:mod:`ampconfig.diagnose.sensitivity`) of the nodes it takes back to float32 (itself, and in the mixed modes
   the gray nodes that followed it) and costs those nodes (or their estimated latency). Pins are ranked by error
   energy removed per cost.
2. **Predict**: independent contributions add in quadrature, so pinning the first ``k`` of the ranking leaves an
   error of about ``scale * sqrt(remaining contributions**2)``; ``scale`` is fitted to every judged trial.
3. **Verify in batches**: judge the smallest predicted prefix that meets the tolerance (with a safety margin);
   a miss refits the scale and grows the prefix (at least doubling it), a pass bounds it; then bisect between
   the longest failing and the shortest passing prefix.
4. **Prune**: with the runs left, try to unpin the least useful pins, in halving batches.

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
    what: str
    pins: int
    passed: bool
    error: float
    low_nodes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "pins": self.pins,
            "passed": self.passed,
            "worst_rel_l2": self.error if math.isfinite(self.error) else str(self.error),
            "low_nodes": self.low_nodes,
        }


@dataclass
class SearchResult:
    found: bool
    candidate: Candidate | None
    error: float | None
    low_nodes: int | None
    steps: list[Step] = field(default_factory=list)
    reason: str = ""


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
    ) -> None:
        self.evaluator = evaluator
        self.objective = objective  # lower is better: float32 nodes, or estimated latency
        self.ranking = list(ranking)
        self.contributions = dict(contributions)
        self.seeds = frozenset(seeds)
        self.tolerance = tolerance
        self.steps: list[Step] = []
        self.best: tuple[Candidate, float, int] | None = None  # candidate, error, low nodes
        remaining = self._remaining(0)
        self.scale = start_error / remaining if math.isfinite(start_error) and remaining > 0 else 1.0

    # -- the model of the error ----------------------------------------------------------------------------------
    def _covered(self, k: int) -> set[str]:
        covered: set[str] = set(self.seeds)
        for pin in self.ranking[:k]:
            covered |= pin.followers
        return covered

    def _remaining(self, k: int) -> float:
        covered = self._covered(k)
        energy = sum(_energy(v) for name, v in self.contributions.items() if name not in covered and math.isfinite(v))
        return math.sqrt(energy)

    def predicted(self, k: int) -> float:
        return self.scale * self._remaining(k)

    def _smallest_predicted(self, low: int, high: int) -> int:
        """The smallest prefix in ``[low, high]`` predicted to meet the tolerance with the safety margin."""
        for k in range(low, high + 1):
            if self.predicted(k) <= self.tolerance * SAFETY:
                return k
        return high

    def _refit(self, k: int, error: float) -> None:
        remaining = self._remaining(k)
        if math.isfinite(error) and remaining > 0:
            self.scale = max(self.scale, error / remaining)

    # -- trials --------------------------------------------------------------------------------------------------
    def candidate(self, k: int) -> Candidate:
        return self._pinning(self.ranking[:k])

    def _pinning(self, pins: Iterable[RankedPin]) -> Candidate:
        return Candidate(self.seeds.union(*(pin.pins for pin in pins)))

    def _judge(self, candidate: Candidate, what: str) -> TrialResult:
        trial = self.evaluator.trial(candidate, what)
        self.steps.append(Step(what, len(candidate.pins), trial.passed, trial.error, trial.low_nodes))
        if trial.passed and (self.best is None or self.objective(candidate) < self.objective(self.best[0])):
            self.best = (candidate, trial.error, trial.low_nodes)
        return trial

    def run(self, known_failing: int | None) -> SearchResult:
        """Find the shortest passing prefix, then prune. ``known_failing``: a prefix already judged failing."""
        count = len(self.ranking)
        low = -1 if known_failing is None else known_failing  # longest prefix known to fail
        high: int | None = None  # shortest prefix known to pass
        k = self._smallest_predicted(max(low + 1, 0), count)
        while self.evaluator.can_run(reserve=1):
            trial = self._judge(self.candidate(k), f"pin {len(self.seeds) + k} node(s): top {k} of the ranking")
            if trial.passed:
                high = k
            else:
                low = k
                self._refit(k, trial.error)
                if k >= count:
                    return self._finish("every lowered node pinned and the tolerance is still missed")
            if high is not None and high - low <= 1:
                break
            k = self._next(low, high, count)
        if high is None:
            return self._finish("")
        self._prune(high, low)
        return self._finish("")

    def _next(self, low: int, high: int | None, count: int) -> int:
        if high is None:
            grown = max(low + 1, 2 * low + 1)  # at least double: a ranking this wrong is better crossed fast
            return min(count, max(self._smallest_predicted(low + 1, count), grown))
        guess = self._smallest_predicted(low + 1, high - 1)
        middle = (low + high) // 2
        return guess if low < guess < high and abs(guess - middle) <= (high - low) // 4 else max(low + 1, middle)

    def _prune(self, high: int, low: int) -> None:
        """Unpin the least useful pins of the passing prefix in halving batches, while runs are left.

        A batch that would leave only pins of the longest failing prefix is not judged: it fails by the same
        reasoning the bisection uses."""
        kept = list(self.ranking[:high])
        failing = self.candidate(low).pins if low >= 0 else None
        order = sorted(kept, key=lambda pin: (pin.priority(self.contributions), pin.name))
        chunk = max(1, len(order) // 4)
        while order and self.evaluator.can_run(reserve=1):
            batch, rest = order[:chunk], order[chunk:]
            remaining = [pin for pin in kept if pin not in batch]
            pruned = self._pinning(remaining)  # a node another kept pin takes along stays pinned
            known_bad = failing is not None and pruned.pins <= failing
            if not known_bad and self._judge(pruned, f"prune {len(batch)} pin(s)").passed:
                kept, order = remaining, rest
            elif chunk > 1:
                chunk //= 2
            else:
                order = rest  # this pin is needed

    def _finish(self, reason: str) -> SearchResult:
        if self.best is None:
            return SearchResult(False, None, None, None, self.steps, reason)
        candidate, error, low_nodes = self.best
        return SearchResult(True, candidate, error, low_nodes, self.steps)
