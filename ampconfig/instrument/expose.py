"""Debugging copies of a model that expose intermediate values as graph outputs (compare, range analysis, tune).
The input model is never modified.

Values are named by their keys (:mod:`ampconfig.instrument.scopes`): a main-graph value by its name, a value inside
an If, Loop or Scan body by its scope path and name. A value inside a body leaves it the way the body's own
outputs do, one scope at a time, until it is an output of the main graph:

- an If branch: it becomes an output of its branch and of the If; the other branch outputs an empty tensor in its
  place (only one branch runs, so a value of the branch that did not run comes back empty);
- a Loop or Scan body: it becomes a scan output, so it comes back with one slice per iteration
  (``[iterations, *shape]``); when the shapes differ between iterations, ONNX Runtime refuses that, and
  :data:`FLAT` layout carries a Loop body's values instead as one flat concatenation of every iteration's values.

A body's float inputs (a Loop's carried state, a Scan's slices) are exposed too, through an Identity, so the
error a value carries from one iteration to the next is seen where it enters.

The measuring runs (:class:`ampconfig.runner.intermediates.ExposedRunner`, one session for every sample, nodes in
graph order) carry the values out with as few nodes and outputs as they can: ONNX Runtime's set-up costs about the
same per node whatever the node, and graph outputs cost more the longer the graph (docs/benchmarks.md: on the CPU
rounding copy of a 20,000-node chain's rewrite, 60,003 nodes, 20,000 values took 10.4 s to set up as one output
each, 7.5 s as a Reshape each joined by 256-value Concats, 5.5 s joined as they are). So values whose shapes ONNX's
shape inference knows from the graph alone (``group=``, :func:`static_shapes`) and that agree but in the first
dimension, of one element type, are **grouped**: up to :data:`VALUE_GROUP` of them joined by one Concat along
that dimension into one output (:class:`ValueGroup`), cut apart again by their known shapes; no node per value.
Every other value is an output of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.instrument.scopes import ProtoScope, leniently_inferred, proto_scopes, scope_types, taken_names
from ampconfig.rewrite.names import fresh_name

log = logging.getLogger(__name__)

#: Element types of the float tensors debugging runs expose.
FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE})

#: Suffix of the float32 copy under which :func:`expose_values` exposes a bfloat16 value (numpy has no bfloat16,
#: so ONNX Runtime's Python API cannot hand one back; the Cast to float32 is exact).
EXPOSED_FLOAT32_SUFFIX = "::as_float32"

#: How values of Loop bodies come back: one slice per iteration, or every iteration's values flattened and joined.
STACKED, FLAT = "stacked", "flat"


#: Most values one :class:`ValueGroup` joins, and most elements: a group's values live until its Concat.
VALUE_GROUP = 256
GROUP_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class ValueGroup:
    """A graph output carrying the main-graph values ``keys`` joined in turn along their first dimension, of one
    element type (bfloat16 values as float32, exactly), each of its known ``shapes``."""

    keys: tuple[str, ...]
    output: str
    shapes: tuple[tuple[int, ...], ...]


@dataclass
class ExposedModel:
    """The debugging copy and, per graph output it added, the key of the value it carries (or, for the values in
    ``groups``, the output carrying each group)."""

    model: onnx.ModelProto
    keys: dict[str, str] = field(default_factory=dict)
    groups: list[ValueGroup] = field(default_factory=list)
    #: keys of values that come back one slice per Loop/Scan iteration (``[iterations, *shape]``)
    per_iteration: set[str] = field(default_factory=set)
    #: keys of values that come back flattened and joined over the iterations (:data:`FLAT`)
    flattened: set[str] = field(default_factory=set)


def expose_values(model: onnx.ModelProto, names: list[str] | tuple[str, ...]) -> onnx.ModelProto:
    """A copy of ``model`` whose main graph also outputs the node-output values ``names`` (main-graph names)."""
    return expose_keys(model, names).model


def expose_keys(
    model: onnx.ModelProto,
    keys: Iterable[str],
    loop_layout: str = STACKED,
    *,
    group: Mapping[str, tuple[int, ...]] | None = None,
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
    exposer = _Exposer(copy, names, types, loop_layout)
    grouper = _Grouper(exposer) if group else None
    for scope, name, known, key in wanted:
        shape = group.get(key) if group else None
        elem_type = known.tensor_type.elem_type
        grouped = scope.is_main and grouper is not None and shape is not None and elem_type in FLOAT_TYPES
        if grouped and grouper is not None and shape is not None and grouper.add(name, elem_type, shape, key):
            continue
        if scope.is_main:
            exposer.main_value(name, known, key)
        else:
            exposer.body_value(scope, name, known.tensor_type.elem_type, key)
    if grouper is not None:
        grouper.finish()
    return exposer.result


def static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """The shape of every main-graph value that ONNX's shape inference finds fully known from the graph alone:
    inferred on a light copy without the model's own declarations of intermediate values (which exporters leave
    stale), so a shape here is what the ops make of the inputs' fixed dimensions."""
    from ampconfig.model_io.models import INFERENCE_FAILURES, light_proto

    light = light_proto(model)
    del light.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=False)
    except INFERENCE_FAILURES as exc:  # best effort: each value then leaves the run as an output of its own
        log.info("ONNX shape inference failed, so no measured value is grouped with others: %s", exc)
        return {}
    shapes: dict[str, tuple[int, ...]] = {}
    for value in inferred.graph.value_info:
        tensor = value.type.tensor_type
        known = value.type.HasField("tensor_type") and tensor.HasField("shape")
        if known and all(dim.HasField("dim_value") for dim in tensor.shape.dim):
            shapes[value.name] = tuple(dim.dim_value for dim in tensor.shape.dim)
    return shapes


class _Grouper:
    """The nodes of a grouped copy: values of one element type whose known shapes agree but in their first
    dimension joined by one ``Concat`` along it, placed after the last of them is made (bfloat16 values through an
    exact Cast to float32 first). No node per value: the values are what the Concat reads."""

    def __init__(self, exposer: _Exposer) -> None:
        self.exposer = exposer
        self.graph = exposer.graph
        self.names = exposer.names
        self.producer = {output: index for index, node in enumerate(self.graph.node) for output in node.output}
        #: main-graph nodes to insert after the node at each position (-1: before the first)
        self._after: dict[int, list[onnx.NodeProto]] = {}
        #: by (element type, shape past the first dimension): the open group's (key, name, shape, producer
        #: position), and its elements
        self._open: dict[tuple[int, tuple[int, ...]], tuple[list[tuple[str, str, tuple[int, ...], int]], int]] = {}

    def add(self, name: str, elem_type: int, shape: tuple[int, ...], key: str) -> bool:
        """Put the value in a group; False for a scalar (nothing to join it along) and for a value as large as a
        group (joined alone, it would only be copied: 16 MB per value and run on a 64-channel convnet)."""
        if not shape or int(np.prod(shape, dtype=np.int64)) >= GROUP_ELEMENTS:
            return False
        at = self.producer.get(name, -1)
        source = name
        if elem_type == TensorProto.BFLOAT16:
            source = self.names.fresh(name + EXPOSED_FLOAT32_SUFFIX)
            cast = oh.make_node("Cast", [name], [source], name=source, to=TensorProto.FLOAT)
            self._after.setdefault(at, []).append(cast)
            elem_type = TensorProto.FLOAT
        kind = (elem_type, shape[1:])
        members, elements = self._open.get(kind, ([], 0))
        members.append((key, source, shape, at))
        elements += int(np.prod(shape, dtype=np.int64))
        if len(members) >= VALUE_GROUP or elements >= GROUP_ELEMENTS:
            self._close(elem_type, members)
            self._open.pop(kind, None)
        else:
            self._open[kind] = (members, elements)
        return True

    def finish(self) -> None:
        for (elem_type, _), (members, _) in list(self._open.items()):
            self._close(elem_type, members)
        original = list(self.graph.node)
        placed = list(self._after.get(-1, []))
        for index, node in enumerate(original):
            placed.append(node)
            placed.extend(self._after.get(index, []))
        del self.graph.node[:]
        self.graph.node.extend(placed)

    def _close(self, elem_type: int, members: list[tuple[str, str, tuple[int, ...], int]]) -> None:
        output = self.names.fresh("::grouped_values")
        self._after.setdefault(max(member[3] for member in members), []).append(
            oh.make_node("Concat", [member[1] for member in members], [output], name=output, axis=0)
        )
        shapes = tuple(member[2] for member in members)
        # its rank only: ONNX Runtime's planner trusts declared sizes, and these come from inference
        self.graph.output.append(oh.make_tensor_value_info(output, elem_type, [None] * len(shapes[0])))
        self.exposer.result.groups.append(ValueGroup(tuple(member[0] for member in members), output, shapes))


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
    inferred = leniently_inferred(model)
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


def measured_value_keys(model: onnx.ModelProto, constants: Iterable[str] = ()) -> list[str]:
    """The keys a calibration of ``model`` measures: the main graph's float inputs (but ``constants``, initializers
    a light proto declares as inputs), then every float value a debugging run exposes (:func:`float_value_keys`)."""
    left_out = set(constants) | {init.name for init in model.graph.initializer}
    inputs = [
        value.name
        for value in model.graph.input
        if value.name not in left_out and value.type.tensor_type.elem_type in FLOAT_TYPES
    ]
    return [*inputs, *float_value_keys(model)]
