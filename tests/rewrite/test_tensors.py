"""Small float32 weights converted to float16 together (``TensorConverter.finish``) get the bits, clamping records
and order that converting each tensor at once gives."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import numpy_helper

from ampconfig.decide.value_ranges import bounds
from ampconfig.dtypes import Dtype
from ampconfig.rewrite.float_cast import float32_to_float16
from ampconfig.rewrite.results import ClampedTensor, RewriteStats
from ampconfig.rewrite.tensors import (
    LARGE_ARRAY_ELEMENTS,
    LAZY_CONVERSION_BYTES,
    TensorConverter,
    _bounds_over_threads,
    count_out_of_range,
    read_weights,
)

#: Zeros, signs, the float16 limits and just beyond (overflow: clamped), subnormal float16 results, float32's own
#: subnormals (flushed to zero in float16), NaN and the infinities.
EDGES = np.array(
    [
        *(0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e30, -3.4e38),
        *(5.96e-8, 2.98e-8, 2.9802322e-08, 2.9802326e-08, 6.1e-5, 6.103515625e-05, 1e-45, -1e-45),
    ],
    dtype=np.float32,
)


def _tensors(arrays: list[np.ndarray]) -> list[ir.Tensor]:
    return [ir.Tensor(array, name=f"w{index}") for index, array in enumerate(arrays)]


def _one_at_a_time(tensors: list[ir.Tensor], dtype: Dtype) -> tuple[list[np.ndarray], RewriteStats]:
    """Each tensor's own conversion (``convert_array``, what ``convert`` did per tensor before batching) and the
    records it makes."""
    stats = RewriteStats()
    converter = TensorConverter(stats, float32_to_float16)
    arrays = []
    for tensor in tensors:
        array, clamped = converter.convert_array(tensor.numpy(), dtype)
        if clamped.count:
            stats.values_clamped += clamped.count
            stats.clamped.append(
                ClampedTensor(tensor.name or "", dtype.value, clamped.count, clamped.largest, clamped.sentinel)
            )
        arrays.append(array)
    return arrays, stats


def _together(tensors: list[ir.Tensor], dtype: Dtype) -> tuple[list[np.ndarray], RewriteStats]:
    stats = RewriteStats()
    converter = TensorConverter(stats, float32_to_float16)
    converted = [converter.convert(tensor, dtype, tensor.name or "") for tensor in tensors]
    converter.finish()
    return [tensor.numpy() for tensor in converted], stats


def _assert_same(
    got: tuple[list[np.ndarray], RewriteStats], want: tuple[list[np.ndarray], RewriteStats], dtype: Dtype
) -> None:
    for got_array, want_array in zip(got[0], want[0], strict=True):
        assert got_array.dtype == want_array.dtype == dtype.numpy and got_array.shape == want_array.shape
        assert got_array.tobytes() == want_array.tobytes()  # bit for bit, NaN payloads included
    assert got[1].values_clamped == want[1].values_clamped
    assert got[1].clamped == want[1].clamped  # the same tensors, counts, largest values, in the same order


def _small_arrays(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [(16, 16), (3,), (), (0,), (2, 0, 5), (7, 1, 3), (LARGE_ARRAY_ELEMENTS - 1,)]
    return [(rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 5)).astype(np.float32) for shape in shapes]


def test_finite_in_range_values_are_converted_in_one_batch_with_the_same_bits() -> None:
    arrays = [*_small_arrays(0), np.resize(EDGES[np.abs(EDGES) <= 65504.0], (4, 3))]
    tensors = _tensors(arrays)
    together = _together(tensors, Dtype.FLOAT16)
    _assert_same(together, _one_at_a_time(tensors, Dtype.FLOAT16), Dtype.FLOAT16)
    assert together[1].values_clamped == 0


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf, 65520.0, -1e30])
def test_a_batch_with_an_inf_nan_or_overflow_gets_each_tensors_own_conversion(special: float) -> None:
    arrays = _small_arrays(1)
    arrays.insert(2, np.array([1.0, special, 2.5e-8, -3.0], dtype=np.float32))
    arrays.append(EDGES.reshape(2, -1).copy())  # overflowing values after the special tensor: a second record
    tensors = _tensors(arrays)
    together = _together(tensors, Dtype.FLOAT16)
    _assert_same(together, _one_at_a_time(tensors, Dtype.FLOAT16), Dtype.FLOAT16)
    assert [clamped.tensor for clamped in together[1].clamped][-1] == f"w{len(arrays) - 1}"


def test_records_keep_their_order_around_tensors_converted_at_once() -> None:
    """A bfloat16 conversion and a large (lazily converted) tensor are recorded when converted; the deferred
    float16 ones in between are recorded where they were converted, not after them."""
    large = np.full(LAZY_CONVERSION_BYTES // 4, 7e4, dtype=np.float32)  # clamped: every value beyond float16
    first, middle, last = (np.array([1e5, 1.0], dtype=np.float32) * scale for scale in (1.0, 2.0, 3.0))
    stats = RewriteStats()
    converter = TensorConverter(stats, float32_to_float16)
    converter.convert(ir.Tensor(first, name="first"), Dtype.FLOAT16, "first")
    converter.convert(ir.Tensor(np.array([1e38, 1.0], dtype=np.float32), name="bf"), Dtype.BFLOAT16, "bf")
    converter.convert(ir.Tensor(middle, name="middle"), Dtype.FLOAT16, "middle")
    lazy = converter.convert(ir.Tensor(large, name="large"), Dtype.FLOAT16, "large")
    converter.convert(ir.Tensor(last, name="last"), Dtype.FLOAT16, "last")
    assert stats.clamped == []  # nothing recorded before finish: the order is kept for it
    converter.finish()
    assert [clamped.tensor for clamped in stats.clamped] == ["first", "middle", "large", "last"]
    assert stats.values_clamped == 3 + large.size
    assert np.all(lazy.numpy() == np.float16(65504.0))


class _CountedReads(ir.Tensor):  # type: ignore[type-arg]
    """An in-memory tensor that counts how often its values are read."""

    def __init__(self, array: np.ndarray, name: str) -> None:
        super().__init__(array, name=name)
        self.reads = 0

    def numpy(self) -> np.ndarray:
        self.reads += 1
        return super().numpy()


def _large(special: float | None) -> np.ndarray:
    """A weight converted when written: the edges float16 holds, then ``special`` (None: nothing more)."""
    array = np.random.default_rng(5).standard_normal(LAZY_CONVERSION_BYTES // 4).astype(np.float32)
    held = EDGES[np.abs(EDGES) <= 65504.0]
    array[: held.size] = held
    if special is not None:
        array[held.size] = special
    return array


@pytest.mark.parametrize("dtype", [Dtype.FLOAT16, Dtype.BFLOAT16])
@pytest.mark.parametrize("special", [None, np.nan, np.inf, 65519.99, 7e4, -3.4e38])
def test_a_large_tensor_with_known_bounds_is_converted_with_one_read(dtype: Dtype, special: float | None) -> None:
    """The values check's bounds of a large weight tell its conversion whether anything lies beyond the low type's
    range: one within it is read once, when written (no count of out-of-range values before, no look for inf and
    NaN after the cast); one beyond it is counted as before. Bits and clamping records are those of a conversion
    without bounds."""
    array = _large(special)
    tensor = _CountedReads(array, "w")
    stats = RewriteStats()
    converter = TensorConverter(stats, float32_to_float16, {tensor: bounds(array)})
    converted = converter.convert(tensor, dtype, "w")
    converter.finish()
    reads_before_written = tensor.reads
    got = converted.numpy()
    if special is None or (dtype is Dtype.BFLOAT16 and abs(special) < 3e38):
        assert (reads_before_written, tensor.reads) == (0, 1)  # read once: when written
    want_array = converter.convert_array(array, dtype)[0]
    want = count_out_of_range(array, dtype)
    want_records = [ClampedTensor("w", dtype.value, want.count, want.largest, want.sentinel)] if want.count else []
    assert got.tobytes() == want_array.tobytes()  # bit for bit, clamped where beyond the range
    assert (stats.values_clamped, stats.clamped) == (want.count, want_records)


class _CountedProtoReads(ir.TensorProtoTensor):
    """A weight held in a protobuf message (each read a copy of its bytes) that counts how often it is read."""

    def __init__(self, array: np.ndarray, name: str) -> None:
        super().__init__(numpy_helper.from_array(array, name))
        self.reads = 0

    def numpy(self) -> np.ndarray:
        self.reads += 1
        return super().numpy()


@pytest.mark.parametrize("special", [None, np.nan, np.inf, 65519.99, 7e4, -3.4e38])
def test_a_weight_read_before_the_decision_is_converted_with_its_bits_and_no_second_read(special: float | None) -> None:
    """``read_weights`` reads each large float32 weight held in a protobuf message once: its bounds, and its
    float16 where it lies within float16's range, which the conversion then writes without reading the weight
    again. The bytes and clamping records are those of a conversion without it; a second write converts again.
    Smaller weights, other dtypes and weights already in memory are left to be read where used."""
    array = _large(special)
    weight = _CountedProtoReads(array, "w")
    others = [
        _CountedProtoReads(array[: LAZY_CONVERSION_BYTES // 8], "small"),
        _CountedProtoReads(np.ones(LAZY_CONVERSION_BYTES, np.float16), "half"),
        ir.Tensor(array, name="in_memory"),
    ]
    reads = read_weights([weight, *others, weight], float32_to_float16)
    within = special is None
    assert list(reads.bounds) == [weight] and repr(reads.bounds[weight]) == repr(bounds(array))  # NaN != NaN
    assert list(reads.float16) == ([weight] if within else [])
    assert [other.reads for other in others[:2]] == [0, 0]
    stats = RewriteStats()
    converter = TensorConverter(stats, float32_to_float16, reads.bounds, reads.float16)
    converted = converter.convert(weight, Dtype.FLOAT16, "w")
    converter.finish()
    got = converted.tobytes()
    if within:
        assert (weight.reads, reads.float16) == (1, {})  # read once, before the decision; the cast handed over
    want = count_out_of_range(array, Dtype.FLOAT16)
    want_bytes = TensorConverter(RewriteStats(), float32_to_float16).convert_array(array, Dtype.FLOAT16)[0].tobytes()
    want_records = [ClampedTensor("w", "float16", want.count, want.largest, want.sentinel)] if want.count else []
    assert got == want_bytes
    assert (stats.values_clamped, stats.clamped) == (want.count, want_records)
    assert converted.tobytes() == want_bytes  # written again: converted again, from the weight


@pytest.mark.parametrize("special", [None, np.nan, np.inf, -np.inf, 7e4, -3.4e38])
@pytest.mark.parametrize("where", [0, (1 << 20) - 1, 1 << 20, 3_500_000 - 1])
def test_bounds_over_threads_are_the_arrays_bounds(special: float | None, where: int) -> None:
    """The bounds of a weight read ahead, found a chunk per thread, are those of the whole array, wherever in
    which chunk its extreme or NaN lies."""
    array = np.random.default_rng(3).standard_normal(3_500_000).astype(np.float32)
    if special is not None:
        array[where] = special
    assert repr(_bounds_over_threads(array)) == repr(bounds(array))
    assert repr(_bounds_over_threads(array[:1000])) == repr(bounds(array[:1000]))
