"""The only module that mutates graphs: it applies a :class:`~ampconfig.decide.plan.Plan` to an onnx-ir model.

Invariants (design section 6): one Cast per (tensor, dtype) shared by all consumers, placed in the graph that
owns the tensor (so a Loop body reuses a cast made once outside it); a cast back to a Cast's own source is
replaced by the source (no round trips); existing Casts retargeted; initializers and Constant values converted
once (in place when every consumer agrees, else one copy per dtype), with out-of-range values clamped and
counted; graph outputs keep their names and dtypes; value types updated; nodes stay in topological order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir

from ampconfig.decide.decisions import RewriteStats
from ampconfig.decide.facts import DTYPE_TO_DATA_TYPE, LOW_DTYPES, graphs_of, value_dtype
from ampconfig.decide.plan import Plan
from ampconfig.files.models import call_onnx_api, inferred_types
from ampconfig.runner.float_cast import float32_to_float16

_NUMPY_DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}
_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


class NameAllocator:
    """Unique node and value names across every scope of the model."""

    def __init__(self, model: ir.Model) -> None:
        self.node_names: set[str] = set()
        self.value_names: set[str] = set()
        for graph in graphs_of(model):
            for value in (*graph.inputs, *graph.outputs, *graph.initializers.values()):
                if value.name:
                    self.value_names.add(value.name)
            for node in graph:
                if node.name:
                    self.node_names.add(node.name)
                self.value_names.update(v.name for v in node.outputs if v.name)

    @staticmethod
    def _fresh(base: str, taken: set[str]) -> str:
        name, counter = base, 1
        while name in taken:
            name = f"{base}_{counter}"
            counter += 1
        taken.add(name)
        return name

    def node(self, base: str) -> str:
        return self._fresh(base, self.node_names)

    def value(self, base: str) -> str:
        return self._fresh(base, self.value_names)


def name_unnamed_nodes(model: ir.Model) -> NameAllocator:
    """Give every node a unique name (reports and keep_dtype refer to nodes by name); duplicates are renamed.
    Returns the names now taken, for :func:`apply_plan` to allocate new ones from without another walk."""
    names = NameAllocator(model)
    seen: set[str] = set()
    for graph in graphs_of(model):
        for node in graph:
            if not node.name or node.name in seen:
                node.name = names.node(node.name or node.op_type)
            seen.add(node.name)
    return names


def annotate_dtypes(model: ir.Model, types: Mapping[str, onnx.TypeProto] | None = None) -> None:
    """Fill in missing value types from ONNX type inference (``types`` by value name, else inferred here);
    shapes are left as the model states them."""
    if types is None:
        types = inferred_types(light_proto_of(model))
    if not types:
        return
    for graph in graphs_of(model):
        values = [*graph.inputs, *graph.initializers.values(), *(v for node in graph for v in node.outputs)]
        for value in values:
            if value.type is None and value.name in types:
                value.type = ir.serde.deserialize_type_proto_for_type(types[value.name])


def light_proto_of(model: ir.Model) -> onnx.ModelProto:
    """A proto of ``model`` for type inference, without serialising large tensors (onnx-ir lifts them)."""
    return call_onnx_api(lambda proto: proto, model)


#: In-memory tensors of at least this many bytes are converted while the output is serialised, one at a time,
#: not during the rewrite: the rewritten model then never holds every converted weight next to the serialised
#: output (peak memory stays near the output's own size).
LAZY_CONVERSION_BYTES = 1 << 20


def _low_limit(dtype: str) -> np.float32:
    target = _NUMPY_DTYPES[dtype]
    return np.float32(np.finfo(target).max if dtype == "float16" else ml_dtypes.finfo(target).max)


def _out_of_range(array: np.ndarray, dtype: str) -> np.ndarray | None:
    """Mask of the finite elements beyond the low dtype's range, or None when there are none. Two reductions
    first, so the common case (everything in range) allocates nothing."""
    if dtype not in LOW_DTYPES or array.size == 0:
        return None
    limit = _low_limit(dtype)
    if array.max() <= limit and array.min() >= -limit:  # false when a NaN is present: checked element-wise below
        return None
    with np.errstate(invalid="ignore"):
        over = np.isfinite(array) & (np.abs(array) > limit)
    return over if over.any() else None


#: Bits of a low-precision value's exponent field: all set means inf or NaN.
_EXPONENT_BITS = {"float16": 0x7C00, "bfloat16": 0x7F80}


def _has_inf_or_nan(low: np.ndarray, dtype: str) -> bool:
    """Any inf or NaN in a float16/bfloat16 array, from its bits: two integer reductions over half the bytes the
    float32 source has. Positive ones are the int16 values >= the exponent bits, negative ones the uint16 values
    >= sign | exponent bits."""
    if low.size == 0:
        return False
    bits, exponent = low.view(np.uint16), _EXPONENT_BITS[dtype]
    return bool(bits.view(np.int16).max() >= exponent or bits.max() >= 0x8000 | exponent)


def _cast(array: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore"):  # overflow is expected here: the caller finds the infs and clamps
        return float32_to_float16(array) if dtype == "float16" else array.astype(_NUMPY_DTYPES[dtype])


def _convert_array(array: np.ndarray, dtype: str) -> tuple[np.ndarray, int]:
    """``array`` in ``dtype`` and how many of its values were clamped to the low type's max (they would have
    become inf). Converted first and checked on the result: values out of range show as inf, so the common case
    costs one cheap check, and only an array with an inf or NaN is examined element by element."""
    converted = _cast(array, dtype)
    if dtype not in LOW_DTYPES or not _has_inf_or_nan(converted, dtype):
        return converted, 0
    over = _out_of_range(array, dtype)
    if over is None:
        return converted, 0  # the infs and NaNs were there before
    clamped = np.where(over, np.sign(array) * _low_limit(dtype), array).astype(array.dtype)
    return _cast(clamped, dtype), int(np.count_nonzero(over))


def convert_tensor(tensor: ir.TensorProtocol, dtype: str, name: str, stats: RewriteStats) -> ir.TensorProtocol:
    if isinstance(tensor, ir.ExternalTensor):
        return _converted_from_disk(tensor, dtype, name, stats)
    if tensor.nbytes >= LAZY_CONVERSION_BYTES:
        return _converted_when_written(tensor, dtype, name, stats)
    array, clamped = _convert_array(tensor.numpy(), dtype)
    stats.values_clamped += clamped
    # ir.Tensor, not the ir.tensor() convenience: that one runs Protocol isinstance checks costing ~0.1 ms a
    # tensor, which dominates on graphs with thousands of small weights. The source's (frozen) shape is reused
    # rather than rebuilt from the array, for the same reason.
    return ir.Tensor(array, dtype=DTYPE_TO_DATA_TYPE[dtype], shape=tensor.shape, name=name)


def _converted_from_disk(tensor: ir.ExternalTensor, dtype: str, name: str, stats: RewriteStats) -> ir.LazyTensor:
    """A tensor on disk is converted when the output is written, one tensor at a time, so a model larger than
    memory can be rewritten. Out-of-range values are counted now, in one pass over the mapped file."""
    over = _out_of_range(tensor.numpy(), dtype)
    stats.values_clamped += 0 if over is None else int(np.count_nonzero(over))
    tensor.release()

    def convert() -> ir.TensorProtocol:
        converted = ir.Tensor(_convert_array(tensor.numpy(), dtype)[0], dtype=DTYPE_TO_DATA_TYPE[dtype])
        tensor.release()
        return converted

    return ir.LazyTensor(convert, DTYPE_TO_DATA_TYPE[dtype], tensor.shape, name=name)


def _converted_when_written(tensor: ir.TensorProtocol, dtype: str, name: str, stats: RewriteStats) -> ir.LazyTensor:
    """A large in-memory tensor is converted when it is serialised, so the converted copy lives only until it is
    in the output proto. Its clamped values are counted at that first conversion (reading the values twice
    would cost a copy of every weight): ``rewrite_model_detailed`` serialises before it returns its stats."""
    counted = False

    def convert() -> ir.TensorProtocol:
        nonlocal counted
        array, clamped = _convert_array(tensor.numpy(), dtype)
        if not counted:
            stats.values_clamped += clamped
            counted = True
        return ir.Tensor(array, dtype=DTYPE_TO_DATA_TYPE[dtype])

    return ir.LazyTensor(convert, DTYPE_TO_DATA_TYPE[dtype], tensor.shape, name=name)


def _set_dtype(value: ir.Value, dtype: str) -> None:
    value.type = ir.TensorType(DTYPE_TO_DATA_TYPE[dtype])


class Rewriter:
    def __init__(self, model: ir.Model, plan: Plan, names: NameAllocator | None = None) -> None:
        self.model = model
        self.plan = plan
        self.names = names if names is not None else NameAllocator(model)
        self.stats = RewriteStats()
        self._converted: dict[tuple[ir.Value, str], ir.Value] = {}

    # -- producers ---------------------------------------------------------------------------------------------
    def retype_nodes(self) -> None:
        for node, dtype in self.plan.new_dtypes().items():
            facts = self.plan.facts_of[node]
            for index in facts.output_slots:
                _set_dtype(node.outputs[index], dtype)
            if node.op_type == "Cast":
                node.attributes["to"] = ir.AttrInt64("to", DTYPE_TO_DATA_TYPE[dtype])
                self.stats.casts_retargeted += 1

    def retype_io(self) -> None:
        """keep_io_types=False: float32 graph inputs whose every consumer computes low become low themselves."""
        if self.plan.keep_io_types:
            return
        for value in self.model.graph.inputs:
            if value_dtype(value) != "float32" or value.const_value is not None:
                continue
            wanted = {self.plan.required(use.node, use.idx) for use in value.uses()} - {None}
            if len(wanted) == 1 and (dtype := next(iter(wanted))) in LOW_DTYPES:
                _set_dtype(value, dtype)

    # -- conversions -------------------------------------------------------------------------------------------
    def converted(self, value: ir.Value, dtype: str) -> ir.Value:
        key = (value, dtype)
        if key not in self._converted:
            self._converted[key] = self._make_converted(value, dtype)
        return self._converted[key]

    def _make_converted(self, value: ir.Value, dtype: str) -> ir.Value:
        producer = value.producer()
        if value.const_value is not None and not value.is_graph_input():
            return self._initializer_copy(value, dtype)
        if producer is not None and producer.op_type == "Constant" and "value" in producer.attributes:
            return self._constant_copy(producer, dtype)
        if (
            producer is not None
            and producer.op_type == "ConstantOfShape"
            and self.plan.wanted_dtypes(value) == {dtype}
            and not value.is_graph_output()
        ):
            return self._convert_constant_of_shape(producer, dtype)
        if producer is not None and producer.op_type == "Cast":
            source = producer.inputs[0]
            if source is not None and value_dtype(source) == dtype:
                return source  # Cast(x -> T) wanted back as x's own dtype: use x, no round trip
        return self._cast(value, dtype)

    def _owner(self, value: ir.Value) -> ir.Graph:
        producer = value.producer()
        graph = producer.graph if producer is not None else value.graph
        assert isinstance(graph, ir.Graph), f"value {value.name} belongs to no graph"
        return graph

    def _cast(self, value: ir.Value, dtype: str, output_name: str | None = None) -> ir.Value:
        graph = self._owner(value)
        base = value.name or "value"
        out = ir.Value(name=output_name or self.names.value(f"{base}_{_SHORT[dtype]}"), shape=value.shape)
        _set_dtype(out, dtype)
        cast = ir.Node(
            "",
            "Cast",
            [value],
            [ir.AttrInt64("to", DTYPE_TO_DATA_TYPE[dtype])],
            outputs=[out],
            name=self.names.node(f"Cast_{base}_to_{_SHORT[dtype]}"),
        )
        producer = value.producer()
        if producer is not None:
            graph.insert_after(producer, cast)
        elif len(graph) > 0:
            graph.insert_before(next(iter(graph)), cast)
        else:
            graph.append(cast)
        self.stats.casts_inserted += 1
        return out

    def _initializer_copy(self, value: ir.Value, dtype: str) -> ir.Value:
        graph = self._owner(value)
        wanted = self.plan.wanted_dtypes(value)
        if wanted == {dtype} and not value.is_graph_output():
            # Every consumer wants the same dtype: convert in place, no second copy kept.
            value.const_value = convert_tensor(value.const_value, dtype, value.name or "", self.stats)
            _set_dtype(value, dtype)
            self.stats.initializers_converted += 1
            return value
        name = self.names.value(f"{value.name}_{_SHORT[dtype]}")
        copy = ir.Value(
            name=name,
            shape=value.shape,
            const_value=convert_tensor(value.const_value, dtype, name, self.stats),
        )
        _set_dtype(copy, dtype)
        graph.register_initializer(copy)
        self.stats.initializers_converted += 1
        return copy

    def _constant_copy(self, constant: ir.Node, dtype: str) -> ir.Value:
        value = constant.outputs[0]
        tensor = constant.attributes["value"].value
        if self.plan.wanted_dtypes(value) == {dtype} and not value.is_graph_output():
            constant.attributes["value"] = ir.AttrTensor("value", convert_tensor(tensor, dtype, "", self.stats))
            _set_dtype(value, dtype)
            self.stats.constants_converted += 1
            return value
        out = ir.Value(name=self.names.value(f"{value.name}_{_SHORT[dtype]}"), shape=value.shape)
        _set_dtype(out, dtype)
        copy = ir.Node(
            "",
            "Constant",
            [],
            [ir.AttrTensor("value", convert_tensor(tensor, dtype, "", self.stats))],
            outputs=[out],
            name=self.names.node(f"{constant.name}_{_SHORT[dtype]}"),
        )
        self._owner(value).insert_after(constant, copy)
        self.stats.constants_converted += 1
        return out

    def _convert_constant_of_shape(self, node: ir.Node, dtype: str) -> ir.Value:
        attr = node.attributes.get("value")
        # ConstantOfShape's default value is a float32 zero.
        tensor = attr.value if attr is not None else ir.tensor(np.zeros(1, dtype=np.float32))
        node.attributes["value"] = ir.AttrTensor("value", convert_tensor(tensor, dtype, "", self.stats))
        _set_dtype(node.outputs[0], dtype)
        self.stats.constants_converted += 1
        return node.outputs[0]

    # -- wiring ------------------------------------------------------------------------------------------------
    def fix_graph_outputs(self) -> None:
        """Graph outputs keep their dtype (keep_io_types; always for subgraphs) and, in the main graph, name."""
        for graph in graphs_of(self.model):
            is_main = graph is self.model.graph
            if is_main and not self.plan.keep_io_types:
                continue
            for index, value in enumerate(list(graph.outputs)):
                wanted = self.plan.original_dtype.get(value)
                have = value_dtype(value)
                if wanted is None or have is None or have == wanted:
                    continue
                name = value.name
                if is_main and value.producer() is not None and value.producer().graph is graph:
                    # Keep the public name: the producer's tensor is renamed, the cast takes the old name.
                    value.name = self.names.value(f"{name}_{_SHORT[have]}")
                    out = self._cast(value, wanted, output_name=name)
                else:
                    out = self._cast(value, wanted)
                self._converted[(value, wanted)] = out
                graph.outputs[index] = out

    def fix_inputs(self) -> None:
        for graph in graphs_of(self.model):
            for node in list(graph):
                for index, value in enumerate(node.inputs):
                    if value is None:
                        continue
                    wanted = self.plan.required(node, index)
                    have = value_dtype(value)
                    if wanted is None or have is None or wanted == have:
                        continue
                    node.replace_input_with(index, self.converted(value, wanted))


def apply_plan(model: ir.Model, plan: Plan, names: NameAllocator | None = None) -> RewriteStats:
    """Mutate ``model`` to realise ``plan``; returns what was done. ``names``: the model's taken names, as
    :func:`name_unnamed_nodes` returned them (else collected here)."""
    rewriter = Rewriter(model, plan, names)
    rewriter.retype_nodes()
    rewriter.retype_io()
    rewriter.fix_graph_outputs()
    rewriter.fix_inputs()
    # No sort: the input passed the full checker, so its nodes are in topological order, and every node added
    # here goes right after its input's producer (or first in the graph): the order stays topological, as the
    # output check confirms. Sorting cost ~8% of the rewrite on node-heavy graphs.
    return rewriter.stats


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


def round_like_low_precision(model: ir.Model, emulated: Callable[[str, str], bool]) -> int:
    """Make a CPU run of ``model`` round every low-precision value the way low-precision hardware stores it.

    ONNX Runtime's CPU provider runs a float16 node that has no float16 kernel by casting around it, and then
    removes each Cast(float32->float16)->Cast(float16->float32) pair its own casts create: chains of such nodes
    compute in float32 and never round to float16, so accuracy measured on the CPU would be the fp32 model's.
    Here each such node (``emulated(op_key, dtype)`` is true) computes in float32 between explicit casts, which
    ONNX Runtime keeps: every value it produces is rounded to float16 exactly once, as stored on a GPU.
    Used for accuracy only (the casts cost time). Returns how many nodes were wrapped; mutates ``model``.
    """
    from ampconfig.decide.facts import node_facts

    names = NameAllocator(model)
    widened: dict[ir.Value, ir.Value] = {}
    wrapped = 0
    for graph in graphs_of(model):
        for node in list(graph):
            facts = node_facts(node, model, "")
            if facts.dtype not in LOW_DTYPES or facts.blocker is not None or not emulated(facts.key, facts.dtype):
                continue
            for index in facts.input_slots:
                value = node.inputs[index]
                if value not in widened:
                    widened[value] = _explicit_cast(value, "float32", names, after=value.producer(), graph=graph)
                node.replace_input_with(index, widened[value])
            for index in facts.output_slots:
                _store_rounded(node, node.outputs[index], facts.dtype, names)
            wrapped += 1
    model.graph.sort()
    return wrapped


def _explicit_cast(
    value: ir.Value, dtype: str, names: NameAllocator, *, after: ir.Node | None, graph: ir.Graph
) -> ir.Value:
    out = ir.Value(name=names.value(f"{value.name}_{_SHORT[dtype]}"), shape=value.shape)
    _set_dtype(out, dtype)
    cast = ir.Node("", "Cast", [value], [ir.AttrInt64("to", DTYPE_TO_DATA_TYPE[dtype])], outputs=[out])
    cast.name = names.node(f"Cast_{value.name}_to_{_SHORT[dtype]}")
    owner = after.graph if after is not None else (value.graph if isinstance(value.graph, ir.Graph) else graph)
    if after is not None:
        owner.insert_after(after, cast)
    else:
        owner.insert_before(next(iter(owner)), cast)
    return out


def _store_rounded(node: ir.Node, value: ir.Value, dtype: str, names: NameAllocator) -> None:
    """The node now produces ``value`` in float32; its consumers (and graph outputs) read a rounded copy."""
    rounded = ir.Value(name=value.name, shape=value.shape)
    _set_dtype(rounded, dtype)
    value.name = names.value(f"{value.name}_fp32")
    _set_dtype(value, "float32")
    ir.convenience.replace_all_uses_with(value, rounded, replace_graph_outputs=True)
    cast = ir.Node("", "Cast", [value], [ir.AttrInt64("to", DTYPE_TO_DATA_TYPE[dtype])], outputs=[rounded])
    cast.name = names.node(f"Cast_{rounded.name}_store_{_SHORT[dtype]}")
    node.graph.insert_after(node, cast)
