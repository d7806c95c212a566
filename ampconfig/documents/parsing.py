"""Reading user files (JSON, YAML, TOML) into plain data that remembers where every key came from.

Config, mixlist and op-info loaders share this: a :class:`Document` is the parsed data plus a
:class:`SourceMap` from JSON paths (``("run", "warmup")``) to line numbers, so a finding can say
``config.yaml:7: $.run.warmup``. Reading and parsing failures (missing file, directory, non-UTF-8, syntax)
raise :class:`AmpconfigError`: the input is unusable. Problems found in parsed data (duplicate keys, wrong
types) are returned as :class:`Problem` findings.

Reading is bounded (files of at most :data:`~ampconfig.files.bounded.MAX_DOCUMENT_BYTES`), and so is parsing:
parsers are fast on the files people write and slow or unsafe on hostile ones (a YAML file of 1.1 KB with nested
anchors expands to billions of values, deeply nested JSON exhausts Python's recursion, a million keys take minutes
to parse). Every document is checked before the expensive step against :data:`MAX_NESTING_DEPTH` (arrays and
objects inside each other: a scan before JSON and TOML are parsed, and while YAML is composed by
:mod:`ampconfig.documents.bounded_yaml`) and :data:`MAX_DOCUMENT_VALUES` (keys plus values plus array items, a YAML
alias counted as the values it stands for wherever it is used), each refused with a located error (exit 2). A YAML
alias that refers to the collection it is inside is refused: nothing downstream can walk it.
"""

from __future__ import annotations

import bisect
import difflib
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

from pydantic import BaseModel, ValidationError

from ampconfig.documents.document_limits import (
    MAX_DOCUMENT_VALUES,
    MAX_NESTING_DEPTH,
    too_deep,
    too_many,
)
from ampconfig.errors import AmpconfigError, Problem, Severity

# Re-exported (``as``): reading a bounded UTF-8 file is files/bounded's; every format reads through it.
from ampconfig.files.bounded import decode_utf8 as decode_utf8
from ampconfig.files.bounded import read_text as read_text

if TYPE_CHECKING:
    from yaml.nodes import Node

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

JsonPath = tuple[str | int, ...]

#: json's own string scanner (the C one where available): the string starting after the quote at ``pos``, and the
#: position after its closing quote. typeshed's json.decoder leaves scanstring out, though json.decoder defines it.
_scan_string: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
DocumentFormat = Literal["json", "yaml", "toml"]

#: File suffixes of the structured formats, and the format each one means.
FORMAT_BY_SUFFIX: dict[str, DocumentFormat] = {
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
}

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def format_json_path(path: Iterable[str | int]) -> str:
    """``("black-list", "to-add", 0)`` → ``$.black-list.to-add[0]`` (odd keys quoted: ``$["a b"]``)."""
    text = "$"
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            text += f".{part}"
        else:
            text += f"[{json.dumps(part)}]"
    return text


@dataclass(frozen=True)
class SourceMap:
    """Where the values of one document are: file name, and the line of each JSON path.

    ``prefix`` places a document inside another one (a mixlist written inline in a config lives under
    ``("modify_mixlist",)`` of the config file), so findings point into the file the user edits.
    """

    file: str | None = None
    lines: Mapping[JsonPath, int] = field(default_factory=dict)
    prefix: JsonPath = ()
    #: how paths are shown where the document is no JSON (a TensorFlow list file names its variables)
    path_names: Mapping[JsonPath, str] = field(default_factory=dict)

    def line_of(self, path: JsonPath) -> int | None:
        """The line of ``path``, or of its nearest ancestor with one (a missing key points at its parent)."""
        full = self.prefix + tuple(path)
        for end in range(len(full), -1, -1):
            line = self.lines.get(full[:end])
            if line is not None:
                return line
        return None

    def json_path(self, path: JsonPath) -> str:
        full = self.prefix + tuple(path)
        return self.path_names.get(full) or format_json_path(full)

    def nested(self, path: JsonPath) -> SourceMap:
        return SourceMap(self.file, self.lines, self.prefix + tuple(path), self.path_names)

    def problem(
        self,
        message: str,
        path: JsonPath = (),
        *,
        hint: str | None = None,
        severity: Severity = Severity.ERROR,
    ) -> Problem:
        return Problem(
            message,
            file=self.file,
            line=self.line_of(path),
            json_path=self.json_path(path),
            hint=hint,
            severity=severity,
        )


@dataclass(frozen=True)
class Document:
    """Parsed data, where its parts came from, and the findings parsing made (duplicate keys)."""

    data: Any
    source: SourceMap
    problems: tuple[Problem, ...] = ()


# ---------------------------------------------------------------------------------------------- line numbers
class LineIndex:
    """Line numbers (1-based) of character offsets in a text."""

    def __init__(self, text: str) -> None:
        self._newlines = [match.start() for match in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        return bisect.bisect_left(self._newlines, offset) + 1  # one more than the newlines before ``offset``


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


# --------------------------------------------------------------------------------------------------- reading
#: How a path in a session config is read: said where a file the config names is missing.
RELATIVE_TO_CONFIG = "relative paths in a config are resolved against the config file's folder"


# --------------------------------------------------------------------------------------------------- parsing
def parse_document(
    text: str, source: str | None, fmt: DocumentFormat, *, max_json_values: int = MAX_DOCUMENT_VALUES
) -> Document:
    """Parse JSON/YAML/TOML text; syntax errors and empty documents raise AmpconfigError with the line.
    ``max_json_values`` bounds a JSON document's keys, values and items (lock files hold one entry per node)."""
    if not text.strip():
        raise AmpconfigError("file is empty", file=source, hint="write a mapping of keys to values")
    if fmt == "json":
        return _parse_json(text, source, max_json_values)
    if fmt == "yaml":
        return _parse_yaml(text, source)
    return _parse_toml(text, source)


def document_format(path: Path) -> DocumentFormat:
    fmt = FORMAT_BY_SUFFIX.get(path.suffix.lower())
    if fmt is None:
        raise AmpconfigError(
            f"unsupported file type {path.suffix or '(no suffix)'!r}",
            file=str(path),
            hint="accepted suffixes: " + ", ".join(FORMAT_BY_SUFFIX),
        )
    return fmt


def _parse_json(text: str, source: str | None, max_values: int = MAX_DOCUMENT_VALUES) -> Document:
    comments = scan_json(text, source, max_values).comments  # also refuses deep nesting and too many values
    if comments:
        first_line, marker = comments[0]
        lines = ", ".join(str(line) for line, _ in comments)
        raise AmpconfigError(
            f"comments are not allowed in JSON: {marker} comment on line {lines}",
            file=source,
            line=first_line,
            problems=[
                Problem(
                    f"comments are not allowed in JSON ({kind} comment)",
                    file=source,
                    line=line,
                    hint="remove the comment; JSON has no comment syntax",
                )
                for line, kind in comments
            ],
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AmpconfigError(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", file=source, line=exc.lineno
        ) from None
    locator = _JsonLocator(text)
    locator.value(0, ())
    smap = SourceMap(source, locator.lines)
    return Document(data, smap, tuple(_duplicate_problems(locator.duplicates, smap)))


def json_source_map(text: str, source: str | None) -> SourceMap:
    """The line of every key and array item of JSON text that ``json.loads`` accepts."""
    locator = _JsonLocator(text)
    locator.value(0, ())
    return SourceMap(source, locator.lines)


def _parse_yaml(text: str, source: str | None) -> Document:
    import yaml  # imported where used: only a command that reads YAML loads PyYAML

    from ampconfig.documents.bounded_yaml import compose_yaml

    try:
        node, loader = compose_yaml(text, source)  # refuses deep nesting, alias bombs and too many values
        try:
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        where = f" (line {line}, column {mark.column + 1})" if mark is not None else ""
        reason = exc.problem or exc.context or "syntax error"
        raise AmpconfigError(f"not valid YAML: {reason}{where}", file=source, line=line) from None
    except yaml.YAMLError as exc:
        raise AmpconfigError(f"not valid YAML: {exc}", file=source) from None
    if node is None or data is None:
        raise AmpconfigError("file is empty (only comments or `null`)", file=source)
    lines: dict[JsonPath, int] = {}
    duplicates: list[tuple[JsonPath, int]] = []
    _walk_yaml(node, (), lines, duplicates)
    smap = SourceMap(source, lines)
    return Document(data, smap, tuple(_duplicate_problems(duplicates, smap)))


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


_TOML_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")
_TOML_TABLE = re.compile(r"^\[\[?\s*([^\]]+?)\s*\]\]?")
_TOML_KEY = re.compile(
    r"^((?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|\"[^\"]*\"|'[^']*'))*)\s*="
)


def _parse_toml(text: str, source: str | None) -> Document:
    scan_toml(text, source)  # tomllib is recursive: refuse deep nesting and too many values first
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_LINE.search(message)
        line = int(match.group(1)) if match else None
        raise AmpconfigError(f"not valid TOML: {message}", file=source, line=line) from None
    if not data:
        raise AmpconfigError("file is empty (no keys)", file=source)
    lines = _toml_lines(text)
    check_data_depth(data, source, lines)  # dotted keys (a.b.c = 1) nest without brackets
    return Document(data, SourceMap(source, lines))


def _toml_key_parts(dotted: str) -> JsonPath:
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_\-]+)", dotted)
    return tuple(next(group for group in groups if group) for groups in parts)


def _toml_lines(text: str) -> dict[JsonPath, int]:
    """Best-effort key lines: tomllib keeps no positions; follow `[table]` headers and `key =` lines."""
    lines: dict[JsonPath, int] = {}
    table: JsonPath = ()
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        header = _TOML_TABLE.match(stripped)
        if header:
            table = _toml_key_parts(header.group(1))
            lines.setdefault(table, number)
            continue
        key = _TOML_KEY.match(stripped)
        if key:
            lines.setdefault(table + _toml_key_parts(key.group(1)), number)
    return lines


def _walk_yaml(node: Node, path: JsonPath, lines: dict[JsonPath, int], duplicates: list[tuple[JsonPath, int]]) -> None:
    from yaml.nodes import MappingNode, SequenceNode

    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            key_path = (*path, key)
            if key in seen:
                duplicates.append((key_path, key_node.start_mark.line + 1))
                continue
            seen.add(key)
            lines[key_path] = key_node.start_mark.line + 1
            _walk_yaml(value_node, key_path, lines, duplicates)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _walk_yaml(item, (*path, index), lines, duplicates)


def _duplicate_problems(duplicates: list[tuple[JsonPath, int]], smap: SourceMap) -> list[Problem]:
    first_lines = smap.lines
    return [
        Problem(
            f"duplicate key {path[-1]!r} (first defined on line {first_lines.get(path, '?')})",
            file=smap.file,
            line=line,
            json_path=format_json_path(path),
            hint="a later value silently replaces the earlier one; keep one",
        )
        for path, line in duplicates
    ]


_JSON_WS = re.compile(r"[ \t\n\r]*")
_JSON_SCALAR = re.compile(r"true|false|null|NaN|-?Infinity|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")


class _JsonLocator:
    """Walks JSON text that ``json.loads`` accepted, recording the line of every key and array item.

    The standard library parser keeps no positions; this small scanner does, and finds duplicate keys, which
    ``json.loads`` silently resolves to the last value.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.line_at = LineIndex(text).line
        self.lines: dict[JsonPath, int] = {}
        self.duplicates: list[tuple[JsonPath, int]] = []

    def skip(self, pos: int) -> int:
        match = _JSON_WS.match(self.text, pos)
        return match.end() if match else pos

    def value(self, pos: int, path: JsonPath) -> int:
        pos = self.skip(pos)
        self.lines.setdefault(path, self.line_at(pos))
        char = self.text[pos]
        if char == "{":
            return self.object(pos + 1, path)
        if char == "[":
            return self.array(pos + 1, path)
        if char == '"':
            return _scan_string(self.text, pos + 1)[1]
        match = _JSON_SCALAR.match(self.text, pos)
        assert match is not None, "text was accepted by json.loads"
        return match.end()

    def object(self, pos: int, path: JsonPath) -> int:
        seen: set[str] = set()
        pos = self.skip(pos)
        if self.text[pos] == "}":
            return pos + 1
        while True:
            pos = self.skip(pos)
            key, end = _scan_string(self.text, pos + 1)
            key_path = (*path, key)
            if key in seen:
                self.duplicates.append((key_path, self.line_at(pos)))
            else:
                self.lines[key_path] = self.line_at(pos)
            seen.add(key)
            pos = self.skip(end) + 1  # the colon
            pos = self.skip(self.value(pos, key_path))
            if self.text[pos] == "}":
                return pos + 1
            pos += 1  # the comma

    def array(self, pos: int, path: JsonPath) -> int:
        pos = self.skip(pos)
        if self.text[pos] == "]":
            return pos + 1
        index = 0
        while True:
            pos = self.skip(self.value(pos, (*path, index)))
            if self.text[pos] == "]":
                return pos + 1
            pos += 1
            index += 1


# --------------------------------------------------------------------------------------- pydantic → findings
#: Discriminator tags of path-or-object unions: pydantic puts them in error locations; users never see them.
UNION_TAGS = frozenset({"@path", "@object", "@list"})


def validation_problems(exc: ValidationError, smap: SourceMap, model: type[BaseModel]) -> list[Problem]:
    """Pydantic errors as located findings, worded for people editing the file."""
    problems = []
    for error in exc.errors():
        path = tuple(part for part in error["loc"] if part not in UNION_TAGS)
        # a record's own rule (fields that contradict each other) says which of its fields it is about
        path += tuple((error.get("ctx") or {}).get("at", ()))
        message, hint = _describe_error(error, path, model)
        problems.append(smap.problem(message, path, hint=hint))
    return problems


def _describe_error(error: Mapping[str, Any], path: JsonPath, model: type[BaseModel]) -> tuple[str, str | None]:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        return _unknown_key(path, model)
    if kind == "missing":
        return f"missing required key {path[-1]!r}", None
    if kind == "value_error":
        return str(ctx.get("error", error["msg"])), None
    if kind == "string_pattern_mismatch":  # a regex is no answer to someone editing a file: say it in words
        allowed = PATTERN_WORDS.get(str(ctx.get("pattern")), "text of another form")
        what = "key" if path and path[-1] == "[key]" else "value"
        return f"the {what} must be {allowed}, got {describe_value(error.get('input'))}", None
    if "hint" in ctx:  # our own PydanticCustomError with a hint
        return error["msg"], str(ctx["hint"])
    # Type and constraint errors: say what was found, since the reader may not have the file open.
    return f"{_lower_first(error['msg'])}, got {describe_value(error.get('input'))}", None


#: What each pattern of ampconfig's file formats allows, in words (every pattern a schema holds has its words here).
PATTERN_WORDS = {
    r"^[0-9a-f]{64}$": "a SHA-256: 64 lowercase hexadecimal digits (0-9, a-f)",
    r"^(0|-?[1-9][0-9]{0,2})$": "a binary exponent: a whole number in ASCII digits from -149 to 127, with no "
    "plus sign, point or leading zero",
    r"^(?:[A-Za-z0-9_.\-]+::)?[A-Za-z_][A-Za-z0-9_]*$": "an op type: ASCII letters, digits and underscores, not "
    "starting with a digit, after an optional domain and ::",
}


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def describe_value(value: Any) -> str:
    """A short description of a parsed value for messages: its JSON type and a bounded repr."""
    kind = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
        type(None): "null",
    }.get(type(value), type(value).__name__)
    if isinstance(value, (dict, list)) or value is None:  # "null" says it all ("null null" said it twice)
        return kind
    text = json.dumps(value) if isinstance(value, (bool, int, float, str, type(None))) else repr(value)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


def _unknown_key(path: JsonPath, model: type[BaseModel]) -> tuple[str, str | None]:
    key = str(path[-1])
    valid = valid_keys_at(model, path[:-1])
    message = f"unknown key {key!r}"
    if not valid:
        return message, None
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    listing = "valid keys here: " + ", ".join(valid)
    return message, (f"did you mean {close[0]!r}? " if close else "") + listing


def valid_keys_at(model: type[BaseModel], path: JsonPath) -> list[str]:
    """The keys a model accepts at ``path`` (aliases, as written in files), or [] where keys are free."""
    annotation: Any = model
    for part in path:
        annotation = _descend(annotation, part)
        if annotation is None:
            return []
    found = _model_in(annotation)
    if found is None:
        return []
    return [info.alias or name for name, info in found.model_fields.items()]


def _descend(annotation: Any, part: str | int) -> Any:
    annotation = _strip_annotated(annotation)
    if _is_union(annotation):
        for member in typing.get_args(annotation):
            inner = _descend(member, part)
            if inner is not None:
                return inner
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for name, info in annotation.model_fields.items():
            if part in (name, info.alias):
                return info.annotation
        return None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is dict and len(args) == 2 and isinstance(part, str):
        return args[1]
    if origin is list and args and isinstance(part, int):
        return args[0]
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    annotation = _strip_annotated(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if _is_union(annotation):
        for member in typing.get_args(annotation):
            found = _model_in(member)
            if found is not None:
                return found
    return None


def _strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (Union, types.UnionType)


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice most like ``word`` (a key, a mode, a dtype), if any is close enough to be a slip of the keys."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return matches[0] if matches else None


#: How alike a node name must be to suggest it. Node names share their op type and scopes ("/MatMul",
#: "encoder/layer.0/"), which alone make two unrelated names 0.6 alike ('注意力/MatMul' and 'attn.v/MatMul'); a
#: misspelt or mis-numbered name of the same model stays above 0.8.
NODE_NAME_CUTOFF = 0.8


def closest_node_name(name: str, names: Iterable[str]) -> str | None:
    """The model's node name most like ``name``, if it is genuinely close (:data:`NODE_NAME_CUTOFF`)."""
    matches = difflib.get_close_matches(name, list(names), n=1, cutoff=NODE_NAME_CUTOFF)
    return matches[0] if matches else None


def require_format(
    document: Any,
    source: str | None,
    *,
    what: str,
    versioned: str,
    fmt: str,
    version: int | tuple[int, ...],
    hint: str,
) -> None:
    """Raise a located AmpconfigError unless the parsed ``document`` (``data`` and its ``source`` map) is an object
    whose ``format`` is ``fmt`` and whose ``format_version`` is exactly the integer ``version`` (or one of them;
    ``true`` is no version, though Python counts it as 1): what tells one of ampconfig's files (a lock, a ranges
    file, named ``what`` and ``versioned`` in messages) from any other JSON. A version above every one read was
    written by a newer ampconfig, and says so."""
    versions = version if isinstance(version, tuple) else (version,)
    data = document.data
    if not isinstance(data, dict) or data.get("format") != fmt:
        found = describe_value(data.get("format")) if isinstance(data, dict) else describe_value(data)
        problem = document.source.problem(
            f'not an ampconfig {what}: expected "format": "{fmt}", got {found}',
            ("format",) if isinstance(data, dict) else (),
            hint=hint,
        )
        raise AmpconfigError(problem.message, file=source, problems=[problem])
    found_version = data.get("format_version")
    if type(found_version) is not int or found_version not in versions:
        newest = max(versions)
        if type(found_version) is int and found_version > newest:  # from a later release: said so, never "edited"
            message = f"{what} written by a newer ampconfig (format {found_version}; this one reads up to {newest})"
            problem = document.source.problem(message, ("format_version",), hint="upgrade ampconfig to read it")
        else:
            readable = ", ".join(str(each) for each in versions)
            problem = document.source.problem(
                f"{versioned} format version {json.dumps(found_version)} is not one this ampconfig reads ({readable})",
                ("format_version",),
                hint=hint,
            )
        raise AmpconfigError(problem.message, file=source, problems=[problem])
