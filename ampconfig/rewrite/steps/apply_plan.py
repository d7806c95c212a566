"""Step 5, apply: the only step that changes dtypes in the graph (:func:`ampconfig.rewrite.apply.apply_plan`):
nodes retyped, casts inserted, retargeted or made no-ops, weights and constants converted."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.rewrite.apply import apply_plan
from ampconfig.rewrite.steps.state import RewriteRun


class ApplyPlanPass(ir.passes.InPlacePass):
    """Requires a plan and the names taken. Ensures ``run.stats``; the model is modified when a node's dtype
    changed or a cast or tensor was touched."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        self.run.require("a plan", self.run.plan, "the rewrite")
        self.run.require("the nodes named", self.run.names, "the rewrite")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        run = self.run
        assert run.plan is not None  # requires
        stats = apply_plan(model, run.plan, run.names, run.setup.encode_float16)
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
