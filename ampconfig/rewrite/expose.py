"""Debugging copies of a model that expose intermediate values as graph outputs (compare, range analysis, tune).
The input model is never modified.

Values are named by their keys (:mod:`ampconfig.rewrite.scopes`): a main-graph value by its name, a value inside
an If, Loop or Scan body by its scope path and name. A value inside a body leaves it the way the body's own
outputs do, one scope at a time, until it is an output of the main graph:

- an If branch: it becomes an output of its branch and of the If; the other branch outputs an empty tensor in its
  place (only one branch runs, so a value of the branch that did not run comes back empty);
- a Loop or Scan body: it becomes a scan output, so it comes back with one slice per iteration
  (``[iterations, *shape]``); when the shapes differ between iterations, ONNX Runtime refuses that, and
  :data:`FLAT` layout carries a Loop body's values instead as one flat concatenation of every iteration's values.

A body's float inputs (a Loop's carried state, a Scan's slices) are exposed too, through an Identity, so the
error a value carries from one iteration to the next is seen where it enters.

:func:`expose_stats` and :func:`expose_quick_stats` expose a few numbers per value instead of the value, computed
in the session. Main-graph values share a few outputs (:data:`STATS_GROUP` values each) and their nodes sit right
after the node that produces the value: a session that runs nodes in graph order (ONNX Runtime's priority-based
order) then frees each value as soon as its numbers are taken. With one output per value, or the numbers computed
after the whole graph, ONNX Runtime's session set-up grows with the square of the values (2,500 values: 19 s);
it costs about the same per node whatever the node, so the quick form spends three nodes per value, the exact
form twelve (``benchmarks/range_run.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.rewrite.names import fresh_name
from ampconfig.rewrite.scopes import ProtoScope, proto_scopes, scope_types, taken_names

#: Element types of the float tensors debugging runs expose.
FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE})

#: Suffix of the float32 copy under which :func:`expose_values` exposes a bfloat16 value (numpy has no bfloat16,
#: so ONNX Runtime's Python API cannot hand one back; the Cast to float32 is exact).
EXPOSED_FLOAT32_SUFFIX = "::as_float32"

#: How values of Loop bodies come back: one slice per iteration, or every iteration's values flattened and joined.
STACKED, FLAT = "stacked", "flat"


#: How many main-graph values share one pair of :class:`StatsOutputs` (ONNX Runtime's set-up time grows with the
#: square of a model's outputs; a Concat of this many scalars is cheap).
STATS_GROUP = 256


@dataclass(frozen=True)
class StatsOutputs:
    """Two graph outputs carrying the numbers of the values ``keys`` (:func:`expose_stats`).

    ``bounds``: per value, its lowest and its highest element that is finite and below the sentinel in magnitude,
    as pairs (reshaped to ``[len(keys), -1, 2]``: one pair per value, or per Loop/Scan iteration for a body's
    value; a value with no such element gives +inf, -inf). ``nonfinite``: per value (or iteration), its count of NaN
    and infinite elements, int32 (reshaped to ``[len(keys), -1]``). An If branch that did not run gives both empty.
    """

    keys: tuple[str, ...]
    bounds: str
    nonfinite: str


@dataclass(frozen=True)
class QuickOutputs:
    """A graph output carrying, for the values ``keys``, each value's minimum, maximum and sum in turn (reshaped to
    ``[len(keys), 3]``; :func:`expose_quick_stats`; ONNX Runtime gives +inf, -inf, 0 for an empty value)."""

    keys: tuple[str, ...]
    numbers: str


@dataclass
class ExposedModel:
    """The debugging copy and, per graph output it added, the key of the value it carries (or, for
    :func:`expose_stats` and :func:`expose_quick_stats`, the outputs carrying each value's numbers)."""

    model: onnx.ModelProto
    keys: dict[str, str] = field(default_factory=dict)
    stats: list[StatsOutputs] = field(default_factory=list)
    quick: list[QuickOutputs] = field(default_factory=list)
    #: keys of values that come back one slice per Loop/Scan iteration (``[iterations, *shape]``)
    per_iteration: set[str] = field(default_factory=set)
    #: keys of values that come back flattened and joined over the iterations (:data:`FLAT`)
    flattened: set[str] = field(default_factory=set)


def expose_values(model: onnx.ModelProto, names: list[str] | tuple[str, ...]) -> onnx.ModelProto:
    """A copy of ``model`` whose main graph also outputs the node-output values ``names`` (main-graph names)."""
    return expose_keys(model, names).model


def expose_stats(model: onnx.ModelProto, keys: Iterable[str], sentinel: float) -> ExposedModel:
    """A copy of ``model`` whose main graph also outputs, for each float value of ``keys``, its lowest and highest
    element of magnitude below ``sentinel`` (NaN and infinity excluded) and its count of NaN and infinite
    elements (:class:`StatsOutputs`, in ``ExposedModel.stats``): what value ranges need, without copying every
    intermediate out of the session. float16 and bfloat16 values are compared as float32 (exact), float64 ones as
    float64. A value inside a Loop or Scan body comes back once per iteration. Values that are main-graph outputs
    already are left out (their arrays are the model's outputs). Needs opset 9 (Where)."""
    return expose_keys(model, keys, STACKED, stats_sentinel=sentinel)


def expose_quick_stats(model: onnx.ModelProto, keys: Iterable[str], sentinel: float) -> ExposedModel:
    """:func:`expose_stats` for a fraction of its nodes: each main-graph value's plain minimum, maximum and sum
    (:class:`QuickOutputs`), three reductions. They are its exact numbers when the sum is finite (no NaN nor
    infinity: a sum propagates them, a minimum or maximum may skip a NaN) and both bounds lie within
    ``sentinel``; the caller runs :func:`expose_stats` for the values where they do not. Values inside bodies get
    :func:`expose_stats`' outputs."""
    return expose_keys(model, keys, STACKED, stats_sentinel=sentinel, quick=True)


def expose_keys(
    model: onnx.ModelProto,
    keys: Iterable[str],
    loop_layout: str = STACKED,
    *,
    stats_sentinel: float | None = None,
    quick: bool = False,
) -> ExposedModel:
    """A copy of ``model`` whose main graph also outputs the values ``keys`` (see the module docstring).

    Skipped: keys of no value a node produces (nor a body's input), values already main-graph outputs, values
    of unknown element type, values of sparse constants. A bfloat16 value is exposed through an exact Cast to
    float32. Main-graph values keep their names as outputs (a bfloat16 one gets :data:`EXPOSED_FLOAT32_SUFFIX`)
    and their stated or inferred shape; a body's value gets a fresh name. The input model is not modified.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    scopes = proto_scopes(copy)
    types = scope_types(copy)
    names = _Names(scopes)
    exposable = _exposable(scopes)
    present = {value.name for value in copy.graph.output}
    wanted: list[tuple[ProtoScope, str, onnx.TypeProto, str]] = []
    for key in dict.fromkeys(keys):
        found = exposable.get(key)
        known = types.get(key)
        if found is None or known is None or known.tensor_type.elem_type == 0:
            continue
        scope, name = found
        if not scope.is_main or name not in present:
            wanted.append((scope, name, known, key))
    if stats_sentinel is not None:
        return _StatsExposer(copy, names, stats_sentinel, quick).expose(wanted)
    exposer = _Exposer(copy, names, types, loop_layout)
    for scope, name, known, key in wanted:
        if scope.is_main:
            exposer.main_value(name, known, key)
        else:
            exposer.body_value(scope, name, known.tensor_type.elem_type, key)
    return exposer.result


def _exposable(scopes: Sequence[ProtoScope]) -> dict[str, tuple[ProtoScope, str]]:
    """Key -> (scope, name) for every node output of every scope and every input of a body, but the values of
    sparse constants (ONNX Runtime cannot output those)."""
    found: dict[str, tuple[ProtoScope, str]] = {}
    for scope in scopes:
        for node in scope.graph.node:
            if any(attribute.type == onnx.AttributeProto.SPARSE_TENSOR for attribute in node.attribute):
                continue
            for output in node.output:
                if output:
                    found[scope.key(output)] = (scope, output)
        if not scope.is_main:
            for value in scope.graph.input:
                found[scope.key(value.name)] = (scope, value.name)
    return found


class _Names:
    """Fresh value and node names, unique across every scope of the copy."""

    def __init__(self, scopes: Sequence[ProtoScope]) -> None:
        self.taken = taken_names(list(scopes))

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.taken)


class _Exposer:
    def __init__(
        self,
        model: onnx.ModelProto,
        names: _Names,
        types: dict[str, onnx.TypeProto],
        layout: str,
    ) -> None:
        self.result = ExposedModel(model)
        self.graph = model.graph
        self.names = names
        self.types = types
        self.layout = layout

    def main_value(self, name: str, known: onnx.TypeProto, key: str) -> None:
        exposed = onnx.ValueInfoProto(name=name)
        exposed.type.CopyFrom(known)
        if known.tensor_type.elem_type == TensorProto.BFLOAT16:
            exposed.name = name + EXPOSED_FLOAT32_SUFFIX
            if exposed.name in self.names.taken:
                return
            self.names.taken.add(exposed.name)
            cast = oh.make_node("Cast", [name], [exposed.name], name=exposed.name, to=TensorProto.FLOAT)
            self.graph.node.append(cast)
            exposed.type.tensor_type.elem_type = TensorProto.FLOAT
        self.graph.output.append(exposed)
        self.result.keys[exposed.name] = key

    def body_value(self, scope: ProtoScope, name: str, elem_type: int, key: str) -> None:
        """Carry ``name`` out of ``scope`` and every scope around it, to a main-graph output."""
        graph = scope.graph
        local = name
        if elem_type == TensorProto.BFLOAT16:
            local = self.names.fresh(name + EXPOSED_FLOAT32_SUFFIX)
            graph.node.append(oh.make_node("Cast", [name], [local], name=local, to=TensorProto.FLOAT))
            elem_type = TensorProto.FLOAT
        elif any(value.name == name for value in graph.input) or any(o.name == name for o in graph.output):
            local = self.names.fresh(name + "::exposed")  # a body's input (or output) leaves through an Identity
            graph.node.append(oh.make_node("Identity", [name], [local], name=local))
        carried = self.carry_out(scope, local, elem_type, key)
        if carried is not None:
            self.graph.output.append(oh.make_tensor_value_info(carried, elem_type, None))
            self.result.keys[carried] = key

    def carry_out(self, scope: ProtoScope, name: str, elem_type: int, key: str) -> str | None:
        """Lift ``name`` out of ``scope`` and every scope around it: its name in the main graph, or None when a
        body on the way cannot carry it out."""
        carried: str | None = name
        current: ProtoScope | None = scope
        while carried is not None and current is not None and not current.is_main:
            carried = self._lift(current, carried, elem_type, key)
            current = current.parent
        return carried

    def _lift(self, scope: ProtoScope, name: str, elem_type: int, key: str) -> str | None:
        """Make ``name`` (a value of ``scope``'s graph) an output of the node that owns the scope; the name of that
        output in the parent graph, or None when this kind of body cannot carry it out."""
        owner = scope.owner
        assert owner is not None
        if owner.op_type == "If":
            return self._lift_if(scope, owner, name, elem_type)
        if owner.op_type == "Loop" and self.layout == FLAT:
            self.result.flattened.add(key)
            return self._lift_loop_flat(scope, owner, name, elem_type)
        if owner.op_type in ("Loop", "Scan"):
            if owner.op_type == "Scan" and not _scan_outputs_stack(owner):
                return None
            self.result.per_iteration.add(key)
            scope.graph.output.append(oh.make_tensor_value_info(name, elem_type, None))
            outer = self.names.fresh(name + "::per_iteration")
            owner.output.append(outer)
            _extend_scan_output_attributes(owner)
            return outer
        return None  # another op with a graph attribute: its outputs cannot be extended

    def _lift_if(self, scope: ProtoScope, owner: onnx.NodeProto, name: str, elem_type: int) -> str:
        sibling_attribute = "else_branch" if scope.attribute == "then_branch" else "then_branch"
        sibling = next(attr.g for attr in owner.attribute if attr.name == sibling_attribute)
        scope.graph.output.append(oh.make_tensor_value_info(name, elem_type, None))
        empty = self.names.fresh(name + "::not_run")
        value = numpy_helper.from_array(np.zeros(0, dtype=onnx.helper.tensor_dtype_to_np_dtype(elem_type)), empty)
        sibling.node.append(oh.make_node("Constant", [], [empty], name=empty, value=value))
        sibling.output.append(oh.make_tensor_value_info(empty, elem_type, None))
        outer = self.names.fresh(name + "::branch")
        owner.output.append(outer)
        return outer

    def _lift_loop_flat(self, scope: ProtoScope, owner: onnx.NodeProto, name: str, elem_type: int) -> str:
        """A carried 1-D accumulator: ``acc = Concat(acc, Reshape(value, [-1]))`` on every iteration."""
        assert scope.parent is not None
        body = scope.graph
        carried = len(body.input) - 2  # Loop bodies: iteration number, condition, then the carried values
        accumulator_in = self.names.fresh(name + "::flat_in")
        accumulator_out = self.names.fresh(name + "::flat")
        flat, shape = self.names.fresh(name + "::flat_one"), self.names.fresh(name + "::flat_shape")
        body.node.extend(
            [
                oh.make_node("Constant", [], [shape], name=shape, value=numpy_helper.from_array(np.array([-1]))),
                oh.make_node("Reshape", [name, shape], [flat], name=flat),
                oh.make_node("Concat", [accumulator_in, flat], [accumulator_out], name=accumulator_out, axis=0),
            ]
        )
        body.input.append(oh.make_tensor_value_info(accumulator_in, elem_type, None))
        body.output.insert(1 + carried, oh.make_tensor_value_info(accumulator_out, elem_type, None))
        start = self.names.fresh(name + "::flat_start")  # a main-graph initializer: every scope sees it
        self.graph.initializer.append(
            numpy_helper.from_array(np.zeros(0, dtype=onnx.helper.tensor_dtype_to_np_dtype(elem_type)), start)
        )
        owner.input.append(start)
        outer = self.names.fresh(name + "::flat_all")
        owner.output.insert(carried, outer)
        return outer


class _StatsExposer:
    """The nodes of :func:`expose_stats`: per value, ``x`` flattened and padded with one finite element beyond the
    sentinel (so no reduction meets an empty tensor, and the pad is neither kept nor counted), then
    ``kept = |x| < sentinel``, ``ReduceMin(Where(kept, x, +inf))``, ``ReduceMax(Where(kept, x, -inf))`` and
    ``ReduceSum(Cast(Not(|x| < inf), int32))`` (NaN compares false)."""

    def __init__(self, model: onnx.ModelProto, names: _Names, sentinel: float, quick: bool = False) -> None:
        self.exposer = _Exposer(model, names, {}, STACKED)
        self.quick = quick
        self.graph = model.graph
        self.names = names
        self.sentinel = sentinel
        self._constants: dict[int, dict[str, str]] = {}
        #: main-graph nodes to insert after the node at each position (-1: before the first)
        self._after: dict[int, list[onnx.NodeProto]] = {}

    @property
    def result(self) -> ExposedModel:
        return self.exposer.result

    def expose(self, wanted: Sequence[tuple[ProtoScope, str, onnx.TypeProto, str]]) -> ExposedModel:
        producer = {output: index for index, node in enumerate(self.graph.node) for output in node.output}
        # by compute type: (key, its numbers' names, the position of its producer)
        open_groups: dict[tuple[int, int], list[tuple[str, tuple[str, str, str], int]]] = {}
        for scope, name, known, key in wanted:
            elem_type = known.tensor_type.elem_type
            if elem_type not in FLOAT_TYPES:
                continue
            if not scope.is_main:
                self._body_value(scope, name, elem_type, key)
                continue
            at = producer.get(name, -1)
            nodes: list[onnx.NodeProto] = []
            rank = 1
            if self.quick:
                low, high, count = self._quick(nodes, name, known)
                rank = _rank(known) or 1
            else:
                low, high, count = self._stats(nodes, name, elem_type)
                bounds = self.names.fresh(name + "::bounds")
                nodes.append(oh.make_node("Concat", [low, high], [bounds], name=bounds, axis=0))
                low = high = bounds
            self._after.setdefault(at, []).extend(nodes)
            group_key = (_compute_type(elem_type), rank)  # one Concat joins values of one type and rank
            group = open_groups.setdefault(group_key, [])
            group.append((key, (low, high, count), at))
            if len(group) == STATS_GROUP:
                self._close_group(group_key, open_groups.pop(group_key))
        for group_key, group in open_groups.items():
            self._close_group(group_key, group)
        self._place_main_nodes()
        return self.result

    def _stats(self, nodes: list[onnx.NodeProto], name: str, elem_type: int) -> tuple[str, str, str]:
        """Append to ``nodes`` the nodes computing ``name``'s lowest and highest kept element and its non-finite
        count, each of shape [1]; their names."""
        compute_type = _compute_type(elem_type)
        constants = self._constants_of(compute_type)
        stem = self.names.fresh(name + "::stats")
        parts = ("f", "flat", "padded", "abs", "kept", "low_in", "high_in", "low", "high", "finite", "bad", "bad_i")
        f, flat, padded, magnitude, kept, low_in, high_in, low, high, finite, bad, bad_i = (
            self.names.fresh(f"{stem}_{part}") for part in parts
        )
        source = name
        if elem_type != compute_type:
            source = f
            nodes.append(oh.make_node("Cast", [name], [f], name=f, to=compute_type))
        count = stem
        nodes.extend(
            [
                oh.make_node("Reshape", [source, constants["flat_shape"]], [flat], name=flat),
                oh.make_node("Concat", [flat, constants["pad"]], [padded], name=padded, axis=0),
                oh.make_node("Abs", [padded], [magnitude], name=magnitude),
                oh.make_node("Less", [magnitude, constants["sentinel"]], [kept], name=kept),
                oh.make_node("Where", [kept, padded, constants["inf"]], [low_in], name=low_in),
                oh.make_node("Where", [kept, padded, constants["minus_inf"]], [high_in], name=high_in),
                oh.make_node("ReduceMin", [low_in], [low], name=low, keepdims=1),
                oh.make_node("ReduceMax", [high_in], [high], name=high, keepdims=1),
                oh.make_node("Less", [magnitude, constants["inf"]], [finite], name=finite),
                oh.make_node("Not", [finite], [bad], name=bad),
                oh.make_node("Cast", [bad], [bad_i], name=bad_i, to=TensorProto.INT32),
                oh.make_node("ReduceSum", [bad_i], [count], name=count, keepdims=1),
            ]
        )
        return low, high, count

    def _quick(self, nodes: list[onnx.NodeProto], name: str, known: onnx.TypeProto) -> tuple[str, str, str]:
        """Append to ``nodes`` the minimum, maximum and sum of ``name``, each kept in ``name``'s rank ([1, ...]) so
        that values of one rank join in one Concat (a value of no stated rank, or a scalar, is flattened first);
        their names."""
        elem_type = known.tensor_type.elem_type
        compute_type = _compute_type(elem_type)
        stem = self.names.fresh(name + "::quick")
        source = name
        if elem_type != compute_type:
            source = self.names.fresh(stem + "_f")
            nodes.append(oh.make_node("Cast", [name], [source], name=source, to=compute_type))
        if _rank(known) in (None, 0):
            flat = self.names.fresh(stem + "_flat")
            nodes.append(
                oh.make_node("Reshape", [source, self._constants_of(compute_type)["flat_shape"]], [flat], name=flat)
            )
            source = flat
        low, high, total = (self.names.fresh(f"{stem}_{part}") for part in ("min", "max", "sum"))
        nodes.extend(
            [
                oh.make_node("ReduceMin", [source], [low], name=low, keepdims=1),
                oh.make_node("ReduceMax", [source], [high], name=high, keepdims=1),
                oh.make_node("ReduceSum", [source], [total], name=total, keepdims=1),
            ]
        )
        return low, high, total

    def _close_group(self, group_key: tuple[int, int], group: list[tuple[str, tuple[str, str, str], int]]) -> None:
        """The group's outputs, placed after the group's last value: one Concat of every value's quick numbers,
        or one Concat of the values' bounds and one of their counts."""
        compute_type, rank = group_key
        last = self._after.setdefault(max(at for *_, at in group), [])
        keys = tuple(member[0] for member in group)
        if self.quick:
            numbers = self.names.fresh("::quick_stats")
            inputs = [number for _, names, _ in group for number in names]
            last.append(oh.make_node("Concat", inputs, [numbers], name=numbers, axis=0))
            self.graph.output.append(oh.make_tensor_value_info(numbers, compute_type, [len(inputs)] + [1] * (rank - 1)))
            self.result.quick.append(QuickOutputs(keys, numbers))
            return
        bounds = self.names.fresh("::stats_bounds")
        counts = self.names.fresh("::stats_nonfinite")
        last.extend(
            [
                oh.make_node("Concat", [names[0] for _, names, _ in group], [bounds], name=bounds, axis=0),
                oh.make_node("Concat", [names[2] for _, names, _ in group], [counts], name=counts, axis=0),
            ]
        )
        self.graph.output.extend(
            [
                oh.make_tensor_value_info(bounds, compute_type, [2 * len(group)]),
                oh.make_tensor_value_info(counts, TensorProto.INT32, [len(group)]),
            ]
        )
        self.result.stats.append(StatsOutputs(keys, bounds, counts))

    def _body_value(self, scope: ProtoScope, name: str, elem_type: int, key: str) -> None:
        """A body's value: its numbers computed in the body, carried out as two outputs of its own."""
        nodes: list[onnx.NodeProto] = []
        low, high, count = self._stats(nodes, name, elem_type)
        bounds = self.names.fresh(name + "::bounds")
        nodes.append(oh.make_node("Concat", [low, high], [bounds], name=bounds, axis=0))
        scope.graph.node.extend(nodes)
        compute_type = _compute_type(elem_type)
        outer_bounds = self.exposer.carry_out(scope, bounds, compute_type, key)
        outer_counts = self.exposer.carry_out(scope, count, TensorProto.INT32, key)
        if outer_bounds is None or outer_counts is None:
            return
        self.graph.output.extend(
            [
                oh.make_tensor_value_info(outer_bounds, compute_type, None),
                oh.make_tensor_value_info(outer_counts, TensorProto.INT32, None),
            ]
        )
        self.result.stats.append(StatsOutputs((key,), outer_bounds, outer_counts))

    def _constants_of(self, compute_type: int) -> dict[str, str]:
        """The main-graph initializers the nodes of ``compute_type`` read (every scope sees them)."""
        if compute_type not in self._constants:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(compute_type)
            values: dict[str, np.ndarray] = {
                "sentinel": np.array(self.sentinel, dtype),
                "inf": np.array(np.inf, dtype),
                "minus_inf": np.array(-np.inf, dtype),
                "pad": np.array([np.finfo(dtype).max], dtype),  # finite, beyond any sentinel
                "flat_shape": np.array([-1], np.int64),
            }
            names: dict[str, str] = {}
            for part, array in values.items():
                names[part] = self.names.fresh(f"::stats_{part}_{dtype}")
                self.graph.initializer.append(numpy_helper.from_array(array, names[part]))
            self._constants[compute_type] = names
        return self._constants[compute_type]

    def _place_main_nodes(self) -> None:
        """Put each value's nodes right after its producer (the graph stays topologically sorted)."""
        original = list(self.graph.node)
        placed = list(self._after.get(-1, []))
        for index, node in enumerate(original):
            placed.append(node)
            placed.extend(self._after.get(index, []))
        del self.graph.node[:]
        self.graph.node.extend(placed)


def _rank(known: onnx.TypeProto) -> int | None:
    return len(known.tensor_type.shape.dim) if known.tensor_type.HasField("shape") else None


def _compute_type(elem_type: int) -> int:
    """float64 is reduced as it is; float16 and bfloat16 as float32 (exact)."""
    return TensorProto.DOUBLE if elem_type == TensorProto.DOUBLE else TensorProto.FLOAT


def _scan_outputs_stack(node: onnx.NodeProto) -> bool:
    """Scan from opset 9 on (Scan-8's batch axis is not handled)."""
    return any(attr.name == "num_scan_inputs" for attr in node.attribute) and not any(
        attr.name == "directions" for attr in node.attribute
    )


def _extend_scan_output_attributes(node: onnx.NodeProto) -> None:
    """A new Scan output stacks along axis 0, forward: lists that name every scan output get an entry."""
    if node.op_type != "Scan":
        return
    for attr in node.attribute:
        if attr.name in ("scan_output_axes", "scan_output_directions"):
            attr.ints.append(0)


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


def float_value_keys(model: onnx.ModelProto) -> list[str]:
    """Keys of every float value a debugging run can expose: the node outputs of every scope and the inputs of
    every body, scope by scope, in node order."""
    types = scope_types(model)
    keys: list[str] = []
    for scope in proto_scopes(model):
        names = [] if scope.is_main else [value.name for value in scope.graph.input]
        names += [output for node in scope.graph.node for output in node.output if output]
        for name in names:
            known = types.get(scope.key(name))
            if known is not None and known.tensor_type.elem_type in FLOAT_TYPES:
                keys.append(scope.key(name))
    return keys
