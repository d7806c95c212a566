"""Where the CLI writes: results to stdout (one JSON object with --json), messages to stderr."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from ampconfig.errors import EXIT_USAGE, Problem

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    stderr.print("error: " + message, markup=False)


def print_warning(message: str) -> None:
    stderr.print("warning: " + message, markup=False)


def print_json(payload: Any) -> None:
    """Exactly one JSON object on stdout, nothing else."""
    print(json.dumps(payload, indent=2, sort_keys=False, default=str))


def error_fields(problem: Problem) -> dict[str, Any]:
    return {
        "message": problem.message,
        "file": problem.file,
        "line": problem.line,
        "json_path": problem.json_path,
        "hint": problem.hint,
    }


def error_payload(problems: Sequence[Problem], exit_code: int = EXIT_USAGE) -> dict[str, Any]:
    """The one JSON object a command asked for JSON prints when it stops with an error (exit 2):

    ``{"ok": false, "exit_code": 2, "error": {"message", "file", "line", "json_path", "hint"}, "problems": [...]}``

    ``error`` is the first problem (null fields where unknown); ``problems`` lists every one (a file can have
    several), as ``validate --format json`` lists its findings."""
    return {
        "ok": False,
        "exit_code": exit_code,
        "error": error_fields(problems[0]) if problems else None,
        "problems": [problem.to_dict() for problem in problems],
    }


def report_error(problems: Sequence[Problem], *, as_json: bool, exit_code: int = EXIT_USAGE) -> None:
    """Each problem on stderr; with ``as_json`` also the error object on stdout."""
    for problem in problems:
        print_error(problem.format())
    if as_json:
        print_json(error_payload(problems, exit_code))
