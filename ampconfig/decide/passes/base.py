"""The shape every decision pass has, after onnx-ir's ``PassBase``: ``requires`` (preconditions), ``call`` (the
work, returning whether it changed the state), ``ensures`` (postconditions), run in that order by ``__call__``.

A pass changes verdicts only through the state's methods (:meth:`DecisionState.decide`,
:meth:`DecisionState.forget`). Its conditions are about the state it reads (the verdicts, colours and facts of the
scope's nodes), stated in its docstring. A failed condition is a bug in ampconfig, raised as the rewrite's steps
raise theirs (:class:`~ampconfig.contracts.ContractBroken`, by ``self.unmet``/``self.unkept``) naming the pass; the
pipeline (:mod:`ampconfig.decide.pass_pipelines`) adds the scope and the passes already run there.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod

from ampconfig.contracts import Contracted
from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.facts import Scope

log = logging.getLogger(__name__)


class DecisionPass(ABC, Contracted):
    """One step of deciding the nodes of a scope."""

    @property
    def name(self) -> str:
        return type(self).__name__

    def requires(self, state: DecisionState, scope: Scope) -> None:
        """Raise ``self.unmet(problem)`` when the state is not what this pass needs."""

    @abstractmethod
    def call(self, state: DecisionState, scope: Scope) -> bool:
        """Decide (or re-decide) nodes of ``scope`` in ``state``; return whether anything in the state changed."""

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        """Raise ``self.unkept(problem)`` when the pass left the state inconsistent."""

    def __call__(self, state: DecisionState, scope: Scope) -> bool:
        self.requires(state, scope)
        before = dict(state.verdicts) if log.isEnabledFor(logging.DEBUG) else None
        changed = self.call(state, scope)
        self.ensures(state, scope)
        if before is not None:
            decided = sum(1 for node, verdict in state.verdicts.items() if before.get(node) is not verdict)
            log.debug("pass %s decided %d node(s) in scope %r", self.name, decided, scope.path or "main graph")
        return changed

    def __repr__(self) -> str:
        return self.name


def scope_name(scope: Scope) -> str:
    return f"scope {scope.path!r}" if scope.path else "the main graph"
