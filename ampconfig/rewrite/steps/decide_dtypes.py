"""Step 4, decide: each node's dtype for the mode, as pure data (:func:`ampconfig.decide.plan.build_plan`); the
model is read, never changed. Also the cost report, read from the graph as decided (before it is rewritten)."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from ampconfig.decide.context import DecisionContext
from ampconfig.decide.cost import decision_cost
from ampconfig.decide.customized import match_customized
from ampconfig.decide.plan import build_plan, match_keep_dtype
from ampconfig.rewrite.steps.conditions import RewriteStep, misnamed_node, plan_not_of
from ampconfig.rewrite.steps.run_context import RewriteRun


class DecideDtypesPass(RewriteStep):
    """Requires every node uniquely named (keep_dtype entries, the checker's rejects and the decisions name
    nodes). Ensures ``run.plan`` decides each node of the model and no other, and ``run.decisions`` holds one
    decision a node (and ``run.cost`` when the options ask for it). Never modifies the model."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        problem = misnamed_node(model)
        if problem is not None:
            raise self.unmet(problem)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        run, setup = self.run, self.run.setup
        pinned, keep_warnings = match_keep_dtype(setup.keep_entries, model, setup.keep_source)
        customized: dict[Any, Any] = {}
        if setup.customize is not None:
            customized, custom_warnings = match_customized(
                setup.customize, model, setup.library, setup.mode.low_dtype, setup.typing
            )
            keep_warnings = [*keep_warnings, *custom_warnings]
        context = DecisionContext(
            setup.mode,
            setup.lists,
            setup.library,
            pinned,
            dict(run.rejected),
            dict(setup.facts.overflow_nodes),
            setup.typing,
            customized=customized,
            judges=dict(setup.judges),
            value_ranges=setup.facts.value_ranges,
            clamp_values=setup.clamp_values,
            runtime_refused=dict(setup.facts.runtime_refused),
        )
        run.keep_warnings = keep_warnings
        known = run.weights.bounds if run.weights is not None else None  # the weights read before it
        run.plan = build_plan(model, context, setup.keep_io_types, constant_bounds=known)
        run.decisions = run.plan.decisions()
        run.cost = decision_cost(run.plan) if setup.with_cost else None
        return ir.passes.PassResult(model, modified=False)

    def ensures(self, model: ir.Model) -> None:
        problem = plan_not_of(self.run.plan, model)
        if problem is not None:
            raise self.unkept(problem)
        names = [decision.name for decision in self.run.decisions]
        if len(names) != len(set(names)):
            raise self.unkept("the decision decided a node twice")
