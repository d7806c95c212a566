"""The ``ampconfig`` command line: a thin typer app; each verb lives in its own module in this package.

Errors never reach the user as tracebacks: every command is wrapped by :func:`ampconfig.cli.typer_app.command`, which
turns :class:`~ampconfig.errors.AmpconfigError` into located messages and exit code 2.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer

from ampconfig.cli.output import EXIT_BROKEN_PIPE, print_error, stderr
from ampconfig.cli.typer_app import app as _app
from ampconfig.cli.typer_app import end_process_after_command
from ampconfig.files.guard import hold_outputs, settle_outputs, take_back_outputs
from ampconfig.files.interrupts import (
    Terminated,
    die_by,
    end_on_signals,
    received_signal,
    stop_ending_on_signals,
    uninterrupted,
)

#: The modules that register each command on the app when imported, by the name the user types. A process that
#: runs one command imports only its modules: typer builds every registered command's parameters before parsing,
#: so registering them all costs every command's start-up (docs/benchmarks.md, "Start-up").
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "run": ("run_cmd",),
    "rewrite": ("rewrite_cmd",),
    "ops-info": ("ops_info_cmd", "ops_info_probe_cmd", "ops_info_import_cmd", "ops_info_show_cmd"),
    "validate": ("validate_cmd",),
    "lists": ("lists_cmd",),
    "schema": ("schema_cmd",),
    "explain": ("explain_cmd",),
    "compare": ("compare_cmd",),
    "tune": ("tune_cmd",),
    "lock": ("lock_cmd",),
    "diff": ("diff_cmd",),
    "calibrate": ("calibrate_cmd",),
    "ranges": ("ranges_cmd",),
}


def command_named(args: Sequence[str]) -> str | None:
    """The command a command line runs: its first word that is not an option (the app's own options, -v and
    --help, take no value)."""
    return next((word for word in args if not word.startswith("-")), None)


def load_commands(args: Sequence[str] | None = None) -> typer.Typer:
    """The app with the commands ``args`` needs registered: the one it names, or every command (no command, an
    unknown word or ``None``: --help lists them all, and a misspelt name gets click's suggestions)."""
    name = command_named(args) if args is not None else None
    modules = (
        COMMAND_MODULES[name] if name in COMMAND_MODULES else tuple(m for ms in COMMAND_MODULES.values() for m in ms)
    )
    for module in modules:
        importlib.import_module(f"ampconfig.cli.{module}")
    return _app


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole app, for in-process callers (tests, typer.testing.CliRunner)
        return load_commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The ``ampconfig`` script: the app, with Ctrl-C, SIGTERM and SIGHUP ending it the same way (every output taken
    back, every staging and temporary folder removed, what was taken back said on stderr) before the process ends by
    the signal. An output is final only once the command has ended successfully: a signal while it still prints its
    results takes the outputs back too (:func:`~ampconfig.files.guard.hold_outputs`)."""
    end_on_signals()
    end_process_after_command()
    hold_outputs()
    try:
        code = _run_command(sys.argv[1:])
        with uninterrupted():  # nothing raises between the last check for a signal and the outputs made final
            late = stop_ending_on_signals()  # from here on a signal changes nothing: the process is ending
            if late is None:
                settle_outputs()
        if late is not None:
            _end_interrupted(late)
    except KeyboardInterrupt:  # Python's own handler: Ctrl-C before the handlers were installed
        _end_interrupted(signal.SIGINT)
    except Terminated as exc:
        _end_interrupted(exc.signum)
    if code == EXIT_BROKEN_PIPE and hasattr(signal, "SIGPIPE"):
        # The reader of the results went away (`ampconfig explain m.onnx | head`): end as cat or grep end,
        # by SIGPIPE (the shell reports 141), now that every output was finished or taken back. SIGPIPE stays
        # ignored while the command runs, so a model streamed into a closed pipe is an error, not a silent end.
        die_by(signal.SIGPIPE)
    sys.exit(code)


def _run_command(args: list[str]) -> int | str | None:
    """Run the command ``args`` names; its exit code. A signal whose exception never reached here (held back by a
    block that then left with an exception of its own, or swallowed) ends it as if it had."""
    try:
        load_commands(args)()
    except SystemExit as exc:
        arrived = received_signal()  # held back by a block that then failed, or swallowed by what caught it
        if arrived is not None:
            raise Terminated(arrived) from None
        return exc.code
    return None


def _end_interrupted(signum: int) -> NoReturn:
    """Take every output back, say so, and end by ``signum`` (Ctrl-C: exit 130, as typer would)."""
    with uninterrupted():
        stop_ending_on_signals()  # a second signal does not cut the cleanup short
        taken_back = take_back_outputs()
        _end_worker()
    with contextlib.suppress(OSError):  # a closed stderr does not stop the process from ending by the signal
        print_error("interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}")
        for line in taken_back:
            stderr.print("note: " + line, markup=False)
    if signum == signal.SIGINT:
        sys.exit(130)
    die_by(signum)


def _end_worker() -> None:
    """End the ONNX Runtime worker now, its folder removed: ending by a signal runs no ``atexit`` handler."""
    worker = sys.modules.get("ampconfig.worker.client")
    if worker is not None:
        worker.shutdown()


__all__ = ["app", "main"]
