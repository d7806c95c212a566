"""The ``ampconfig`` command line: a thin typer app; each verb lives in its own module in this package.

Errors never reach the user as tracebacks: every command is wrapped by :func:`ampconfig.cli.typer_app.command`, which
turns :class:`~ampconfig.errors.AmpconfigError` into located messages and exit code 2.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Sequence
from typing import Any

import typer

from ampconfig.cli.output import EXIT_BROKEN_PIPE, print_error
from ampconfig.cli.typer_app import app as _app
from ampconfig.cli.typer_app import end_process_after_command
from ampconfig.files.interrupts import Terminated, die_by, end_on_signals, pending_signal

#: The modules that register each command on the app when imported, by the name the user types. A process that
#: runs one command imports only its modules: typer builds every registered command's parameters before parsing
#: (with all of them registered, 0.03 s of ``ampconfig validate``'s 0.3 s start-up).
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
    """The ``ampconfig`` script: the app, with SIGTERM and SIGHUP ending it as Ctrl-C does (every output taken
    back, every staging and temporary folder removed) before the process ends by the signal."""
    end_on_signals()
    end_process_after_command()
    try:
        load_commands(sys.argv[1:])()
    except KeyboardInterrupt:
        print_error("interrupted")
        sys.exit(130)
    except Terminated as exc:
        print_error(f"stopped by {exc.name}")
        die_by(exc.signum)
    except SystemExit as exc:
        held = pending_signal()
        if held is not None:
            die_by(held)
        if exc.code == EXIT_BROKEN_PIPE and hasattr(signal, "SIGPIPE"):
            # The reader of the results went away (`ampconfig explain m.onnx | head`): end as cat or grep end,
            # by SIGPIPE (the shell reports 141), now that every output was finished or taken back. SIGPIPE stays
            # ignored while the command runs, so a model streamed into a closed pipe is an error, not a silent end.
            die_by(signal.SIGPIPE)
        raise


__all__ = ["app", "main"]
