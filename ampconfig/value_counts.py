"""The numbers a calibration keeps of each float value: its bounds without sentinels and non-finite elements, its
NaN and infinite elements, its zeros and the binary exponent histogram of its finite non-zero elements.

Pure NumPy and at the ground of the house (docs/design.md §10), so the ONNX Runtime worker
(:mod:`ampconfig.worker.server`) counts a run's values where the arrays are, without importing decide/; the
decisions read the same numbers as :class:`~ampconfig.decide.value_ranges.ValueStats`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np

#: |x| at or beyond this is float32's own extreme (its largest is 3.4e38): a stand-in for infinity, not a value.
SENTINEL = 1e38

#: float32's binary exponents: its smallest subnormal is 2^-149, its largest finite value lies below 2^128. An
#: exponent histogram has one bin per exponent between them (a float64 value beyond them counts at the nearest end).
EXPONENT_MIN, EXPONENT_MAX = -149, 127

#: Values up to this many elements are counted together by :func:`segment_counts` (a few numpy calls for all of
#: them); larger ones one at a time, where the calls cost nothing beside the elements.
SMALL_VALUE = 1 << 14


class Counts(NamedTuple):
    """One value's numbers, in :class:`~ampconfig.decide.value_ranges.ValueStats`'s order: the lowest and highest
    element with sentinels and non-finite elements left out (None when none is left), the NaN and infinite elements,
    the zeros, the exponent histogram of the finite non-zero elements (sentinels included), ascending, and how many
    of those are sentinels (``|x| >= SENTINEL``: what the histogram may hold above the largest magnitude)."""

    minimum: float | None
    maximum: float | None
    nonfinite: int
    zeros: int
    exponents: dict[int, int]
    sentinels: int = 0


def joined_counts(first: Counts, second: Counts) -> Counts:
    """The numbers of both arrays' elements together (two samples or two chunks of one value): exact, in any
    order."""
    exponents = dict(first.exponents)
    for exponent, count in second.exponents.items():
        exponents[exponent] = exponents.get(exponent, 0) + count
    return Counts(
        _joined(min, first.minimum, second.minimum),
        _joined(max, first.maximum, second.maximum),
        first.nonfinite + second.nonfinite,
        first.zeros + second.zeros,
        dict(sorted(exponents.items())),
        first.sentinels + second.sentinels,
    )


def _joined(pick: Callable[[float, float], float], first: float | None, second: float | None) -> float | None:
    if first is None or second is None:
        return second if first is None else first
    return pick(first, second)


def is_float(array: np.ndarray) -> bool:
    """Whether an array holds floats (NumPy's, or ml_dtypes' bfloat16)."""
    return bool(array.dtype.kind == "f" or array.dtype.name == "bfloat16")


def value_counts(array: np.ndarray) -> Counts | None:
    """The :class:`Counts` of one array (None for a non-float one). float16 and bfloat16 are read as float32
    (exactly); float32 in a few passes over its bits (:func:`_float32_exponents`), float64 through ``frexp``."""
    import numpy as np

    values = np.asarray(array)
    if not is_float(values):
        return None
    if values.dtype != np.float64:
        values = values.astype(np.float32, copy=False)
    flat = np.ascontiguousarray(values).reshape(-1)
    if flat.dtype == np.float32:
        zeros, nonfinite, exponents, large = _float32_exponents(flat)
    else:
        zeros, nonfinite, exponents, large = _float64_exponents(flat)
    kept = flat
    if nonfinite or large:  # only then can an element be NaN, infinite or a sentinel
        with np.errstate(invalid="ignore"):
            kept = flat[np.abs(flat) < SENTINEL]
    sentinels = flat.size - kept.size - nonfinite
    if not kept.size:
        return Counts(None, None, nonfinite, zeros, exponents, sentinels)
    return Counts(float(kept.min()), float(kept.max()), nonfinite, zeros, exponents, sentinels)


def segment_counts(joined: np.ndarray, sizes: Sequence[int]) -> list[Counts]:
    """:func:`value_counts` of each of the values that lie one after another in ``joined`` (flat; float32 or
    float64), ``sizes`` elements each: equal to calling it on each slice, in a few numpy calls for all the small
    values (a graph's thousands of small values would otherwise cost more in calls than in elements)."""
    import numpy as np

    flat = np.ascontiguousarray(np.ravel(joined))
    starts = np.concatenate([[0], np.cumsum(np.asarray(sizes, np.int64))])
    found: list[Counts | None] = [None] * len(sizes)
    small = [i for i, size in enumerate(sizes) if 0 < size <= SMALL_VALUE] if flat.dtype == np.float32 else []
    if small:
        _small_float32_counts(flat, starts, small, found)
    counted: list[Counts] = []
    for i, each in enumerate(found):
        if each is None:
            each = value_counts(flat[starts[i] : starts[i + 1]])
            assert each is not None  # a slice of a float array
        counted.append(each)
    return counted


def _small_float32_counts(
    flat: np.ndarray, starts: np.ndarray, chosen: Sequence[int], found: list[Counts | None]
) -> None:
    """The :class:`Counts` of the small float32 values ``chosen`` (indices into ``starts``), all at once: one
    ``bincount`` of (value, exponent field) pairs, zeros by value, bounds by ``reduceat``. A value holding NaN,
    infinity, a magnitude of 2^126 or more (a sentinel may be among them) or a subnormal is left to
    :func:`value_counts`."""
    import numpy as np

    index = np.asarray(chosen, np.int64)
    begins, ends = starts[index], starts[index + 1]
    lengths = ends - begins
    # every chosen value's elements, one after another, and which value each belongs to
    picked = np.concatenate([flat[begin:end] for begin, end in zip(begins.tolist(), ends.tolist(), strict=True)])
    owner = np.repeat(np.arange(len(index), dtype=np.int64), lengths)
    fields = (picked.view(np.uint32) >> 23) & 0xFF
    counts = np.bincount(owner * 256 + fields, minlength=len(index) * 256).reshape(len(index), 256)
    zeros = np.bincount(owner[picked == 0], minlength=len(index))
    subnormal = counts[:, 0] > zeros  # non-zero elements with exponent field 0
    awkward = subnormal | (counts[:, 253:].sum(axis=1) > 0)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    lows, highs = np.minimum.reduceat(picked, offsets), np.maximum.reduceat(picked, offsets)
    for row, value in enumerate(index.tolist()):
        if awkward[row]:
            continue  # value_counts, one at a time
        present = np.flatnonzero(counts[row, 1:253]) + 1
        exponents = {int(field) - 127: int(counts[row, field]) for field in present}
        found[value] = Counts(float(lows[row]), float(highs[row]), 0, int(zeros[row]), exponents)


def float_counts(arrays: Mapping[str, np.ndarray]) -> dict[str, Counts]:
    """The :class:`Counts` of every float array, by key: the small float32 ones (float16 and bfloat16 read as
    float32) joined and counted together, the rest one by one; as :func:`value_counts` of each."""
    import numpy as np

    small: dict[str, np.ndarray] = {}
    found: dict[str, Counts] = {}
    for key, array in arrays.items():
        values = np.asarray(array)
        if not is_float(values):
            continue
        if values.dtype != np.float64 and values.size <= SMALL_VALUE:
            small[key] = values.astype(np.float32, copy=False).reshape(-1)
        else:
            counted = value_counts(values)
            assert counted is not None  # a float array
            found[key] = counted
    if small:
        joined = np.concatenate(list(small.values()))
        found.update(zip(small, segment_counts(joined, [each.size for each in small.values()]), strict=True))
    return {key: found[key] for key in arrays if key in found}


def exponent_fields(flat: np.ndarray) -> np.ndarray:
    """How many elements of a contiguous float32 array have each of the 256 exponent fields (the sign ignored).

    ``bincount`` costs about 5 ns an element when consecutive elements fall in the same few bins (an activation's
    elements mostly do): every count waits for the one before. So the fields, one byte each, are counted in pairs
    (each two neighbours one 16-bit number, 65,536 bins): half the elements, few repeats, and the pair table's
    row and column sums give every field's count (whatever the byte order)."""
    import numpy as np

    fields = (flat.view(np.uint32) >> 23).astype(np.uint8)  # the sign bit falls off the byte
    even = fields.size - fields.size % 2
    pairs = np.bincount(fields[:even].view(np.uint16), minlength=1 << 16).reshape(256, 256)
    counts: np.ndarray = pairs.sum(axis=0) + pairs.sum(axis=1)
    if even < fields.size:
        counts[fields[-1]] += 1
    return counts


def _float32_exponents(flat: np.ndarray) -> tuple[int, int, dict[int, int], bool]:
    """Zeros, NaN and infinities, the exponent histogram and whether any magnitude reaches 2^126 (a sentinel may
    be among them), of a contiguous float32 array: the exponent fields counted (:func:`exponent_fields`), a normal
    element's exponent its field less 127; subnormals (field 0, not zero; rare) read again through ``frexp``,
    exactly (each is a normal float64)."""
    import numpy as np

    by_field = exponent_fields(flat)
    exponents: dict[int, int] = {}
    zeros = int(np.count_nonzero(flat == 0)) if by_field[0] else 0  # a zero's field is 0: none, no zeros
    if by_field[0] > zeros:
        tiny = flat[((flat.view(np.uint32) & 0x7F800000) == 0) & (flat != 0)]
        _, power = np.frexp(tiny.astype(np.float64))
        found, found_counts = np.unique(power - 1, return_counts=True)
        exponents.update(zip(found.tolist(), found_counts.tolist(), strict=True))
    for exponent_field in np.flatnonzero(by_field[1:255]) + 1:
        exponents[int(exponent_field) - 127] = int(by_field[exponent_field])
    return zeros, int(by_field[255]), dict(sorted(exponents.items())), bool(by_field[253] or by_field[254])


def _float64_exponents(flat: np.ndarray) -> tuple[int, int, dict[int, int], bool]:
    """:func:`_float32_exponents` of a float64 array, through ``frexp``; exponents beyond float32's count at its
    ends."""
    import numpy as np

    finite = np.isfinite(flat)
    nonfinite = int(flat.size - np.count_nonzero(finite))
    nonzero = flat[finite & (flat != 0)]
    zeros = int(np.count_nonzero(flat == 0))
    _, power = np.frexp(nonzero)
    found, counts = np.unique(np.clip(power - 1, EXPONENT_MIN, EXPONENT_MAX), return_counts=True)
    large = bool(nonzero.size and np.abs(nonzero).max() >= 2.0**126)
    return zeros, nonfinite, dict(zip(found.tolist(), counts.tolist(), strict=True)), large
