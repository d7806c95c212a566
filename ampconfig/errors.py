"""Errors and findings that carry where the problem is and what to do about it.

Every user-facing failure is an :class:`AmpconfigError` (exit code 2: unusable input or usage) or a list of
:class:`Problem` findings (exit code 1 from ``validate``). The CLI prints them; it never prints a traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
#: An unexpected exception: a bug in ampconfig, apart from the user's usage and input errors.
EXIT_INTERNAL = 3


def printable(text: str, keep: str = "") -> str:
    """``text`` with each control character (a NUL, an escape, a newline in a file name) and each character that
    reorders or hides text where it is shown (the bidirectional overrides, embeddings and isolates, the marks
    U+200E, U+200F and U+061C, the line and paragraph separators) written as its Python escape (``\\u202e``), so
    a hostile name or path can neither drive the terminal nor show as other text, as git's ``core.quotePath``
    quotes file names. The one function every reporter echoes user strings through (names and paths from
    models, locks, ranges files and mixlists); JSON output escapes the same characters as JSON does. ``keep``:
    the characters a multi-line text keeps (``"\\n"``). Everything else is kept, the surrogates that stand for a
    file name's non-UTF-8 bytes included: the terminal gets those bytes back as they were given."""
    if _UNSHOWABLE.search(text) is None:
        return text
    return _UNSHOWABLE.sub(lambda found: found[0] if found[0] in keep else ascii(found[0])[1:-1], text)


#: C0 and C1 controls, DEL, and the characters that reorder or hide the text around them (Unicode's bidi controls
#: U+202A-U+202E and U+2066-U+2069, the marks U+200E, U+200F, U+061C; U+2028 and U+2029 break lines).
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"  # what ampconfig read a setting as (an op name mapped to ONNX): shown, never a finding


@dataclass(frozen=True)
class Problem:
    """One finding: what is wrong, where (file, line, JSON path) and what to do."""

    message: str
    file: str | None = None
    line: int | None = None
    json_path: str | None = None
    hint: str | None = None
    severity: Severity = Severity.ERROR

    def location(self) -> str:
        parts = []
        if self.file:
            file = printable(self.file)
            parts.append(file if self.line is None else f"{file}:{self.line}")
        elif self.line is not None:
            parts.append(f"line {self.line}")
        if self.json_path:
            parts.append(self.json_path)
        return ": ".join(parts)

    def format(self) -> str:
        where = self.location()
        text = f"{where}: {self.message}" if where else self.message
        if self.hint:
            text += f" ({self.hint})"
        return text

    def to_dict(self) -> dict[str, object]:
        return {
            "severity": self.severity.value,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "json_path": self.json_path,
            "hint": self.hint,
        }


@dataclass
class AmpconfigError(Exception):
    """Input or usage error: the CLI reports it and exits with code 2."""

    message: str
    file: str | None = None
    line: int | None = None
    json_path: str | None = None
    hint: str | None = None
    problems: list[Problem] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def as_problems(self) -> list[Problem]:
        if self.problems:
            return list(self.problems)
        return [Problem(self.message, self.file, self.line, self.json_path, self.hint)]

    def __str__(self) -> str:
        return "\n".join(problem.format() for problem in self.as_problems())
