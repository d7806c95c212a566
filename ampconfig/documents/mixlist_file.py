"""modify_mixlist: the user's edits to the built-in op lists, in Ascend's format and with Ascend's semantics.

.. code-block:: json

    {"black-list": {"to-add": ["MatMul"], "to-remove": ["Erf"]},
     "white-list": {"to-add": ["Softmax"], "to-remove": ["Conv"]},
     "gray-list":  {"to-add": ["Add"]}}

Per op type every entry of the file combines into one *combination*; exactly eleven are valid (docs/design.md
§4, :data:`VALID_COMBINATIONS`). Applying a valid combination: a to-remove of the list the op is on moves it to
gray, a to-remove of another list changes nothing (and warns), then add-black → black, else add-white → white,
else add-gray → gray.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from ampconfig.documents.parsing import (
    Document,
    JsonPath,
    SourceMap,
    closest,
    describe_value,
    parse_document,
    read_text,
    validation_problems,
)
from ampconfig.documents.tf_env_lists import (
    is_tf_lists_mapping,
    is_tf_lists_text,
    tf_lists_from_mapping,
    tf_lists_from_text,
)
from ampconfig.domains import DEFAULT_DOMAINS
from ampconfig.errors import AmpconfigError, Problem, Severity
from ampconfig.opinfo.library import Colour, OpLists
from ampconfig.opinfo.op_names import (
    AmbiguousOpName,
    OpName,
    Vocabulary,
    file_vocabulary,
    read_as_onnx_note,
    read_op_name,
)

#: `OpType`, or `domain::OpType` for an op outside the default ONNX domain.
OP_KEY_PATTERN = r"^(?:[A-Za-z0-9_.\-]+::)?[A-Za-z_][A-Za-z0-9_]*$"
_OP_KEY_HINT = (
    "write the ONNX op type exactly (case-sensitive), e.g. 'MatMul', or 'domain::OpType' such as "
    "'com.microsoft::FusedMatMul'"
)


def _check_op_key(value: str) -> str:
    if not re.match(OP_KEY_PATTERN, value):
        raise PydanticCustomError("op_key", f"{value!r} is not an op type name", {"hint": _OP_KEY_HINT})
    return value


OpKeyName = Annotated[
    str,
    AfterValidator(_check_op_key),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": OP_KEY_PATTERN,
            "description": "ONNX op type, exact and case-sensitive: `OpType`, or `domain::OpType` outside "
            "the default ONNX domain.",
        }
    ),
]


class ListEdit(BaseModel):
    """Op types to add to or remove from one list."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    to_add: list[OpKeyName] = Field(
        default_factory=list,
        alias="to-add",
        description="Op types moved onto this list.",
    )
    to_remove: list[OpKeyName] = Field(
        default_factory=list,
        alias="to-remove",
        description="Op types taken off this list; they become gray unless also added to another list. "
        "Removing an op from a list it is not on changes nothing.",
    )


class Mixlist(BaseModel):
    """Ascend modify_mixlist: per-op edits of the built-in black/white/gray lists (mixed modes only)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", title="ampconfig modify_mixlist")

    schema_ref: str | None = Field(default=None, alias="$schema", description="JSON Schema of this file.")
    black_list: ListEdit = Field(
        default_factory=ListEdit,
        alias="black-list",
        description="Black list (deny): ops always kept in fp32; their gray and clear neighbours follow.",
    )
    white_list: ListEdit = Field(
        default_factory=ListEdit,
        alias="white-list",
        description="White list (allow): ops always computed in low precision (fp16/bf16).",
    )
    gray_list: ListEdit = Field(
        default_factory=ListEdit,
        alias="gray-list",
        description="Gray list (infer): ops follow their inputs. Ascend ignores gray-list to-add alone; "
        "ampconfig honours it.",
    )

    _origin: SourceMap = PrivateAttr(default_factory=SourceMap)
    _op_names: Vocabulary | None = PrivateAttr(default=None)
    _format_problems: tuple[Problem, ...] = PrivateAttr(default=())

    @property
    def origin(self) -> SourceMap:
        """Where this mixlist was written: file, lines, and its place inside a config when inline."""
        return self._origin

    @property
    def op_names(self) -> Vocabulary | None:
        """Whose op names the file's format implies (TensorFlow's list format: tensorflow); None: not implied."""
        return self._op_names

    @property
    def format_problems(self) -> tuple[Problem, ...]:
        """Warnings reading the file's format gave (a TensorFlow clear-list edit, which a mixlist cannot carry)."""
        return self._format_problems

    def located(
        self, origin: SourceMap, op_names: Vocabulary | None = None, format_problems: tuple[Problem, ...] = ()
    ) -> Mixlist:
        self._origin = origin
        self._op_names = op_names
        self._format_problems = format_problems
        return self

    def list_edit(self, colour: Colour) -> ListEdit:
        return {Colour.BLACK: self.black_list, Colour.WHITE: self.white_list, Colour.GRAY: self.gray_list}[colour]


class Edit(str, Enum):
    """One kind of mixlist entry."""

    ADD_BLACK = "add-black"
    ADD_WHITE = "add-white"
    ADD_GRAY = "add-gray"
    REMOVE_BLACK = "remove-black"
    REMOVE_WHITE = "remove-white"
    REMOVE_GRAY = "remove-gray"

    @property
    def colour(self) -> Colour:
        return Colour(self.value.split("-")[1])

    @property
    def is_add(self) -> bool:
        return self.value.startswith("add")

    @property
    def list_key(self) -> str:
        return f"{self.colour.value}-list"

    @property
    def action(self) -> str:
        return "to-add" if self.is_add else "to-remove"

    def describe(self) -> str:
        return f"{self.list_key} {self.action}"


def _combination(*edits: Edit) -> frozenset[Edit]:
    return frozenset(edits)


#: The eleven per-op combinations Ascend accepts (docs/design.md §4).
VALID_COMBINATIONS: frozenset[frozenset[Edit]] = frozenset(
    {
        _combination(Edit.REMOVE_BLACK),
        _combination(Edit.REMOVE_WHITE),
        _combination(Edit.ADD_GRAY),
        _combination(Edit.ADD_GRAY, Edit.REMOVE_BLACK),
        _combination(Edit.ADD_GRAY, Edit.REMOVE_WHITE),
        _combination(Edit.ADD_WHITE),
        _combination(Edit.ADD_WHITE, Edit.REMOVE_GRAY),
        _combination(Edit.ADD_WHITE, Edit.REMOVE_BLACK),
        _combination(Edit.ADD_BLACK),
        _combination(Edit.ADD_BLACK, Edit.REMOVE_GRAY),
        _combination(Edit.ADD_BLACK, Edit.REMOVE_WHITE),
    }
)

_VALID_HINT = (
    "valid per op: one to-add (black, white or gray) with at most one to-remove of a different list, "
    "or a to-remove of black-list or white-list alone"
)
_EDIT_ORDER = list(Edit)


@dataclass(frozen=True)
class MixlistEntry:
    """One op type written in one array of the mixlist."""

    op: str  # the ONNX op key: `Op`, or `domain::Op` outside the default domain
    written: str  # as the user wrote it
    edit: Edit
    path: JsonPath  # e.g. ("black-list", "to-add", 0)
    name: OpName | None = None  # how a TensorFlow/Ascend name was read (docs/op-names.md); None for ONNX names

    @property
    def mapped(self) -> bool:
        return self.name is not None and self.name.mapped


def normalise_op_key(written: str) -> str:
    """``ai.onnx::Relu`` and ``::Relu`` mean ``Relu``: the default domain is written without a prefix."""
    domain, sep, op_type = written.rpartition("::")
    if sep and domain in DEFAULT_DOMAINS:
        return op_type
    return written


OpNames = Vocabulary | str | None


def read_entries(mixlist: Mixlist, op_names: OpNames = None) -> tuple[list[MixlistEntry], list[Problem]]:
    """Every entry with the ONNX op it names, and what reading the names found: each TensorFlow/Ascend name mapped
    to its ONNX op (a note), a name without an ONNX equivalent (a warning; the entry moves nothing) and an
    ambiguous name (an error listing the choices). ``op_names`` (the setting) wins over the file format's own."""
    setting = op_names if op_names is not None else mixlist.op_names
    origin = mixlist.origin
    written_ops = [
        (edit, index, written)
        for edit in Edit
        for index, written in enumerate(_edit_ops(mixlist.list_edit(edit.colour), edit))
    ]
    vocabulary = file_vocabulary((normalise_op_key(written) for _, _, written in written_ops), setting)
    entries: list[MixlistEntry] = []
    problems: list[Problem] = []
    for edit, index, written in written_ops:
        path = (edit.list_key, edit.action, index)
        key = normalise_op_key(written)
        try:
            name = read_op_name(key, vocabulary)
        except AmbiguousOpName as exc:
            problems.append(origin.problem(str(exc), path, hint=exc.hint))
            continue
        note = read_as_onnx_note(key, setting)
        if note is not None:
            problems.append(origin.problem(note, path, severity=Severity.NOTE))
        if name.foreign is None:
            entries.append(MixlistEntry(key, written, edit, path))
        elif name.onnx is None:
            problems.append(_no_onnx_op_warning(name, origin, path))
        else:
            entries.append(MixlistEntry(name.onnx, written, edit, path, name))
            if name.mapped:
                problems.append(origin.problem(name.describe(), path, severity=Severity.NOTE))
    return entries, problems


def _edit_ops(list_edit: ListEdit, edit: Edit) -> list[str]:
    return list_edit.to_add if edit.is_add else list_edit.to_remove


def _no_onnx_op_warning(name: OpName, origin: SourceMap, path: JsonPath) -> Problem:
    assert name.foreign is not None
    why = f" ({name.foreign.note})" if name.foreign.note else ""
    return origin.problem(
        f"{name.describe()}{why}: this entry moves no ONNX op",
        path,
        hint="the ONNX export writes it as several ops: list those ONNX op types instead",
        severity=Severity.WARNING,
    )


def mixlist_entries(mixlist: Mixlist, op_names: OpNames = None) -> list[MixlistEntry]:
    return read_entries(mixlist, op_names)[0]


def entries_by_op(mixlist: Mixlist, op_names: OpNames = None) -> dict[str, list[MixlistEntry]]:
    """Entries grouped per ONNX op, ops in the order they first appear in the file (by line, then by list)."""
    return _grouped(mixlist_entries(mixlist, op_names), mixlist.origin)


def _grouped(entries: list[MixlistEntry], origin: SourceMap) -> dict[str, list[MixlistEntry]]:
    grouped: dict[str, list[MixlistEntry]] = {}
    for entry in sorted(entries, key=lambda entry: origin.line_of(entry.path) or 0):
        grouped.setdefault(entry.op, []).append(entry)
    return grouped


def combination_of(entries: list[MixlistEntry]) -> frozenset[Edit]:
    return frozenset(entry.edit for entry in entries)


def describe_combination(combination: Collection[Edit]) -> str:
    return " + ".join(edit.describe() for edit in sorted(combination, key=_EDIT_ORDER.index))


def combination_reasons(combination: frozenset[Edit]) -> list[str]:
    """Why a per-op combination is invalid; empty when it is one of the eleven valid ones."""
    if combination in VALID_COMBINATIONS:
        return []
    adds = sorted((edit.colour.value for edit in combination if edit.is_add), key=_colour_order)
    removes = sorted((edit.colour.value for edit in combination if not edit.is_add), key=_colour_order)
    reasons = []
    if len(adds) > 1:
        reasons.append(f"it is added to the {' and '.join(adds)} lists, but an op ends on exactly one list")
    for colour in sorted(set(adds) & set(removes), key=_colour_order):
        reasons.append(f"it is both added to and removed from the {colour} list")
    if len(removes) > 1:
        reasons.append(
            f"it is removed from the {' and '.join(removes)} lists, but an op is on one list, so at most one "
            "to-remove can apply"
        )
    if removes == ["gray"] and not adds:
        reasons.append(
            "removing it from the gray list alone moves it nowhere (removed ops become gray); add it to "
            "black-list or white-list as well"
        )
    return reasons or ["this is not one of the valid combinations"]


def _colour_order(colour: str) -> int:
    return ["black", "white", "gray"].index(colour)


@cache
def _onnx_op_names() -> tuple[str, ...]:
    import onnx.defs  # here, not at import: `validate` of a mixlist naming known ops loads no onnx

    return tuple(sorted({schema.name for schema in onnx.defs.get_all_schemas() if schema.domain in DEFAULT_DOMAINS}))


def is_onnx_op(key: str) -> bool:
    import onnx.defs

    domain, _, op_type = key.rpartition("::")
    return onnx.defs.has(op_type, domain if domain not in DEFAULT_DOMAINS else "")


#: "Did you mean" costs ~5 ms per unknown op (difflib against every op name); a generated mixlist with thousands
#: of custom ops took 25 s, so only the first unknown ops of a mixlist get a suggestion.
MAX_SUGGESTIONS = 20


def mixlist_problems(
    mixlist: Mixlist, source: str | None = None, known_ops: Collection[str] | None = None, op_names: OpNames = None
) -> list[Problem]:
    """Every finding about a mixlist's content: invalid combinations and ambiguous names (errors), warnings, and
    a note per TensorFlow/Ascend name read as its ONNX op (``op_names``: whose names the file uses).

    ``known_ops`` are the op keys of the target's op info; an op known neither there nor to the ONNX schemas
    is a warning (custom ops exist). ``source`` names the file when the mixlist does not know it.
    """
    origin = mixlist.origin
    if source is not None and origin.file is None:
        origin = dataclasses.replace(origin, file=source)
        mixlist = mixlist.model_copy().located(origin, mixlist.op_names, mixlist.format_problems)
    entries, problems = read_entries(mixlist, op_names)
    problems = [*mixlist.format_problems, *problems]
    grouped = _grouped(entries, origin)
    if not grouped and not problems:
        return [origin.problem("the mixlist changes nothing: no op types listed", severity=Severity.WARNING)]
    unknown = 0
    for op, entries in grouped.items():
        problems.extend(_op_problems(op, entries, origin, tf_lists=mixlist.op_names is Vocabulary.TENSORFLOW))
        if not (known_ops is not None and op in known_ops) and not is_onnx_op(op):
            unknown += 1
            suggest = unknown <= MAX_SUGGESTIONS
            problems.append(_unknown_op_warning(op, entries[0].path, origin, known_ops, suggest))
    return problems


def op_label(op: str, entries: list[MixlistEntry]) -> str:
    """``'Conv'``, or ``'Conv' (written 'Conv2D')`` when the file named it the TensorFlow/Ascend way."""
    written = list(dict.fromkeys(entry.written for entry in entries if entry.mapped))
    return f"{op!r}" + (f" (written {', '.join(repr(name) for name in written)})" if written else "")


def _op_problems(op: str, entries: list[MixlistEntry], origin: SourceMap, tf_lists: bool = False) -> list[Problem]:
    problems = []
    first = entries[0]
    combination = combination_of(entries)
    reasons = combination_reasons(combination)
    if reasons:
        problems.append(
            origin.problem(
                f"invalid mixlist combination for op {op_label(op, entries)}: {describe_combination(combination)}: "
                + "; ".join(reasons),
                first.path,
                hint=_VALID_HINT,
            )
        )
    problems.extend(_repeat_warnings(op, entries, origin))
    for entry in entries:
        key = normalise_op_key(entry.written)
        if key != entry.written:
            problems.append(
                origin.problem(
                    f"{entry.written!r} is in the default ONNX domain; write it as {key!r}",
                    entry.path,
                    severity=Severity.WARNING,
                )
            )
    if combination == {Edit.ADD_GRAY} and not tf_lists:  # TensorFlow's infer-list additions are honoured there
        problems.append(
            origin.problem(
                f"gray-list to-add of {op!r} alone: Ascend ignores this; ampconfig honours it and makes {op!r} gray",
                first.path,
                severity=Severity.WARNING,
            )
        )
    return problems


def _repeat_warnings(op: str, entries: list[MixlistEntry], origin: SourceMap) -> list[Problem]:
    # Several foreign names of one ONNX op in one list (MatMulV2, BatchMatMulV2) are no repeat: that is how a
    # TensorFlow/Ascend list names it.
    seen: set[tuple[Edit, str]] = set()
    problems = []
    for entry in entries:
        key = (entry.edit, normalise_op_key(entry.written))
        if key in seen:
            problems.append(
                origin.problem(
                    f"{entry.written!r} is listed twice in {entry.edit.describe()}",
                    entry.path,
                    severity=Severity.WARNING,
                )
            )
        seen.add(key)
    return problems


def _unknown_op_warning(
    op: str, path: JsonPath, origin: SourceMap, known_ops: Collection[str] | None, suggest: bool = True
) -> Problem:
    hint = _unknown_op_hint(op, [*(known_ops or ()), *_onnx_op_names()]) if suggest else None
    return origin.problem(
        f"op type {op!r} is unknown to the op info and to the ONNX schemas; kept as written (custom op?)",
        path,
        hint=hint,
        severity=Severity.WARNING,
    )


def _unknown_op_hint(op: str, known: list[str]) -> str | None:
    """The op key the user probably meant: the same op type in another domain (``SkipLayerNormalization`` for
    ``com.microsoft::SkipLayerNormalization``, which a near spelling would miss), else the closest spelling."""
    other_domains = sorted(key for key in known if key != op and key.rpartition("::")[2] == op)
    if other_domains:
        return f"did you mean {other_domains[0]!r}? ops outside the default ONNX domain are written domain::OpType"
    suggestion = closest(op, known)
    return f"did you mean {suggestion!r}? op types are case-sensitive" if suggestion else None


# -------------------------------------------------------------------------------------------------- applying
def apply_mixlist(base: OpLists, mixlist: Mixlist, op_names: OpNames = None) -> tuple[OpLists, list[Problem]]:
    """The lists after the mixlist, and its warnings and notes. Invalid combinations and ambiguous op names raise
    AmpconfigError."""
    problems = mixlist_problems(mixlist, known_ops=base.colours.keys(), op_names=op_names)
    errors = [problem for problem in problems if problem.severity is Severity.ERROR]
    if errors:
        raise AmpconfigError(
            f"{len(errors)} invalid entr{'y' if len(errors) == 1 else 'ies'} in the mixlist",
            file=mixlist.origin.file,
            problems=errors,
        )
    changes: dict[str, Colour] = {}
    for op, entries in entries_by_op(mixlist, op_names).items():
        colour, warnings = _apply_op(base.colour_of(op), op, entries, mixlist.origin)
        problems.extend(warnings)
        changes[op] = colour
    return base.with_colours(changes), problems


def _apply_op(current: Colour, op: str, entries: list[MixlistEntry], origin: SourceMap) -> tuple[Colour, list[Problem]]:
    warnings = []
    colour = current
    for entry in entries:
        if entry.edit.is_add:
            continue
        if entry.edit.colour is current:
            colour = Colour.GRAY
        else:
            warnings.append(
                origin.problem(
                    f"{entry.edit.describe()} of {op_label(op, [entry])} changes nothing: {op!r} is on the "
                    f"{current.value} list, not the {entry.edit.colour.value} list",
                    entry.path,
                    severity=Severity.WARNING,
                )
            )
    combination = combination_of(entries)
    for add in (Edit.ADD_BLACK, Edit.ADD_WHITE, Edit.ADD_GRAY):
        if add in combination:
            colour = add.colour
            break
    return colour, warnings


# --------------------------------------------------------------------------------------------------- loading
def mixlist_from_data(data: Any, origin: SourceMap) -> tuple[Mixlist | None, list[Problem]]:
    """Validate parsed data as a mixlist: the model, or None and the findings that say why not. A mapping of
    TensorFlow's list variables (:mod:`ampconfig.documents.tf_env_lists`) is read as the mixlist it means."""
    if is_tf_lists_mapping(data):
        converted, tf_origin, problems = tf_lists_from_mapping(data, origin)
        return _tf_mixlist(converted, tf_origin, problems)
    if not isinstance(data, Mapping):
        return None, [
            origin.problem(
                f"a mixlist is a JSON object with black-list, white-list and gray-list keys, got {describe_value(data)}"
            )
        ]
    try:
        mixlist = Mixlist.model_validate(data)
    except ValidationError as exc:
        return None, validation_problems(exc, origin, Mixlist)
    return mixlist.located(origin), []


def _tf_mixlist(
    data: dict[str, Any], origin: SourceMap, problems: list[Problem]
) -> tuple[Mixlist | None, list[Problem]]:
    mixlist, found = mixlist_from_data(data, origin)
    problems = [*problems, *found]
    if mixlist is None or any(problem.severity is Severity.ERROR for problem in problems):
        return None, problems
    # The format's warnings travel with the mixlist: every reader of it reports them (mixlist_problems).
    return mixlist.located(origin, Vocabulary.TENSORFLOW, tuple(problems)), []


def mixlist_from_document(document: Document) -> tuple[Mixlist | None, list[Problem]]:
    mixlist, problems = mixlist_from_data(document.data, document.source)
    problems = [*document.problems, *problems]
    if any(problem.severity is Severity.ERROR for problem in problems):
        return None, problems
    return mixlist, problems


def mixlist_from_text(text: str, source: str | None = None) -> tuple[Mixlist | None, list[Problem]]:
    """A mixlist file's text: Ascend's JSON, or TensorFlow's list variables (``NAME=value`` lines)."""
    if is_tf_lists_text(text):
        return _tf_mixlist(*tf_lists_from_text(text, source))
    return mixlist_from_document(parse_document(text, source, "json"))


def parse_mixlist(text: str, source: str | None = None) -> Mixlist:
    """Parse a mixlist (Ascend's JSON or TensorFlow's list variables): comments in JSON, syntax errors, duplicate
    keys, unknown keys and wrong types raise."""
    mixlist, problems = mixlist_from_text(text, source)
    if mixlist is None:
        errors = [problem for problem in problems if problem.severity is Severity.ERROR]
        raise AmpconfigError(errors[0].message, file=source, line=errors[0].line, problems=errors)
    return mixlist


def load_mixlist(path: str | Path) -> Mixlist:
    path = Path(path)
    return parse_mixlist(read_text(path, "mixlist file"), str(path))
