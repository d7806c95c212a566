"""Bounded reading and parsing of user documents (configs, mixlists, keep_dtype and op info files).

Parsers are fast on the files people write and slow or unsafe on hostile ones: a YAML file of 1.1 KB with nested
anchors expands to billions of values, deeply nested JSON exhausts Python's recursion, a million keys take minutes
to parse. Every document is therefore checked against three limits, each refused with a located error (exit 2)
before the expensive step:

- :data:`MAX_DOCUMENT_BYTES`: the file's size, checked before it is read (and while reading, for a file that grows);
- :data:`MAX_NESTING_DEPTH`: arrays and objects inside each other, checked by a scan before JSON and TOML are
  parsed and while YAML is composed;
- :data:`MAX_DOCUMENT_VALUES`: keys plus values plus array items, with every YAML alias counted as the values it
  stands for, checked before anything is built from them. A YAML alias is expanded wherever it is used, so the
  count is what a consumer of the parsed data would see, not what the file spells out.

A YAML alias that refers to the collection it is inside (a recursive document) is refused: nothing downstream can
walk it. The YAML composer is :mod:`ampconfig.formats.bounded_yaml`.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ampconfig.errors import AmpconfigError
from ampconfig.files.paths import open_regular

#: Largest document read, in bytes. Session configs, mixlists and keep_dtype files are kilobytes; the built-in op
#: info files about 70 KB.
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
#: Most arrays/objects inside each other. Session configs nest 4 deep.
MAX_NESTING_DEPTH = 64
#: Most keys + values + array items in one document, YAML aliases counted where they are used.
MAX_DOCUMENT_VALUES = 100_000
#: Precision lock files (``ampconfig lock``) hold one line per node of a model: larger limits, the same checks.
#: About 140 bytes and 17 values a node, so these admit models of about 100,000 nodes.
MAX_LOCK_BYTES = 16 * 1024 * 1024
MAX_LOCK_VALUES = 2_000_000

_SPLIT_HINT = "is it the right file? ampconfig's files are small; split the content or list op types instead"


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


# --------------------------------------------------------------------------------------------------- reading
def read_bounded(
    path: Path, what: str, max_bytes: int = MAX_DOCUMENT_BYTES, *, too_large_hint: str = _SPLIT_HINT
) -> bytes:
    """The bytes of ``path``, a regular file (:func:`~ampconfig.files.paths.open_regular`: a FIFO, device or
    socket is refused, never opened to wait): one larger than ``max_bytes`` is refused from its size, before it is
    read (with ``too_large_hint``); one that grows past the limit while it is read is refused then."""
    source = str(path)
    try:
        with open_regular(path, what) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > max_bytes:
                raise _too_large(what, source, _megabytes(size), max_bytes, too_large_hint)
            # Read one byte more than expected: a file that grows meanwhile is read on, up to the limit.
            raw = handle.read(size + 1)
            if len(raw) > size:
                raw += handle.read(max_bytes + 1 - len(raw))
    except OSError as exc:
        raise AmpconfigError(f"cannot read {what}: {exc.strerror or exc}", file=source) from None
    if len(raw) > max_bytes:  # a file that grew while it was read
        raise _too_large(what, source, f"more than {_megabytes(max_bytes)}", max_bytes, too_large_hint)
    return raw


def _too_large(what: str, source: str, size: str, max_bytes: int, hint: str) -> AmpconfigError:
    return AmpconfigError(
        f"{what} is too large: {size}; ampconfig reads files up to {_megabytes(max_bytes)}", file=source, hint=hint
    )


# ---------------------------------------------------------------------------------------------- line numbers
class LineIndex:
    """Line numbers (1-based) of character offsets in a text."""

    def __init__(self, text: str) -> None:
        self._newlines = [match.start() for match in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        return bisect.bisect_left(self._newlines, offset) + 1  # one more than the newlines before ``offset``


def too_deep(source: str | None, line: int | None) -> AmpconfigError:
    return AmpconfigError(
        f"nesting too deep: more than {MAX_NESTING_DEPTH} arrays/objects inside each other",
        file=source,
        line=line,
        hint="ampconfig's files nest a few levels; is it the right file?",
    )


def too_many(
    source: str | None, line: int | None, through_alias: str | None = None, max_values: int = MAX_DOCUMENT_VALUES
) -> AmpconfigError:
    limit = f"{max_values:,}"
    if through_alias is not None:
        return AmpconfigError(
            f"YAML alias *{through_alias} expands the document beyond {limit} values (keys, values and items): "
            "refused before expanding it",
            file=source,
            line=line,
            hint="an alias repeats its anchor's whole value wherever it is used; write the values out instead "
            "of nesting aliases",
        )
    return AmpconfigError(
        f"too many values: more than {limit} keys, values and items", file=source, line=line, hint=_SPLIT_HINT
    )


# -------------------------------------------------------------------------------------------------- JSON scan
#: One JSON token: a string (possibly unterminated), a comment (not JSON, but reported), a bracket or a bare scalar.
_JSON_TOKEN = re.compile(
    # A string, written as runs of plain characters between escapes: one alternation per character made a 50 MB
    # base64 array of a data set take 37 s to scan; this takes 0.3 s.
    r'"[^"\\]*(?:\\.[^"\\]*)*"?'  # string
    r"|#[^\n]*|//[^\n]*|/\*.*?(?:\*/|\Z)"  # comments
    r"|[\[{]|[\]}]"  # brackets
    r'|[^\s\[\]{},:"#/]+|/',  # scalar (true, 12.5e3, ...); a lone slash is a syntax error json.loads reports
    re.S,
)


@dataclass
class JsonScan:
    """What a scan of JSON text found before parsing it: the comments (line, kind), which JSON does not allow."""

    comments: list[tuple[int, str]] = field(default_factory=list)


def scan_json(text: str, source: str | None, max_values: int = MAX_DOCUMENT_VALUES) -> JsonScan:
    """Check nesting depth and value count (at most ``max_values``) of JSON text without parsing it, and find
    comments.

    Runs before ``json.loads``, whose C parser raises RecursionError on deep nesting."""
    lines = LineIndex(text)
    scan = JsonScan()
    depth = values = 0
    for match in _JSON_TOKEN.finditer(text):
        first = text[match.start()]
        if first in "[{":
            depth += 1
            values += 1
            if depth > MAX_NESTING_DEPTH:
                raise too_deep(source, lines.line(match.start()))
        elif first in "]}":
            depth -= 1
        elif first in "#/" and match.end() - match.start() > 1:
            kind = "#" if first == "#" else ("/* */" if text[match.start() + 1] == "*" else "//")
            scan.comments.append((lines.line(match.start()), kind))
            continue
        else:
            values += 1
        if values > max_values:
            raise too_many(source, lines.line(match.start()), max_values=max_values)
    return scan


# -------------------------------------------------------------------------------------------------- TOML scan
#: TOML strings (basic, literal, multi-line), comments, brackets, and the separators that start a value.
_TOML_TOKEN = re.compile(
    r'"""(?:[^\\]|\\.)*?(?:"""|\Z)|\'\'\'.*?(?:\'\'\'|\Z)'  # multi-line strings
    r'|"(?:[^"\\\n]|\\.)*"?|\'[^\'\n]*\'?'  # one-line strings
    r"|#[^\n]*"  # comment
    r"|[\[{]|[\]}]|[=,]",
    re.S,
)


def scan_toml(text: str, source: str | None) -> None:
    """Check nesting depth and value count of TOML text before ``tomllib`` parses it (recursively, and slowly).

    Every ``=`` is a key and every ``,`` separates two values, so their number never exceeds the document's keys
    and values: refusing on it never refuses a document within the limit."""
    lines = LineIndex(text)
    depth = values = 0
    for match in _TOML_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > MAX_NESTING_DEPTH:
                raise too_deep(source, lines.line(match.start()))
        elif token in ("]", "}"):
            depth = max(depth - 1, 0)
        elif token in ("=", ","):
            values += 1
            if values > MAX_DOCUMENT_VALUES:
                raise too_many(source, lines.line(match.start()))


def check_data_depth(data: object, source: str | None, lines: dict[tuple[str | int, ...], int]) -> None:
    """Nesting depth of parsed data (TOML's dotted keys nest without brackets), walked without recursion."""
    pending: list[tuple[object, tuple[str | int, ...]]] = [(data, ())]
    while pending:
        value, path = pending.pop()
        if len(path) > MAX_NESTING_DEPTH:
            raise too_deep(source, _first_line_under(path, lines))
        if isinstance(value, dict):
            pending.extend((item, (*path, str(key))) for key, item in value.items())
        elif isinstance(value, list):
            pending.extend((item, (*path, index)) for index, item in enumerate(value))


def _first_line_under(path: tuple[str | int, ...], lines: dict[tuple[str | int, ...], int]) -> int | None:
    """The first line of a key at or below ``path`` (a dotted key sets a deep path on one line), else the line of
    its nearest ancestor with one (array items have no line of their own)."""
    below = [line for key, line in lines.items() if key[: len(path)] == path]
    if below:
        return min(below)
    return next((lines[path[:end]] for end in range(len(path), -1, -1) if path[:end] in lines), None)
