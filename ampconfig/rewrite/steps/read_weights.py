"""Step 3b, read the weights: each large float32 weight held in a protobuf message (the API's input) is read once,
for both the decision's values check (its bounds) and the float16 conversion (its float16 array, where it lies
within float16's range), instead of once for each (:func:`~ampconfig.rewrite.tensors.read_weights`). Only in the
modes that may lower to float16; weights on disk or already arrays are read where used, as before."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.dtypes import Dtype
from ampconfig.model_io.ir_bridge import model_graphs
from ampconfig.precision_modes import PrecisionMode
from ampconfig.rewrite.steps.conditions import RewriteStep
from ampconfig.rewrite.steps.run_context import RewriteRun
from ampconfig.rewrite.tensors import WeightReads, read_weights

#: Modes that lower no float32 node: no weight is converted, so none is read ahead.
_KEEPING_MODES = frozenset({PrecisionMode.FORCE_FP32, PrecisionMode.MUST_KEEP_ORIGIN_DTYPE})


class ReadWeightsPass(RewriteStep):
    """Requires nothing. Ensures every weight read ahead is a float32 initializer of this model (empty where the
    mode lowers nothing to float16); never modifies the model."""

    def __init__(self, run: RewriteRun) -> None:
        super().__init__()
        self.run = run

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        mode = self.run.setup.mode
        if mode in _KEEPING_MODES or mode.low_dtype is not Dtype.FLOAT16:
            self.run.weights = WeightReads()
            return ir.passes.PassResult(model, modified=False)
        tensors = (
            value.const_value
            for graph in model_graphs(model)
            for value in graph.initializers.values()
            if value.const_value is not None
        )
        self.run.weights = read_weights(tensors, self.run.setup.encode_float16, self.run.setup.read_float16_within)
        return ir.passes.PassResult(model, modified=False)

    def ensures(self, model: ir.Model) -> None:
        if self.run.weights is None:
            raise self.unkept("reading the weights left no reads")
        weights = {
            id(value.const_value)
            for graph in model_graphs(model)
            for value in graph.initializers.values()
            if value.const_value is not None and value.const_value.dtype == ir.DataType.FLOAT
        }
        stray = sum(id(tensor) not in weights for tensor in self.run.weights.bounds)
        if stray:
            raise self.unkept(f"{stray} weight(s) read ahead are no float32 initializer of this model")
