"""The copies that compute each value's numbers in the session: few nodes per value, few outputs, graph order."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper as oh

from ampconfig.decide.value_ranges import SENTINEL
from ampconfig.rewrite.expose import STATS_GROUP, expose_quick_stats, expose_stats, float_value_keys
from tests.graphs import const, make_model, tensor


def _chain(length: int) -> onnx.ModelProto:
    """x [4, 8] -> Add, Mul, Relu, Tanh in turn, ``length`` nodes."""
    nodes, previous = [], "x"
    for index in range(length):
        op = ("Add", "Mul", "Relu", "Tanh")[index % 4]
        inputs = [previous, "c"] if op in ("Add", "Mul") else [previous]
        nodes.append(oh.make_node(op, inputs, [f"v{index}"], name=f"n{index}"))
        previous = f"v{index}"
    return make_model(nodes, [tensor("x", shape=[4, 8])], [tensor(previous, shape=[4, 8])], [const("c", 0.5)])


def test_quick_stats_add_three_nodes_per_value_and_one_output_per_group() -> None:
    model = _chain(STATS_GROUP + 44)
    before = model.SerializeToString()
    keys = float_value_keys(model)
    exposed = expose_quick_stats(model, keys, SENTINEL)
    assert model.SerializeToString() == before  # the input model is not modified
    onnx.checker.check_model(exposed.model, full_check=True)
    exposed_values = len(keys) - 1  # the last value is the model's output already
    groups = math.ceil(exposed_values / STATS_GROUP)
    assert len(exposed.model.graph.node) - len(model.graph.node) == 3 * exposed_values + groups
    assert len(exposed.model.graph.output) - len(model.graph.output) == groups == len(exposed.quick)
    assert [key for group in exposed.quick for key in group.keys] == keys[:-1]


def test_each_values_reductions_follow_its_producer() -> None:
    """A session running nodes in graph order frees each value before the next chain node runs."""
    exposed = expose_quick_stats(_chain(12), [f"v{index}" for index in range(12)], SENTINEL)
    order = [node.name for node in exposed.model.graph.node]
    for index in range(11):
        reductions = [position for position, name in enumerate(order) if name.startswith(f"v{index}::quick")]
        assert len(reductions) == 3
        assert order.index(f"n{index}") < min(reductions) and max(reductions) < order.index(f"n{index + 1}")


def test_exact_stats_share_outputs_too() -> None:
    model = _chain(20)
    exposed = expose_stats(model, float_value_keys(model), SENTINEL)
    onnx.checker.check_model(exposed.model, full_check=True)
    assert len(exposed.stats) == 1 and len(exposed.stats[0].keys) == 19
    assert len(exposed.model.graph.output) == len(model.graph.output) + 2  # bounds and non-finite counts


def test_scalars_are_flattened_before_they_are_reduced() -> None:
    """A scalar's reductions would be scalars too, which Concat refuses: it becomes [1] first."""
    nodes = [
        oh.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
        oh.make_node("Tanh", ["total"], ["y"], name="y"),
    ]
    model = make_model(nodes, [tensor("x", shape=[2, 2])], [tensor("y", shape=[])])
    exposed = expose_quick_stats(model, ["total"], SENTINEL)
    onnx.checker.check_model(exposed.model, full_check=True)
    assert [node.op_type for node in exposed.model.graph.node] == [
        "ReduceSum",
        "Reshape",
        "ReduceMin",
        "ReduceMax",
        "ReduceSum",
        "Concat",
        "Tanh",
    ]
    session = ort.InferenceSession(exposed.model.SerializeToString(), providers=["CPUExecutionProvider"])
    numbers = session.run([exposed.quick[0].numbers], {"x": np.array([[1.0, 2.0], [3.0, -4.0]], np.float32)})[0]
    assert numbers.tolist() == [2.0, 2.0, 2.0]
