"""The calibration's numbers (ranges, zeros, non-finite counts, exponent histograms) from the grouped run, against
numpy on every intermediate exposed alone, and the exponent histogram against Python's own ``math.frexp``."""

from __future__ import annotations

import logging
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.decide.value_ranges import SMALL_VALUE, segment_stats
from ampconfig.instrument.expose import expose_keys, float_value_keys
from ampconfig.runner.intermediates import (
    ValueStats,
    run_value_stats,
    value_bytes,
    value_parts,
    value_stats,
)
from ampconfig.runner.sessions import create_session, run_once
from tests.graphs import make_model, recursive_function_model, tensor

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
    """Every float value exposed as an output of its own (no groups), its numbers joined over the samples."""
    exposed = expose_keys(model, float_value_keys(model))
    session = create_session(exposed.model, "cpu")
    stats: dict[str, ValueStats] = {}
    for sample in samples:
        results = run_once(session, sample)
        arrays = {**sample, **{exposed.keys.get(name, name): array for name, array in results.items()}}
        for key, array in arrays.items():
            if np.asarray(array).dtype.kind == "f":
                found = value_stats(array)
                stats[key] = stats[key].joined(found) if key in stats else found
    return stats


def _frexp_histogram(array: np.ndarray) -> tuple[int, int, dict[int, int]]:
    """Zeros, non-finite elements and the exponent histogram, one element at a time in Python."""
    zeros = nonfinite = 0
    exponents: dict[int, int] = {}
    for element in np.asarray(array, np.float64).ravel().tolist():
        if not math.isfinite(element):
            nonfinite += 1
        elif element == 0:
            zeros += 1
        else:
            exponent = min(max(math.frexp(element)[1] - 1, -149), 127)
            exponents[exponent] = exponents.get(exponent, 0) + 1
    return zeros, nonfinite, dict(sorted(exponents.items()))


#: float32 elements at every kind of edge: zeros of both signs, NaN, infinities, the smallest subnormals, every
#: subnormal exponent, the normal range's ends, sentinels and float32's largest value.
EDGES = np.array(
    [0.0, -0.0, np.nan, np.inf, -np.inf, 2.0**-149, -(2.0**-149), 3 * 2.0**-149, 2.0**-134, 2.0**-133, 2.0**-127]
    + [2.0**-126, -(2.0**-126) * 1.5, 6e-5, 6.1e-5, 2.0**-25, 2.0**-24, 1.0, -1.0, 65504.0, 2.0**126, 1e38, -3.4e38]
    + [float(np.finfo(np.float32).max)]
    + [1.1 * 2.0**exponent for exponent in range(-149, -126)],
    np.float32,
)


def test_the_exponent_histogram_equals_frexp_at_every_edge() -> None:
    rng = np.random.default_rng(0)
    spread = (rng.standard_normal(4000) * 10.0 ** rng.integers(-45, 38, 4000)).astype(np.float32)
    half = np.clip(spread, -6e4, 6e4).astype(np.float16)
    for array in (EDGES, spread, np.concatenate([EDGES, spread]), EDGES.astype(np.float64), half):
        stats = value_stats(array)
        assert (stats.zeros, stats.nonfinite, dict(stats.exponents)) == _frexp_histogram(array)
        assert stats.zeros + stats.nonfinite + sum(stats.exponents.values()) == array.size
    wide = value_stats(np.array([1e-300, 1e300, 2.0**-1074], np.float64))
    assert wide.exponents == {-149: 2, 127: 1}  # float64 beyond float32's exponents counts at its ends


def test_many_values_at_once_equal_each_value_alone() -> None:
    rng = np.random.default_rng(1)
    parts = []
    for index in range(200):
        size = int(rng.integers(0, 40)) if index % 9 else SMALL_VALUE + int(rng.integers(1, 500))
        part = (rng.standard_normal(size) * 10.0 ** rng.integers(-30, 30)).astype(np.float32)
        if size and index % 4 == 0:
            part[0] = EDGES[index % EDGES.size]
        parts.append(part)
    joined = np.concatenate(parts)
    assert segment_stats(joined, [part.size for part in parts]) == [value_stats(part) for part in parts]
    assert segment_stats(joined.astype(np.float64), [part.size for part in parts]) == [
        value_stats(part.astype(np.float64)) for part in parts
    ]


def test_stats_computed_in_the_session_equal_numpy_on_every_value() -> None:
    model = _awkward_values()
    stats = run_value_stats(model, [_sample()])
    assert stats == _numpy_stats(model, [_sample()])
    x = _sample()["x"].astype(np.float64)

    def bounds(key: str) -> tuple[float | None, float | None, int]:
        return stats[key].minimum, stats[key].maximum, stats[key].nonfinite

    assert bounds("broken") == (-7.0, 1.5, 2)  # -2.5, NaN, 1.5, inf, -7, 0.25
    assert bounds("masked") == (-2.5, 3e5, 0)  # the two sentinels left out
    assert bounds("all_sentinel") == (None, None, 0) and stats["all_sentinel"].exponents == {127: 6}
    assert stats["empty"] == ValueStats(None, None, 0)
    assert bounds("wide_twice") == (2 * x.min(), 2 * x.max(), 0)
    assert bounds("total") == (float(np.float32(x.sum())), float(np.float32(x.sum())), 0)
    assert bounds("half_relu") == (0.0, 1.5, 1)  # 3e5 is inf in float16
    assert stats["plain"].zeros == 3 and stats["plain"].exponents == {-2: 1, 0: 1, 18: 1}


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
    assert heard[-1][2] == 2 + 2  # the copy and its session, then each sample: NaN and sentinels need no second run
    messages = [record.getMessage() for record in caplog.records]
    assert any("ONNX Runtime session" in message for message in messages)
    assert "done in" in messages[-1]


def test_a_model_measured_in_parts_gives_the_numbers_of_one_run() -> None:
    """A model whose values would not fit in memory together runs once per part: the same numbers."""
    model = _awkward_values()
    samples = [_sample(), _sample(-2.0)]
    keys = float_value_keys(model)
    sizes = value_bytes(model, samples[0])
    assert sizes["plain"] == 6 * 4 and sizes["wide_twice"] == 6 * 8 and sizes["total"] == 4
    parts = value_parts(model, keys, samples[0], budget=40)
    assert len(parts) > 3 and [key for part in parts for key in part] == keys
    assert run_value_stats(model, samples, memory_budget=40) == run_value_stats(model, samples)


def test_value_sizes_are_unknown_when_inference_fails_and_the_log_says_why(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="ampconfig.runner.intermediates"):
        sizes = value_bytes(recursive_function_model(), {"x": np.ones(2, np.float32)})
    assert sizes == {}
    assert any("no value's size is known" in r.message and "Cycle detected" in r.message for r in caplog.records)
