"""The shape every decision pass has, after onnx-ir's ``PassBase``: ``requires`` (preconditions), ``call`` (the
work, returning whether it changed the state), ``ensures`` (postconditions), run in that order by ``__call__``.

A pass changes verdicts only through the state's methods (:meth:`DecisionState.decide`,
:meth:`DecisionState.forget`). A failed condition is a bug in ampconfig, raised as :class:`DecisionInvariantError`
naming the pass; the pipeline (:mod:`ampconfig.decide.pass_pipelines`) adds the scope and the passes already run there.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence

from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.facts import Scope

log = logging.getLogger(__name__)


class DecisionInvariantError(AssertionError):
    """A pass's pre- or postcondition does not hold: the decision would be inconsistent."""

    def __init__(self, pass_name: str, problem: str, scope: str | None = None, ran: Sequence[str] = ()) -> None:
        self.pass_name = pass_name
        self.problem = problem
        self.scope = scope
        #: the passes that had run on the scope before this one, in order
        self.ran = tuple(ran)
        where = "" if scope is None else f" (in {scope}, after {', '.join(self.ran) or 'no other pass'})"
        super().__init__(f"{pass_name}: {problem}{where}")

    def located(self, scope: Scope, ran: Sequence[str]) -> DecisionInvariantError:
        """The same failure, saying in which scope and after which passes it happened."""
        return DecisionInvariantError(self.pass_name, self.problem, scope_name(scope), ran)


class DecisionPass(ABC):
    """One step of deciding the nodes of a scope."""

    @property
    def name(self) -> str:
        return type(self).__name__

    def requires(self, state: DecisionState, scope: Scope) -> None:  # noqa: B027 - optional hook
        """Raise :class:`DecisionInvariantError` when the state is not what this pass needs."""

    @abstractmethod
    def call(self, state: DecisionState, scope: Scope) -> bool:
        """Decide (or re-decide) nodes of ``scope`` in ``state``; return whether anything in the state changed."""

    def ensures(self, state: DecisionState, scope: Scope) -> None:  # noqa: B027 - optional hook
        """Raise :class:`DecisionInvariantError` when the pass left the state inconsistent."""

    def __call__(self, state: DecisionState, scope: Scope) -> bool:
        self.requires(state, scope)
        before = dict(state.verdicts) if log.isEnabledFor(logging.DEBUG) else None
        changed = self.call(state, scope)
        self.ensures(state, scope)
        if before is not None:
            decided = sum(1 for node, verdict in state.verdicts.items() if before.get(node) is not verdict)
            log.debug("pass %s decided %d node(s) in scope %r", self.name, decided, scope.path or "main graph")
        return changed

    def fail(self, problem: str) -> DecisionInvariantError:
        return DecisionInvariantError(self.name, problem)

    def __repr__(self) -> str:
        return self.name


def scope_name(scope: Scope) -> str:
    return f"scope {scope.path!r}" if scope.path else "the main graph"
