"""One-node probe models: for an op and a float dtype, small models whose only node is that op computing in that
dtype, with inputs to run them on where we have them. Pure model building (no ONNX Runtime here);
:func:`ampconfig.opinfo.kernels.measure_op` loads and runs them.

Corpus, in order of preference:

1. ONNX's node test cases (``onnx.backend.test.case.node.collect_testcases``) whose model is a single node of the
   op with float32 tensors: they carry valid attributes, ranks and data (the first data set is the probe's
   inputs). They are retyped exactly as the rewrite retypes a node: the tensors of the type variables
   :func:`ampconfig.opinfo.schema.compute_variables` moves (Attention's V with Q/K, RMSNormalization's scale with X)
   go to the probed dtype; the others (LayerNormalization's float16 Mean/InvStdDev ``U``, Resize's scales) keep
   their type. A node the rewrite would not retype (sequence/optional values, an absent output) gets no
   low-dtype probe.
2. A model synthesised from the op schema (required inputs only, rank-unknown tensors, required attributes given
   defaults) for default-domain ops without such a test case, retyped by the same rule. Load-only.
3. Hand-written signatures for the com.microsoft contrib ops ORT's transformer optimizer produces (ONNX does not
   ship their schemas); those with static shapes run on random inputs.

Every model of an op keeps its ``origin`` across dtypes, so a float32 probe and its retyped copies are compared
pairwise. An op for which none of these builds a model gets no probe (``dtype_source: "not-probed"``).
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import onnx
import onnx.defs
from onnx import helper, numpy_helper

from ampconfig.domains import is_default_domain, onnx_opset
from ampconfig.dtypes import MOVABLE_DTYPES, Dtype
from ampconfig.opinfo.schema import ABSENT, compute_variables, node_typing

#: ONNX Runtime 1.31 refuses onnx 1.23's default IR version 14; 10 is read by every ORT we support.
PROBE_IR_VERSION = 10
#: Probes never import a newer default-domain opset than this (the newest the rest of ampconfig targets).
MAX_PROBE_OPSET = 23
PROBE_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
_FLOAT = onnx.TensorProto.FLOAT
_FLOAT_ELEMS = frozenset(dtype.elem_type for dtype in Dtype)
_CONTRIB = "com.microsoft"
# Attributes that name the element type of output 0 (Cast.to, RandomNormal.dtype, EyeLike.dtype, ...).
_DTYPE_ATTRS = frozenset({"to", "dtype", "output_dtype", "output_datatype"})


#: Input values of a probe by graph input name: arrays (ml_dtypes.bfloat16 for bfloat16), lists for sequences.
Feeds = Mapping[str, object]


@dataclass(frozen=True)
class ProbeModel:
    """One probe: a single-node model of ``key`` computing in ``dtype``; ``origin`` says where it came from and is
    the same for the float32 model and its retyped copies. ``inputs`` are values to run it with (already in the
    model's input types); None when the probe can only be loaded (rank-unknown tensors, no test data)."""

    key: str
    dtype: str
    origin: str
    model: onnx.ModelProto = field(repr=False, compare=False)
    inputs: Feeds | None = field(default=None, repr=False, compare=False)


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


@dataclass(frozen=True)
class _TestCase:
    name: str
    model: onnx.ModelProto
    data: tuple[object, ...] | None  # inputs of the first data set, in graph input order


@cache
def _single_node_testcases() -> Mapping[str, tuple[_TestCase, ...]]:
    """Default-domain single-node test models with a float32 tensor, by op type (collected once: ~15 s)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference implementations overflow on purpose
        cases = collect_testcases("")  # "" = no filter; the module keeps a global list, so filter here
    by_op: dict[str, list[_TestCase]] = {}
    for case in cases:
        if "_expanded" in case.name or case.model is None or len(case.model.graph.node) != 1:
            continue
        node = case.model.graph.node[0]
        if not is_default_domain(node.domain) or not _has_float32(case.model):
            continue
        data = tuple(case.data_sets[0][0]) if case.data_sets else None
        by_op.setdefault(node.op_type, []).append(_TestCase(case.name, case.model, data))
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
    opset = onnx_opset(model.opset_import) or MAX_PROBE_OPSET
    if opset <= MAX_PROBE_OPSET:
        return opset
    return MAX_PROBE_OPSET if _schema_at(op_type, MAX_PROBE_OPSET) is not None else None


def _float_dtype(elem: int | None) -> str | None:
    dtype = Dtype.of_data_type(elem)
    return dtype if dtype in MOVABLE_DTYPES else None


def _moving_names(node: onnx.NodeProto, opset: int, elems: Mapping[str, int], dtype: str) -> set[str] | None:
    """Names of the float32 tensors the rewrite would move to ``dtype``, by :func:`compute_variables`.

    None when nothing can move: no float variable, the primary variable's tensors are not all float32 (the test
    case is not a float32 computation, e.g. Cast to float16), or a moving variable does not allow ``dtype``.
    """
    typing = node_typing(node.op_type, "", opset, len(node.input), len(node.output))
    if typing is None:
        return None
    input_dtypes = [_float_dtype(elems.get(name)) if name else ABSENT for name in node.input]
    output_dtypes = [_float_dtype(elems.get(name)) if name else ABSENT for name in node.output]
    found = compute_variables(typing, input_dtypes, output_dtypes, dtype)
    if found is None:
        return None
    primary, variables = found
    if not all(typing.var_allows(var, dtype) for var in variables):
        return None
    bound = [(name, slot) for name, slot in zip(node.input, typing.inputs) if name]
    bound += [(name, slot) for name, slot in zip(node.output, typing.outputs) if name]
    if {elems.get(name) for name, slot in bound if slot.type_var == primary} != {_FLOAT}:
        return None
    return {name for name, slot in bound if slot.type_var in variables and elems.get(name) == _FLOAT}


def _touches_non_tensor(graph: onnx.GraphProto, node: onnx.NodeProto) -> bool:
    """Does the node read or write a sequence / optional / map value? A tensor put into (or taken from) a
    sequence must keep the sequence's element type, so the rewrite never retypes such a node."""
    declared = {info.name: info.type for info in (*graph.input, *graph.output, *graph.value_info)}
    names = [name for name in (*node.input, *node.output) if name in declared]
    return any(declared[name].WhichOneof("value") not in (None, "tensor_type") for name in names)


def retype_model(model: onnx.ModelProto, dtype: str, opset: int | None = None) -> onnx.ModelProto | None:
    """A copy of a single-node float32 model whose node computes in ``dtype``, retyped as the rewrite would.

    The tensors moved are those of :func:`ampconfig.opinfo.schema.compute_variables` (the primary float variable and
    the variables bound only to tensors of its dtype): Attention's V and RMSNormalization's X move with the data,
    LayerNormalization's Mean/InvStdDev (``U``) and Resize's scales keep their type. For float32 the model is only
    restamped. Returns None when the model cannot compute in ``dtype`` (see :func:`_moving_names`).
    ``opset`` stamps another default-domain opset than the model's own, to probe
    the op's schema version in force there; None when the op does not exist at that opset.
    """
    node = model.graph.node[0]
    if opset is not None:
        opset = opset if _schema_at(node.op_type, opset) is not None else None
    else:
        opset = _clamped_opset(model, node.op_type)
    if opset is None:
        return None
    if dtype == "float32":
        # Also models without a movable variable (NonMaxSuppression's fixed float boxes, If/Loop/Scan outputs):
        # they probe float32 as they are.
        return _stamped(model, opset)
    if _touches_non_tensor(model.graph, node):
        return None  # the rewrite leaves a node with sequence/optional values alone (node_facts: NON_TENSOR)
    names = _moving_names(node, opset, _value_elems(model.graph), dtype)
    if names is None:
        return None
    out = _stamped(model, opset)
    _retype_values(out.graph, names, Dtype(dtype).elem_type)
    if node.output and node.output[0] in names:
        _retype_output_attrs(out.graph.node[0], Dtype(dtype).elem_type, opset)
    return out


def _stamped(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    out = copy.deepcopy(model)
    out.ir_version = PROBE_IR_VERSION
    for entry in out.opset_import:
        if is_default_domain(entry.domain):
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


def testcase_probes(op_type: str, dtype: str, opset: int | None = None) -> Iterator[ProbeModel]:
    for case in _single_node_testcases().get(op_type, ()):
        retyped = retype_model(case.model, dtype, opset)
        if retyped is not None:
            inputs = _testcase_feeds(retyped, case.data)
            yield ProbeModel(op_type, dtype, f"onnx-testcase:{case.name}", retyped, inputs)


def _testcase_feeds(model: onnx.ModelProto, data: tuple[object, ...] | None) -> Feeds | None:
    """The test case's inputs by name, float arrays converted to the (retyped) input's element type."""
    inputs = [info for info in model.graph.input if info.name not in {init.name for init in model.graph.initializer}]
    if data is None or len(data) != len(inputs):
        return None
    return {info.name: _as_input(value, info.type) for info, value in zip(inputs, data)}


def _as_input(value: object, type_proto: onnx.TypeProto) -> object:
    if isinstance(value, onnx.TensorProto):
        value = numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        value = np.asarray(value)  # some cases give 0-d inputs as numpy scalars
    if isinstance(value, list) and type_proto.HasField("sequence_type"):
        return [_as_input(item, type_proto.sequence_type.elem_type) for item in value]
    if isinstance(value, np.ndarray) and type_proto.HasField("tensor_type"):
        target = helper.tensor_dtype_to_np_dtype(type_proto.tensor_type.elem_type)
        if value.dtype != target and value.dtype == np.float32:
            with np.errstate(over="ignore"):  # some cases test huge values: inf in float16 is what the op gets
                return value.astype(target)  # a retyped input: float16 / ml_dtypes.bfloat16
    return value


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


def _pick_type(allowed: Sequence[str]) -> str | None:
    """The float32 probe's type of a parameter: float32 (or a container of it) where allowed, else int64, bool,
    else the first allowed type. The low-dtype probes are this model retyped by :func:`retype_model`."""
    for preferred in ("tensor(float)", *(t for t in allowed if "tensor(float)" in t), "tensor(int64)", "tensor(bool)"):
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


def _synth_values(schema: onnx.defs.OpSchema) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]] | None:
    """Rank-unknown inputs/outputs for the schema's required parameters (every later optional is left out too)."""
    allowed_by_var = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    option = onnx.defs.OpSchema.FormalParameterOption
    values: dict[str, list[onnx.ValueInfoProto]] = {"in": [], "out": []}
    for kind, formal in (("in", schema.inputs), ("out", schema.outputs)):
        for index, param in enumerate(formal):
            if param.option == option.Optional:
                continue
            type_str = _pick_type(allowed_by_var.get(param.type_str, [param.type_str]))
            proto = _type_proto(type_str) if type_str else None
            if proto is None:
                return None
            values[kind].append(helper.make_value_info(f"{kind}{index}", proto))
    return values["in"], values["out"]


def _float_elems(values: list[onnx.ValueInfoProto]) -> set[int]:
    """Element types of the tensors, sequences and optionals among ``values``."""
    elems: set[int] = set()
    for info in values:
        proto = info.type
        while not proto.HasField("tensor_type"):
            kind = proto.WhichOneof("value")
            if kind not in ("sequence_type", "optional_type"):
                break
            proto = getattr(proto, kind).elem_type
        if proto.HasField("tensor_type"):
            elems.add(proto.tensor_type.elem_type)
    return elems


def synthesise_probe(op_type: str, dtype: str = "float32", opset: int = MAX_PROBE_OPSET) -> onnx.ModelProto | None:
    """A one-node model of a default-domain op built from its schema at ``opset``, retyped to ``dtype`` as the
    rewrite would (None when it cannot compute in ``dtype``, or when no model can be built)."""
    schema = _schema_at(op_type, opset)
    if schema is None or schema.deprecated:
        return None
    values = _synth_values(schema)
    if values is None:
        return None
    inputs, outputs = values
    if _FLOAT not in _float_elems(inputs + outputs):
        return None  # no float32 tensor or container of them: not a float op
    attrs = []
    for attr in schema.attributes.values():
        if attr.required:
            made = _synth_attr(attr)
            if made is None:
                return None
            attrs.append(made)
    node = helper.make_node(op_type, [v.name for v in inputs], [v.name for v in outputs])
    node.attribute.extend(attrs)
    model = _one_node_model(node, inputs, outputs, [helper.make_opsetid("", opset)])
    return retype_model(model, dtype, opset)


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
    """A com.microsoft op's probe: its inputs (name, None = probed dtype, else a fixed element type), and static
    input shapes where we know valid ones (the probe then runs on random inputs; without them it only loads)."""

    inputs: tuple[tuple[str, int | None], ...]
    outputs: tuple[str, ...] = ("Y",)
    attrs: Mapping[str, Any] = field(default_factory=dict)  # onnx.helper.make_node takes attributes as Any
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


_I32, _I64 = onnx.TensorProto.INT32, onnx.TensorProto.INT64
# Shapes shared by several signatures: batch 1, sequence 2, hidden 4 (one head of size 4).
_BSH = (1, 2, 4)
_MATMUL_SHAPES = {"A": (2, 3), "B": (3, 4)}
_SKIP_NORM_SHAPES = {"input": _BSH, "skip": _BSH, "gamma": (4,)}
#: Signatures from ORT's contrib op docs (docs/ContribOperators.md), required inputs only. GroupQueryAttention
#: gets no shapes: its seqlens_k / total_sequence_length must be consistent values, not random ones.
CONTRIB_SIGNATURES: Mapping[str, ContribSignature] = {
    "Attention": ContribSignature(
        (("input", None), ("weights", None), ("bias", None)),
        attrs={"num_heads": 1},
        shapes={"input": _BSH, "weights": (4, 12), "bias": (12,)},
    ),
    "MultiHeadAttention": ContribSignature(
        (("query", None), ("key", None), ("value", None)),
        attrs={"num_heads": 1},
        shapes={"query": _BSH, "key": _BSH, "value": _BSH},
    ),
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
    "FusedMatMul": ContribSignature((("A", None), ("B", None)), shapes=_MATMUL_SHAPES),
    "TransposeMatMul": ContribSignature((("A", None), ("B", None)), shapes=_MATMUL_SHAPES),
    "FusedConv": ContribSignature(
        (("X", None), ("W", None)), attrs={"activation": "Relu"}, shapes={"X": (1, 1, 3, 3), "W": (1, 1, 1, 1)}
    ),
    "NhwcConv": ContribSignature((("X", None), ("W", None))),
    "GemmFastGelu": ContribSignature((("X", None), ("W", None)), shapes={"X": (2, 3), "W": (3, 4)}),
    "FastGelu": ContribSignature((("X", None),), shapes={"X": (2, 4)}),
    "Gelu": ContribSignature((("X", None),), shapes={"X": (2, 4)}),
    "BiasGelu": ContribSignature((("A", None), ("B", None)), shapes={"A": (2, 4), "B": (4,)}),
    "QuickGelu": ContribSignature((("X", None),), shapes={"X": (2, 4)}),
    "BiasSplitGelu": ContribSignature((("X", None), ("bias", None))),
    "BiasAdd": ContribSignature((("X", None), ("bias", None), ("skip", None))),
    "BiasSoftmax": ContribSignature(
        (("data", None), ("bias", None)),
        attrs={"axis": -1, "is_inner_broadcast": 0},
        shapes={"data": _BSH, "bias": _BSH},
    ),
    "SkipLayerNormalization": ContribSignature(
        (("input", None), ("skip", None), ("gamma", None)), shapes=_SKIP_NORM_SHAPES
    ),
    "SkipSimplifiedLayerNormalization": ContribSignature(
        (("input", None), ("skip", None), ("gamma", None)), shapes=_SKIP_NORM_SHAPES
    ),
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
        # Integer inputs are zeros (see random_inputs): valid ids into every embedding table.
        shapes={
            "input_ids": (1, 2),
            "segment_ids": (1, 2),
            "word_embedding": (3, 4),
            "position_embedding": (3, 4),
            "segment_embedding": (2, 4),
            "gamma": (4,),
            "beta": (4,),
        },
    ),
    "RotaryEmbedding": ContribSignature(
        (("input", None), ("position_ids", _I64), ("cos_cache", None), ("sin_cache", None)),
        shapes={"input": _BSH, "position_ids": (1, 2), "cos_cache": (2, 2), "sin_cache": (2, 2)},
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
    """A com.microsoft op's probe in ``dtype``. ONNX ships no schema for these, so the signature says which inputs
    carry the compute dtype instead of :func:`compute_variables`."""
    signature = CONTRIB_SIGNATURES.get(op_type)
    if signature is None:
        return None
    elem = Dtype(dtype).elem_type
    inputs = [
        helper.make_tensor_value_info(name, elem if fixed is None else fixed, signature.shapes.get(name))
        for name, fixed in signature.inputs
    ]
    out_elems = {"mask_index": _I32}
    outputs = [helper.make_tensor_value_info(n, out_elems.get(n, elem), None) for n in signature.outputs]
    node = helper.make_node(
        op_type, [v.name for v in inputs], list(signature.outputs), domain=_CONTRIB, **signature.attrs
    )
    opsets = [helper.make_opsetid("", MAX_PROBE_OPSET), helper.make_opsetid(_CONTRIB, 1)]
    return _one_node_model(node, inputs, outputs, opsets)


# --------------------------------------------------------------------------------------------- random inputs


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> Feeds | None:
    """Small random values for every graph input when all are tensors of static shape, else None.

    Floats are standard normal (converted to the input's dtype); integers and bools are zero, which is a valid
    index, id or mask for the probes built here.
    """
    rng = np.random.default_rng(seed)
    initialized = {init.name for init in model.graph.initializer}
    feeds: dict[str, object] = {}
    for info in model.graph.input:
        if info.name in initialized:
            continue
        shape = _static_shape(info.type)
        if shape is None:
            return None
        np_dtype = helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        if info.type.tensor_type.elem_type in _FLOAT_ELEMS:
            feeds[info.name] = rng.standard_normal(shape).astype(np.float32).astype(np_dtype)
        else:
            feeds[info.name] = np.zeros(shape, dtype=np_dtype)
    return feeds


def _static_shape(type_proto: onnx.TypeProto) -> tuple[int, ...] | None:
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims = type_proto.tensor_type.shape.dim
    if not all(dim.HasField("dim_value") for dim in dims):
        return None
    return tuple(dim.dim_value for dim in dims)


# --------------------------------------------------------------------------------------------- entry point


def split_key(key: str) -> tuple[str, str]:
    domain, _, op_type = key.rpartition("::")
    return domain, op_type


def probe_models(key: str, dtype: str, opset: int | None = None) -> list[ProbeModel]:
    """Every probe model of op ``key`` in ``dtype``: test cases first (with their first data set), else one
    synthesised model (with random inputs when its input shapes are static). ``opset`` stamps that default-domain
    opset (the schema version in force there is probed); None: the test case's own, clamped to MAX_PROBE_OPSET."""
    domain, op_type = split_key(key)
    if domain == _CONTRIB:
        model = contrib_probe(op_type, dtype)
        origin = "contrib-signature"
    elif not is_default_domain(domain):
        return []
    elif op_type in _single_node_testcases():
        return list(testcase_probes(op_type, dtype, opset))
    else:
        model, origin = synthesise_probe(op_type, dtype, opset or MAX_PROBE_OPSET), "schema"
    return [] if model is None else [ProbeModel(key, dtype, origin, model, random_inputs(model))]


def op_since_versions(key: str) -> tuple[int, ...]:
    """The schema versions a probe can measure for op ``key``: ``onnx.defs``'s history for the default domain,
    version 1 of the ``com.microsoft`` domain for the contrib signatures, none otherwise (ops ONNX does not know,
    such as ORT's own SimplifiedLayerNormalization)."""
    domain, op_type = split_key(key)
    if domain == _CONTRIB:
        return (1,) if op_type in CONTRIB_SIGNATURES else ()
    if not is_default_domain(domain):
        return ()
    return tuple(sorted({s.since_version for s in _default_schema_history().get(op_type, ())}))


@cache
def _default_schema_history() -> Mapping[str, tuple[onnx.defs.OpSchema, ...]]:
    history: dict[str, list[onnx.defs.OpSchema]] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "":
            history.setdefault(schema.name, []).append(schema)
    return {name: tuple(schemas) for name, schemas in history.items()}
