"""Timed runs: warm-up calls, then timed calls, each time in milliseconds (the server times a bound run with it, next
to its session). The counts are checked before a request is sent (:func:`ampconfig.runner.timing.check_counts`).

``progress`` is a hook the CLI uses for its progress bar: it is called as ``progress(label, done, total)``
after each run (warm-up runs count), and once with ``done == 0`` before the first.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: ``progress(label, done, total)``
ProgressCallback = Callable[[str, int, int], None]


def timed_runs(
    step: Callable[[], object],
    *,
    warmup: int,
    iterations: int,
    label: str = "timing",
    progress: ProgressCallback | None = None,
) -> list[float]:
    """The milliseconds of each of ``iterations`` timed calls of ``step``, after ``warmup`` untimed ones."""
    total = warmup + iterations
    if progress is not None:
        progress(label, 0, total)
    for done in range(1, warmup + 1):
        step()
        if progress is not None:
            progress(label, done, total)
    samples: list[float] = []
    for index in range(iterations):
        start = time.perf_counter_ns()
        step()
        samples.append((time.perf_counter_ns() - start) / 1e6)
        if progress is not None:
            progress(label, warmup + index + 1, total)
    return samples
