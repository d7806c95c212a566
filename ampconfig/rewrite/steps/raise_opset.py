"""Step 0b, raise the opset for bfloat16: a model below opset 13 is converted to it (Cast-13 and most arithmetic
ops gained bfloat16 there) by ONNX's version converter, run on a proto of the model without its large weights
(:func:`~ampconfig.model_io.models.weightless_proto`: they stay initializers of their type and shape, which the
converter keeps as they are). The converted graph replaces the model's, the very weight tensors put back: none
is copied or read. Where the converter fails or would change the model's inputs or outputs, the opset stays (a
warning says so) and ops without bfloat16 at it stay float32. Runs once, after the admission, in the bfloat16
modes that lower nodes."""

from __future__ import annotations

import onnx
import onnx_ir as ir

from ampconfig.domains import onnx_opset
from ampconfig.model_io.ir_bridge import move_into, to_ir
from ampconfig.model_io.models import (
    INFERENCE_FAILURES,
    inferred_types,
    light_proto,
    weightless_proto,
    with_weights_back,
)
from ampconfig.model_io.repair import graphs
from ampconfig.rewrite.steps.admit_input import misaligned, unsorted
from ampconfig.rewrite.steps.conditions import RewriteStep, onnx_opset_of
from ampconfig.rewrite.steps.run_context import InputAdmission

#: bfloat16 tensors need opset 13 (Cast-13 and most arithmetic ops gained bfloat16 there).
BF16_MIN_OPSET = 13


class RaiseOpsetForBf16Pass(RewriteStep):
    """Requires ``admission.light`` to match the model (as many nodes in each graph, the same ONNX opset) and,
    where the checker accepted the input, every graph in topological order (the converter reads the graph in
    order): the model as admitted. Ensures the model imports ONNX's domain at opset :data:`BF16_MIN_OPSET` or more
    (or none), or a warning in ``admission.warnings`` says why it could not, and ``admission.light`` matches the
    model again (when it was raised, it and ``admission.types`` are the converted model's, and
    ``admission.opset_raised`` says to what). Modified when the opset was raised."""

    def __init__(self, admission: InputAdmission) -> None:
        super().__init__()
        self.admission = admission

    def requires(self, model: ir.Model) -> None:
        problem = self._light_mismatch(model)
        if problem is None and not self.admission.checker_errors:
            problem = unsorted(model)
        if problem is not None:
            raise self.unmet(problem)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        admission = self.admission
        opset = onnx_opset(admission.light.opset_import)
        if opset is None or opset >= BF16_MIN_OPSET:
            return ir.passes.PassResult(model, modified=False)
        proto, left_out = weightless_proto(model)
        needs = f"bfloat16 needs opset >= {BF16_MIN_OPSET}"
        try:
            converted = onnx.version_converter.convert_version(proto, BF16_MIN_OPSET)
        except INFERENCE_FAILURES as exc:  # ONNX's C++ errors: plain RuntimeErrors for unsupported adapters
            admission.warnings.append(
                f"{needs}; converting from opset {opset} failed ({exc}); ops whose schema lacks bfloat16 at this "
                "opset stay float32"
            )
            return ir.passes.PassResult(model, modified=False)
        if _io_signature(converted) != _io_signature(proto):
            # The converter's adapters are not all faithful (Scan-8 -> 9 drops the batch axis of the inputs).
            admission.warnings.append(
                f"{needs}; converting from opset {opset} would change the model's inputs/outputs, so the opset was "
                "kept and ops without bfloat16 at this opset stay float32"
            )
            return ir.passes.PassResult(model, modified=False)
        admission.warnings.append(f"opset raised from {opset} to {BF16_MIN_OPSET}: bfloat16 needs it")
        _keep_declarations_of(proto, converted)
        raised = to_ir(converted)
        with_weights_back(raised, left_out)
        move_into(model, raised)
        admission.light = light_proto(converted)
        admission.types = inferred_types(admission.light)
        admission.opset_raised = BF16_MIN_OPSET
        return ir.passes.PassResult(model, modified=True)

    def ensures(self, model: ir.Model) -> None:
        problem = self._light_mismatch(model)
        opset = onnx_opset_of(model)
        if problem is None and self.admission.opset_raised is not None and opset != self.admission.opset_raised:
            problem = f"the opset was to be raised to {self.admission.opset_raised}, the model imports {opset}"
        if problem is None and opset is not None and opset < BF16_MIN_OPSET and not self.admission.warnings:
            problem = f"the model stays at opset {opset} and no warning says why"
        if problem is not None:
            raise self.unkept(problem)

    def _light_mismatch(self, model: ir.Model) -> str | None:
        """What does not match between the model and the admission's light proto: the nodes of each graph, the
        ONNX opset."""
        light = self.admission.light
        problem = misaligned(model, light, "the admission's light proto")
        if problem is None and onnx_opset(light.opset_import) != onnx_opset_of(model):
            problem = (
                f"the admission's light proto imports ONNX's domain at {onnx_opset(light.opset_import)}, the model "
                f"at {onnx_opset_of(model)}"
            )
        return problem


def _keep_declarations_of(source: onnx.ModelProto, converted: onnx.ModelProto) -> None:
    """Give ``converted`` the ``value_info`` of ``source`` and no other: the converter runs shape inference and
    writes what it inferred (``[N, 4]``, ``unk__0``) as declarations, shape claims the input never made that ONNX
    Runtime's memory planner would trust (docs/design.md §6). Each graph keeps its own entries, by graph name,
    for the values it still has."""
    declared: dict[tuple[str, str], onnx.ValueInfoProto] = {}
    for graph in graphs(source.graph):
        for entry in graph.value_info:
            declared.setdefault((graph.name, entry.name), entry)
    for graph in graphs(converted.graph):
        kept = [declared[graph.name, entry.name] for entry in graph.value_info if (graph.name, entry.name) in declared]
        if len(kept) != len(graph.value_info):
            del graph.value_info[:]
            graph.value_info.extend(kept)


def _io_signature(proto: onnx.ModelProto) -> list[bytes]:
    return [value.type.SerializeToString() for value in (*proto.graph.input, *proto.graph.output)]
