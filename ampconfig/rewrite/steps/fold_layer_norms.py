"""Step 2, fold: written-out LayerNorms become LayerNormalization nodes (docs/design.md §5) in the modes that
lower, so the decision can take them low where the target's kernel sums in float32. Nodes the user pins
(keep_dtype, customize_dtypes) or range analysis keeps float32 stay as they are."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.decide.customized import customized_names
from ampconfig.decide.plan import match_keep_dtype
from ampconfig.precision_modes import PrecisionMode
from ampconfig.rewrite.fold import fold_layer_norms
from ampconfig.rewrite.steps.conditions import RewriteStep, misnamed_or_untaken
from ampconfig.rewrite.steps.run_context import RewriteRun


class FoldLayerNormsPass(RewriteStep):
    """Requires every node uniquely named (the user's pins name nodes) and ``run.names`` holding every node's name
    (the nodes made get new ones). Ensures ``run.folded`` names the LayerNormalization nodes made. Modified when a
    LayerNorm was folded."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        problem = misnamed_or_untaken(model, self.run.names)
        if problem is not None:
            raise self.unmet(problem)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        setup, names = self.run.setup, self.run.names
        assert names is not None  # requires
        self.run.folded = []
        if setup.mode.is_mixed or setup.mode is PrecisionMode.FORCE_FP16:
            pinned, _ = match_keep_dtype(setup.keep_entries, model, setup.keep_source)
            keep = {node.name for node in pinned if node.name is not None}
            keep |= set(setup.facts.overflow_nodes) | customized_names(setup.customize, model)
            self.run.folded = fold_layer_norms(model, names, keep)
        return ir.passes.PassResult(model, modified=bool(self.run.folded))

    def ensures(self, model: ir.Model) -> None:
        layer_norms = {node.name for node in model.graph if node.op_type == "LayerNormalization"}
        missing = [name for name in self.run.folded if name not in layer_norms]
        if missing:
            raise self.unkept(f"folded node(s) {missing[:5]} are not LayerNormalization nodes")
