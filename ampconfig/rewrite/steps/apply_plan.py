"""Step 5, apply: the only step that changes dtypes in the graph (:func:`ampconfig.rewrite.apply.apply_plan`):
nodes retyped, casts inserted, retargeted or made no-ops, weights and constants converted."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.decide.facts import graphs_of
from ampconfig.rewrite.apply import apply_plan
from ampconfig.rewrite.steps.run_context import RewriteRun


class ApplyPlanPass(ir.passes.InPlacePass):
    """Requires a plan and the names taken. Ensures ``run.stats``, and every graph still in order (no node reads a
    value its graph makes later: each cast and copy is placed where its value is made); the model is modified when
    a node's dtype changed or a cast or tensor was touched."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        self.run.require("a plan", self.run.plan, "the rewrite")
        self.run.require("the nodes named", self.run.names, "the rewrite")

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
            raise ir.passes.PostconditionError("the rewrite left no statistics")
        for graph in graphs_of(model):
            seen: set[int] = set()
            for node in graph:
                for value in node.inputs:
                    if value is None:
                        continue
                    producer = value.producer()
                    if producer is not None and producer.graph is graph and id(producer) not in seen:
                        raise ir.passes.PostconditionError(
                            f"node {node.name!r} reads {value.name!r} before {producer.name!r} makes it: the casts "
                            "and copies the rewrite adds go where their values are made"
                        )
                seen.add(id(node))
