"""Giving every value of a model a type before deciding: ONNX type inference, then the schemas of ops ONNX does not
know.

ONNX's inference stops at an op it has no schema for (``com.microsoft::SkipLayerNormalization``, written by ONNX
Runtime's transformer optimizer): every value downstream stays untyped, so nothing around a fused op could be
decided. Where the typing source knows such an op (ONNX Runtime's schema registry), its outputs take the dtype its
type constraints bind from its inputs, and ONNX inference runs again from there, until nothing new is typed.
Shapes are left as the model states them. This mutates value types only (the rewrite's stage).
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx
import onnx_ir as ir

from ampconfig.decide.facts import ONNX_TYPING, graphs_of
from ampconfig.model_io.ir_bridge import stand_in_type
from ampconfig.model_io.models import call_onnx_api, inferred_types
from ampconfig.opinfo.schema import NodeTyping, default_opset
from ampconfig.opinfo.typing_source import TypingSource

#: ONNX inference passes at most this often: each pass gets past one more layer of ops ONNX does not know.
_MAX_ROUNDS = 64


def annotate_dtypes(
    model: ir.Model,
    types: Mapping[str, onnx.TypeProto] | None = None,
    typing_source: TypingSource = ONNX_TYPING,
) -> int:
    """Fill in missing value types: from ``types`` (ONNX inference by value name; inferred here when None), then
    through ops only ``typing_source`` knows, alternating with ONNX inference until nothing new is typed. Returns
    how many values got a type."""
    typed = _fill(model, inferred_types(light_proto_of(model)) if types is None else types)
    for _ in range(_MAX_ROUNDS):
        by_schema = _type_by_schema(model, typing_source)
        if not by_schema:
            break
        typed += by_schema + _fill(model, inferred_types(light_proto_of(model)))
    return typed


def light_proto_of(model: ir.Model) -> onnx.ModelProto:
    """A proto of ``model`` for type inference, without serialising large tensors (onnx-ir lifts them)."""
    return call_onnx_api(lambda proto: proto, model)


def _fill(model: ir.Model, types: Mapping[str, onnx.TypeProto]) -> int:
    if not types:
        return 0
    typed = 0
    for graph in graphs_of(model):
        values = [*graph.inputs, *graph.initializers.values(), *(v for node in graph for v in node.outputs)]
        for value in values:
            if value.type is None and value.name is not None and value.name in types:
                value.type = _ir_type(model, value.name, types[value.name])
                typed += value.type is not None
    return typed


def _ir_type(model: ir.Model, name: str, type_proto: onnx.TypeProto) -> ir.TypeProtocol | None:
    """:func:`~ampconfig.model_io.ir_bridge.stand_in_type`, a plain tensor type read here directly (as onnx-ir reads
    it): inference types every value of a model, and most are plain tensors."""
    if type_proto.HasField("tensor_type") and type_proto.tensor_type.HasField("elem_type"):
        data_type = _DATA_TYPES.get(type_proto.tensor_type.elem_type)
        if data_type is not None:
            denotation = type_proto.denotation if type_proto.HasField("denotation") else None
            return ir.TensorType(data_type, denotation=denotation)
    return stand_in_type(model, name, type_proto)


_DATA_TYPES = {int(data_type): data_type for data_type in ir.DataType}


def _type_by_schema(model: ir.Model, typing_source: TypingSource) -> int:
    """Type the untyped outputs of nodes ONNX inference could not type, from their schema's type constraints;
    returns how many values got a type."""
    typed = 0
    for graph in graphs_of(model):
        for node in graph:
            if all(value.type is not None or not value.name for value in node.outputs):
                continue
            opset = default_opset(model.opset_imports, node.domain)
            if opset is None:
                continue
            typing = typing_source.typing(node.op_type, node.domain, opset, len(node.inputs), len(node.outputs))
            if typing is not None:
                typed += _type_outputs(node, typing)
    return typed


def _type_outputs(node: ir.Node, typing: NodeTyping) -> int:
    bound: dict[str, ir.DataType] = {}
    for value, slot in zip(node.inputs, typing.inputs):
        if value is not None and slot.type_var is not None and isinstance(value.type, ir.TensorType):
            bound.setdefault(slot.type_var, value.type.dtype)
    typed = 0
    for value, slot in zip(node.outputs, typing.outputs):
        if value.type is not None or not value.name:
            continue
        dtype = bound.get(slot.type_var) if slot.type_var is not None else None
        if dtype is None and len(slot.allowed) == 1:
            dtype = _tensor_dtype(next(iter(slot.allowed)))
        if dtype is not None:
            value.type = ir.TensorType(dtype)
            typed += 1
    return typed


def _tensor_dtype(type_str: str) -> ir.DataType | None:
    """The element type of a ``tensor(...)`` type string (its name is the TensorProto name in lower case); None
    for sequences, maps and optionals."""
    if not (type_str.startswith("tensor(") and type_str.endswith(")")):
        return None
    try:
        return ir.DataType(onnx.TensorProto.DataType.Value(type_str[len("tensor(") : -1].upper()))
    except ValueError:
        return None
