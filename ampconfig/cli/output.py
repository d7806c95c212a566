"""Where the CLI writes: results to stdout (one JSON object with --json), messages to stderr.

On a terminal every line fits its width: text wraps at word boundaries (a word wider than the terminal folds),
tables fold (:mod:`ampconfig.report.tables`). In a pipe or a file nothing is wrapped, so CI logs and grep keep each
line whole; JSON, GitHub annotations and Markdown are never wrapped (:func:`say` with ``wrap=False``).

Results go through :data:`reports`, a stand-in for ``sys.stdout`` that a command can move to stderr when one of its
outputs is standard output itself (``-o -``, ``-o /dev/stdout``): the model or HTML bytes then stay alone on the
stream. It never raises: a write that fails (a reader that went away, a full disk) is remembered, later writes are
dropped, and :meth:`ReportStream.finish` turns it into the command's exit code when the command ends.
"""

from __future__ import annotations

import codecs
import errno
import json
import os
import sys
import textwrap
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from rich.console import Console

from ampconfig.errors import EXIT_OK, EXIT_USAGE, Problem, printable
from ampconfig.files.guard import STDOUT_FD, STDOUT_NAME, Destination, OutputGuard
from ampconfig.report.tables import escaped

#: 128 + SIGPIPE: what a shell reports for a command whose output pipe was closed.
EXIT_BROKEN_PIPE = 141


class ReportStream:
    """Standard output as the commands' results see it (see the module's docstring)."""

    def __init__(self) -> None:
        self.on_stderr = False
        self.failure: OSError | None = None

    def target(self) -> TextIO:
        """Looked up at every write: test runners swap ``sys.stdout`` per invocation."""
        return sys.stderr if self.on_stderr else sys.stdout

    def reset(self) -> None:
        """Back to stdout, no failure: at the start and end of every command."""
        self.on_stderr = False
        self.failure = None

    def move_to_stderr(self, destination: Destination | None = None) -> None:
        """Results from now on go to stderr (an output of the command is standard output)."""
        self.flush()
        self.on_stderr = True

    def write(self, text: str) -> int:
        if self.failure is None:
            try:
                _write_whole(self.target(), text)
            except OSError as exc:
                self._failed(exc)
        return len(text)

    def flush(self) -> None:
        if self.failure is None:
            try:
                self.target().flush()
            except OSError as exc:
                self._failed(exc)

    def __getattr__(self, name: str) -> Any:  # isatty, encoding, fileno ... as the real stream has them
        return getattr(self.target(), name)

    def _failed(self, exc: OSError) -> None:
        self.failure = exc
        # What the stream still buffers would fail again when Python flushes it on the way out: send it nowhere.
        stream = self.target()
        try:
            descriptor = stream.fileno()
        except (OSError, ValueError, AttributeError):  # a test runner's stream: nothing to silence
            return
        if descriptor in (STDOUT_FD, 2):
            os.dup2(os.open(os.devnull, os.O_WRONLY), descriptor)

    def finish(self, exit_code: int) -> int:
        """Flush; the command's exit code, unless writing its results failed: a reader that went away is
        :data:`EXIT_BROKEN_PIPE`, said nowhere (as ``cat`` and ``grep`` end); any other failure is one located
        line on stderr and exit 2."""
        self.flush()
        failure = self.failure
        if failure is None:
            return exit_code
        if failure.errno == errno.EPIPE:
            return EXIT_BROKEN_PIPE
        where = "<stderr>" if self.on_stderr else STDOUT_NAME
        reason = "no space left on the device" if failure.errno == errno.ENOSPC else failure.strerror or str(failure)
        hint = "free some space, or send the output elsewhere"
        print_error(Problem(f"cannot write the command's output: {reason}", file=where, hint=hint).format())
        return EXIT_USAGE


def _write_whole(stream: TextIO, text: str) -> None:
    """Write all of ``text``, or raise. A text stream hides short writes: when the reader of a pipe goes away in the
    middle of a large write, the binary layer returns how much it wrote and the text layer drops the rest without
    a word. Writing the bytes until they are all taken makes the next attempt raise the broken pipe."""
    binary = getattr(stream, "buffer", None)
    if binary is None:
        stream.write(text)
        return
    stream.flush()  # text the stream still holds goes first
    remaining = memoryview(text.encode(stream.encoding or "utf-8", stream.errors or "strict"))
    while remaining:
        written = binary.write(remaining)
        if not written:
            raise OSError(errno.EIO, "the stream took no bytes")
        remaining = remaining[written:]


class FittingConsole(Console):
    """A console that wraps what it prints at word boundaries on a terminal, and never in a pipe or a file, and
    escapes the control and bidi characters of what it prints (:func:`~ampconfig.report.tables.escaped`)."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, **kwargs: Any) -> None:
        shown = [escaped(item) for item in objects]
        super().print(*shown, soft_wrap=not self.is_terminal if soft_wrap is None else soft_wrap, **kwargs)


#: The results stream of the running command.
reports = ReportStream()
# A text stream to rich by what it calls (write, flush, isatty, encoding), not an IO[str] subclass.
stdout = FittingConsole(file=reports, highlight=False)  # type: ignore[arg-type]
stderr = FittingConsole(stderr=True, highlight=False)


def fitted(text: str, width: int) -> str:
    """``text`` with each line wider than ``width`` wrapped at word boundaries, its continuation lines indented two
    columns more than the line; a word wider than the room left folds. Whitespace inside a line is kept where the
    line fits."""
    lines = []
    for line in text.split("\n"):
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        hanging = (indent + "  ")[: max(0, width // 3)]
        wrapper = textwrap.TextWrapper(
            width=max(width, 2),
            subsequent_indent=hanging,
            break_long_words=True,
            break_on_hyphens=False,
            replace_whitespace=False,
        )
        lines.extend(wrapper.wrap(line) or [""])
    return "\n".join(lines)


def _on_terminal() -> bool:
    try:
        return bool(reports.isatty())
    except (OSError, ValueError, AttributeError):  # a closed or replaced stream
        return False


# ------------------------------------------------------------------------------------------ encodings
#: The codec error handler the standard streams write with: what the stream's encoding cannot hold is written in
#: ASCII (``PYTHONIOENCODING=ascii``, ``LC_ALL=C``), and a file name's undecodable bytes go back out as they came in.
FALLBACK_ERRORS = "ampconfig.ascii-fallback"
_ASCII_FOR = {"…": "...", "→": "->", "←": "<-", "—": "-", "–": "-", "≤": "<=", "≥": ">=", "×": "x", "±": "+/-"}


def _ascii_for(char: str) -> str:
    """ASCII that reads like ``char``: table lines for box drawing, the letter without its accent, else an escape."""
    if char in _ASCII_FOR:
        return _ASCII_FOR[char]
    name = unicodedata.name(char, "")
    if name.startswith("BOX DRAWINGS"):
        return "-" if "HORIZONTAL" in name else "|" if "VERTICAL" in name else "+"
    plain = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode("ascii")
    return plain or char.encode("ascii", "backslashreplace").decode("ascii")


def _fallback(error: UnicodeError) -> tuple[str | bytes, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    if all("\udc80" <= char <= "\udcff" for char in text):  # bytes of a file name that were not UTF-8
        return bytes(ord(char) - 0xDC00 for char in text), error.end
    return "".join(_ascii_for(char) for char in text), error.end


codecs.register_error(FALLBACK_ERRORS, _fallback)


def write_anything() -> None:
    """Make stdout and stderr write every text: an encoding that cannot hold a character (an ASCII locale) gets
    ASCII for it instead of a UnicodeEncodeError halfway through a report."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) != FALLBACK_ERRORS:
            try:
                reconfigure(errors=FALLBACK_ERRORS)
            except (OSError, ValueError):  # a stream that cannot change now: left as it is
                continue


# ------------------------------------------------------------------------------------------ output guard
def output_guard() -> OutputGuard:
    """The guard a command writes through: an output that is standard output moves the results to stderr."""
    return OutputGuard(on_stdout=reports.move_to_stderr)


def say(text: str, *, wrap: bool = True) -> None:
    """One line of results (plain text, no markup), on a terminal fitted to its width (:func:`fitted`); with
    ``wrap`` false (JSON, annotations, Markdown: text a program reads) exactly as it is; in every format its
    control and bidi characters escaped (:func:`~ampconfig.errors.printable`; JSON has them escaped already)."""
    text = printable(text, keep="\n")  # a name's escape sequence or right-to-left override, shown escaped
    if wrap and _on_terminal():
        text = fitted(text, stdout.width)
    print(text, file=reports, flush=True)


def print_error(message: str) -> None:
    stderr.print("error: " + message, markup=False)


def print_warning(message: str) -> None:
    stderr.print("warning: " + message, markup=False)


def print_json(payload: Any) -> None:
    """Exactly one JSON object on the results stream, nothing else."""
    say(json.dumps(payload, indent=2, sort_keys=False, default=str), wrap=False)


def print_result(payload: Mapping[str, Any], exit_code: int = EXIT_OK) -> None:
    """The JSON object of a command that ran to its end: the envelope every object shares first, ``ok`` (exit 0)
    and ``exit_code`` (1 when a check failed), as :func:`error_payload` has them for a command that stopped, then
    the command's own keys."""
    print_json({"ok": exit_code == EXIT_OK, "exit_code": exit_code, **payload})


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
    """Each problem on stderr; with ``as_json`` also the error object on the results stream."""
    for problem in problems:
        print_error(problem.format())
    if as_json:
        print_json(error_payload(problems, exit_code))
