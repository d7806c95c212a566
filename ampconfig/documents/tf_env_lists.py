"""TensorFlow's auto-mixed-precision list edits, read as a mixlist (docs/op-names.md, "TensorFlow's lists").

TensorFlow's graph rewrite takes its list edits from environment variables, each a comma-separated list of op
types (``tensorflow/core/grappler/optimizers/auto_mixed_precision_lists.h``)::

    TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_ALLOWLIST_ADD=MatMul,BatchMatMulV2
    TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD=Softmax

A TensorFlow user has them in a launch script or an env file, so ampconfig reads exactly that: a file of
``NAME=value`` lines (``export`` and quotes allowed, ``#`` comments; ``env | grep TF_AUTO_MIXED_PRECISION``
writes one) wherever a mixlist file goes, or the same names as keys of an inline ``modify_mixlist`` mapping in a
session config. The names are TensorFlow's (``op_names: tensorflow`` unless the setting says otherwise), and the
edits become Ascend's:

============================  ==================================================================================
ALLOWLIST (WHITELIST) _ADD    white-list to-add
DENYLIST (BLACKLIST) _ADD     black-list to-add
INFERLIST (GRAYLIST) _ADD     gray-list to-add
ALLOWLIST/DENYLIST _REMOVE    white-list / black-list to-remove (the op becomes gray, as on Ascend)
INFERLIST/CLEARLIST _REMOVE   black-list to-add: TensorFlow keeps an op on no list in float32 (warned: black
                              also makes the gray ops after it float32)
CLEARLIST_ADD                 gray-list to-add (warned: a mixlist has no clear list)
============================  ==================================================================================

TensorFlow's pre-2.4 names (WHITELIST, BLACKLIST, GRAYLIST) are read too. ``..._LEVEL`` is not a list edit: it
is reported and ignored. A file is read as these variables when any line sets one, so a whole env file works;
its other variables (``PATH=...``) are ignored, a note each.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ampconfig.documents.parsing import JsonPath, SourceMap, closest
from ampconfig.errors import Problem, Severity

PREFIX = "TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_"
LEVEL = PREFIX + "LEVEL"


@dataclass(frozen=True)
class _Edit:
    list_key: str
    action: str
    warning: str | None = None


_NO_LIST = (
    "TensorFlow keeps an op on no list in float32; the nearest in a mixlist is the black list (black also makes the "
    "gray ops after it float32)"
)
_EDITS: dict[str, _Edit] = {}
for _names, _list, _add_warning in (
    (("ALLOWLIST", "WHITELIST"), "white-list", None),
    (("DENYLIST", "BLACKLIST"), "black-list", None),
    (("INFERLIST", "GRAYLIST"), "gray-list", None),
    (("CLEARLIST",), "gray-list", "a mixlist has no clear list: the op becomes gray (it follows its inputs)"),
):
    for _name in _names:
        _EDITS[f"{PREFIX}{_name}_ADD"] = _Edit(_list, "to-add", _add_warning)
        if _list in ("white-list", "black-list"):
            _EDITS[f"{PREFIX}{_name}_REMOVE"] = _Edit(_list, "to-remove")
        else:
            _EDITS[f"{PREFIX}{_name}_REMOVE"] = _Edit("black-list", "to-add", _NO_LIST)

#: The variables, for `--help` and the docs.
VARIABLES: tuple[str, ...] = tuple(_EDITS)

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$")
#: A TOML table header, ``[modify_mixlist]`` or ``[[array]]``, alone on its line.
_TOML_TABLE = re.compile(r"^\s*\[\[?[^\[\]=]+\]\]?\s*(?:#.*)?$")


def is_tf_lists_text(text: str) -> bool:
    """True when any line sets a TensorFlow list variable: an env file (``env > amp.env``, a launch script's
    exports) sets other variables too, in any order. A TOML config's ``[modify_mixlist]`` table sets the same
    names with the same syntax; its table header tells it apart (an env file has none). JSON and YAML spell a
    key differently (quoted, or followed by a colon)."""
    if any(_TOML_TABLE.match(line) for line in text.splitlines()):
        return False
    for line in text.splitlines():
        match = _ASSIGNMENT.match(line)
        if match is not None and match.group(1).startswith(PREFIX):
            return True
    return False


def is_tf_lists_mapping(data: Any) -> bool:
    return isinstance(data, Mapping) and bool(data) and all(str(key).startswith(PREFIX) for key in data)


@dataclass
class _Builder:
    """The mixlist data being built, where each entry came from, and the findings."""

    origin: SourceMap
    data: dict[str, dict[str, list[str]]]
    lines: dict[JsonPath, int]
    names: dict[JsonPath, str]
    problems: list[Problem]

    def add(self, variable: str, value: str, line: int | None, key: JsonPath) -> None:
        """One variable's comma-separated op types; ``key`` is where the variable is in the enclosing document."""
        edit = _EDITS.get(variable)
        where = Problem("", file=self.origin.file, line=line, json_path=self.origin.json_path(key) if key else None)
        if variable == LEVEL:
            self._problem(where, f"{LEVEL} is not a list edit: ignored", Severity.WARNING)
            return
        if edit is None and not variable.startswith(PREFIX):  # an env file's PATH, HOME ...: not ours to read
            self._problem(where, f"{variable} is not a TensorFlow list variable: ignored", Severity.NOTE)
            return
        if edit is None:
            suggestion = closest(variable, VARIABLES)
            self._problem(
                where,
                f"{variable} is not one of TensorFlow's auto-mixed-precision list variables",
                Severity.ERROR,
                (f"did you mean {suggestion}? " if suggestion else "")
                + f"the variables are {PREFIX}{{ALLOWLIST,DENYLIST,INFERLIST,CLEARLIST}}_{{ADD,REMOVE}}",
            )
            return
        ops = self.data.setdefault(edit.list_key, {}).setdefault(edit.action, [])
        for op in (part.strip() for part in value.split(",")):
            if not op:
                continue
            path = (edit.list_key, edit.action, len(ops))
            ops.append(op)
            self.names[path] = f"{variable}: {op}"
            if line is not None:
                self.lines[path] = line
            if edit.warning:
                self._problem(where, f"{variable}: {op}: {edit.warning}", Severity.WARNING)

    def _problem(self, where: Problem, message: str, severity: Severity, hint: str | None = None) -> None:
        self.problems.append(Problem(message, where.file, where.line, where.json_path, hint, severity))

    def result(self) -> tuple[dict[str, Any], SourceMap, list[Problem]]:
        origin = SourceMap(self.origin.file, {**self.origin.lines, **self.lines}, (), self.names)
        return self.data, origin, self.problems


def tf_lists_from_text(text: str, source: str | None) -> tuple[dict[str, Any], SourceMap, list[Problem]]:
    """A TensorFlow list file as mixlist data, the source map of its entries (each at its line), and findings."""
    builder = _Builder(SourceMap(source), {}, {}, {}, [])
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ASSIGNMENT.match(stripped)
        if match is None:
            builder.problems.append(
                Problem(
                    "not a NAME=value line",
                    file=source,
                    line=number,
                    hint=f"write e.g. {PREFIX}DENYLIST_ADD=Exp,Pow (one variable per line)",
                )
            )
            continue
        try:
            words = shlex.split(match.group(2), comments=True)
        except ValueError as exc:
            builder.problems.append(Problem(f"cannot read the value: {exc}", file=source, line=number))
            continue
        builder.add(match.group(1), " ".join(words), number, ())
    return builder.result()


def tf_lists_from_mapping(
    data: Mapping[str, Any], origin: SourceMap
) -> tuple[dict[str, Any], SourceMap, list[Problem]]:
    """The same variables as keys of an inline mapping (a config's ``modify_mixlist``); values are strings of
    comma-separated op types, or lists of op types."""
    builder = _Builder(origin, {}, {}, {}, [])
    for variable, value in data.items():
        key = (str(variable),)
        line = origin.line_of(key)
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            value = ",".join(value)
        if not isinstance(value, str):
            builder.problems.append(
                origin.problem(f"{variable} takes comma-separated op types (a string) or a list of them", key)
            )
            continue
        builder.add(str(variable), value, line, key)
    # Entries point at their variable's line inside the enclosing file.
    lines = {**origin.lines, **_prefixed(builder.lines, origin)}
    nested = SourceMap(origin.file, lines, origin.prefix, _prefixed(builder.names, origin))
    return builder.data, nested, builder.problems


def _prefixed(values: Mapping[JsonPath, Any], origin: SourceMap) -> dict[JsonPath, Any]:
    return {origin.prefix + path: value for path, value in values.items()}
