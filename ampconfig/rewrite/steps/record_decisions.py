"""Step 5b, record: each decided node's decision written into its ``metadata_props`` (what Netron shows beside
it; :mod:`ampconfig.rewrite.decision_metadata`), or every ampconfig entry taken out when the options ask for none.
A model below IR version 10 has no node metadata: it gets none, and the run keeps a note saying so."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.decide.facts import graphs_of
from ampconfig.rewrite.decision_metadata import (
    FIRST_IR_VERSION,
    PREFIX,
    no_metadata_note,
    record_decisions,
    remove_decisions,
)
from ampconfig.rewrite.steps.conditions import RewriteStep, plan_unapplied
from ampconfig.rewrite.steps.run_context import RewriteRun


class RecordDecisionsPass(RewriteStep):
    """Requires the plan applied: every node ``run.plan`` retypes (still in the model) computes in its new dtype.
    Ensures every decided node carries its decision (or, with ``decision_metadata`` off, no node carries any), or
    ``run.metadata_note`` says why not. Modified when an entry changed."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        problem = plan_unapplied(self.run.plan, model)
        if problem is not None:
            raise self.unmet(problem)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        run = self.run
        assert run.plan is not None  # the plan was applied
        if not run.setup.decision_metadata:
            return ir.passes.PassResult(model, modified=remove_decisions(model))
        if model.ir_version < FIRST_IR_VERSION:
            run.metadata_note = no_metadata_note(model.ir_version)
            return ir.passes.PassResult(model, modified=False)
        changed = record_decisions(model, run.decisions, run.plan.facts_of, run.setup.mode.value)
        return ir.passes.PassResult(model, modified=changed)

    def ensures(self, model: ir.Model) -> None:
        run = self.run
        recorded = {
            node.name or ""
            for graph in graphs_of(model)
            for node in graph
            if any(key.startswith(PREFIX) for key in node.metadata_props)
        }
        if not run.setup.decision_metadata or model.ir_version < FIRST_IR_VERSION:
            if recorded:
                raise self.unkept(f"node(s) {sorted(recorded)[:5]} carry decisions that were asked away")
            return
        present = {node.name for graph in graphs_of(model) for node in graph}
        missing = [d.name for d in run.decisions if d.name in present and d.name not in recorded]
        if missing:
            raise self.unkept(f"decided node(s) {missing[:5]} carry no decision in their metadata")
