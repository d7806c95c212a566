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


def command(name: str | None = None, **kwargs: Any) -> Callable[[F], F]:
    """Register a command on the app with error reporting."""

    def register(func: F) -> F:
        app.command(name, **kwargs)(reporting_errors(func))
        return func

    return register
