"""The shape every decision pass has, after onnx-ir's ``PassBase``: ``requires`` (preconditions), ``call`` (the
work), ``ensures`` (postconditions), run in that order by ``__call__``. A failed condition is a bug in ampconfig,
raised as :class:`DecisionInvariantError` naming the pass and the node."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod

from ampconfig.decide.facts import Scope
from ampconfig.decide.state import DecisionState

log = logging.getLogger(__name__)


class DecisionInvariantError(AssertionError):
    """A pass's pre- or postcondition does not hold: the decision would be inconsistent."""


class DecisionPass(ABC):
    """One step of deciding the nodes of a scope."""

    def requires(self, state: DecisionState, scope: Scope) -> None:  # noqa: B027 - optional hook
        """Raise :class:`DecisionInvariantError` when the state is not what this pass needs."""

    @abstractmethod
    def call(self, state: DecisionState, scope: Scope) -> None:
        """Decide (or re-decide) nodes of ``scope`` in ``state``."""

    def ensures(self, state: DecisionState, scope: Scope) -> None:  # noqa: B027 - optional hook
        """Raise :class:`DecisionInvariantError` when the pass left the state inconsistent."""

    def __call__(self, state: DecisionState, scope: Scope) -> None:
        self.requires(state, scope)
        before = dict(state.verdicts) if log.isEnabledFor(logging.DEBUG) else None
        self.call(state, scope)
        self.ensures(state, scope)
        if before is not None:
            decided = sum(1 for node, verdict in state.verdicts.items() if before.get(node) is not verdict)
            log.debug("pass %s decided %d node(s) in scope %r", type(self).__name__, decided, _scope_name(scope))

    def fail(self, message: str) -> DecisionInvariantError:
        return DecisionInvariantError(f"{type(self).__name__}: {message}")


def _scope_name(scope: Scope) -> str:
    return scope.path or "main graph"
