"""Latency: warm-up runs, then timed runs; median and p90 in milliseconds.

The runs themselves are timed in the worker, next to their session (:func:`ampconfig.worker.timed.timed_runs`,
where ``progress``, the CLI's progress bar hook, is described).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ampconfig.documents.numeric_limits import MAX_ITERATIONS, MAX_WARMUP, check_count
from ampconfig.worker.timed import ProgressCallback as ProgressCallback  # re-exported: what callers pass
from ampconfig.worker.timed import timed_runs


@dataclass(frozen=True)
class Latency:
    median_ms: float
    p90_ms: float
    min_ms: float
    iterations: int
    warmup: int

    def to_dict(self) -> dict[str, float | int]:
        return {
            "median": round(self.median_ms, 4),
            "p90": round(self.p90_ms, 4),
            "min": round(self.min_ms, 4),
            "iterations": self.iterations,
            "warmup": self.warmup,
        }


def check_counts(warmup: int, iterations: int) -> None:
    check_count(warmup, "--warmup", 0, MAX_WARMUP)
    check_count(iterations, "--iterations", 1, MAX_ITERATIONS)


def summarize(samples_ms: list[float], warmup: int) -> Latency:
    """Median, p90 (linear interpolation) and minimum of the timed samples."""
    values = np.asarray(samples_ms, dtype=np.float64)
    return Latency(
        median_ms=float(np.median(values)),
        p90_ms=float(np.percentile(values, 90)),
        min_ms=float(values.min()),
        iterations=len(samples_ms),
        warmup=warmup,
    )


def measure(
    step: Callable[[], object],
    *,
    warmup: int,
    iterations: int,
    label: str = "timing",
    progress: ProgressCallback | None = None,
) -> Latency:
    """Run ``step`` ``warmup`` times untimed, then ``iterations`` times timed (``step`` blocks until done)."""
    check_counts(warmup, iterations)
    return summarize(timed_runs(step, warmup=warmup, iterations=iterations, label=label, progress=progress), warmup)


def speedup(reference: Latency, candidate: Latency) -> float | None:
    """Reference median over candidate median (> 1 means the candidate is faster)."""
    if candidate.median_ms <= 0:
        return None
    return reference.median_ms / candidate.median_ms
