"""The typer application and the decorator every command is registered with."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from ampconfig.cli.output import print_error
from ampconfig.errors import EXIT_USAGE, AmpconfigError

app = typer.Typer(
    name="ampconfig",
    help=(
        "NPU-style precision control for ONNX models.\n\n"
        "Pick a precision mode (allow_mix_precision, force_fp16, ...), optionally move op types between the "
        "black, white and gray lists with a modify_mixlist JSON, and ampconfig decides each node's dtype, "
        "rewrites the graph with the needed casts and proves the result against fp32 in ONNX Runtime.\n\n"
        "Exit codes: 0 ok, 1 a check failed, 2 usage or input error."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)

F = TypeVar("F", bound=Callable[..., Any])


def reporting_errors(func: F) -> F:
    """Turn AmpconfigError into messages + exit 2, and any other exception into an 'internal error' line."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AmpconfigError as exc:
            for problem in exc.as_problems():
                print_error(problem.format())
            raise typer.Exit(EXIT_USAGE) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            if type(exc).__module__.endswith("exceptions") and hasattr(exc, "exit_code"):
                raise  # click/typer usage errors keep their own handling
            if os.environ.get("AMPCONFIG_DEBUG"):
                raise
            print_error(f"internal error: {type(exc).__name__}: {exc}")
            print_error("this is a bug in ampconfig; rerun with AMPCONFIG_DEBUG=1 for the traceback")
            raise typer.Exit(EXIT_USAGE) from None

    return wrapper  # type: ignore[return-value]


def reflow_help(text: str) -> str:
    """Join the wrapped lines of each prose paragraph (rich keeps source line breaks); indented lines (examples)
    keep theirs."""
    paragraphs = []
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        if any(line.startswith("  ") for line in lines):
            paragraphs.append("\n".join(lines))
        else:
            paragraphs.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(paragraphs)


def command(name: str | None = None, **kwargs: Any) -> Callable[[F], F]:
    """Register a command on the app with error reporting."""

    def register(func: F) -> F:
        help_text = kwargs.pop("help", None) or func.__doc__
        if help_text:
            kwargs["help"] = reflow_help(help_text)
        app.command(name, **kwargs)(reporting_errors(func))
        return func

    return register
