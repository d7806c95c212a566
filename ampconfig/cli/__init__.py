"""The ``ampconfig`` command line: a thin typer app; each verb lives in its own module in this package.

Errors never reach the user as tracebacks: every command is wrapped by :func:`ampconfig.cli.app.command`, which
turns :class:`~ampconfig.errors.AmpconfigError` into located messages and exit code 2.
"""

from __future__ import annotations

import importlib
import signal
import sys

from ampconfig.deferred_imports import defer_unused_imports

defer_unused_imports()  # before anything imports onnx-ir: sympy only if something does arithmetic on dimensions

from ampconfig.cli.app import app, end_process_after_command  # noqa: E402
from ampconfig.cli.output import EXIT_BROKEN_PIPE, print_error  # noqa: E402
from ampconfig.files.interrupts import Terminated, die_by, end_on_signals, pending_signal  # noqa: E402

# Each module registers its command(s) on `app` when imported.
_COMMAND_MODULES: tuple[str, ...] = (
    "run_cmd",
    "rewrite_cmd",
    "ops_info_cmd",
    "ops_info_probe_cmd",
    "ops_info_import_cmd",
    "ops_info_show_cmd",
    "validate_cmd",
    "lists_cmd",
    "schema_cmd",
    "explain_cmd",
    "compare_cmd",
    "tune_cmd",
    "lock_cmd",
    "diff_cmd",
)

for _module in _COMMAND_MODULES:
    importlib.import_module(f"ampconfig.cli.{_module}")


def main() -> None:
    """The ``ampconfig`` script: the app, with SIGTERM and SIGHUP ending it as Ctrl-C does (every output taken
    back, every staging and temporary folder removed) before the process ends by the signal."""
    end_on_signals()
    end_process_after_command()
    try:
        app()
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
