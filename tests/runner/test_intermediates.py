"""Value ranges computed inside the session (run's range check) against numpy on every exposed intermediate."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.decide.value_ranges import peak
from ampconfig.runner.intermediates import (
    ValueStats,
    run_samples_with_intermediates,
    run_value_stats,
    value_stats,
)
from tests.graphs import make_model, tensor

SENTINEL_FILL = -3.4e38  # a mask's float32 minimum: a sentinel, left out of the ranges


def _awkward_values(opset: int = 13) -> onnx.ModelProto:
    """x [6] -> values with NaN and infinity, sentinels, nothing but sentinels, no element, float16, float64, a
    scalar, and a plain one."""
    inits = [
        numpy_helper.from_array(np.array([1, 0, 1, 0, 1, 1], np.float32), "divisor"),
        numpy_helper.from_array(np.array([True, False, True, True, False, True]), "keep"),
        numpy_helper.from_array(np.array(SENTINEL_FILL, np.float32), "fill"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "start"),
        numpy_helper.from_array(np.array([0], np.int64), "stop"),
        numpy_helper.from_array(np.array(2.0, np.float64), "two"),
    ]
    nodes = [
        oh.make_node("Relu", ["x"], ["plain"], name="plain"),
        oh.make_node("Div", ["x", "divisor"], ["broken"], name="broken"),  # x / 0: inf, -inf or NaN
        oh.make_node("Where", ["keep", "x", "fill"], ["masked"], name="masked"),
        oh.make_node("Mul", ["x", "zero"], ["nothing"], name="nothing"),
        oh.make_node("Add", ["nothing", "fill"], ["all_sentinel"], name="all_sentinel"),
        oh.make_node("Slice", ["x", "start", "stop"], ["empty"], name="empty"),
        oh.make_node("Cast", ["x"], ["half"], name="half", to=TensorProto.FLOAT16),
        oh.make_node("Relu", ["half"], ["half_relu"], name="half_relu"),
        oh.make_node("Cast", ["x"], ["wide"], name="wide", to=TensorProto.DOUBLE),
        oh.make_node("Mul", ["wide", "two"], ["wide_twice"], name="wide_twice"),
        oh.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
        oh.make_node("Tanh", ["plain"], ["y"], name="y"),
    ]
    return make_model(nodes, [tensor("x", shape=[6])], [tensor("y", shape=[6])], inits, opset=opset)


def _sample(scale: float = 1.0) -> dict[str, np.ndarray]:
    return {"x": np.array([-2.5, 0.0, 1.5, 3e5, -7.0, 0.25], np.float32) * np.float32(scale)}


def _numpy_stats(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]]) -> dict[str, ValueStats]:
    exposed = run_samples_with_intermediates(model, samples)
    return {key: value_stats(array) for key, array in exposed.values.items() if np.asarray(array).dtype.kind == "f"}


def test_value_stats_leave_out_sentinels_and_count_nan_and_infinity() -> None:
    stats = value_stats(np.array([np.nan, -np.inf, 3.0, -2.0, SENTINEL_FILL, 5e37], np.float32))
    assert stats == ValueStats(-2.0, float(np.float32(5e37)), 2)
    assert stats.peak == peak(np.array([np.nan, -np.inf, 3.0, -2.0, SENTINEL_FILL, 5e37], np.float32))
    assert value_stats(np.zeros(0, np.float32)) == ValueStats(None, None, 0)
    assert value_stats(np.full(3, SENTINEL_FILL, np.float32)).peak == 0.0
    assert value_stats(np.arange(3)) == ValueStats(None, None, 0)  # not a float value


def test_stats_computed_in_the_session_equal_numpy_on_every_value() -> None:
    model = _awkward_values()
    stats = run_value_stats(model, [_sample()])
    assert stats == _numpy_stats(model, [_sample()])
    x = _sample()["x"].astype(np.float64)
    assert stats["broken"] == ValueStats(-7.0, 1.5, 2)  # -2.5, NaN, 1.5, inf, -7, 0.25
    assert stats["masked"] == ValueStats(-2.5, 3e5, 0)  # the two sentinels left out
    assert stats["all_sentinel"] == ValueStats(None, None, 0)
    assert stats["empty"] == ValueStats(None, None, 0)
    assert stats["wide_twice"] == ValueStats(2 * x.min(), 2 * x.max(), 0)
    assert stats["total"] == ValueStats(float(np.float32(x.sum())), float(np.float32(x.sum())), 0)
    assert stats["half_relu"] == ValueStats(0.0, 1.5, 1)  # 3e5 is inf in float16


def test_stats_over_several_samples_join_each_samples_numbers() -> None:
    model = _awkward_values()
    samples = [_sample(), _sample(-2.0), _sample(0.5)]
    stats = run_value_stats(model, samples)
    assert stats == _numpy_stats(model, samples)
    assert stats["broken"].nonfinite == 6


@pytest.mark.parametrize("opset", [9, 11])
def test_old_opsets_get_the_same_numbers(opset: int) -> None:
    nodes = [
        oh.make_node("Relu", ["x"], ["r"], name="r"),
        oh.make_node("Div", ["x", "r"], ["q"], name="q"),  # 0 / 0 and x / 0: NaN, -inf
        oh.make_node("Tanh", ["q"], ["y"], name="y"),
    ]
    model = make_model(nodes, [tensor("x", shape=[6])], [tensor("y", shape=[6])], opset=opset)
    stats = run_value_stats(model, [_sample()])
    assert stats == _numpy_stats(model, [_sample()])
    assert stats["q"].nonfinite == 3


def test_the_range_run_reports_each_step(caplog: pytest.LogCaptureFixture) -> None:
    heard: list[tuple[str, int, int]] = []
    with caplog.at_level(logging.INFO, logger="ampconfig.runner.intermediates"):
        run_value_stats(_awkward_values(), [_sample(), _sample(2.0)], progress=lambda *step: heard.append(step))
    assert {label for label, _, _ in heard} == {"ranges: fp32 values"}
    assert heard[0][1] == 0 and heard[-1][1] == heard[-1][2]
    assert [done for _, done, _ in heard] == list(range(len(heard)))
    assert heard[-1][2] == 2 + 2 + 2 + 2  # copy and session, twice (NaN and sentinels: exact numbers), 2 samples each
    messages = [record.getMessage() for record in caplog.records]
    assert any("ONNX Runtime session" in message for message in messages)
    assert any("exact ranges of" in message for message in messages)
    assert "done in" in messages[-1]
