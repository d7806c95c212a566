"""Debugging copies of a model that expose intermediate values as graph outputs (compare, range analysis, tune).
The input model is never modified."""

from __future__ import annotations

import onnx
from onnx import TensorProto

#: Element types of the float tensors debugging runs expose.
FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE})

#: Suffix of the float32 copy under which :func:`expose_values` exposes a bfloat16 value (numpy has no bfloat16,
#: so ONNX Runtime's Python API cannot hand one back; the Cast to float32 is exact).
EXPOSED_FLOAT32_SUFFIX = "::as_float32"


def expose_values(model: onnx.ModelProto, names: list[str] | tuple[str, ...]) -> onnx.ModelProto:
    """A copy of ``model`` whose main graph also outputs the node-output values ``names`` (for debugging runs).

    Values no main-graph node produces, values already graph outputs and values of unknown element type are
    skipped. A bfloat16 value is exposed through an exact Cast to float32 named ``name + EXPOSED_FLOAT32_SUFFIX``.
    Outputs carry the stated or inferred shape where known. The input model is not modified.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    produced = {output for node in graph.node for output in node.output if output}
    taken = produced | {value.name for value in (*graph.input, *graph.output)} | {i.name for i in graph.initializer}
    present = {value.name for value in graph.output}
    types = known_tensor_types(copy)
    for name in dict.fromkeys(names):
        known = types.get(name)
        if name not in produced or name in present or known is None:
            continue
        exposed = onnx.ValueInfoProto(name=name)
        exposed.type.CopyFrom(known)
        if known.tensor_type.elem_type == onnx.TensorProto.BFLOAT16:
            exposed.name = name + EXPOSED_FLOAT32_SUFFIX
            if exposed.name in taken:
                continue
            graph.node.append(
                onnx.helper.make_node("Cast", [name], [exposed.name], name=exposed.name, to=onnx.TensorProto.FLOAT)
            )
            exposed.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        graph.output.append(exposed)
    return copy


def known_tensor_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Tensor type of every main-graph value the model states or ONNX type inference derives (stated first)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=False)
    except Exception:  # inference is best effort: the values the model states still count
        inferred = model
    types: dict[str, onnx.TypeProto] = {}
    for source in (model.graph, inferred.graph):
        for value in (*source.input, *source.output, *source.value_info):
            if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
                types.setdefault(value.name, value.type)
    return types


def known_elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every main-graph value the model states or ONNX type inference derives."""
    return {name: known.tensor_type.elem_type for name, known in known_tensor_types(model).items()}


def value_elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every main-graph value stated by the model or derived by ONNX type inference."""
    types = known_elem_types(model)
    for init in model.graph.initializer:
        types.setdefault(init.name, init.data_type)
    return types


def float_node_outputs(model: onnx.ModelProto) -> list[str]:
    """Names of the main-graph node outputs whose element type is a float type, in node order."""
    types = value_elem_types(model)
    return [name for node in model.graph.node for name in node.output if name and types.get(name) in FLOAT_TYPES]
