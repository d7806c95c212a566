"""Where the CLI writes: results to stdout (one JSON object with --json), messages to stderr."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

stdout = Console(highlight=False, soft_wrap=True)
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    stderr.print("error: " + message, markup=False)


def print_warning(message: str) -> None:
    stderr.print("warning: " + message, markup=False)


def print_json(payload: Any) -> None:
    """Exactly one JSON object on stdout, nothing else."""
    print(json.dumps(payload, indent=2, sort_keys=False, default=str))
