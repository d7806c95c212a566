"""``-v``/``-vv``: Python ``logging`` for the ``ampconfig`` logger tree, on stderr.

Library modules log with ``logging.getLogger(__name__)`` and print nothing; the command line decides what is
shown. Log lines go to stderr, never stdout, so ``--json`` still prints exactly one object there. The handler looks
``sys.stderr`` up when it writes (test runners swap it per invocation) and is removed when the command ends.
"""

from __future__ import annotations

import logging
import sys

#: The root of every logger in the package (``ampconfig.settings.resolve``, ``ampconfig.runner.sessions``, ...).
PACKAGE_LOGGER = "ampconfig"

_LEVELS = {0: logging.WARNING, 1: logging.INFO}


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time of the record."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        # Logging must never break the command: logging's own policy for broken handlers.
        except Exception:  # noqa: BLE001
            self.handleError(record)


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: [{record.name}] {record.getMessage()}"


def level_for(verbosity: int) -> int:
    """0: warnings only; 1 (-v): info; 2 or more (-vv): debug."""
    return _LEVELS.get(verbosity, logging.DEBUG)


def configure_logging(verbosity: int) -> logging.Handler:
    """Show the package's log records of ``verbosity``'s level and above on stderr; returns the handler to pass
    to :func:`restore_logging` when the command ends."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    for old in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(old)
    handler = _StderrHandler()
    handler.setFormatter(_Format())
    logger.addHandler(handler)
    logger.setLevel(level_for(verbosity))
    logger.propagate = False  # shown once, here; not again by a root handler the host may have
    return handler


def restore_logging(handler: logging.Handler) -> None:
    """Undo :func:`configure_logging` (a library user's logging is theirs again)."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)
    logger.propagate = True
