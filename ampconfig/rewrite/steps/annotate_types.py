"""Step 3, type: every value gets its type, from the admission's ONNX inference, then from the schemas of ops ONNX
does not know (:mod:`ampconfig.rewrite.types`). Only value types change; shapes stay as the model states them."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.rewrite.steps.conditions import RewriteStep
from ampconfig.rewrite.steps.run_context import RewriteRun
from ampconfig.rewrite.types import annotate_dtypes


class AnnotateTypesPass(RewriteStep):
    """Requires nothing it could check cheaply: it types any value without a type, from the admission's inference
    by value name (a folded LayerNorm keeps its output's name), then from the op schemas. Ensures
    ``run.values_typed`` counts the values that got a type, and every main-graph tensor value ONNX inference typed
    has one. Modified when a value got a type."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

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
            raise self.unkept(f"value(s) {untyped[:5]} that ONNX inference typed have no type")
