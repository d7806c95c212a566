"""Step 3, type: every value gets its type, from the admission's ONNX inference, then from the schemas of ops ONNX
does not know (:mod:`ampconfig.rewrite.types`). Only value types change; shapes stay as the model states them."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.rewrite.steps.state import RewriteRun
from ampconfig.rewrite.types import annotate_dtypes


class AnnotateTypesPass(ir.passes.InPlacePass):
    """Requires the nodes named and folded (inference types the folded nodes' outputs by name). Ensures
    ``run.values_typed`` counts the values that got a type."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        self.run.require("the nodes named", self.run.names, "typing")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.run.values_typed = annotate_dtypes(model, self.run.admission.types, self.run.setup.typing)
        return ir.passes.PassResult(model, modified=self.run.values_typed > 0)
