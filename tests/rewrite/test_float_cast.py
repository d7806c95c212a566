"""ONNX Runtime's Cast kernel, in the worker, converts large weights exactly as numpy's astype would, and the main
process never imports onnxruntime for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from ampconfig.rewrite import float_cast
from ampconfig.rewrite.float_cast import MIN_ELEMENTS, float32_to_float16
from ampconfig.rewrite.tensors import HeldBytesTensor, numpy_float16, read_weights
from tests.fresh_process import command_in_fresh_process
from tests.worker_faults import fresh_worker, inject

__all__ = ["fresh_worker"]  # the fixture, used by name


EDGES = np.array(
    [
        *(0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e30, np.inf, -np.inf, np.nan, -np.nan),
        *(5.96e-8, 2.98e-8, 2.9802322e-08, 2.9802326e-08, 6.1e-5, 6.103515625e-05, 1e-45, -1e-45, 3.4e38),
    ],
    dtype=np.float32,
)


def _assert_same_as_numpy(values: np.ndarray) -> None:
    got = float32_to_float16(values)
    with np.errstate(over="ignore"):
        want = values.astype(np.float16)
    assert got.dtype == np.float16 and got.shape == values.shape
    got_bits, want_bits = got.view(np.uint16), want.view(np.uint16)
    # A NaN stays a NaN of the same sign; its payload may differ (ONNX Runtime writes the quiet NaN).
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got_bits[nan] >> 15, want_bits[nan] >> 15)
    assert np.array_equal(got_bits[~nan], want_bits[~nan])


def test_random_bit_patterns_match_numpy() -> None:
    bits = np.random.default_rng(0).integers(0, 1 << 32, size=1 << 21, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32).copy()
    values[: EDGES.size] = EDGES
    assert values.size >= MIN_ELEMENTS  # the ONNX Runtime path, not numpy's
    _assert_same_as_numpy(values)


def test_rounding_around_every_float16_value_matches_numpy() -> None:
    # Each float16 value, the midpoints between neighbours (ties to even) and one float32 step on each side.
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.sort(halves[np.isfinite(halves)].astype(np.float32))
    mids = (finite[:-1] + finite[1:]) / 2
    values = np.concatenate([finite, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)])
    _assert_same_as_numpy(values.astype(np.float32))


@pytest.mark.parametrize("shape", [(3, 5), (MIN_ELEMENTS * 2, 2), (0,), (2, 0, 4)])
def test_shapes_and_small_arrays(shape: tuple[int, ...]) -> None:
    values = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    _assert_same_as_numpy(values)


def test_non_contiguous_and_non_float32_input() -> None:
    values = np.random.default_rng(2).standard_normal((512, 512)).astype(np.float32)
    _assert_same_as_numpy(values.T)  # a transposed view: converted in its logical order
    doubles = np.random.default_rng(3).standard_normal(MIN_ELEMENTS * 2)
    np.testing.assert_array_equal(float32_to_float16(doubles), doubles.astype(np.float16))


# Rewrites one model through the Python API in a fresh interpreter and says whether onnxruntime was imported and
# how many sessions the worker built.
_API_PROBE = """
import sys
import numpy as np
from ampconfig.worker import client as worker
from onnx import TensorProto, helper, numpy_helper
import ampconfig

rows = int(sys.argv[1])
weight = numpy_helper.from_array(np.ones((rows, 4), np.float32), "w")
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
    "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    [weight],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
out = ampconfig.rewrite_model(model, "force_fp16")
assert numpy_helper.to_array(out.graph.initializer[0]).dtype == np.float16
built = worker._current.ask("count", {}, worker.Phase.RUN, "count")["built"] if worker._current else 0
print("onnxruntime" in sys.modules, built)
"""


@pytest.mark.parametrize("rows, sessions", [(MIN_ELEMENTS // 4, 1), (16, 0)])
def test_the_api_converts_large_weights_in_the_worker_by_default(rows: int, sessions: int) -> None:
    """The Python API and the commands share one encoder: ONNX Runtime's Cast kernel, in the worker, for a large
    weight (one session built there); a model whose weights are all small is rewritten without a worker. Neither
    imports onnxruntime in this process (on main the large weight imported it: ``True``)."""
    done = subprocess.run([sys.executable, "-c", _API_PROBE, str(rows)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", str(sessions)]


def test_rewrite_of_a_large_weight_model_never_imports_onnxruntime(tmp_path: Path) -> None:
    """``ampconfig rewrite`` converts a 512x512 weight to float16 through the worker (its log says so) and the
    command's own process never imports onnxruntime (on main it did: the Cast session ran in this process)."""
    weight = np.random.default_rng(5).standard_normal((512, 512)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
        "large_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = tmp_path / "large_weight.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), model)
    out = tmp_path / "out.onnx"
    outcome = command_in_fresh_process(tmp_path, "-v", "rewrite", model, "-o", out, "-m", "force_fp16")
    assert outcome["exit_code"] == 0, outcome["stderr"]
    assert "Cast kernel in the worker" in outcome["stderr"]
    assert "onnxruntime" not in outcome["modules"]
    written = numpy_helper.to_array(onnx.load(out).graph.initializer[0])
    assert written.dtype == np.float16
    assert np.array_equal(written.view(np.uint16), weight.astype(np.float16).view(np.uint16))


def test_a_worker_that_crashes_on_the_cast_leaves_the_conversion_to_numpy(
    fresh_worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNX Runtime dying in the worker while it builds the Cast session (an injected SIGSEGV) ends the worker, not
    the conversion: numpy converts, with the same bits (on main the Cast ran in this process, and such a crash
    ended it)."""
    monkeypatch.setattr(float_cast, "_cast", None)
    monkeypatch.setattr(float_cast, "_unavailable", False)
    inject(monkeypatch, "load:segv:any")
    values = np.random.default_rng(9).standard_normal(MIN_ELEMENTS * 2).astype(np.float32)
    _assert_same_as_numpy(values)
    assert float_cast._unavailable  # the worker's part ended; later weights go to numpy at once


def _bounds_of(values: np.ndarray) -> tuple[float, float]:
    return float(values.min()), float(values.max())


@pytest.mark.parametrize("elements", [MIN_ELEMENTS, float_cast.CHUNK_ELEMENTS + 12_345])
def test_the_bounded_read_gives_the_bounds_and_the_bits_of_two_reads(elements: int) -> None:
    """One pass over a weight (its bounds found as each piece is copied to the worker) gives what the two passes
    gave: numpy's min and max, and float32_to_float16's bits; across the shared file's chunks too."""
    values = np.random.default_rng(4).standard_normal(elements).astype(np.float32) * 100
    (read,) = float_cast.float16_within_all([lambda: values], 65504.0)
    assert read is not None
    known, converted = read
    assert known is not None and (known.low, known.high) == _bounds_of(values)
    assert converted is not None and converted.shape == values.shape
    assert np.array_equal(converted.view(np.uint16), values.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("spoiler", [1e6, -7e4, np.nan])
def test_the_bounded_read_converts_nothing_beyond_the_limit(spoiler: float) -> None:
    """A value beyond float16's range (or a NaN) in the last chunk: the bounds are still the whole array's, and no
    float16 array comes back (the conversion clamps and counts such a weight itself)."""
    values = np.random.default_rng(5).standard_normal(float_cast.CHUNK_ELEMENTS * 2 + 7).astype(np.float32)
    values[-3] = spoiler
    (read,) = float_cast.float16_within_all([lambda: values], 65504.0)
    assert read is not None
    known, converted = read
    assert converted is None and known is not None
    if np.isnan(spoiler):
        assert np.isnan(known.low) and np.isnan(known.high)
    else:
        assert (known.low, known.high) == _bounds_of(values)


def test_the_bounded_read_leaves_small_and_non_float32_arrays_to_the_caller() -> None:
    small, doubles = np.ones(MIN_ELEMENTS - 1, np.float32), np.ones(MIN_ELEMENTS * 2, np.float64)
    assert float_cast.float16_within_all([lambda: small, lambda: doubles], 65504.0) == [None, None]


def test_the_bounded_read_of_many_arrays_keeps_each_apart() -> None:
    """Arrays of one and several chunks in a row, one beyond the limit between them, and one left to the caller:
    each gets its own bounds and bits (the pipeline copies the next array while the worker converts this one)."""
    rng = np.random.default_rng(8)
    arrays = [
        rng.standard_normal(float_cast.CHUNK_ELEMENTS + 5).astype(np.float32),
        rng.standard_normal(MIN_ELEMENTS).astype(np.float32) * 1e5,  # beyond float16's range
        np.ones(3, np.float32),  # too small: the caller's
        rng.standard_normal((MIN_ELEMENTS // 8, 8)).astype(np.float32),
        rng.standard_normal(2 * float_cast.CHUNK_ELEMENTS).astype(np.float32),
    ]
    found = float_cast.float16_within_all([lambda array=array: array for array in arrays], 65504.0)
    assert found[2] is None
    for index, array in enumerate(arrays):
        if index == 2:
            continue
        read = found[index]
        assert read is not None
        known, converted = read
        assert known is not None and (known.low, known.high) == _bounds_of(array)
        if index == 1:
            assert converted is None
            continue
        assert converted is not None and converted.shape == array.shape
        assert np.array_equal(converted.view(np.uint16), array.astype(np.float16).view(np.uint16))


def test_a_converted_weight_hands_its_bytes_on_without_a_copy() -> None:
    """The worker's float16 array lies over a bytes object; the converted tensor's tobytes is that object (the
    API's output proto takes it as it is), and equals numpy's bytes. Any other array is serialised as before."""
    values = np.random.default_rng(6).standard_normal((MIN_ELEMENTS // 64, 64)).astype(np.float32)
    converted = float32_to_float16(values)
    tensor = HeldBytesTensor(converted, dtype=ir.DataType.FLOAT16)
    held = tensor.tobytes()
    assert held is tensor.tobytes()  # the same object each time: no copy
    assert held == values.astype(np.float16).tobytes()
    transposed = HeldBytesTensor(converted.T, dtype=ir.DataType.FLOAT16)  # not contiguous: serialised anew
    assert transposed.tobytes() == np.ascontiguousarray(values.astype(np.float16).T).tobytes()
    plain = HeldBytesTensor(values.astype(np.float16), dtype=ir.DataType.FLOAT16)
    assert plain.tobytes() == values.astype(np.float16).tobytes()


def test_a_weight_of_several_chunks_converted_for_a_file_is_one_array() -> None:
    """The encoder (a weight written to a file) fills one array chunk by chunk, with numpy's bits; the API's
    bounded read joins the chunks' bytes, which its output proto takes as they are."""
    values = np.random.default_rng(10).standard_normal((float_cast.CHUNK_ELEMENTS * 2 + 3,)).astype(np.float32)
    _assert_same_as_numpy(values)
    assert float32_to_float16(values).flags.writeable  # filled in place, not joined from (read-only) bytes
    (read,) = float_cast.float16_within_all([lambda: values], 65504.0)
    assert read is not None and read[1] is not None
    assert HeldBytesTensor(read[1], dtype=ir.DataType.FLOAT16).tobytes() == values.astype(np.float16).tobytes()


def test_without_the_worker_the_bounded_read_leaves_every_weight_to_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """No worker (no memfd, or it crashed before): the bounded read gives no answer, and the weights read ahead
    are those of the two reads, bounds then numpy's cast."""
    monkeypatch.setattr(float_cast, "_unavailable", True)
    values = np.random.default_rng(11).standard_normal((512, 512)).astype(np.float32)
    assert float_cast.float16_within_all([lambda: values], 65504.0) == [None]
    weight = ir.serde.deserialize_tensor(numpy_helper.from_array(values, "w"))
    reads = read_weights([weight], numpy_float16, float_cast.float16_within_all)
    known = reads.bounds[weight]
    assert (known.low, known.high) == _bounds_of(values)
    assert np.array_equal(reads.float16[weight].view(np.uint16), values.astype(np.float16).view(np.uint16))
