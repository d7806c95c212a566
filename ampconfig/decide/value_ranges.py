"""Decisions that know the values (docs/design.md §5): a node stays float32 when the low type cannot hold what it
reads or writes.

Rules, all hard verdicts decided before any painting:

- **value_out_of_range**: a node whose compute-dtype input is a constant (an initializer or a Constant) with
  finite values beyond the low type's range keeps float32, so that constant keeps its values (a BatchNormalization
  running variance of 9.8e7 clamped to float16's 65504 breaks a detector). Exceptions: the user asked for clamping
  (``clamp_values``: each clamp is then a warning naming the tensor, the count and the largest value), and
  **sentinels**: values at float32's own extremes (|x| >= :data:`SENTINEL`, such as ``torch.finfo(float32).min``
  in an attention mask) stand for infinity, which the low type's largest value stands for just as well; they are
  saturated, with a warning, and decide nothing.
- **range_exceeds**: a node whose float inputs or outputs reached beyond the **margin** on data the float32 model
  ran on (:class:`~ampconfig.decide.value_limits.ValueRanges`: run, tune, compare, explain --range-check or --data
  record them) keeps float32. The margin leaves room for data the calibration did not see; its default is
  :data:`~ampconfig.decide.value_limits.DEFAULT_MARGIN_FRACTION` of the low type's largest value
  (``benchmarks/value_margin.py``: a detector calibrated on scenes met document pages whose stem convolution reached
  1.6x the calibration peak; half of float16's range holds it, three quarters did not). Sentinel values flowing
  through activations (a mask's -3.4e38 after a Where) are not ranges: they are left out of the peaks.
- **range_underflows**: a node reading or writing a value whose finite non-zero magnitudes lie below the low type's
  smallest normal value (float16: 2^-14; bfloat16 has float32's exponents) in more than
  :data:`~ampconfig.decide.value_limits.UNDERFLOW_SHARE` of its elements keeps float32, so the value's producer and
  every consumer compute it in float32 and no cast rounds it. One half (``benchmarks/underflow_share.py``): on
  log-normal magnitudes the median element keeps float16's ordinary rounding error (2.8e-4) up to a share of one
  half, is 3x worse at three quarters and 12x at nine tenths, while the relative L2 error, carried by the largest
  elements, stays near 2e-4 until 99.6% (a constant-Q front end passes with any share up to 0.75 and gives -inf
  at 0.95). And a Log, Reciprocal, divisor, Pow with a negative exponent, Sqrt or Rsqrt whose input the low type
  would round to zero where float32 had no zero keeps float32 with that input's producer: a few flushed elements
  turn into -inf or inf.
- **log_domain_precision**: a value on a path into a Log, a divisor, a Reciprocal, a negative Pow or an Rsqrt
  (:mod:`ampconfig.decide.log_domain`), which weigh every element alike, is judged by its typical element's error in
  the low type instead (:func:`~ampconfig.decide.value_limits.typical_error`, beyond
  :data:`~ampconfig.decide.value_limits.LOG_DOMAIN_ERROR`, ``benchmarks/log_domain_error.py``): the tests'
  constant-Q bank, whose filter outputs lie 45% and 28% below float16's normal range (under the share), missed
  rel-L2 1e-2 at 0.035 without it.

Pure: arrays and numbers in, findings out.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ampconfig.decide.value_limits import ValueSpread
from ampconfig.decide.value_limits import low_max as low_max
from ampconfig.dtypes import Dtype
from ampconfig.value_counts import SENTINEL as SENTINEL
from ampconfig.value_counts import SMALL_VALUE as SMALL_VALUE
from ampconfig.value_counts import Counts, float_counts, joined_counts, segment_counts, value_counts

if TYPE_CHECKING:
    import numpy as np


def value_key(key_path: str, name: str, main_names: Container[str] = ()) -> str:
    """How value ranges (and every debugging run) name a value: its own name in the main graph; inside a body, the
    body's key path (:func:`subgraph_key_path`) and its name, escaped as the path's parts are, joined by ``/``.

    Unique across scopes: parts are escaped, so no body key starts with an unescaped ``/``, and a body key that
    equals a name of the main graph (``main_names``: a value named ``<If node>.then_branch/t2`` beside the branch's
    ``t2``) gets a ``/`` in front until it does not."""
    if not key_path:
        return name
    key = f"{key_path}/{escape_key_part(name)}"
    while key in main_names:
        key = "/" + key
    return key


def escape_key_part(part: str) -> str:
    """A scope part or a name inside a body's key: ``\\`` and ``/`` escaped by a backslash."""
    return part.replace("\\", "\\\\").replace("/", "\\/")


def subgraph_key_path(parent: str, part: str) -> str:
    """The key path of a body: its parent's (empty for the main graph) and its own part (``<node>.<attribute>``,
    ``[i]`` for a list of graphs), escaped, joined by ``/``."""
    escaped = escape_key_part(part)
    return f"{parent}/{escaped}" if parent else escaped


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
class ValueStats:
    """What a float value held over the samples: its lowest and highest element with sentinels (:data:`SENTINEL`)
    and non-finite elements left out (None when no element is left: the value was empty, or every element a
    sentinel, NaN or infinite), its count of NaN and infinite elements, its count of zeros, and the binary exponent
    histogram of its finite non-zero elements (:class:`~ampconfig.decide.value_limits.ValueSpread`; sentinels
    included: they are finite)."""

    minimum: float | None
    maximum: float | None
    nonfinite: int = 0
    zeros: int = 0
    exponents: Mapping[int, int] = field(default_factory=dict)
    #: how many of the histogram's elements are sentinels (``|x| >= SENTINEL``)
    sentinels: int = 0

    @property
    def peak(self) -> float:
        """The largest finite |value| below the sentinel (0 when no element is left), as :func:`peak` computes it."""
        return max((abs(bound) for bound in (self.minimum, self.maximum) if bound is not None), default=0.0)

    @property
    def spread(self) -> ValueSpread:
        return ValueSpread(self.zeros, self.nonfinite, self.exponents)

    def joined(self, other: ValueStats) -> ValueStats:
        """The numbers of both values' elements together (two samples of one value): exact, in any order
        (:func:`~ampconfig.value_counts.joined_counts`)."""
        return ValueStats(*joined_counts(self.counts, other.counts))

    @property
    def counts(self) -> Counts:
        """The same numbers as :mod:`ampconfig.value_counts` gives them."""
        return Counts(self.minimum, self.maximum, self.nonfinite, self.zeros, dict(self.exponents), self.sentinels)


def value_stats(array: np.ndarray) -> ValueStats:
    """:class:`ValueStats` of one array (a non-float array has none: ``ValueStats(None, None)``), as
    :func:`~ampconfig.value_counts.value_counts` counts it."""
    counted = value_counts(array)
    return ValueStats(None, None) if counted is None else ValueStats(*counted)


def segment_stats(joined: np.ndarray, sizes: Sequence[int]) -> list[ValueStats]:
    """:func:`value_stats` of each of the values that lie one after another in ``joined`` (flat; float32 or
    float64), ``sizes`` elements each (:func:`~ampconfig.value_counts.segment_counts`: the small ones together)."""
    return [ValueStats(*counted) for counted in segment_counts(joined, sizes)]


def float_stats(arrays: Mapping[str, np.ndarray]) -> dict[str, ValueStats]:
    """The :class:`ValueStats` of every float array, by key, as :func:`value_stats` of each
    (:func:`~ampconfig.value_counts.float_counts`: small values together). The ONNX Runtime worker counts the
    same way where the arrays are (:mod:`ampconfig.worker.server`)."""
    return {key: ValueStats(*counted) for key, counted in float_counts(arrays).items()}


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


def joined_bounds(parts: Iterable[Bounds | None]) -> Bounds | None:
    """The bounds of an array from those of its parts (None for an empty part): a NaN in one part is the
    whole's, as in :func:`bounds`."""
    import numpy as np

    found = [part for part in parts if part is not None]
    if not found:
        return None
    lows = np.array([part.low for part in found])
    highs = np.array([part.high for part in found])
    return Bounds(float(lows.min()), float(highs.max()))


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
