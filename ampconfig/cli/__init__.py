"""The ``ampconfig`` command line: a thin typer app; each verb lives in its own module in this package.

Errors never reach the user as tracebacks: every command is wrapped by :func:`ampconfig.cli.app.command`, which
turns :class:`~ampconfig.errors.AmpconfigError` into located messages and exit code 2.
"""

from __future__ import annotations

import importlib
import signal
import sys

from ampconfig.cli.app import app
from ampconfig.cli.output import print_error

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
    if hasattr(signal, "SIGPIPE"):
        # A closed stdout (`ampconfig explain m.onnx | head`) ends the process quietly, as it ends cat or grep
        # (the shell reports 141); without this Python would report the broken pipe as an error.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        app()
    except KeyboardInterrupt:
        print_error("interrupted")
        sys.exit(130)


__all__ = ["app", "main"]
