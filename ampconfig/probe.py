"""One-node probe models: for an op and a float dtype, small models whose only node is that op computing in that
dtype. Pure model building (no ONNX Runtime here); :mod:`ampconfig.runner.kernels` asks a provider to load them.

Corpus, in order of preference:

1. ONNX's node test cases (``onnx.backend.test.case.node.collect_testcases``) whose model is a single node of the
   op with float32 tensors: they carry valid attributes and ranks. They are retyped by TYPE CONSTRAINT: only the
   tensors bound to the node's primary float type variable move to the probed dtype; tensors of other variables
   (LayerNormalization's Mean/InvStdDev ``U``, Resize's scales) keep their type.
2. A model synthesised from the op schema (required inputs only, rank-unknown tensors, required attributes given
   defaults) for default-domain ops without such a test case.
3. Hand-written signatures for the com.microsoft contrib ops ORT's transformer optimizer produces (ONNX does not
   ship their schemas).

An op for which none of these builds a model gets no probe (``dtype_source: "not-probed"``).
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import onnx
import onnx.defs
from onnx import helper, numpy_helper

from ampconfig.op_schema import DTYPE_TO_ELEM, DTYPE_TO_TYPE_STR, node_typing

#: ONNX Runtime 1.31 refuses onnx 1.23's default IR version 14; 10 is read by every ORT we support.
PROBE_IR_VERSION = 10
#: Probes never import a newer default-domain opset than this (the newest the rest of ampconfig targets).
MAX_PROBE_OPSET = 23
PROBE_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
_FLOAT = onnx.TensorProto.FLOAT
_CONTRIB = "com.microsoft"
# Attributes that name the element type of output 0 (Cast.to, RandomNormal.dtype, EyeLike.dtype, ...).
_DTYPE_ATTRS = frozenset({"to", "dtype", "output_dtype", "output_datatype"})


@dataclass(frozen=True)
class ProbeModel:
    """One probe: a single-node model of ``key`` computing in ``dtype``; ``origin`` says where it came from."""

    key: str
    dtype: str
    origin: str
    model: onnx.ModelProto = field(repr=False, compare=False)


# --------------------------------------------------------------------------------------------- schemas


def _latest_default_schemas() -> dict[str, onnx.defs.OpSchema]:
    latest: dict[str, onnx.defs.OpSchema] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain != "":
            continue
        known = latest.get(schema.name)
        if known is None or schema.since_version > known.since_version:
            latest[schema.name] = schema
    return latest


@cache
def default_domain_op_types() -> tuple[str, ...]:
    """Every op type of the default ONNX domain known to ``onnx.defs`` whose latest schema is not deprecated."""
    return tuple(sorted(name for name, schema in _latest_default_schemas().items() if not schema.deprecated))


def _schema_at(op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return None


# --------------------------------------------------------------------------------------------- test cases


@cache
def _single_node_testcases() -> Mapping[str, tuple[tuple[str, onnx.ModelProto], ...]]:
    """Default-domain single-node test models with a float32 tensor, by op type (collected once: ~10 s)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference implementations overflow on purpose
        cases = collect_testcases("")  # "" = no filter; the module keeps a global list, so filter here
    by_op: dict[str, list[tuple[str, onnx.ModelProto]]] = {}
    for case in cases:
        if "_expanded" in case.name or case.model is None or len(case.model.graph.node) != 1:
            continue
        node = case.model.graph.node[0]
        if node.domain not in ("", "ai.onnx") or not _has_float32(case.model):
            continue
        by_op.setdefault(node.op_type, []).append((case.name, case.model))
    return {op: tuple(models) for op, models in by_op.items()}


def _has_float32(model: onnx.ModelProto) -> bool:
    return any(elem == _FLOAT for elem in _value_elems(model.graph).values())


def _value_elems(graph: onnx.GraphProto) -> dict[str, int]:
    """Tensor element type of every named value the graph declares (inputs, outputs, value_info, initializers)."""
    elems: dict[str, int] = {}
    for info in (*graph.input, *graph.output, *graph.value_info):
        if info.type.HasField("tensor_type"):
            elems[info.name] = info.type.tensor_type.elem_type
    for init in graph.initializer:
        elems[init.name] = init.data_type
    return elems


def _clamped_opset(model: onnx.ModelProto, op_type: str) -> int | None:
    """The default-domain opset to stamp: the model's, lowered to MAX_PROBE_OPSET when the op exists there."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), MAX_PROBE_OPSET)
    if opset <= MAX_PROBE_OPSET:
        return opset
    return MAX_PROBE_OPSET if _schema_at(op_type, MAX_PROBE_OPSET) is not None else None


def _primary_var(node: onnx.NodeProto, opset: int, elems: Mapping[str, int]) -> str | None:
    """The node's primary float type variable: output 0's if it is float32, else the first float32 input's."""
    typing = node_typing(node.op_type, "", opset, len(node.input), len(node.output))
    if typing is None:
        return None
    pairs = [(node.output[0], typing.outputs[0])] if node.output and typing.outputs else []
    pairs += [(name, slot) for name, slot in zip(node.input, typing.inputs) if name]
    for name, slot in pairs:
        if slot.type_var is not None and elems.get(name) == _FLOAT:
            return slot.type_var
    return None


def _bound_names(node: onnx.NodeProto, opset: int, var: str) -> set[str]:
    typing = node_typing(node.op_type, "", opset, len(node.input), len(node.output))
    assert typing is not None  # _primary_var found a var, so the schema exists
    names = {name for name, slot in zip(node.input, typing.inputs) if name and slot.type_var == var}
    names |= {name for name, slot in zip(node.output, typing.outputs) if name and slot.type_var == var}
    return names


def retype_model(model: onnx.ModelProto, dtype: str) -> onnx.ModelProto | None:
    """A copy of a single-node model with the tensors of the node's primary float type variable in ``dtype``.

    Returns None when the node has no float32 primary variable or its schema does not allow ``dtype`` there.
    Tensors bound to other type variables keep their type (LayerNormalization's Mean/InvStdDev stay float32).
    """
    node = model.graph.node[0]
    opset = _clamped_opset(model, node.op_type)
    if opset is None:
        return None
    elems = _value_elems(model.graph)
    var = _primary_var(node, opset, elems)
    if var is None:
        # Float32 tensors of fixed type (NonMaxSuppression's boxes) or heterogeneous variadics (If/Loop/Scan
        # outputs): the model probes float32 as it is, but there is no variable to move to a low dtype.
        return _stamped(model, opset) if dtype == "float32" else None
    typing = node_typing(node.op_type, "", opset, len(node.input), len(node.output))
    if typing is None or not typing.var_allows(var, dtype):
        return None
    out = _stamped(model, opset)
    if dtype == "float32":
        return out
    names = {name for name in _bound_names(node, opset, var) if elems.get(name) == _FLOAT}
    _retype_values(out.graph, names, DTYPE_TO_ELEM[dtype])
    if node.output and node.output[0] in names:
        _retype_output_attrs(out.graph.node[0], DTYPE_TO_ELEM[dtype], opset)
    return out


def _stamped(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    out = copy.deepcopy(model)
    out.ir_version = PROBE_IR_VERSION
    for entry in out.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    return out


def _retype_values(graph: onnx.GraphProto, names: set[str], elem: int) -> None:
    for info in (*graph.input, *graph.output, *graph.value_info):
        if info.name in names and info.type.HasField("tensor_type"):
            info.type.tensor_type.elem_type = elem
    for index, init in enumerate(graph.initializer):
        if init.name in names:
            graph.initializer[index].CopyFrom(_converted(init, elem))


def _converted(tensor: onnx.TensorProto, elem: int) -> onnx.TensorProto:
    array = numpy_helper.to_array(tensor).astype(np.float32)
    target = helper.tensor_dtype_to_np_dtype(elem)
    return numpy_helper.from_array(array.astype(target), tensor.name)


def _retype_output_attrs(node: onnx.NodeProto, elem: int, opset: int) -> None:
    """Attributes that fix output 0's type follow it (Cast.to, EyeLike.dtype, Constant/ConstantOfShape.value),
    and a dtype attribute the node leaves at its float default is set (HannWindow.output_datatype)."""
    schema = _schema_at(node.op_type, opset)
    present = {attr.name for attr in node.attribute}
    for name in sorted(_DTYPE_ATTRS & set(schema.attributes if schema else ()) - present):
        default = schema.attributes[name].default_value if schema else None
        if default is not None and default.i == _FLOAT:
            node.attribute.append(helper.make_attribute(name, elem))
    for attr in node.attribute:
        if attr.name in _DTYPE_ATTRS and attr.type == onnx.AttributeProto.INT and attr.i == _FLOAT:
            attr.i = elem
        elif attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == _FLOAT:
            attr.t.CopyFrom(_converted(attr.t, elem))


def testcase_probes(op_type: str, dtype: str) -> Iterator[ProbeModel]:
    for name, model in _single_node_testcases().get(op_type, ()):
        retyped = retype_model(model, dtype)
        if retyped is not None:
            yield ProbeModel(op_type, dtype, f"onnx-testcase:{name}", retyped)


# --------------------------------------------------------------------------------------------- schema synthesis

# Required attributes whose type default would be invalid.
_ATTR_DEFAULTS: Mapping[str, object] = {
    "shape": [2, 3],
    "pooled_shape": [1, 1],
    "kernel_shape": [1, 1],
    "equation": "ij,jk->ik",
}
_TYPE_RE = re.compile(r"^(?:(optional)\()?(?:(seq)\()?tensor\((\w+)\)\)?\)?$")


def _type_proto(type_str: str) -> onnx.TypeProto | None:
    """TypeProto of an ONNX type string such as ``tensor(float)``, ``seq(tensor(int64))``."""
    match = _TYPE_RE.match(type_str)
    if match is None:
        return None
    optional, seq, elem_name = match.groups()
    elem = onnx.TensorProto.DataType.Value(elem_name.upper()) if elem_name != "float" else _FLOAT
    proto = helper.make_tensor_type_proto(elem, None)
    if seq:
        proto = helper.make_sequence_type_proto(proto)
    if optional:
        proto = helper.make_optional_type_proto(proto)
    return proto


def _float_capable(allowed: Sequence[str]) -> bool:
    return any("tensor(float)" in type_str for type_str in allowed)


def _pick_type(allowed: Sequence[str], dtype: str, primary: bool) -> str | None:
    """The probe type of a parameter: the probed dtype (or its container) for the primary variable; for other
    variables the same if allowed (a sequence of the probed tensors), else float32, int64, bool, first."""
    in_dtype = [t.replace("tensor(float)", DTYPE_TO_TYPE_STR[dtype]) for t in allowed if "tensor(float)" in t]
    in_dtype = [t for t in in_dtype if t in allowed]
    if primary:
        return in_dtype[0] if in_dtype else None
    for preferred in (*in_dtype, "tensor(float)", "tensor(int64)", "tensor(bool)"):
        if preferred in allowed:
            return preferred
    return sorted(allowed)[0] if allowed else None


def _synth_attr(attr: onnx.defs.OpSchema.Attribute) -> onnx.AttributeProto | None:
    if attr.name in _ATTR_DEFAULTS:
        return helper.make_attribute(attr.name, _ATTR_DEFAULTS[attr.name])
    kind = onnx.defs.OpSchema.AttrType
    defaults: dict[object, object] = {kind.INT: 1, kind.INTS: [1], kind.FLOAT: 1.0, kind.FLOATS: [1.0]}
    if attr.type not in defaults:
        return None  # graphs, tensors, strings: no sensible default
    return helper.make_attribute(attr.name, defaults[attr.type])


def synthesise_probe(op_type: str, dtype: str) -> onnx.ModelProto | None:
    """A one-node model of a default-domain op built from its schema at MAX_PROBE_OPSET, or None."""
    schema = _schema_at(op_type, MAX_PROBE_OPSET)
    if schema is None or schema.deprecated:
        return None
    allowed_by_var = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    params = [*schema.outputs, *schema.inputs]
    primary = next((p.type_str for p in params if _float_capable(allowed_by_var.get(p.type_str, []))), None)
    if primary is None:
        return None
    option = onnx.defs.OpSchema.FormalParameterOption
    inputs, outputs = [], []
    for kind, formal in (("in", schema.inputs), ("out", schema.outputs)):
        for index, param in enumerate(formal):
            if param.option == option.Optional:
                continue  # required parameters only; every later optional is left out too
            allowed = allowed_by_var.get(param.type_str, [param.type_str])
            type_str = _pick_type(allowed, dtype, primary=param.type_str == primary)
            proto = _type_proto(type_str) if type_str else None
            if proto is None:
                return None
            (inputs if kind == "in" else outputs).append(helper.make_value_info(f"{kind}{index}", proto))
    attrs = []
    for attr in schema.attributes.values():
        if attr.required:
            made = _synth_attr(attr)
            if made is None:
                return None
            attrs.append(made)
    node = helper.make_node(op_type, [v.name for v in inputs], [v.name for v in outputs])
    node.attribute.extend(attrs)
    if dtype != "float32" and primary in {p.type_str for p in schema.outputs[:1]}:
        for name in _DTYPE_ATTRS & set(schema.attributes):
            node.attribute.append(helper.make_attribute(name, DTYPE_TO_ELEM[dtype]))
    return _one_node_model(node, inputs, outputs, [helper.make_opsetid("", MAX_PROBE_OPSET)])


def _one_node_model(
    node: onnx.NodeProto,
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    opsets: list[onnx.OperatorSetIdProto],
) -> onnx.ModelProto:
    graph = helper.make_graph([node], f"probe_{node.op_type}", inputs, outputs)
    model = helper.make_model(graph, opset_imports=opsets, producer_name="ampconfig-probe")
    model.ir_version = PROBE_IR_VERSION
    return model


# --------------------------------------------------------------------------------------------- contrib ops


@dataclass(frozen=True)
class ContribSignature:
    """A com.microsoft op's probe: its inputs (name, None = probed dtype, else a fixed element type)."""

    inputs: tuple[tuple[str, int | None], ...]
    outputs: tuple[str, ...] = ("Y",)
    attrs: Mapping[str, object] = field(default_factory=dict)


_I32, _I64 = onnx.TensorProto.INT32, onnx.TensorProto.INT64
#: Signatures from ORT's contrib op docs (docs/ContribOperators.md), required inputs only.
CONTRIB_SIGNATURES: Mapping[str, ContribSignature] = {
    "Attention": ContribSignature((("input", None), ("weights", None), ("bias", None)), attrs={"num_heads": 1}),
    "MultiHeadAttention": ContribSignature((("query", None), ("key", None), ("value", None)), attrs={"num_heads": 1}),
    "GroupQueryAttention": ContribSignature(
        (
            ("query", None),
            ("key", None),
            ("value", None),
            ("past_key", None),
            ("past_value", None),
            ("seqlens_k", _I32),
            ("total_sequence_length", _I32),
        ),
        outputs=("Y", "present_key", "present_value"),
        attrs={"num_heads": 1, "kv_num_heads": 1},
    ),
    "FusedMatMul": ContribSignature((("A", None), ("B", None))),
    "TransposeMatMul": ContribSignature((("A", None), ("B", None))),
    "FusedConv": ContribSignature((("X", None), ("W", None)), attrs={"activation": "Relu"}),
    "NhwcConv": ContribSignature((("X", None), ("W", None))),
    "GemmFastGelu": ContribSignature((("X", None), ("W", None))),
    "FastGelu": ContribSignature((("X", None),)),
    "Gelu": ContribSignature((("X", None),)),
    "BiasGelu": ContribSignature((("A", None), ("B", None))),
    "QuickGelu": ContribSignature((("X", None),)),
    "BiasSplitGelu": ContribSignature((("X", None), ("bias", None))),
    "BiasAdd": ContribSignature((("X", None), ("bias", None), ("skip", None))),
    "BiasSoftmax": ContribSignature((("data", None), ("bias", None)), attrs={"axis": -1, "is_inner_broadcast": 0}),
    "SkipLayerNormalization": ContribSignature((("input", None), ("skip", None), ("gamma", None))),
    "SkipSimplifiedLayerNormalization": ContribSignature((("input", None), ("skip", None), ("gamma", None))),
    "EmbedLayerNormalization": ContribSignature(
        (
            ("input_ids", _I32),
            ("segment_ids", _I32),
            ("word_embedding", None),
            ("position_embedding", None),
            ("segment_embedding", None),
            ("gamma", None),
            ("beta", None),
        ),
        outputs=("Y", "mask_index"),
    ),
    "RotaryEmbedding": ContribSignature(
        (("input", None), ("position_ids", _I64), ("cos_cache", None), ("sin_cache", None))
    ),
    "GroupNorm": ContribSignature(
        (("X", None), ("gamma", _FLOAT), ("beta", _FLOAT)),
        attrs={"activation": 0, "epsilon": 1e-5, "groups": 1},
    ),
    "SkipGroupNorm": ContribSignature(
        (("X", None), ("gamma", _FLOAT), ("beta", _FLOAT), ("skip", None)),
        outputs=("Y",),
        attrs={"activation": 0, "epsilon": 1e-5, "groups": 1},
    ),
}


def contrib_probe(op_type: str, dtype: str) -> onnx.ModelProto | None:
    signature = CONTRIB_SIGNATURES.get(op_type)
    if signature is None:
        return None
    elem = DTYPE_TO_ELEM[dtype]
    inputs = [helper.make_tensor_value_info(n, elem if t is None else t, None) for n, t in signature.inputs]
    out_elems = {"mask_index": _I32}
    outputs = [helper.make_tensor_value_info(n, out_elems.get(n, elem), None) for n in signature.outputs]
    node = helper.make_node(
        op_type, [v.name for v in inputs], list(signature.outputs), domain=_CONTRIB, **signature.attrs
    )
    opsets = [helper.make_opsetid("", MAX_PROBE_OPSET), helper.make_opsetid(_CONTRIB, 1)]
    return _one_node_model(node, inputs, outputs, opsets)


# --------------------------------------------------------------------------------------------- entry point


def split_key(key: str) -> tuple[str, str]:
    domain, _, op_type = key.rpartition("::")
    return domain, op_type


def probe_models(key: str, dtype: str) -> list[ProbeModel]:
    """Every probe model of op ``key`` in ``dtype``: test cases first, else one synthesised model."""
    domain, op_type = split_key(key)
    if domain == _CONTRIB:
        model = contrib_probe(op_type, dtype)
        return [] if model is None else [ProbeModel(key, dtype, "contrib-signature", model)]
    if domain not in ("", "ai.onnx"):
        return []
    if op_type in _single_node_testcases():
        return list(testcase_probes(op_type, dtype))
    model = synthesise_probe(op_type, dtype)
    return [] if model is None else [ProbeModel(key, dtype, "schema", model)]
