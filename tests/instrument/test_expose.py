"""The copies that carry intermediate values out (one graph output each, or joined in groups where their shapes
are known): what comes back is every value as the model computed it, in its own shape and dtype (bfloat16 as
float32, exactly), the input model untouched."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.instrument.expose import GROUP_ELEMENTS, VALUE_GROUP, expose_keys, float_value_keys, static_shapes
from ampconfig.runner.intermediates import ExposedRunner
from ampconfig.runner.sessions import create_session, run_once
from tests.graphs import make_model, tensor


def _awkward() -> onnx.ModelProto:
    """Values of every kind a run meets: a scalar, an empty one, float16, bfloat16, float64, ranks 1 to 3."""
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


def test_one_output_per_value_and_the_input_untouched() -> None:
    model = _awkward()
    before = model.SerializeToString()
    keys = float_value_keys(model)
    exposed = expose_keys(model, keys)
    assert model.SerializeToString() == before
    onnx.checker.check_model(exposed.model, full_check=True)
    assert sorted(exposed.keys.values()) == sorted(key for key in keys if key != "y")  # y is an output already
    assert len(exposed.model.graph.node) == len(model.graph.node) + 1  # the exact Cast of the bfloat16 value


def test_values_come_back_in_their_shapes_and_dtypes() -> None:
    model = _awkward()
    feeds = {"x": np.array([-2.5, 0.0, 1.5, 3e5, -7.0, 0.25], np.float32)}
    run = ExposedRunner(model, float_value_keys(model), "cpu").run(feeds)
    x = feeds["x"]
    np.testing.assert_array_equal(run.values["plain"], np.maximum(x, 0))
    assert run.values["total"].shape == () and run.values["empty"].shape == (0,)
    assert run.values["cube"].shape == (1, 2, 3) and run.values["wide"].dtype == np.float64
    assert run.values["half_neg"].dtype == np.float16
    with np.errstate(over="ignore"):  # 3e5 is infinite in float16, as in the model
        np.testing.assert_array_equal(run.values["half_neg"], -x.astype(np.float16))
    np.testing.assert_array_equal(run.values["brain"], x.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(run.values["x"], x)  # the graph input as fed


def _chain(length: int) -> onnx.ModelProto:
    """x [4, 8] -> Add, Mul, Relu, Tanh in turn, ``length`` nodes."""
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "c")]
    nodes, previous = [], "x"
    for index in range(length):
        op = ("Add", "Mul", "Relu", "Tanh")[index % 4]
        nodes.append(oh.make_node(op, [previous, "c"] if op in ("Add", "Mul") else [previous], [f"v{index}"]))
        previous = f"v{index}"
    return make_model(nodes, [tensor("x", shape=[4, 8])], [tensor(previous, shape=[4, 8])], inits)


def test_values_of_known_shapes_leave_joined_without_a_node_each() -> None:
    model = _chain(VALUE_GROUP + 10)
    keys = float_value_keys(model)
    exposed = expose_keys(model, keys, group=static_shapes(model))
    onnx.checker.check_model(exposed.model, full_check=True)
    assert [len(group.keys) for group in exposed.groups] == [VALUE_GROUP, 9]  # the last value is an output already
    assert len(exposed.model.graph.node) == len(model.graph.node) + 2  # one Concat per group
    assert len(exposed.model.graph.output) == len(model.graph.output) + 2 and not exposed.keys
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)}
    grouped = ExposedRunner(model, keys, "cpu").run(feeds).values
    alone = expose_keys(model, keys)
    results = run_once(create_session(alone.model, "cpu"), feeds)
    for name, array in results.items():
        key = alone.keys.get(name, name)
        assert grouped[key].shape == (4, 8)
        np.testing.assert_array_equal(grouped[key], array)


def test_a_value_as_large_as_a_group_leaves_as_it_is() -> None:
    """A Concat of one value would only copy it (16 MB per value and run on chain_commands' 64-channel convnet):
    it leaves as an output of its own, the small values beside it still joined."""
    side = int(GROUP_ELEMENTS**0.5)
    nodes = [
        oh.make_node("Relu", ["x"], ["large"], name="large"),
        oh.make_node("Tanh", ["large"], ["larger"], name="larger"),
        oh.make_node("ReduceMax", ["larger"], ["small"], name="small", keepdims=1),
        oh.make_node("Neg", ["small"], ["smaller"], name="smaller"),
        oh.make_node("Abs", ["smaller"], ["y"], name="y"),
    ]
    model = make_model(nodes, [tensor("x", shape=[side, side])], [tensor("y", shape=[1, 1])])
    exposed = expose_keys(model, float_value_keys(model), group=static_shapes(model))
    assert sorted(exposed.keys.values()) == ["large", "larger"]
    assert [group.keys for group in exposed.groups] == [("small", "smaller")]
    assert [node.op_type for node in exposed.model.graph.node].count("Concat") == 1


def test_a_group_that_comes_back_in_another_shape_is_carried_out_one_value_each() -> None:
    """Shape inference wrong about a value (a custom op's output, say): the run is made again with every value an
    output of its own, and its values are right."""
    model = _chain(6)
    keys = float_value_keys(model)
    runner = ExposedRunner(model, keys, "cpu")
    wrong = {key: (2, 8) for key in keys}  # the values are [4, 8]
    runner.exposed = expose_keys(model, keys, group=wrong)
    runner.session = create_session(runner.exposed.model, "cpu")
    run = runner.run({"x": np.ones((4, 8), np.float32)})
    assert not runner.exposed.groups and run.values["v0"].shape == (4, 8)
    np.testing.assert_allclose(run.values["v0"], np.full((4, 8), 1.5))
    # the numbers counted in the worker take the same way back
    runner.exposed = expose_keys(model, keys, group=wrong)
    runner.session = create_session(runner.exposed.model, "cpu")
    stats = runner.stats({"x": np.ones((4, 8), np.float32)})
    assert not runner.exposed.groups and stats["v0"].minimum == stats["v0"].maximum == 1.5
    assert stats["v0"].exponents == {0: 32}
