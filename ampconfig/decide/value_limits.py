"""The low dtypes' limits and the value ranges a model reached (:class:`ValueRanges`), which the value decisions
(:mod:`ampconfig.decide.value_ranges`, :mod:`ampconfig.decide.passes.keep_in_range`) read and the rewrite's
options carry (:mod:`ampconfig.decide.rewrite_options`). The settings check a margin the user gives against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ampconfig.documents.numeric_limits import is_positive_finite
from ampconfig.dtypes import Dtype
from ampconfig.errors import AmpconfigError

#: The largest finite value of each low dtype.
LOW_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}
#: The default margin of the range rule, as a fraction of the low type's largest finite value (the measurement
#: behind it: ampconfig.decide.value_ranges).
DEFAULT_MARGIN_FRACTION = 0.5


#: A value whose finite non-zero magnitudes lie below the low type's smallest normal value in more than this share
#: (its subnormals, and what it rounds to zero) keeps float32 on every edge (rule range_underflows; the measurement
#: behind it: ampconfig.decide.value_ranges).
UNDERFLOW_SHARE = 0.5
#: Per low dtype: the binary exponent of its smallest normal value, and the largest exponent all of whose magnitudes
#: it rounds to zero (float16: subnormals are multiples of 2^-24, so |x| < 2^-25 rounds to 0; bfloat16 keeps
#: float32's exponents, its subnormals multiples of 2^-133).
LOW_EXPONENTS = {"float16": (-14, -26), "bfloat16": (-126, -135)}
#: Per low dtype: its explicit mantissa bits (its unit roundoff is 2^-(bits + 1); its subnormals are multiples of
#: 2^(normal exponent - bits)).
LOW_MANTISSA_BITS = {"float16": 10, "bfloat16": 7}
#: A value on a path into a log-domain reader (a Log, a divisor, a Reciprocal, a negative Pow, an Rsqrt:
#: :mod:`ampconfig.decide.log_domain`) whose typical element would err by more than this in the low type
#: (:func:`typical_error`) keeps float32 on that path, whatever its share below the normal range (rule
#: log_domain_precision). One threshold for every reader kind: each turns an element's relative error into an
#: error of its own output of the same size (a Log: that absolute error; a divisor: that relative error).
#: ``benchmarks/log_domain_error.py`` (600 random float16 filter banks read by a Log, binned by this estimate): the
#: normalised log spectrum's median error stays within half the default run tolerance (5e-3) in every bin up to 3e-3
#: (2.2e-3, 3.0e-3, 4.3e-3) and passes it beyond (6.1e-3 between 3e-3 and 5e-3, 1.0e-2 up to 1e-2).
LOG_DOMAIN_ERROR = 3e-3


def default_margin(low_dtype: str) -> float:
    return DEFAULT_MARGIN_FRACTION * LOW_MAX[str(low_dtype)]


def check_margin(value: float | None, low_dtype: str, name: str = "--data-max") -> float | None:
    """``value`` when it is a usable margin for ``low_dtype`` (positive, at most the type's largest value): the one
    check of the margin, for the command line (``name``: the flag or the config key), the config and the API."""
    if value is None:
        return None
    limit = LOW_MAX[str(low_dtype)]
    hint = f"give a positive value up to {limit:.6g} (default {default_margin(low_dtype):.6g})"
    if not is_positive_finite(value):
        raise AmpconfigError(f"{name} must be a finite number greater than 0, got {value!r}", hint=hint)
    if value > limit:
        raise AmpconfigError(f"{name} {value:g} is out of range for {low_dtype}", hint=hint)
    return float(value)


def low_max(dtype: Dtype | str) -> float:
    """The largest finite value of a low dtype (65504 for float16, about 3.39e38 for bfloat16)."""
    return LOW_MAX[str(Dtype(dtype))]


@dataclass(frozen=True)
class ValueSpread:
    """How a float value's elements spread over the samples: its zeros, its NaN and infinite elements, and per
    binary exponent ``e`` (``2^e <= |x| < 2^(e+1)``) how many finite non-zero elements it had (sparse: only
    exponents that occur)."""

    zeros: int
    nonfinite: int
    exponents: Mapping[int, int]

    @property
    def nonzero(self) -> int:
        """Its finite non-zero elements."""
        return sum(self.exponents.values())

    def below(self, exponent: int) -> int:
        """How many finite non-zero elements had a magnitude below ``2^exponent``."""
        return sum(count for each, count in self.exponents.items() if each < exponent)


#: The share of a value's elements at or below its reference magnitude (:func:`typical_error`): its large elements,
#: not its peak alone (``benchmarks/log_domain_error.py``: the 90th percentile tracks the measured error of float16
#: filter banks best, 0.93 correlated in log and under by more than 3x in 5% of them; the median in 23%).
REFERENCE_QUANTILE = 0.9


def typical_error(
    spread: ValueSpread, dtype: str, root: int | None = None, *, quantile: float = REFERENCE_QUANTILE
) -> float | None:
    """The mean relative error of ``spread``'s finite non-zero elements in the low type (None without such an
    element), from its exponent histogram alone; at most 1 an element (rounded to zero).

    Without ``root``, the value's own rounding when it is stored in the low type: half the unit roundoff, or below
    the normal range half the subnormal spacing over the element's magnitude. With ``root``, what a low-type
    computation before it leaves: an absolute error of half a unit roundoff of the value's large elements
    (:data:`REFERENCE_QUANTILE`) in every element, over the element's magnitude, which a log-domain reader weighs as
    much as any other (a filter's quiet outputs come from cancelling loud terms). ``root`` 2 reads a power (a sum of
    squares) as the magnitude it is the square of, whose error that computation set. ``quantile``: where the large
    elements start (the benchmark compares others)."""
    total = spread.nonzero
    if not total:
        return None
    normal, _ = LOW_EXPONENTS[dtype]
    bits = LOW_MANTISSA_BITS[dtype]
    half_roundoff = 2.0 ** -(bits + 2)
    ordered = sorted(spread.exponents.items())
    reference, seen = ordered[-1][0], 0
    for exponent, count in ordered:
        seen += count
        if seen >= quantile * total:
            reference = exponent
            break
    error = 0.0
    for exponent, count in ordered:
        if root is None:  # the element's magnitude taken as 2^(e + 1/2), the middle of its octave
            each = max(half_roundoff, 2.0 ** (normal - bits - 1) / 2.0 ** (exponent + 0.5))
        else:
            each = half_roundoff * 2.0 ** ((reference - exponent) / root)
        error += count * min(1.0, each)
    return error / total


@dataclass(frozen=True)
class Underflow:
    """How a value's finite non-zero elements fall below a low type's normal range: ``below`` of ``nonzero`` do
    (its subnormals and what it rounds to zero), ``flushed`` of them it rounds to zero; ``zeros``: the value's own
    zeros in float32."""

    below: int
    flushed: int
    nonzero: int
    zeros: int

    @property
    def share(self) -> float:
        return self.below / self.nonzero

    @property
    def flushed_share(self) -> float:
        return self.flushed / self.nonzero


@dataclass(frozen=True)
class ValueRanges:
    """The largest finite |value| (sentinels left out) of each float value, by key
    (:func:`ampconfig.decide.value_ranges.value_key`), seen by float32 runs on ``source`` (the data, named), and the
    margin the range rule keeps values within (None: the default, :func:`default_margin` of the low dtype). Kept
    with the limits, since a :class:`~ampconfig.decide.measured_facts.MeasuredFacts` carries them."""

    peaks: Mapping[str, float]
    source: str
    margin: float | None = None
    #: where they came from, for a lock to record: the ranges file (path as given) and its SHA-256, or the digest
    #: of the data a command ran the float32 model on
    file: str | None = None
    file_sha256: str | None = None
    data_sha256: str | None = None
    #: by key, how each value's elements spread (what the underflow rule reads); absent where not measured (a
    #: version 1 ranges file, a version 1 lock)
    spreads: Mapping[str, ValueSpread] = field(default_factory=dict)
    #: what reading them found that a reader should know (a version 1 file: underflow and weights not judged)
    notes: tuple[str, ...] = ()

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

    def underflowing(self, key: str, dtype: Dtype | str) -> Underflow | None:
        """How ``key``'s elements fall below the low type's normal range, when more than :data:`UNDERFLOW_SHARE` of
        its finite non-zero magnitudes do (else None; None too for a value measured without a spread)."""
        found = self.underflow(key, dtype)
        return found if found is not None and found.share > UNDERFLOW_SHARE else None

    def underflow(self, key: str, dtype: Dtype | str) -> Underflow | None:
        """How ``key``'s elements fall below the low type's normal range (None for a value without a spread or
        without a finite non-zero element)."""
        spread = self.spreads.get(key)
        if spread is None or not spread.nonzero:
            return None
        normal, flushed = LOW_EXPONENTS[str(Dtype(dtype))]
        return Underflow(spread.below(normal), spread.below(flushed + 1), spread.nonzero, spread.zeros)

    def log_domain_error(self, key: str, dtype: Dtype | str, root: int | None = None) -> float | None:
        """:func:`typical_error` of ``key`` in the low type, when it exceeds :data:`LOG_DOMAIN_ERROR` (else None;
        None too for a value measured without a spread)."""
        spread = self.spreads.get(key)
        found = typical_error(spread, str(Dtype(dtype)), root) if spread is not None else None
        return found if found is not None and found > LOG_DOMAIN_ERROR else None

    def below_normal(self, dtype: Dtype | str) -> dict[str, ValueSpread]:
        """Every value whose spread can decide by underflow or by its precision, by key: more than
        :data:`UNDERFLOW_SHARE` below the low type's normal range, with elements it rounds to zero where float32 had
        none (what a Log or a divisor reading it decides by), or whose typical element errs by more than
        :data:`LOG_DOMAIN_ERROR` (what a log-domain reader decides by). With :meth:`beyond_margin`, all the value
        rules read: a decision made with only these equals one made with every value."""
        found = {}
        for key, spread in self.spreads.items():
            underflow = self.underflow(key, dtype)
            if underflow is None:
                continue
            if (
                underflow.share > UNDERFLOW_SHARE
                or (underflow.flushed and not spread.zeros)
                or any(self.log_domain_error(key, dtype, root) is not None for root in (None, 1, 2))
            ):
                found[key] = spread
        return found

    def beyond_margin(self, dtype: Dtype | str) -> dict[str, float]:
        """Every value whose peak is beyond the margin, by key: all the range rule reads (a value within the margin
        decides nothing), so a decision made with only these equals one made with every peak."""
        margin = self.margin_for(dtype)
        return {key: value for key, value in self.peaks.items() if value > margin}
