"""Step 5, apply: the only step that changes dtypes in the graph (:func:`ampconfig.rewrite.apply.apply_plan`):
nodes retyped, casts inserted, retargeted or made no-ops, weights and constants converted."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.decide.facts import graphs_of
from ampconfig.rewrite.apply import apply_plan
from ampconfig.rewrite.steps.conditions import (
    RewriteStep,
    misnamed_or_untaken,
    plan_not_of,
    plan_unapplied,
    read_before_made,
)
from ampconfig.rewrite.steps.run_context import RewriteRun


class ApplyPlanPass(RewriteStep):
    """Requires ``run.plan`` to decide each node of the model and no other (a plan of this model, not of an earlier
    attempt), and ``run.names`` to hold every node's name, each unique (the casts and copies get new ones). Ensures
    ``run.stats``; every node the plan retypes computes in its new dtype; every graph still in order (no node reads
    a value its graph makes later: each cast and copy is placed where its value is made). Modified when a node's
    dtype changed or a cast or tensor was touched."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        problem = plan_not_of(self.run.plan, model) or misnamed_or_untaken(model, self.run.names)
        if problem is not None:
            raise self.unmet(problem)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        run = self.run
        assert run.plan is not None  # requires
        cast_before = run.weights.float16 if run.weights is not None else {}
        stats = apply_plan(model, run.plan, run.names, run.setup.encode_float16, cast_before)
        cast_before.clear()  # what the plan did not convert (the rest went into the model's lazy tensors)
        run.stats = stats
        touched = (
            stats.casts_inserted
            + stats.casts_retargeted
            + stats.casts_removed
            + stats.initializers_converted
            + stats.constants_converted
        )
        changed = any(decision.changed for decision in run.decisions)
        return ir.passes.PassResult(model, modified=changed or touched > 0)

    def ensures(self, model: ir.Model) -> None:
        if self.run.stats is None:
            raise self.unkept("the rewrite left no statistics")
        problem = plan_unapplied(self.run.plan, model) or read_before_made(graphs_of(model))
        if problem is not None:
            raise self.unkept(problem)
