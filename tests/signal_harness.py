"""The ``ampconfig`` command line with one test-only pause, so a test can send a signal at a known moment of a write
(``tests/cli/test_signals.py``). ``AMPCONFIG_TEST_PAUSE=MOMENT:MARKER``: at MOMENT the process writes the MARKER file
and sleeps until a signal ends it. MOMENT is ``staged`` (an output is complete in its staging folder, not yet moved
into place) or ``committed`` (the first file was just moved into place). Only the guard's timing is changed: the
command, the rewrite, onnx and ONNX Runtime run as they always do.

Usage: ``python tests/signal_harness.py rewrite m.onnx -o out.onnx``
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from ampconfig.files import guard

moment, _, marker = os.environ["AMPCONFIG_TEST_PAUSE"].partition(":")


def pause() -> None:
    if not getattr(pause, "done", False):
        pause.done = True  # type: ignore[attr-defined]
        Path(marker).write_text(str(os.getpid()), encoding="utf-8")
        time.sleep(600)  # a signal ends this


commit = guard.OutputGuard._commit
move = guard.OutputGuard._move


def commit_after_pause(self: guard.OutputGuard, *args: Any) -> None:
    if moment == "staged":
        pause()
    commit(self, *args)


def move_then_pause(self: guard.OutputGuard, *args: Any) -> None:
    move(self, *args)
    if moment == "committed":
        pause()


guard.OutputGuard._commit = commit_after_pause  # type: ignore[method-assign]
guard.OutputGuard._move = move_then_pause  # type: ignore[method-assign]

if __name__ == "__main__":
    from ampconfig.cli import main

    sys.argv = ["ampconfig", *sys.argv[1:]]
    main()
