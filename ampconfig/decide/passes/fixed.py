"""Nodes no mode may retype, and nodes the user or an earlier check pinned. Runs first, in every mode."""

from __future__ import annotations

from collections.abc import Callable

from ampconfig.decide.context import DecisionContext, Verdict
from ampconfig.decide.decision_state import DecisionState, is_flexible
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import NodeFacts, Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.dtypes import Dtype

_UNRETYPABLE = {
    Rule.UNTYPED: "tensor types could not be inferred; left exactly as it was",
    Rule.NO_SCHEMA: "neither ONNX nor ONNX Runtime has a schema for this op (custom op); never retyped",
    Rule.CONTROL_FLOW: "control flow; its body is decided in its own scope",
    Rule.MODE_KEEPS: "its output dtype is set by an attribute; kept",
    Rule.NON_TENSOR: "reads or writes sequences, maps or optionals, whose element types stay as they are",
    Rule.SPARSE_TENSOR: "holds or reads a sparse tensor (sparse_value, sparse initializer), which stays as it is",
}


def _unretypable(facts: NodeFacts, ctx: DecisionContext) -> Verdict | None:
    if facts.dtype is None:
        rule = facts.blocker or Rule.NOT_FLOAT
        return Verdict(None, rule, _UNRETYPABLE.get(rule, "computes on no float32/float16/bfloat16 tensor"))
    if facts.blocker is not None:
        return Verdict(facts.dtype, facts.blocker, _UNRETYPABLE.get(facts.blocker, "kept as it was"))
    return None


def _keep_dtype(facts: NodeFacts, ctx: DecisionContext) -> Verdict | None:
    if facts.node in ctx.pinned:
        return Verdict(facts.dtype, Rule.KEEP_DTYPE, "pinned to its original dtype by keep_dtype")
    return None


def _op_keeps_dtype(facts: NodeFacts, ctx: DecisionContext) -> Verdict | None:
    if (kept := ctx.library.keeps_dtype(facts.key)) is not None:
        return Verdict(facts.dtype, Rule.OP_KEEPS_DTYPE, f"{facts.key} keeps its dtype: {kept}")
    return None


def _overflow_nodes(facts: NodeFacts, ctx: DecisionContext) -> Verdict | None:
    name = facts.node.name
    if name is not None and name in ctx.overflow and facts.dtype is Dtype.FLOAT32:
        return Verdict(facts.dtype, Rule.RANGE_EXCEEDS, ctx.overflow[name])
    return None


def _checker_rejects(facts: NodeFacts, ctx: DecisionContext) -> Verdict | None:
    if facts.node.name in ctx.rejected:
        reason = f"the ONNX checker rejects it in another dtype, kept: {ctx.rejected[facts.node.name]}"
        return Verdict(facts.dtype, Rule.CHECKER_REJECTS, reason)
    return None


def _runtime_refuses(facts: NodeFacts, ctx: DecisionContext) -> Verdict | None:
    name = facts.node.name
    if name is not None and name in ctx.runtime_refused:
        return Verdict(facts.dtype, Rule.RUNTIME_REFUSES, ctx.runtime_refused[name])
    return None


#: A rule that keeps a node in the dtype it has: its verdict, or None when the rule does not apply to the node.
KeepingRule = Callable[[NodeFacts, DecisionContext], Verdict | None]

#: Nodes nothing may retype: no float tensor, untyped, no schema, control flow, sequences.
UNRETYPABLE: tuple[KeepingRule, ...] = (_unretypable,)
#: The rules :class:`FixedVerdicts` applies, in precedence order: a node takes the first verdict given. A rule
#: added here must keep the node's dtype (the pass ensures it); a rule that sets another dtype is a pass of its own
#: in :data:`ampconfig.decide.pass_pipelines.HARD`, placed at its precedence (``CustomizedDtypes`` comes first; a pass
#: that must leave unretypable nodes alone follows ``FixedVerdicts(UNRETYPABLE)``).
KEEPING_RULES: tuple[KeepingRule, ...] = (
    *UNRETYPABLE,
    _keep_dtype,
    _op_keeps_dtype,
    _overflow_nodes,
    _checker_rejects,
    _runtime_refuses,
)


def fixed_verdict(
    facts: NodeFacts, ctx: DecisionContext, rules: tuple[KeepingRule, ...] = KEEPING_RULES
) -> Verdict | None:
    """The verdict of the first of ``rules`` that keeps the node, or None when the mode decides."""
    for rule in rules:  # a loop, not next() over a generator: asked for every node, twice
        verdict = rule(facts, ctx)
        if verdict is not None:
            return verdict
    return None


class FixedVerdicts(DecisionPass):
    """Every mode, first but for customize_dtypes: nodes nothing may retype, and nodes the user or an earlier check
    pinned (:data:`KEEPING_RULES`, or the ``rules`` given). Skips nodes a hard pass before it decided
    (:class:`~ampconfig.decide.passes.customized_dtypes.CustomizedDtypes`). Ensures: every node it decided keeps its
    dtype."""

    def __init__(self, rules: tuple[KeepingRule, ...] = KEEPING_RULES) -> None:
        self.rules = rules

    def call(self, state: DecisionState, scope: Scope) -> bool:
        changed = False
        for facts in scope.facts:
            if is_flexible(facts) or facts.node in state.verdicts:
                continue
            verdict = fixed_verdict(facts, state.ctx, self.rules)
            if verdict is not None:
                changed |= state.decide(facts.node, verdict)
        return changed

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            verdict = state.verdicts.get(facts.node)
            if verdict is None or verdict.dtype == facts.dtype:
                continue
            kept = fixed_verdict(facts, state.ctx, self.rules)
            if kept is not None and verdict.rule is kept.rule:  # this pass's node, not a hard pass's before it
                raise self.unkept(f"{facts.node.name} changed dtype under rule {verdict.rule.value}")
