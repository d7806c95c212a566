"""Every mode, last: Casts and constants take the dtype their consumers need. A constant (Constant,
ConstantOfShape) is converted once; an existing float Cast is retargeted to the one dtype all its consumers need."""

from __future__ import annotations

from ampconfig.decide.context import Verdict
from ampconfig.decide.decision_state import DecisionState, is_flexible
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import NodeFacts, Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.dtypes import MOVABLE_DTYPES


class SettleFlexible(DecisionPass):
    """Requires: every other node of the scope decided. Ensures: every Cast and constant has a verdict.

    Runs over the scopes innermost first and each scope's nodes in reverse, so a Cast feeding a constant chain
    sees its consumers' final dtypes."""

    def requires(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            if not is_flexible(facts) and facts.node not in state.verdicts:
                raise self.unmet(f"{facts.node.name} is undecided")

    def call(self, state: DecisionState, scope: Scope) -> bool:
        changed = False
        for facts in reversed(scope.facts):
            if is_flexible(facts):
                changed |= state.decide(facts.node, _settled(state, facts))
        return changed

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            if facts.node not in state.verdicts:
                raise self.unkept(f"{facts.node.name} has no verdict")


def _settled(state: DecisionState, facts: NodeFacts) -> Verdict:
    node = facts.node
    if facts.dtype is None:
        return Verdict(None, Rule.NOT_FLOAT, "computes on no float32/float16/bfloat16 tensor")
    if node in state.ctx.pinned:
        return Verdict(facts.dtype, Rule.KEEP_DTYPE, "pinned to its original dtype by keep_dtype")
    kept = state.verdicts.get(node)
    if kept is not None and kept.rule is Rule.INTEGER_ACCUMULATOR_BOUND:
        return kept  # a Cast of an integer accumulator's values beyond the low type's range (accumulator_bounds.py)
    wanted = state.needs.wanted(node.outputs[0])
    kind = "Cast" if node.op_type == "Cast" else "constant"
    if len(wanted) == 1 and (dtype := next(iter(wanted))) is not facts.dtype and dtype in MOVABLE_DTYPES:
        if dtype not in facts.schema_allows:
            # ConstantOfShape has no bfloat16 output before opset 20: it keeps its dtype, a Cast follows.
            reason = f"{kind} kept: the {facts.key} schema at this opset has no {dtype} output; cast after it"
            return Verdict(facts.dtype, Rule.SCHEMA_FORBIDS, reason)
        rule = Rule.CAST_RETARGETED if node.op_type == "Cast" else Rule.FOLLOWS_CONSUMERS
        return Verdict(dtype, rule, f"{kind} now produces {dtype}, as every consumer needs")
    detail = "consumers need several dtypes" if len(wanted) > 1 else "consumers need its dtype"
    return Verdict(facts.dtype, Rule.MODE_KEEPS, f"{kind} kept: {detail}")
