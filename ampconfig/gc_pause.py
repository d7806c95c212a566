"""Pausing Python's cyclic garbage collector around whole-model graph work, where the caller owns the process.

onnx-ir builds a few objects per node and value, all long-lived while a rewrite runs. Each generation-2 collection
walks all of them, and allocation-heavy passes trigger many, so on node-heavy graphs the collector takes a large
share of a rewrite's time (``benchmarks/gc_pause.py``; the numbers are in docs/benchmarks.md, "The garbage
collector paused"). Nothing of ours produces cyclic garbage worth collecting mid-rewrite.

The collector is process-wide state, so no library function switches it: the command line pauses it around each
command but ``tune`` (the ``ampconfig`` process is ours; see :func:`ampconfig.cli.typer_app.command`), and library users
opt in with ``with ampconfig.gc_paused(): ...``. The cycles left over (a discarded graph's node <-> value links)
are collected after the block as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused(*, freeze_after: bool = False) -> Iterator[None]:
    """Disable the cyclic collector inside the block; leave it as it was found (a caller may have disabled it).

    Args:
        freeze_after: for a process that ends right after the block. Everything then in memory, garbage included,
            is moved out of the collector's reach (``gc.freeze``): a collection would free only what the exit
            frees, and the first one after the block, or the interpreter's at exit, walks every object the block
            allocated (a 25k-node graph's: 0.4-0.6 s on a 2-core machine).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze_after:
            gc.freeze()
        if was_enabled:
            gc.enable()
