"""Step 0b, raise the opset for bfloat16: a model below opset 13 is converted to it (Cast-13 and most arithmetic
ops gained bfloat16 there) by ONNX's version converter, run on a proto of the model without its large weights
(:func:`~ampconfig.files.models.weightless_proto`: they stay initializers of their type and shape, which the
converter keeps as they are). The converted graph replaces the model's, the very weight tensors put back: none
is copied or read. Where the converter fails or would change the model's inputs or outputs, the opset stays (a
warning says so) and ops without bfloat16 at it stay float32. Runs once, after the admission, in the bfloat16
modes that lower nodes."""

from __future__ import annotations

import onnx
import onnx_ir as ir

from ampconfig.domains import is_default_domain, onnx_opset
from ampconfig.files.ir_bridge import move_into, to_ir
from ampconfig.files.models import INFERENCE_FAILURES, inferred_types, light_proto, weightless_proto, with_weights_back
from ampconfig.files.repair import graphs
from ampconfig.rewrite.steps.run_context import InputAdmission

#: bfloat16 tensors need opset 13 (Cast-13 and most arithmetic ops gained bfloat16 there).
BF16_MIN_OPSET = 13


class RaiseOpsetForBf16Pass(ir.passes.InPlacePass):
    """Requires the input admitted (``admission``). Ensures the model imports ONNX's domain at opset
    :data:`BF16_MIN_OPSET` or more, or a warning in ``admission.warnings`` says why it could not; when it was
    raised, ``admission.opset_raised`` says to what, and ``admission.light`` and ``admission.types`` are the
    converted model's. Modified when the opset was raised."""

    def __init__(self, admission: InputAdmission) -> None:
        super().__init__()
        self.admission = admission

    def requires(self, model: ir.Model) -> None:
        self.admission.require_admitted("raising the opset")

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
        opset = next((version for domain, version in model.opset_imports.items() if is_default_domain(domain)), None)
        if self.admission.opset_raised is not None and opset != self.admission.opset_raised:
            raise ir.passes.PostconditionError(f"the opset was to be raised to {self.admission.opset_raised}")


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
