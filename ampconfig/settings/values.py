"""Ranges of the numeric settings, shared by the command-line flags and the session config.

A threshold or tolerance of NaN, infinity, 0 or a negative number cannot mean what the user wants (NaN compares
false with everything, so it would silently pass or fail every check); a count of 10^20 runs for ever. Each is
refused with the flag's name or the config key's JSON path.
"""

from __future__ import annotations

import math

from ampconfig.errors import AmpconfigError

#: Untimed runs per model: more only heats the room.
MAX_WARMUP = 10_000
#: Timed runs per model.
MAX_ITERATIONS = 100_000
#: Model runs `tune` may spend.
MAX_TUNE_RUNS = 10_000
#: Generated inputs are drawn from a 32-bit seed: a larger seed would repeat a smaller one's values.
MAX_SEED = 2**32 - 1
#: Relative L2 error at which `compare` counts a node's output as bad (--threshold).
DEFAULT_THRESHOLD = 1e-2
#: The kinds of file `validate` checks (--kind).
FILE_KINDS: tuple[str, ...] = ("config", "mixlist", "keep-dtype", "customize-dtypes", "ops-info", "lock", "ranges")
#: The ``format`` of a precision lock file, which tells a lock from other JSON.
LOCK_FORMAT = "ampconfig-precision-lock"
#: The ``format`` of a value ranges file (:mod:`ampconfig.settings.ranges_file`).
RANGES_FORMAT = "ampconfig-value-ranges"


def is_positive_finite(value: float) -> bool:
    return math.isfinite(value) and value > 0


def check_positive_finite(value: float, name: str, example: str = "1e-2") -> float:
    """``value`` when it is a finite number greater than 0, else an AmpconfigError naming ``name``."""
    if not is_positive_finite(value):
        raise AmpconfigError(
            f"{name} must be a finite number greater than 0, got {value!r}", hint=f"for example {name} {example}"
        )
    return value


def check_count(value: int, name: str, low: int, high: int) -> int:
    """``value`` when ``low <= value <= high``, else an AmpconfigError naming ``name`` and the range."""
    if not low <= value <= high:
        raise AmpconfigError(f"{name} must be between {low} and {high:,}, got {value}")
    return value


#: The largest finite value of each low dtype.
LOW_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}
#: The default margin of the range rule, as a fraction of the low type's largest finite value (the measurement
#: behind it: ampconfig.decide.values).
DEFAULT_MARGIN_FRACTION = 0.5


def default_margin(low_dtype: str) -> float:
    return DEFAULT_MARGIN_FRACTION * LOW_MAX[str(low_dtype)]


def check_margin(value: float | None, low_dtype: str, name: str = "--data-max") -> float | None:
    """``value`` when it is a usable margin for ``low_dtype`` (positive, at most the type's largest value)."""
    if value is None:
        return None
    limit = LOW_MAX[str(low_dtype)]
    if not (math.isfinite(value) and 0 < value <= limit):
        raise AmpconfigError(
            f"{name} {value:g} is out of range for {low_dtype}",
            hint=f"give a positive value up to {limit:.6g} (default {default_margin(low_dtype):.6g})",
        )
    return float(value)
