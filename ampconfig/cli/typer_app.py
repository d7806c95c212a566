"""The typer application and the decorator every command is registered with."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

try:  # typer >= 0.17 vendors click: every click error derives from typer's public TyperException
    from typer import TyperException as ClickException
except ImportError:  # older typer uses click itself
    from click import ClickException  # type: ignore[import-not-found, no-redef, assignment, unused-ignore]

from ampconfig.cli.logs import configure_logging, restore_logging
from ampconfig.cli.output import EXIT_BROKEN_PIPE, error_payload, print_json, report_error, reports, write_anything
from ampconfig.errors import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, AmpconfigError, Problem
from ampconfig.files.interrupts import Terminated, received_signal
from ampconfig.gc_pause import gc_paused

#: Where the command line's arguments are kept in click's context (``ctx.meta`` is shared by every subcommand).
_ARGS_KEY = "ampconfig.args"
#: The context TyperCommand's methods take: click's Context, which typer >= 0.17 vendors under a private module
#: (older typer: click's own), so no public name types it in every supported typer; typer.Context narrows it.
_ClickContext = Any


#: click's UsageError (a command line click could not parse: an unknown option, a missing or bad value). typer >=
#: 0.17 vendors click privately and exports only its subclass BadParameter, whose base it is (click's documented
#: hierarchy; older typer re-exports click's own BadParameter).
def _usage_error() -> type[ClickException]:
    base = typer.BadParameter.__base__
    if base is None or not issubclass(base, ClickException):
        raise ImportError(f"this typer's BadParameter derives from {base}, not from click's UsageError")
    return base


UsageError = _usage_error()


def json_in_arguments(args: Sequence[str]) -> bool:
    """Whether the command line asks for JSON output: the shared option ``json_output`` (``--json``, as the table
    of shared options spells it), or ``--format json`` (validate). Read only where an error is reported: the table
    is not imported on the way to a command."""
    from ampconfig.settings.flags import shared_option

    words = list(args)
    if "--" in words:
        words = words[: words.index("--")]
    pairs = zip(words, [*words[1:], ""])
    asking = {*shared_option("json_output").flags(), "--format=json"}
    return any(word in asking or (word == "--format" and after == "json") for word, after in pairs)


def json_in_options(options: Mapping[str, Any]) -> bool:
    """Whether a command's parsed options ask for JSON output (the parameter names the commands use)."""
    return bool(options.get("json_output") or options.get("as_json") or options.get("output_format") == "json")


def _flags_without_value_type(params: list[Any]) -> list[Any]:
    """On/off flags and counters take no value, so --help shows no value type for them (typer >= 0.20 writes
    ``<bool>`` next to --help, --json and every flag)."""
    for param in params:
        if (getattr(param, "is_flag", False) or getattr(param, "count", False)) and param.metavar is None:
            param.metavar = ""
    return params


class AmpconfigCommand(TyperCommand):
    """Every command: its flags show no value type in --help, and --help fits the terminal, nothing cut
    (:mod:`ampconfig.cli.help_format`)."""

    def get_params(self, ctx: _ClickContext) -> list[Any]:
        return _flags_without_value_type(super().get_params(ctx))

    def format_help(self, ctx: _ClickContext, formatter: Any) -> None:
        from ampconfig.cli.help_format import print_command_help  # only --help needs it

        print_command_help(self, ctx)


class SubcommandGroup(TyperGroup):
    """A group of subcommands (``ops-info``): its flags show no value type in --help, and its --help is laid out
    as a command's."""

    def get_params(self, ctx: _ClickContext) -> list[Any]:
        return _flags_without_value_type(super().get_params(ctx))

    def format_help(self, ctx: _ClickContext, formatter: Any) -> None:
        from ampconfig.cli.help_format import print_command_help

        print_command_help(self, ctx)


class AmpconfigGroup(SubcommandGroup):
    """The app: errors raised while the command line is parsed (an option's check, a usage error) are reported
    like a command's own errors, including the JSON error object when JSON was asked for (once, here, for every
    subcommand group below)."""

    def parse_args(self, ctx: _ClickContext, args: list[str]) -> list[str]:
        ctx.meta.setdefault(_ARGS_KEY, list(args))
        return super().parse_args(ctx, args)

    def invoke(self, ctx: _ClickContext) -> Any:
        try:
            return super().invoke(ctx)
        except AmpconfigError as exc:  # an option's callback refused its value
            report_error(exc.as_problems(), as_json=json_in_arguments(ctx.meta.get(_ARGS_KEY, [])))
            raise typer.Exit(reports.finish(EXIT_USAGE)) from None
        except UsageError as exc:  # click prints the usage message on stderr as it always does
            if json_in_arguments(ctx.meta.get(_ARGS_KEY, [])):
                usage_ctx = getattr(exc, "ctx", None)
                hint = f"see `{usage_ctx.command_path} --help`" if usage_ctx is not None else None
                print_json(_usage_payload(exc.format_message(), hint))
            raise


def _usage_payload(message: str, hint: str | None) -> dict[str, Any]:
    return error_payload([Problem(message, hint=hint)])


app = typer.Typer(
    name="ampconfig",
    help=(
        "NPU-style precision control for ONNX models.\n\n"
        "Pick a precision mode (allow_mix_precision, force_fp16, ...), optionally move op types between the "
        "black, white and gray lists with a modify_mixlist JSON, and ampconfig decides each node's dtype, "
        "rewrites the graph with the needed casts and proves the result against fp32 in ONNX Runtime.\n\n"
        "Exit codes: 0 ok, 1 a check failed, 2 usage or input error (a located message), 3 internal error (a bug "
        "in ampconfig: please report it; AMPCONFIG_DEBUG=1 shows the traceback), 141 the reader of a report went "
        "away (ampconfig explain m.onnx | head).\n\n"
        "Outputs (-o, --html): - is standard output, and the other results then go to stderr."
    ),
    no_args_is_help=True,
    cls=AmpconfigGroup,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)


@app.callback()
def _global_options(
    ctx: typer.Context,
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose",
            "-v",
            count=True,
            help="Log what happens on stderr: -v the resolved settings and where each came from, the model "
            "opened, the decisions, sessions and files written; -vv also each decision pass. Before the command: "
            "ampconfig -v run ...",
        ),
    ] = 0,
) -> None:
    handler = configure_logging(verbose)
    ctx.call_on_close(lambda: restore_logging(handler))
    ctx.call_on_close(_log_worker)  # runs first: the log is still on


def _log_worker() -> None:
    """With -v, what the command asked of ONNX Runtime's worker (the sessions it built)."""
    worker = sys.modules.get("ampconfig.worker.client")
    if worker is not None:
        worker.log_sessions()


F = TypeVar("F", bound=Callable[..., Any])


#: Set by the ``ampconfig`` script, whose process ends once its one command has run; in-process callers (tests)
#: run many commands in one process and get the collector back after each.
_process_ends_after_command = False


def end_process_after_command() -> None:
    """The process ends when the command returns: what the command leaves behind need not be collected."""
    global _process_ends_after_command
    _process_ends_after_command = True


def reporting_errors(func: F, *, pause_gc: bool = True) -> F:
    """Turn AmpconfigError into messages + exit 2, and any other exception into an 'internal error' line + exit 3;
    with JSON output asked for, also print the error object (:func:`~ampconfig.cli.output.error_payload`). A
    results stream that could not be written ends the command as :meth:`ReportStream.finish` says (141 for a
    reader that went away, else 2 with one line).

    With ``pause_gc`` the cyclic garbage collector is paused while the command runs and restored afterwards
    (:mod:`ampconfig.gc_pause`: about a fifth of the time of graph work on many-node graphs; the process is ours,
    the library never switches it). Run as the ``ampconfig`` script (:func:`end_process_after_command`), what the
    command leaves in memory is then frozen out of the collector's reach: collecting it would free only what the
    exit frees."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = json_in_options(kwargs)
        write_anything()
        reports.reset()
        try:
            exit_code = _exit_code_of(func, args, kwargs, pause_gc=pause_gc, as_json=as_json)
            exit_code = reports.finish(exit_code)
        finally:
            reports.reset()
        if exit_code != EXIT_OK:
            raise typer.Exit(exit_code)

    return wrapper  # type: ignore[return-value]  # the same call signature as func, which mypy cannot see


def _exit_code_of(
    func: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], *, pause_gc: bool, as_json: bool
) -> int:
    """Run the command; its exit code, its errors reported."""
    try:
        with gc_paused(freeze_after=_process_ends_after_command) if pause_gc else contextlib.nullcontext():
            func(*args, **kwargs)
        return EXIT_OK
    except typer.Exit as exc:
        return int(exc.exit_code)
    except AmpconfigError as exc:
        _raise_interruption_behind(exc)
        report_error(exc.as_problems(), as_json=as_json)
        return EXIT_USAGE
    except (typer.Abort, KeyboardInterrupt):
        raise
    except BrokenPipeError:
        # A pipe ampconfig writes to directly (not the results stream, which never raises) was closed: the reader
        # went away, and nothing is wrong with the command.
        return EXIT_BROKEN_PIPE
    except Exception as exc:
        _raise_interruption_behind(exc)
        if isinstance(exc, ClickException):
            raise  # click's errors (a usage error raised by a command's own check) keep click's handling
        if os.environ.get("AMPCONFIG_DEBUG"):
            raise
        internal = Problem(
            f"internal error: {type(exc).__name__}: {exc}",
            hint="this is a bug in ampconfig; rerun with AMPCONFIG_DEBUG=1 for the traceback",
        )
        report_error([internal], as_json=as_json, exit_code=EXIT_INTERNAL)
        return EXIT_INTERNAL


def _raise_interruption_behind(exc: BaseException) -> None:
    """Raise the signal an error came from: one raised while the signal's exception unwound (a memory map that
    cannot close while the interrupted frame still holds a view of it), or after something swallowed that
    exception. The command was interrupted; it did not fail."""
    seen: set[int] = set()
    cause = exc.__context__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, (Terminated, KeyboardInterrupt)):
            raise cause
        seen.add(id(cause))
        cause = cause.__context__
    signum = received_signal()
    if signum is not None:
        raise Terminated(signum) from exc


def reflow_help(text: str) -> str:
    """Join the wrapped lines of each prose paragraph (rich keeps source line breaks); indented lines (examples)
    keep theirs. A docstring's common indentation is removed first."""
    paragraphs = []
    for block in inspect.cleandoc(text).split("\n\n"):
        lines = block.splitlines()
        if any(line.startswith("  ") for line in lines):
            paragraphs.append("\n".join(lines))
        else:
            paragraphs.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(paragraphs)


def register_command(
    group: typer.Typer, name: str | None, func: Callable[..., Any], *, pause_gc: bool = True, **kwargs: Any
) -> None:
    """Register ``func`` on ``group`` with error reporting, its help reflowed and flags without value types. A
    ``func`` whose first parameter is ``options`` takes the shared options the table gives the command ``name``
    (:func:`~ampconfig.cli.options.receiving_shared_options`)."""
    help_text = kwargs.pop("help", None) or func.__doc__
    if help_text:
        kwargs["help"] = reflow_help(help_text)
    if name is not None and next(iter(inspect.signature(func).parameters), None) == "options":
        from ampconfig.cli.options import receiving_shared_options  # not for a command without shared options

        func = receiving_shared_options(name, func)
    group.command(name, cls=AmpconfigCommand, **kwargs)(reporting_errors(func, pause_gc=pause_gc))


#: Each command registered on the app: its function and how it was registered (a test registers them again on an
#: app of its own, with a table of shared options of its own).
REGISTERED: dict[str, tuple[Callable[..., Any], bool, dict[str, Any]]] = {}


def command(name: str, *, pause_gc: bool = True, **kwargs: Any) -> Callable[[F], F]:
    """Register a command on the app with error reporting and (unless ``pause_gc`` is false) the garbage collector
    paused while it runs. A command taking shared options declares ``options: SharedOptions`` as its first parameter,
    then its own options (keyword-only): its signature as registered is the shared options
    :data:`~ampconfig.settings.flags.SHARED_OPTIONS` gives it, its own, then how the results are shown."""

    def register(func: F) -> F:
        REGISTERED[name] = (func, pause_gc, dict(kwargs))
        register_command(app, name, func, pause_gc=pause_gc, **kwargs)
        return func

    return register
