"""The copies that carry intermediate values out grouped: two nodes per value, few outputs, graph order, and the
values cut apart again exactly as they were."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.rewrite.expose import GROUP_ELEMENTS, VALUE_GROUP, expose_grouped, expose_keys, float_value_keys
from ampconfig.runner.intermediates import ExposedRunner
from ampconfig.runner.sessions import create_session, run_once
from tests.graphs import const, make_model, tensor


def _chain(length: int, shape: tuple[int, ...] = (4, 8)) -> onnx.ModelProto:
    """x -> Add, Mul, Relu, Tanh in turn, ``length`` nodes."""
    nodes, previous = [], "x"
    for index in range(length):
        op = ("Add", "Mul", "Relu", "Tanh")[index % 4]
        inputs = [previous, "c"] if op in ("Add", "Mul") else [previous]
        nodes.append(oh.make_node(op, inputs, [f"v{index}"], name=f"n{index}"))
        previous = f"v{index}"
    return make_model(nodes, [tensor("x", shape=list(shape))], [tensor(previous, shape=list(shape))], [const("c", 0.5)])


def test_a_value_costs_two_nodes_and_a_group_two_outputs() -> None:
    model = _chain(VALUE_GROUP + 44)
    before = model.SerializeToString()
    keys = float_value_keys(model)
    exposed = expose_grouped(model, keys)
    assert model.SerializeToString() == before  # the input model is not modified
    onnx.checker.check_model(exposed.model, full_check=True)
    carried = len(keys) - 1  # the last value is the model's output already
    groups = math.ceil(carried / VALUE_GROUP)
    assert len(exposed.model.graph.node) - len(model.graph.node) == 2 * carried + 2 * groups
    assert len(exposed.model.graph.output) - len(model.graph.output) == 2 * groups == 2 * len(exposed.groups)
    assert [key for group in exposed.groups for key in group.keys] == keys[:-1]


def test_each_values_nodes_follow_its_producer() -> None:
    """A session running nodes in graph order keeps a value only until its group's Concat."""
    exposed = expose_grouped(_chain(12), [f"v{index}" for index in range(12)])
    order = [node.name for node in exposed.model.graph.node]
    for index in range(11):
        own = [position for position, name in enumerate(order) if name.startswith(f"v{index}::grouped")]
        assert len(own) == 2
        assert order.index(f"n{index}") < min(own) and max(own) < order.index(f"n{index + 1}")


def test_groups_close_where_their_known_elements_would_hold_too_much_memory() -> None:
    side = math.isqrt(GROUP_ELEMENTS // 2) + 1  # two values pass the bound
    exposed = expose_grouped(_chain(8, (side, side)), [f"v{index}" for index in range(7)])
    assert [len(group.keys) for group in exposed.groups] == [2, 2, 2, 1]


def _awkward() -> onnx.ModelProto:
    """Values of every kind a group meets: a scalar, an empty one, float16, bfloat16, float64, ranks 1 to 3."""
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "start"),
        numpy_helper.from_array(np.array([0], np.int64), "stop"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "shape"),
    ]
    nodes = [
        oh.make_node("Relu", ["x"], ["plain"], name="plain"),
        oh.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
        oh.make_node("Slice", ["x", "start", "stop"], ["empty"], name="empty"),
        oh.make_node("Cast", ["x"], ["half"], name="half", to=TensorProto.FLOAT16),
        oh.make_node("Neg", ["half"], ["half_neg"], name="half_neg"),
        oh.make_node("Cast", ["x"], ["brain"], name="brain", to=TensorProto.BFLOAT16),
        oh.make_node("Cast", ["x"], ["wide"], name="wide", to=TensorProto.DOUBLE),
        oh.make_node("Reshape", ["plain", "shape"], ["matrix"], name="matrix"),
        oh.make_node("Unsqueeze", ["matrix", "start"], ["cube"], name="cube"),
        oh.make_node("Tanh", ["total"], ["y"], name="y"),
    ]
    return make_model(nodes, [tensor("x", shape=[6])], [tensor("y", shape=[])], inits)


def test_values_come_back_cut_apart_exactly_as_each_alone() -> None:
    model = _awkward()
    feeds = {"x": np.array([-2.5, 0.0, 1.5, 3e5, -7.0, 0.25], np.float32)}
    keys = float_value_keys(model)
    grouped = ExposedRunner(model, keys, "cpu").run(feeds)
    alone = expose_keys(model, keys)
    results = run_once(create_session(alone.model, "cpu"), feeds)
    expected = {alone.keys.get(name, name): array for name, array in results.items()}
    for key, array in expected.items():
        got = grouped.values[key]
        assert got.dtype == array.dtype and got.shape == array.shape, key
        np.testing.assert_array_equal(got, array)
    assert grouped.values["half_neg"].dtype == np.float16 and grouped.values["total"].shape == ()
    assert grouped.values["empty"].shape == (0,) and grouped.values["cube"].shape == (1, 2, 3)
    np.testing.assert_array_equal(grouped.values["brain"], feeds["x"].astype(ml_dtypes.bfloat16).astype(np.float32))
    assert len(grouped.values) == len(keys) + 1  # and the graph input as fed
