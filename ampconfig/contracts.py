"""One contract vocabulary for ampconfig's passes: the decision passes (:mod:`ampconfig.decide.passes`) and the
rewrite's steps (:mod:`ampconfig.rewrite.steps`) each state ``requires`` (preconditions) and ``ensures``
(postconditions) about the model or the plan they read, after onnx-ir's ``PassBase``, and a condition that does
not hold raises :class:`ContractBroken` naming the pass and the condition: a bug in ampconfig, never the user's
input (the CLI reports it as an internal error, exit code 3).

A precondition broken is a :class:`PreconditionBroken`, which is also onnx-ir's ``PreconditionError``; a
postcondition broken a :class:`PostconditionBroken`, also onnx-ir's ``PostconditionError``. onnx-ir's
``PassBase.__call__`` lets those two through as they are and wraps any other error of ``requires``/``ensures`` in
its own, so a step's broken contract reaches its caller still naming the step, run alone or in a ``PassManager``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import onnx_ir as ir


class ContractBroken(ir.passes.InvariantError):
    """A pass's precondition or postcondition does not hold. ``pass_name``: the pass; ``condition``: "requires"
    or "ensures"; ``problem``: what does not hold; ``scope`` and ``ran``: where it happened and the passes that
    had run there before it, when the pipeline that ran it says so."""

    condition: ClassVar[str]
    #: how the message names the condition
    kind: ClassVar[str]

    def __init__(self, pass_name: str, problem: str, scope: str | None = None, ran: Sequence[str] = ()) -> None:
        self.pass_name = pass_name
        self.problem = problem
        self.scope = scope
        self.ran = tuple(ran)
        where = "" if scope is None else f" (in {scope}, after {', '.join(self.ran) or 'no other pass'})"
        super().__init__(f"{self.kind} of {pass_name} broken: {problem}{where}")

    def located(self, scope: str, ran: Sequence[str]) -> ContractBroken:
        """The same failure, saying in which scope and after which passes it happened."""
        return type(self)(self.pass_name, self.problem, scope, ran)


class PreconditionBroken(ContractBroken, ir.passes.PreconditionError):
    """What a pass requires does not hold when it starts."""

    condition = "requires"
    kind = "precondition"


class PostconditionBroken(ContractBroken, ir.passes.PostconditionError):
    """What a pass ensures does not hold when it ends."""

    condition = "ensures"
    kind = "postcondition"


class Contracted:
    """What a pass with a contract says when a condition fails, named after its class: ``raise
    self.unmet(problem)`` in ``requires``, ``raise self.unkept(problem)`` in ``ensures``."""

    def unmet(self, problem: str) -> PreconditionBroken:
        return PreconditionBroken(type(self).__name__, problem)

    def unkept(self, problem: str) -> PostconditionBroken:
        return PostconditionBroken(type(self).__name__, problem)
