"""The ``ampconfig`` command line: a thin typer app; each verb lives in its own module in this package.

Errors never reach the user as tracebacks: every command is wrapped by :func:`ampconfig.cli.app.command`, which
turns :class:`~ampconfig.errors.AmpconfigError` into located messages and exit code 2.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

from ampconfig.cli.app import app
from ampconfig.cli.output import EXIT_BROKEN_PIPE, print_error

# Each module registers its command(s) on `app` when imported.
_COMMAND_MODULES: tuple[str, ...] = (
    "run_cmd",
    "rewrite_cmd",
    "ops_info_cmd",
    "validate_cmd",
    "lists_cmd",
    "schema_cmd",
    "explain_cmd",
    "compare_cmd",
    "tune_cmd",
)

for _module in _COMMAND_MODULES:
    importlib.import_module(f"ampconfig.cli.{_module}")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        print_error("interrupted")
        sys.exit(130)
    except SystemExit as exc:
        if exc.code == EXIT_BROKEN_PIPE and hasattr(signal, "SIGPIPE"):
            # The reader of the results went away (`ampconfig explain m.onnx | head`): end as cat or grep end,
            # by SIGPIPE (the shell reports 141), now that every output was finished or taken back. SIGPIPE stays
            # ignored while the command runs, so a model streamed into a closed pipe is an error, not a silent end.
            sys.stdout.flush = lambda: None  # type: ignore[method-assign]  # nothing more to say there
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGPIPE)
        raise


__all__ = ["app", "main"]
