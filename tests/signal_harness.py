"""The ``ampconfig`` command line with one test-only pause, so a test can send a signal at a known moment of a write
(``tests/cli/test_signals.py``). ``AMPCONFIG_TEST_PAUSE=MOMENT:MARKER``: at MOMENT the process writes the MARKER file
and waits for a signal. Only the timing is changed: the command, the rewrite, onnx and ONNX Runtime run as they
always do. The moments:

- ``staged``: an output is complete in its staging folder, not yet moved into place;
- ``committed``: the first file was just moved into place;
- ``exiting``: a guarded block ended successfully and its guard's exit is about to run (its outputs in place);
- ``kept``: a guarded block ended successfully: its outputs are in place, and the command still prints its results;
- ``returned``: the command returned, its outputs not yet final;
- ``ending``: the outputs are final and the process is about to end (ending signals are ignored by now);
- ``line:N``: the N-th line run in the writing and ending code (the output guard, the signal handling, the command
  line's own modules) once the first output is staged: each N is another point of the write and of everything
  after it. ``count:FILE`` runs without a pause and writes the number of such lines to FILE at the end.

Usage: ``python tests/signal_harness.py rewrite m.onnx -o out.onnx``
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import ampconfig.cli
from ampconfig.files import guard, interrupts

moment, _, argument = os.environ["AMPCONFIG_TEST_PAUSE"].partition(":")
pause_at_line = 0
if moment == "line":
    number, _, argument = argument.partition(":")  # line:N:MARKER
    pause_at_line = int(number)
#: How long a pause lasts once ending signals are ignored (the signal the test sends then changes nothing).
IGNORED_PAUSE_S = 1.0


def pause() -> None:
    """Write the marker and wait until a signal arrived (its handler raises here, or holds it back inside an
    uninterrupted block: the code then goes on as it would). Where the signals are ignored, go on after a while."""
    if getattr(pause, "done", False):
        return
    pause.done = True  # type: ignore[attr-defined]
    Path(argument).write_text(str(os.getpid()), encoding="utf-8")
    ignored = signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    deadline = time.monotonic() + (IGNORED_PAUSE_S if ignored else 600)
    while interrupts.received_signal() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def paused_after(function: Any, when: str) -> Any:
    def wrapped(*args: Any) -> Any:
        result = function(*args)
        if moment == when:
            pause()
        return result

    return wrapped


commit = guard.OutputGuard._commit
guard_exit = guard.OutputGuard.__exit__


def commit_after_pause(self: guard.OutputGuard, *args: Any) -> None:
    if moment == "staged":
        pause()
    commit(self, *args)


def exit_then_pause(self: guard.OutputGuard, kind: Any, error: Any, trace: Any) -> None:
    if moment == "exiting" and error is None:
        pause()  # the signal's exception is raised here, before the guard's own exit has run a line
    guard_exit(self, kind, error, trace)
    if moment == "kept" and error is None:
        pause()


guard.OutputGuard._commit = commit_after_pause  # type: ignore[method-assign]
guard.OutputGuard._move = paused_after(guard.OutputGuard._move, "committed")  # type: ignore[method-assign]
guard.OutputGuard.__exit__ = exit_then_pause  # type: ignore[method-assign]
ampconfig.cli._run_command = paused_after(ampconfig.cli._run_command, "returned")
ampconfig.cli.settle_outputs = paused_after(ampconfig.cli.settle_outputs, "ending")

# ------------------------------------------------------------------------------------------------ line:N, count
#: The files whose lines are counted: what writes the outputs, takes them back or makes them final.
WATCHED = {
    str(Path(module.__file__).resolve()) for module in (guard, interrupts, ampconfig.cli) if module.__file__ is not None
} | {str(path.resolve()) for path in Path(ampconfig.cli.__file__ or "").parent.glob("*.py")}
lines_run = 0


def count_line(frame: FrameType, event: str, _arg: Any) -> Any:
    global lines_run
    if event == "line":
        lines_run += 1
        if lines_run == pause_at_line:
            pause()
    return count_line


def trace_calls(frame: FrameType, event: str, _arg: Any) -> Any:
    return count_line if frame.f_code.co_filename in WATCHED else None


def start_counting() -> None:
    """Count from here on: in new frames, and in the watched frames already running (the callers of the
    staging)."""
    sys.settrace(trace_calls)
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename in WATCHED:
            frame.f_trace = count_line
        frame = frame.f_back


if moment in ("line", "count"):
    staging = guard.OutputGuard.staging

    def staging_counted(self: guard.OutputGuard, destination: guard.Destination) -> Any:
        if sys.gettrace() is None:
            start_counting()
        return staging(self, destination)

    guard.OutputGuard.staging = staging_counted  # type: ignore[assignment,method-assign]

if moment == "count":
    atexit.register(lambda: Path(argument).write_text(str(lines_run), encoding="utf-8"))

if __name__ == "__main__":
    sys.argv = ["ampconfig", *sys.argv[1:]]
    ampconfig.cli.main()
