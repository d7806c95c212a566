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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ampconfig.dtypes import Dtype
from ampconfig.settings.limits import ValueRanges as ValueRanges
from ampconfig.settings.limits import low_max as low_max

if TYPE_CHECKING:
    import numpy as np

#: |x| at or beyond this is float32's own extreme (its largest is 3.4e38): a stand-in for infinity, not a value.
SENTINEL = 1e38


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
