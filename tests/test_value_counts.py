"""The ground's counting (ampconfig/value_counts.py), which the ONNX Runtime worker runs where the arrays are: every
number against a plain definition (Python's ``math.frexp``, one element at a time), on float32 arrays with zeros of
both signs, subnormals, NaN and infinities, sentinels, negative values, no element, odd and even sizes, and on
float16 and bfloat16 arrays read as float32."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from ampconfig.value_counts import SENTINEL, Counts, exponent_fields, float_counts, joined_counts, value_counts

#: float32 elements at every kind of edge (each subnormal exponent among them).
EDGES = np.array(
    [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 2.0**-149, -(2.0**-149), 3 * 2.0**-149, 2.0**-134, 2.0**-133]
    + [2.0**-127, 2.0**-126, -(2.0**-126) * 1.5, 6e-5, 2.0**-24, 1.0, -1.0, 65504.0, 2.0**126, 1e38, -3.4e38]
    + [1.1 * 2.0**exponent for exponent in range(-149, -126)],
    np.float32,
)


def defined(array: np.ndarray) -> Counts:
    """The numbers by their definition, one element at a time in Python (float64 holds every float32 exactly).
    Narrow floats are read as float32, so the sentinel is float32's nearest to it (9.9999997e37, itself one)."""
    values = np.asarray(array)
    sentinel = SENTINEL if values.dtype == np.float64 else float(np.float32(SENTINEL))
    elements = values.astype(np.float64).ravel().tolist()
    kept = [x for x in elements if math.isfinite(x) and abs(x) < sentinel]
    exponents: dict[int, int] = {}
    for x in elements:
        if math.isfinite(x) and x != 0:
            exponent = math.frexp(x)[1] - 1
            exponents[exponent] = exponents.get(exponent, 0) + 1
    return Counts(
        min(kept) if kept else None,
        max(kept) if kept else None,
        sum(1 for x in elements if not math.isfinite(x)),
        sum(1 for x in elements if x == 0),
        dict(sorted(exponents.items())),
        sum(1 for x in elements if math.isfinite(x) and abs(x) >= sentinel),
    )


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    spread = (rng.standard_normal(5001) * 10.0 ** rng.integers(-44, 38, 5001)).astype(np.float32)
    activation = np.maximum(rng.standard_normal(40_000), 0).astype(np.float32)  # half zeros, the rest near 1
    mixed = np.concatenate([EDGES, spread, -np.abs(spread), activation])
    rng.shuffle(mixed)
    return [EDGES, spread, -np.abs(spread), activation, mixed, mixed[:-1], np.zeros(0, np.float32), EDGES[:1]]


@pytest.mark.parametrize("index", range(len(_arrays())))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_the_numbers_equal_their_definition(index: int, dtype: type) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        array = _arrays()[index].astype(dtype)
    assert value_counts(array) == defined(array)


def test_every_field_is_counted_whatever_the_size() -> None:
    """The fields are counted two at a time: an odd last element, one element and none are counted too."""
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 2**32, 10_001, dtype=np.uint64).astype(np.uint32)
    for size in (0, 1, 2, 3, 10_000, 10_001):
        flat = bits[:size].view(np.float32)
        want = np.bincount((bits[:size] >> 23) & 0xFF, minlength=256)
        assert exponent_fields(flat).tolist() == want.tolist()


def test_float_counts_leaves_out_what_is_not_a_float_and_keeps_the_order() -> None:
    arrays = {"b": EDGES, "ints": np.arange(4), "a": EDGES[:3].astype(np.float64), "big": _arrays()[3]}
    counted = float_counts(arrays)
    assert list(counted) == ["b", "a", "big"]
    assert counted == {key: defined(arrays[key]) for key in counted}
    assert value_counts(np.arange(4)) is None


def test_counts_of_chunks_joined_are_the_counts_of_the_whole() -> None:
    """How the worker counts a large value a chunk at a time, and a calibration joins its samples."""
    whole = _arrays()[4]
    for size in (1, 1000, 4096, whole.size):
        chunks = [value_counts(whole[start : start + size]) for start in range(0, whole.size, size)]
        joined = chunks[0]
        for chunk in chunks[1:]:
            assert joined is not None and chunk is not None
            joined = joined_counts(joined, chunk)
        assert joined == value_counts(whole) == defined(whole)
    nothing = value_counts(np.full(3, np.nan, np.float32))
    assert nothing is not None and joined_counts(nothing, nothing) == Counts(None, None, 6, 0, {})
