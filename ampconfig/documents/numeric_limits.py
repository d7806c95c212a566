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
