"""Step 6, check: the output serialised once without its large weights (the skeleton that is written, and that the
API's proto is completed from), and the full checker's verdict on it against the (repaired) input, with the
changed nodes it rejects. The checker sees the large weights as graph inputs of their type and shape: no weight is
copied for it. This is the one serialisation the pipeline makes of the model it rewrites."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.model_io.models import light_proto
from ampconfig.model_io.node_checks import check_output
from ampconfig.model_io.skeleton import skeleton_of
from ampconfig.rewrite.steps.conditions import RewriteStep, misnamed_node
from ampconfig.rewrite.steps.run_context import RewriteRun


class CheckOutputPass(RewriteStep):
    """Requires every node uniquely named (the checker's complaints are traced to changed nodes by name). Ensures
    ``run.skeleton`` and ``run.check`` (a complaint, if any, is for the pipeline to repair or refuse). Never
    modifies the model."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        problem = misnamed_node(model)
        if problem is not None:
            raise self.unmet(problem)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        run = self.run
        run.skeleton = skeleton_of(model)
        changed = [decision.name for decision in run.decisions if decision.changed]
        run.check = check_output(
            light_proto(run.skeleton.proto),
            changed,
            run.admission.input_pieces,
            input_passes=run.admission.input_passes,
        )
        return ir.passes.PassResult(model, modified=False)

    def ensures(self, model: ir.Model) -> None:
        if self.run.skeleton is None or self.run.check is None:
            raise self.unkept("the check left no skeleton or no verdict")
