"""Pausing Python's cyclic garbage collector around whole-model graph work.

onnx-ir builds a few objects per node and value (a 25k-node graph: ~300k), all long-lived while a rewrite runs.
Each generation-2 collection walks all of them, and allocation-heavy passes trigger many: on a 25k-node graph the
collector took ~40% of the rewrite's time. Nothing of ours produces cyclic garbage worth collecting mid-rewrite,
so the collector is paused for the call and restored afterwards (the cycles left over, such as a discarded
graph's node <-> value links, are collected later as usual).
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block; leave it as it was found (a caller may have disabled it)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def with_gc_paused(function: Callable[P, R]) -> Callable[P, R]:
    """Decorator form of :func:`gc_paused`."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with gc_paused():
            return function(*args, **kwargs)

    return wrapper
