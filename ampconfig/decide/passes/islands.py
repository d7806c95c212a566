"""Mixed modes, cast-aware: a float32 island that costs more casts than it has nodes goes low.

Following neighbours keeps a gray or clear node float32 when one input arrives in float32; between low neighbours
that leaves small float32 islands, each paid for with a cast on every edge in and out. A cast is a kernel like any
other (``h100-op-costs.json``: an elementwise node and a cast of the same size cost the same), so an island of
nodes that are all safe in low precision on the target, whose boundary casts outnumber its nodes, runs faster low.
Such an island goes low when that also lowers the number of casts, under a rule of its own.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

import onnx_ir as ir

from ampconfig.decide.context import Verdict
from ampconfig.decide.decision_state import DecisionState, LoweredIsland
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import NodeFacts, Scope, connected_groups
from ampconfig.decide.needs import Needs
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.decide.passes.follow import SOFT_RULES
from ampconfig.decide.passes.fusion_guard import feeds_float32_layer_norm
from ampconfig.dtypes import Dtype
from ampconfig.opinfo.library import Colour


class LowerCastBoundIslands(DecisionPass):
    """Ensures: every island it lowered (``state.lowered_islands``) is low, and lowering removed casts."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        lowered = len(state.lowered_islands)
        movable = {facts.node: facts for facts in scope.facts if _movable(state, facts)}
        for island in _islands(state, movable):
            before = island_casts(state.needs, island, Dtype.FLOAT32)
            if before <= len(island):
                continue  # its casts cost less than its nodes would save: no need to count them low
            after = island_casts(state.needs, island, state.ctx.low)
            if after < before:
                _lower(state, island, before, after)
        return len(state.lowered_islands) > lowered

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for island, before, after in state.lowered_islands:
            if after >= before or any(not state.verdicts[node].is_low for node in island):
                raise self.unkept(f"island {sorted(n.name or '' for n in island)} was lowered without saving casts")


def _lower(state: DecisionState, island: frozenset[ir.Node], before: int, after: int) -> None:
    low = state.ctx.low
    reason = (
        f"a float32 island of {len(island)} node(s) that are safe in {low} on target "
        f"{state.ctx.library.target!r} cost {before} casts at its boundary; in {low} it costs {after}"
    )
    cause = min(node.name or "" for node in island)
    for node in island:
        state.decide(node, Verdict(low, Rule.CAST_AWARE_ISLAND, reason, cause))
    state.lowered_islands.append(LoweredIsland(island, before, after))


def _movable(state: DecisionState, facts: NodeFacts) -> bool:
    """A float32 node decided only by its neighbours, which the target can run low and which guards nothing."""
    verdict = state.verdicts.get(facts.node)
    return (
        verdict is not None
        and verdict.rule in SOFT_RULES
        and verdict.dtype is Dtype.FLOAT32
        and state.colours.get(facts.node) in (Colour.GRAY, Colour.CLEAR)
        and state.ctx.low_blocker(facts, state.ctx.low) is None
        and feeds_float32_layer_norm(state, facts) is None
    )


def _islands(state: DecisionState, movable: dict[ir.Node, NodeFacts]) -> list[frozenset[ir.Node]]:
    """Connected groups of movable nodes, joined by float edges between them."""

    def neighbours(node: ir.Node) -> list[ir.Node]:
        found = [consumer for consumer, _ in state.float_consumers(node)]
        return found + [p for v in state.live_inputs(movable[node]) if (p := v.producer()) is not None]

    return connected_groups(movable, neighbours)


def island_casts(needs: Needs, island: Collection[ir.Node], dtype: Dtype) -> int:
    """How many casts the rewrite puts on the island's edges (:meth:`Needs.boundary_casts`) when its nodes compute
    in ``dtype``, every other verdict as it is."""
    verdicts = needs.verdicts
    if all(verdicts[node].dtype is dtype for node in island):
        return len(needs.boundary_casts(island))  # nothing to assume: the island computes in dtype already
    assumed = {node: replace(verdicts[node], dtype=dtype) for node in island}
    return len(needs.assuming(assumed).boundary_casts(island))
