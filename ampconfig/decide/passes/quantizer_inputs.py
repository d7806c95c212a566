"""Nodes that compute what a quantizer rounds (``ampconfig.decide.quantized``: rule quantizer_input). A hard pass
in every pipeline, after :class:`FixedVerdicts` and :class:`KeepValuesInRange` (a node kept for its values says
so); like them its verdicts are hard: neighbours follow them."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.decide.context import Verdict
from ampconfig.decide.decision_state import DecisionState, is_flexible
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import NodeFacts, Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.decide.passes.keep_in_range import could_go_low
from ampconfig.decide.passes.mode_rules import ModeVerdicts
from ampconfig.decide.quantized import QUANTIZERS, quantizer_inputs
from ampconfig.dtypes import Dtype


class KeepQuantizerInputs(DecisionPass):
    """Ensures: a node the mode would retype whose float output reaches a quantizer keeps its dtype, with the
    quantizer named."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        if not any(facts.key in QUANTIZERS for facts in scope.facts):
            return False  # no quantizer here (most scopes of most models): no walk
        fed = quantizer_inputs(facts.node for facts in scope.facts)
        verdict_of = ModeVerdicts(state.ctx)
        changed = False
        for facts in scope.facts:
            quantizer = fed.get(facts.node)
            if quantizer is None or facts.dtype is None or facts.node in state.verdicts or is_flexible(facts):
                continue
            if _would_retype(facts, state, verdict_of):
                changed |= state.decide(facts.node, _verdict(facts, quantizer))
        return changed

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            verdict = state.verdicts.get(facts.node)
            if verdict is not None and verdict.rule is Rule.QUANTIZER_INPUT and verdict.dtype is not facts.dtype:
                raise self.unkept(f"{facts.node.name} feeds a quantizer but computes in {verdict.dtype}")


def _would_retype(facts: NodeFacts, state: DecisionState, verdict_of: ModeVerdicts) -> bool:
    """Whether the mode might change the node's dtype: a float32 node that could go low, or a low node the mode
    raises (force_fp32)."""
    if facts.dtype is Dtype.FLOAT32:
        return could_go_low(facts, state, verdict_of)
    if state.ctx.mode.is_mixed:
        return False  # the mixed modes keep nodes that are already low
    verdict = verdict_of(facts)
    return verdict.dtype is not None and verdict.dtype is not facts.dtype


def _verdict(facts: NodeFacts, quantizer: ir.Node) -> Verdict:
    where = "a quantizer" if quantizer is facts.node else f"its output reaches quantizer {quantizer.name!r}"
    reason = (
        f"{where} ({quantizer.op_type}): kept {facts.dtype} so the quantizer rounds the values it was calibrated "
        "on (a value rounded to a low type crosses integer steps)"
    )
    return Verdict(facts.dtype, Rule.QUANTIZER_INPUT, reason, cause=quantizer.name)
