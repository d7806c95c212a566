"""Mixed modes: the nodes the lists decide outright. Already-low nodes stay low (raised when black); a node the
target cannot run in the low type stays float32 whatever its colour (rule 5); white goes low, black float32."""

from __future__ import annotations

from ampconfig.decide.context import Verdict
from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import NodeFacts, Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.dtypes import Dtype
from ampconfig.opinfo.library import Colour


class PaintListed(DecisionPass):
    """Ensures: white nodes are low unless the target cannot run them so; black float32 nodes stay float32."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        changed = False
        for facts in scope.facts:
            colour = state.colours.get(facts.node)
            if colour is None or facts.node in state.verdicts:
                continue
            verdict = _listed(state, facts, colour)
            if verdict is not None:
                changed |= state.decide(facts.node, verdict)
        return changed

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            verdict = state.verdicts.get(facts.node)
            if verdict is None:
                continue
            if verdict.rule is Rule.WHITE_LIST and not verdict.is_low:
                raise self.unkept(f"white {facts.node.name} is not low")
            if verdict.rule is Rule.BLACK_LIST and verdict.dtype is not Dtype.FLOAT32:
                raise self.unkept(f"black {facts.node.name} is not float32")


def _listed(state: DecisionState, facts: NodeFacts, colour: Colour) -> Verdict | None:
    """The verdict the lists give the node outright, or None where its neighbours decide (gray, clear)."""
    ctx = state.ctx
    why = state.colour_reasons.get(facts.node)
    if facts.dtype is not Dtype.FLOAT32:
        return _already_low(facts.dtype, colour, facts.key, ctx.can_run(facts, Dtype.FLOAT32))
    blocker = ctx.low_blocker(facts, ctx.low) if colour is not Colour.BLACK else None
    if blocker is not None:
        return blocker
    if colour is Colour.WHITE:
        return Verdict(ctx.low, Rule.WHITE_LIST, why or f"{facts.key} is on the white list")
    if colour is Colour.BLACK:
        return Verdict(Dtype.FLOAT32, Rule.BLACK_LIST, why or f"{facts.key} is on the black list")
    return None


def _already_low(dtype: Dtype | None, colour: Colour, key: str, fp32_runs: bool) -> Verdict:
    if colour is Colour.BLACK and fp32_runs:
        return Verdict(Dtype.FLOAT32, Rule.BLACK_LIST, f"{key} is on the black list: raised to float32")
    return Verdict(dtype, Rule.ALREADY_LOW, f"already {dtype}; the mixed mode keeps it")
