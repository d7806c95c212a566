"""SIGTERM and SIGHUP end a command the way Ctrl-C does: as an exception that unwinds the stack, so every output
guard takes back what it wrote and removes its staging folder, and every temporary folder is removed, before the
process ends by the signal (the shell reports 143 or 129, as it reports 130 for Ctrl-C).

A signal handler can raise between any two Python bytecodes. :func:`uninterrupted` holds the signals back for a few
lines that must run together (an output renamed into place and recorded for undo; the guard's cleanup); one that
arrives meanwhile is raised when the block ends. After the first signal, later ones are ignored: the cleanup that
the first one started is not cut short.

Ctrl-C raises :class:`Terminated` too, not KeyboardInterrupt: typer turns a KeyboardInterrupt that leaves a command
into a silent exit 130, before the command line could take the outputs back and say so. Once the command is done
and its outputs are final, :func:`stop_ending_on_signals` ignores the signals until the process has ended: a signal
then finds nothing left to take back.

Only the command line installs the handlers (:func:`end_on_signals`); the library changes no signal handling.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn


class Terminated(BaseException):
    """An ending signal arrived (SIGINT, SIGTERM or SIGHUP). A BaseException, like KeyboardInterrupt: no ``except
    Exception`` stops it on its way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


#: The signals a command ends on as on Ctrl-C (those the platform has).
ENDING_SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)

_held = 0
_pending: int | None = None
#: The first ending signal that arrived, raised or not: code that catches everything (a bare ``except`` in a
#: dependency, an exception in ``__del__``) can swallow the exception, and the command must still end by it.
_received: int | None = None


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _pending, _received
    for each in ENDING_SIGNALS:  # the cleanup this signal starts is not cut short by the next one
        if signal.getsignal(each) is _on_signal:
            signal.signal(each, signal.SIG_IGN)
    _received = signum if _received is None else _received
    if _held:
        _pending = signum
        return
    raise Terminated(signum)


def end_on_signals() -> None:
    """Install the handlers (main thread only). A signal the process inherited as ignored (``nohup`` ignores
    SIGHUP, a shell's background job ignores SIGINT) stays ignored."""
    for each in ENDING_SIGNALS:
        current = signal.getsignal(each)
        if current in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(each, _on_signal)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Hold the ending signals back while the block runs; one that arrived meanwhile is raised at its end (unless
    the block is already leaving with an exception, which then ends the command anyway)."""
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
    if not _held and _pending is not None:  # reached only when the block ended without an exception
        signum, _pending = _pending, None
        raise Terminated(signum)


def stop_ending_on_signals() -> int | None:
    """Ignore the ending signals from now on (the command is done; a later signal changes nothing) and return the
    one that arrived before, if any, for the caller to act on: one held back and not raised yet, or one whose
    exception something swallowed. Call it inside :func:`uninterrupted`, so that no signal is raised between."""
    global _pending
    for each in ENDING_SIGNALS:
        if signal.getsignal(each) is _on_signal:
            signal.signal(each, signal.SIG_IGN)
    _pending = None
    return _received


def received_signal() -> int | None:
    """The ending signal that arrived, if one did (raised, held back, or swallowed by whatever caught it)."""
    return _received


def die_by(signum: int) -> NoReturn:
    """End the process by ``signum`` with its default action, as if it had never been caught (a parent sees the
    signal, a shell reports 128 + its number)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # not reached where the default action ends the process
