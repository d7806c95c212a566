"""Step 3, type: every value gets its type, from the admission's ONNX inference, then from the schemas of ops ONNX
does not know (:mod:`ampconfig.rewrite.types`). Only value types change; shapes stay as the model states them."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.rewrite.steps.run_context import RewriteRun
from ampconfig.rewrite.types import annotate_dtypes


class AnnotateTypesPass(ir.passes.InPlacePass):
    """Requires the nodes named and folded (inference types the folded nodes' outputs by name). Ensures
    ``run.values_typed`` counts the values that got a type, and every main-graph tensor value ONNX inference typed
    has one."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def requires(self, model: ir.Model) -> None:
        self.run.require("the nodes named", self.run.names, "typing")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        self.run.values_typed = annotate_dtypes(model, self.run.admission.types, self.run.setup.typing)
        return ir.passes.PassResult(model, modified=self.run.values_typed > 0)

    def ensures(self, model: ir.Model) -> None:
        inferred = self.run.admission.types
        untyped = [
            value.name
            for node in model.graph
            for value in node.outputs
            if value.type is None
            and value.name
            and value.name in inferred
            and inferred[value.name].HasField("tensor_type")
        ]
        if untyped:
            raise ir.passes.PostconditionError(f"value(s) {untyped[:5]} that ONNX inference typed have no type")
