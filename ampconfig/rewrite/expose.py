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

One value, one graph output: in a session that runs nodes in graph order (ONNX Runtime's priority-based order, as
:class:`ampconfig.runner.intermediates.ExposedRunner` builds it), that set-up costs less per value than any node
added to compute or to group values in the session (``benchmarks/range_run.py``, docs/benchmarks.md): at 20,000
values one output each took 1.7 s to set up, a Reshape per value into 256-value Concats 2.4 s, with a Shape per
value to cut them apart again 12 s, and three reductions per value (the range run before histograms) 5 s.
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


@dataclass
class ExposedModel:
    """The debugging copy and, per graph output it added, the key of the value it carries."""

    model: onnx.ModelProto
    keys: dict[str, str] = field(default_factory=dict)
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
