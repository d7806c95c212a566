"""Mixed modes, last check: every node's reason agrees with its neighbours' final dtypes."""

from __future__ import annotations

from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.decide.passes.follow import soft_verdict_problem
from ampconfig.dtypes import Dtype


class CheckReasons(DecisionPass):
    """Changes nothing. Ensures: soft verdicts agree with the final dtypes around them; deny-propagated nodes name
    a float32 cause; no node goes low where the target or its schema forbids it."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        return False

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        outputs = set(scope.graph.outputs)
        names = {facts.node.name: facts.node for facts in scope.facts}
        for facts in scope.facts:
            verdict = state.verdicts.get(facts.node)
            if verdict is None or facts.node not in state.colours:
                continue
            problem = soft_verdict_problem(state, facts, outputs)
            if problem is not None:
                raise self.unkept(f"{facts.node.name} ({verdict.rule.value}) {problem}")
            if verdict.rule is Rule.DENY_PROPAGATION:
                cause = names.get(verdict.cause or "")
                if cause is None or state.dtype_of(cause) is not Dtype.FLOAT32:
                    raise self.unkept(f"{facts.node.name} is denied by {verdict.cause}, which is not float32")
            low = verdict.dtype if verdict.is_low else None
            if low is not None and facts.dtype is Dtype.FLOAT32 and state.ctx.low_blocker(facts, low):
                raise self.unkept(f"{facts.node.name} went {verdict.dtype} where the target or schema forbids it")
