"""customize_dtypes: the nodes an entry sets compute in its dtype, whatever the mode and the lists (Ascend's
precedence: customize_dtypes > keep_dtype > precision_mode + modify_mixlist). The entries were checked against the
nodes' facts before anything is decided (:mod:`ampconfig.decide.customized`), so every dtype set here is one the
schema and the target's kernels allow."""

from __future__ import annotations

from ampconfig.decide.context import Verdict
from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import Scope
from ampconfig.decide.passes.base import DecisionPass


class CustomizedDtypes(DecisionPass):
    """Every mode, the first hard pass: each customised node gets its entry's dtype under rule ``customized``.
    Ensures: every customised node computes in its entry's dtype."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        changed = False
        for facts in scope.facts:
            custom = state.ctx.customized.get(facts.node)
            if custom is not None and facts.node not in state.verdicts:
                dtype, reason = custom
                changed |= state.decide(facts.node, Verdict(dtype, Rule.CUSTOMIZED, reason))
        return changed

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            custom = state.ctx.customized.get(facts.node)
            verdict = state.verdicts.get(facts.node)
            if custom is not None and (verdict is None or verdict.dtype != custom[0]):
                raise self.unkept(f"{facts.node.name} does not compute in its customised {custom[0]}")
