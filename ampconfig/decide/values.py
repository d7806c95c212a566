"""Decisions that know the values (docs/design.md §5): a node stays float32 when the low type cannot hold what it
reads or writes.

Two rules, both hard verdicts decided before any painting:

- **value_out_of_range**: a node whose compute-dtype input is a constant (an initializer or a Constant) with
  finite values beyond the low type's range keeps float32, so that constant keeps its values (a BatchNormalization
  running variance of 9.8e7 clamped to float16's 65504 breaks a detector). Exceptions: the user asked for clamping
  (``clamp_values``: each clamp is then a warning naming the tensor, the count and the largest value), and
  **sentinels**: values at float32's own extremes (|x| >= :data:`SENTINEL`, such as ``torch.finfo(float32).min``
  in an attention mask) stand for infinity, which the low type's largest value stands for just as well; they are
  saturated, with a warning, and decide nothing.
- **range_exceeds**: a node whose float inputs or outputs reached beyond the **margin** on data the float32 model
  ran on (:class:`ValueRanges`: run, tune, compare, explain --range-check or --data record them) keeps float32.
  The margin leaves room for data the calibration did not see; its default is :data:`DEFAULT_MARGIN_FRACTION` of
  the low type's largest value (``benchmarks/value_margin.py``: a detector calibrated on scenes met document
  pages whose stem convolution reached 1.6x the calibration peak; half of float16's range holds it, three
  quarters did not). Sentinel values flowing through activations (a mask's -3.4e38 after a Where) are not
  ranges: they are left out of the peaks.

Pure: arrays and numbers in, findings out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ampconfig.dtypes import Dtype
from ampconfig.settings.values import DEFAULT_MARGIN_FRACTION, LOW_MAX, default_margin

if TYPE_CHECKING:
    import numpy as np

#: |x| at or beyond this is float32's own extreme (its largest is 3.4e38): a stand-in for infinity, not a value.
SENTINEL = 1e38


def low_max(dtype: Dtype | str) -> float:
    """The largest finite value of a low dtype (65504 for float16, about 3.39e38 for bfloat16)."""
    return LOW_MAX[str(Dtype(dtype))]


def value_key(scope: str, name: str) -> str:
    """How value ranges name a value: its own name in the main graph, ``<scope path>/<name>`` inside a body."""
    return f"{scope}/{name}" if scope else name


def peak(array: np.ndarray) -> float:
    """The largest finite |value| below :data:`SENTINEL` (0 for an empty, non-float or all-sentinel array)."""
    import numpy as np

    values = np.asarray(array)
    if values.dtype.kind != "f" and values.dtype.name != "bfloat16":
        return 0.0
    magnitudes = np.abs(values.astype(np.float64, copy=False)).ravel()
    magnitudes = magnitudes[np.isfinite(magnitudes) & (magnitudes < SENTINEL)]
    return float(magnitudes.max()) if magnitudes.size else 0.0


@dataclass(frozen=True)
class OutOfRange:
    """A constant's finite values beyond a low dtype's range: how many, the largest |value|, and whether every one
    of them is a sentinel (:data:`SENTINEL`)."""

    count: int
    largest: float
    sentinel: bool


@dataclass(frozen=True)
class Bounds:
    """The smallest and largest element of a float array (NaN where it holds a NaN). The values check finds them
    for each large constant it reads and keeps them, so the float16 conversion, which reads the constant again to
    convert it, knows without a second look whether anything there lies beyond the low type's range."""

    low: float
    high: float

    def within(self, limit: float) -> bool:
        """Whether every element is finite and within [-limit, limit] (false where one is NaN)."""
        return self.high <= limit and self.low >= -limit


def bounds(array: np.ndarray) -> Bounds | None:
    """The :class:`Bounds` of a float array; None for an empty or non-float one."""
    import numpy as np

    values = np.asarray(array)
    if values.size == 0 or values.dtype.kind != "f":
        return None
    return Bounds(float(values.min()), float(values.max()))


def out_of_range(array: np.ndarray, dtype: Dtype | str, known: Bounds | None = None) -> OutOfRange | None:
    """What of ``array`` (a float constant) lies beyond ``dtype``'s range; None when everything fits. Its bounds
    first (``known`` where they were found already), so the common case allocates nothing."""
    import numpy as np

    values = np.asarray(array)
    if values.size == 0 or values.dtype.kind != "f":
        return None
    limit = low_max(dtype)
    found = known if known is not None else bounds(values)
    if found is None or found.within(limit):
        return None
    with np.errstate(invalid="ignore"):
        magnitudes = np.abs(values.astype(np.float64, copy=False))
        over = np.isfinite(magnitudes) & (magnitudes > limit)
    if not over.any():
        return None
    beyond = magnitudes[over]
    return OutOfRange(int(beyond.size), float(beyond.max()), bool((beyond >= SENTINEL).all()))


#: Arrays up to this many elements are looked at together by :func:`out_of_range_each` (larger ones alone: not
#: copied).
JOINED_ELEMENTS = 1 << 14


def out_of_range_each(arrays: Sequence[np.ndarray], dtype: Dtype | str) -> list[OutOfRange | None]:
    """:func:`out_of_range` of each array. For small arrays that all fit (the common case) that shows in two
    reductions over all of them together, not two per array: a graph's thousands of small weights."""
    import numpy as np

    values = [np.asarray(array) for array in arrays]
    small = [i for i, each in enumerate(values) if 0 < each.size <= JOINED_ELEMENTS and each.dtype.kind == "f"]
    fit: set[int] = set()
    if small:
        joined = np.concatenate([values[i].reshape(-1) for i in small])  # float16 < 32 < 64: values kept exactly
        limit = low_max(dtype)
        if joined.max() <= limit and joined.min() >= -limit:  # false with a NaN: each array is looked at then
            fit = set(small)
    return [None if i in fit else out_of_range(each, dtype) for i, each in enumerate(values)]


@dataclass(frozen=True)
class ValueRanges:
    """The largest finite |value| (sentinels left out) of each float value, by key (:func:`value_key`), seen by
    float32 runs on ``source`` (the data, named), and the margin the range rule keeps values within (None: the
    default, :func:`default_margin` of the low dtype)."""

    peaks: Mapping[str, float]
    source: str
    margin: float | None = None
    #: where they came from, for a lock to record: the ranges file (path as given) and its SHA-256, or the digest
    #: of the data a command ran the float32 model on
    file: str | None = None
    file_sha256: str | None = None
    data_sha256: str | None = None

    def margin_for(self, dtype: Dtype | str) -> float:
        return self.margin if self.margin is not None else default_margin(str(Dtype(dtype)))

    def describe_margin(self, dtype: Dtype | str) -> str:
        margin = self.margin_for(dtype)
        if self.margin is None:
            return f"margin {margin:.6g}, {DEFAULT_MARGIN_FRACTION:g} of {dtype}'s {low_max(dtype):.6g}"
        return f"margin {margin:.6g} (--data-max)"

    def exceeding(self, key: str, dtype: Dtype | str) -> float | None:
        """The peak of ``key`` when it is beyond the margin, else None."""
        value = self.peaks.get(key)
        return value if value is not None and value > self.margin_for(dtype) else None

    def beyond_margin(self, dtype: Dtype | str) -> dict[str, float]:
        """Every value whose peak is beyond the margin, by key: all the range rule reads (a value within the margin
        decides nothing), so a decision made with only these equals one made with every peak."""
        margin = self.margin_for(dtype)
        return {key: value for key, value in self.peaks.items() if value > margin}
