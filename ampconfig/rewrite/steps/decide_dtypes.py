"""Step 4, decide: each node's dtype for the mode, as pure data (:func:`ampconfig.decide.plan.build_plan`); the
model is read, never changed. Also the cost report, read from the graph as decided (before it is rewritten)."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from ampconfig.decide.context import DecisionContext
from ampconfig.decide.cost import decision_cost
from ampconfig.decide.customized import match_customized
from ampconfig.decide.plan import build_plan, match_keep_dtype
from ampconfig.rewrite.steps.run_context import RewriteRun


class DecideDtypesPass(ir.passes.InPlacePass):
    """Requires the nodes named and typed. Ensures ``run.plan`` and ``run.decisions`` (and ``run.cost`` when the
    options ask for it); never modifies the model."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        self.run.require("the nodes named", self.run.names, "the decision")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        run, setup = self.run, self.run.setup
        options = setup.options
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
            dict(options.overflow_nodes),
            setup.typing,
            customized=customized,
            judges=dict(options.judges),
            value_ranges=setup.value_ranges,
            clamp_values=options.clamp_values,
            runtime_refused=dict(options.runtime_refused),
        )
        run.keep_warnings = keep_warnings
        known = run.weights.bounds if run.weights is not None else None  # the weights read before it
        run.plan = build_plan(model, context, options.keep_io_types, constant_bounds=known)
        run.decisions = run.plan.decisions()
        run.cost = decision_cost(run.plan) if options.with_cost else None
        return ir.passes.PassResult(model, modified=False)

    def ensures(self, model: ir.Model) -> None:
        if self.run.plan is None:
            raise ir.passes.PostconditionError("the decision left no plan")
        names = [decision.name for decision in self.run.decisions]
        if len(names) != len(set(names)):
            raise ir.passes.PostconditionError("the decision decided a node twice")
