"""Nodes no mode may retype, and nodes the user or an earlier check pinned. Runs first, in every mode."""

from __future__ import annotations

from ampconfig.decide.context import DecisionContext, Verdict
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import NodeFacts, Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.decide.state import DecisionState, is_flexible
from ampconfig.dtypes import Dtype

_UNRETYPABLE = {
    Rule.UNTYPED: "tensor types could not be inferred; left exactly as it was",
    Rule.NO_SCHEMA: "neither ONNX nor ONNX Runtime has a schema for this op (custom op); never retyped",
    Rule.CONTROL_FLOW: "control flow; its body is decided in its own scope",
    Rule.MODE_KEEPS: "its output dtype is set by an attribute; kept",
    Rule.NON_TENSOR: "reads or writes sequences/optionals, whose element type stays as it is",
}


def fixed_verdict(facts: NodeFacts, ctx: DecisionContext) -> Verdict | None:
    """The verdict of a node nothing may retype, or None when the mode decides."""
    if facts.dtype is None:
        rule = facts.blocker or Rule.NOT_FLOAT
        return Verdict(None, rule, _UNRETYPABLE.get(rule, "computes on no float32/float16/bfloat16 tensor"))
    if facts.blocker is not None:
        return Verdict(facts.dtype, facts.blocker, _UNRETYPABLE.get(facts.blocker, "kept as it was"))
    if facts.node in ctx.pinned:
        return Verdict(facts.dtype, Rule.KEEP_DTYPE, "pinned to its original dtype by keep_dtype")
    if (kept := ctx.library.keeps_dtype(facts.key)) is not None:
        return Verdict(facts.dtype, Rule.OP_KEEPS_DTYPE, f"{facts.key} keeps its dtype: {kept}")
    if facts.node.name in ctx.overflow and facts.dtype is Dtype.FLOAT32:
        return Verdict(facts.dtype, Rule.RANGE_OVERFLOW, ctx.overflow[facts.node.name])
    if facts.node.name in ctx.rejected:
        return Verdict(
            facts.dtype,
            Rule.CHECKER_REJECTS,
            f"the ONNX checker rejects it in another dtype, kept: {ctx.rejected[facts.node.name]}",
        )
    return None


class FixedVerdicts(DecisionPass):
    """Skips nodes a pass before it decided (:class:`~ampconfig.decide.passes.customized.CustomizedDtypes`).
    Ensures: every non-retypable, pinned, overflowing or checker-rejected node keeps its dtype."""

    def call(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            if is_flexible(facts) or facts.node in state.verdicts:
                continue
            verdict = fixed_verdict(facts, state.ctx)
            if verdict is not None:
                state.decide(facts.node, verdict)

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            verdict = state.verdicts.get(facts.node)
            if verdict is not None and verdict.rule is not Rule.CUSTOMIZED and verdict.dtype != facts.dtype:
                raise self.fail(f"{facts.node.name} changed dtype under rule {verdict.rule.value}")
