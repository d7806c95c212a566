"""keep_dtype: node-level pins in Ascend's keep_dtype.cfg format (precedence: keep_dtype > mixlist > op info).

One entry per line, as in Ascend's ``--keep_dtype`` file:

- ``fp32_vars/Relu`` — a node name: that node keeps its original dtype;
- ``OpType::Softmax`` — every node of op type ``Softmax`` keeps its original dtype (``OpType::`` is a literal,
  case-sensitive prefix; ``OpType::com.microsoft::FusedMatMul`` for ops outside the default ONNX domain).

Decisions where Ascend's documentation is silent: blank lines are skipped; a line whose first non-blank
character is ``#`` is a comment (Ascend's own example file carries ``#`` lines); ``#`` later in a line is part
of the name, because ONNX node names may contain it; leading and trailing whitespace is stripped; a repeated
entry is a warning; a wrongly cased prefix (``optype::X``) is an error rather than a node name that silently
pins nothing. In a session config, ``keep_dtype`` is either the path of such a file or a list of the same
entries.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ampconfig.documents.mixlist_file import OP_KEY_PATTERN, is_onnx_op, normalise_op_key
from ampconfig.documents.parsing import SourceMap, read_text
from ampconfig.errors import AmpconfigError, Problem, Severity
from ampconfig.opinfo.op_names import AmbiguousOpName, file_vocabulary, read_as_onnx_note, read_op_name

OP_TYPE_PREFIX = "OpType::"


@dataclass(frozen=True)
class KeepDtypeEntry:
    """A node name, or an op type (``OpType::X``), whose nodes keep their original dtype."""

    name: str | None  # node name; None for an op-type entry
    op_type: str | None  # ONNX op key (`Op` or `domain::Op`) for an `OpType::` entry; None for a node name
    line: int | None = None  # line in the keep_dtype file; None when the entry came from a config list
    written_op_type: str | None = None  # the TensorFlow/Ascend name the file used, when it was mapped to op_type

    def matches(self, node_name: str, op_key: str) -> bool:
        if self.op_type is not None:
            return self.op_type == op_key
        return self.name == node_name

    def onnx_text(self) -> str:
        """The entry as a line naming the ONNX op type (``OpType::MatMul`` for ``OpType::BatchMatMulV2``)."""
        return f"{OP_TYPE_PREFIX}{self.op_type}" if self.op_type is not None else str(self.name)

    def __str__(self) -> str:
        if self.op_type is None:
            return str(self.name)
        return f"{OP_TYPE_PREFIX}{self.written_op_type or self.op_type}"


def parse_entry(text: str, line: int | None = None) -> KeepDtypeEntry:
    """One entry (already stripped); an invalid one raises AmpconfigError with the reason and a hint."""
    if text.startswith(OP_TYPE_PREFIX):
        op_type = text[len(OP_TYPE_PREFIX) :].strip()
        if not op_type:
            raise AmpconfigError("`OpType::` with no op type after it", line=line, hint="e.g. OpType::Softmax")
        if not re.match(OP_KEY_PATTERN, op_type):
            raise AmpconfigError(
                f"{op_type!r} is not an op type name",
                line=line,
                hint="OpType::Op, or OpType::domain::Op outside the default ONNX domain",
            )
        return KeepDtypeEntry(None, normalise_op_key(op_type), line)
    if text.lower().startswith(OP_TYPE_PREFIX.lower()):
        # A node named `optype::X` is implausible; a mistyped prefix that silently pins nothing is likely.
        raise AmpconfigError(
            f"{text[: len(OP_TYPE_PREFIX)]!r} is not Ascend's op type prefix",
            line=line,
            hint=f"write {OP_TYPE_PREFIX}{text[len(OP_TYPE_PREFIX) :]} (case-sensitive)",
        )
    return KeepDtypeEntry(text, None, line)


def keep_dtype_problems(text: str, source: str | None = None) -> tuple[list[KeepDtypeEntry], list[Problem]]:
    """All entries of a keep_dtype file and every finding (invalid lines are errors, repeats warnings)."""
    entries: list[KeepDtypeEntry] = []
    problems: list[Problem] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            entries.append(parse_entry(stripped, number))
        except AmpconfigError as exc:
            problems.append(Problem(exc.message, file=source, line=number, hint=exc.hint))
    problems.extend(_repeat_warnings(entries, SourceMap(source)))
    if not entries and not problems:
        problems.append(Problem("keep_dtype file lists no entries", file=source, severity=Severity.WARNING))
    return entries, problems


def _repeat_warnings(entries: list[KeepDtypeEntry], origin: SourceMap, path_of_index: bool = False) -> list[Problem]:
    first_seen: dict[str, KeepDtypeEntry] = {}
    problems = []
    for index, entry in enumerate(entries):
        key = str(entry)
        if key in first_seen:
            earlier = first_seen[key].line
            problems.append(
                Problem(
                    f"{key!r} is listed twice" + (f" (first on line {earlier})" if earlier else ""),
                    file=origin.file,
                    line=entry.line if not path_of_index else origin.line_of((index,)),
                    json_path=origin.json_path((index,)) if path_of_index else None,
                    severity=Severity.WARNING,
                )
            )
        else:
            first_seen[key] = entry
    return problems


def parse_keep_dtype(text: str, source: str | None = None) -> list[KeepDtypeEntry]:
    entries, problems = keep_dtype_problems(text, source)
    errors = [problem for problem in problems if problem.severity is Severity.ERROR]
    if errors:
        raise AmpconfigError(errors[0].message, file=source, line=errors[0].line, problems=errors)
    return entries


def load_keep_dtype(path: str | Path) -> list[KeepDtypeEntry]:
    path = Path(path)
    return parse_keep_dtype(read_text(path, "keep_dtype file"), str(path))


def keep_dtype_list_problems(
    values: Sequence[str], origin: SourceMap | None = None
) -> tuple[list[KeepDtypeEntry], list[Problem]]:
    """Entries written as a list in a config (``origin`` points at the config's ``keep_dtype`` key)."""
    origin = origin or SourceMap()
    entries: list[KeepDtypeEntry] = []
    problems: list[Problem] = []
    for index, value in enumerate(values):
        stripped = value.strip()
        if not stripped:
            problems.append(origin.problem("empty keep_dtype entry", (index,)))
            continue
        try:
            entries.append(parse_entry(stripped))
        except AmpconfigError as exc:
            problems.append(origin.problem(exc.message, (index,), hint=exc.hint))
    problems.extend(_repeat_warnings(entries, origin, path_of_index=True))
    return entries, problems


def keep_dtype_from_config(
    value: str | Path | Sequence[str] | None, origin: SourceMap | None = None
) -> list[KeepDtypeEntry]:
    """The entries a config's ``keep_dtype`` names: a file (read now) or a list; invalid entries raise."""
    if value is None:
        return []
    if isinstance(value, (str, Path)):
        return load_keep_dtype(value)
    entries, problems = keep_dtype_list_problems(value, origin)
    errors = [problem for problem in problems if problem.severity is Severity.ERROR]
    if errors:
        raise AmpconfigError(errors[0].message, file=errors[0].file, problems=errors)
    return entries


def read_keep_dtype_names(
    entries: list[KeepDtypeEntry], op_names: str | None, origin: SourceMap
) -> tuple[list[KeepDtypeEntry], list[Problem]]:
    """``OpType::`` entries read through the op-name table (docs/op-names.md): a TensorFlow/Ascend name becomes
    its ONNX op (a note), a name with no ONNX op is dropped (a warning), an ambiguous name is an error. ``origin``
    locates entries without a line (a config's list: by index)."""
    read: list[KeepDtypeEntry] = []
    problems: list[Problem] = []
    vocabulary = file_vocabulary((entry.op_type for entry in entries if entry.op_type is not None), op_names)
    for index, entry in enumerate(entries):
        if entry.op_type is None:
            read.append(entry)
            continue

        try:
            name = read_op_name(entry.op_type, vocabulary)
        except AmbiguousOpName as exc:
            problems.append(_at(entry, index, origin, f"{OP_TYPE_PREFIX}{entry.op_type}: {exc}", hint=exc.hint))
            continue
        note = read_as_onnx_note(entry.op_type, op_names)
        if note is not None:
            problems.append(_at(entry, index, origin, f"{OP_TYPE_PREFIX}{note}", Severity.NOTE))
        if name.foreign is not None and name.onnx is None:
            message = f"{name.describe(OP_TYPE_PREFIX)}: this entry pins nothing"
            problems.append(_at(entry, index, origin, message, Severity.WARNING))
            continue
        if name.mapped and name.onnx is not None:
            problems.append(_at(entry, index, origin, f"{name.describe(OP_TYPE_PREFIX)}", Severity.NOTE))
            entry = replace(entry, op_type=name.onnx, written_op_type=entry.op_type)
        read.append(entry)
    return read, problems


def _at(
    entry: KeepDtypeEntry,
    index: int,
    origin: SourceMap,
    message: str,
    severity: Severity = Severity.ERROR,
    hint: str | None = None,
) -> Problem:
    """A finding at an entry: its line in a keep_dtype file, else its index in a config's list."""
    if entry.line is not None:
        return Problem(message, origin.file, entry.line, hint=hint, severity=severity)
    return origin.problem(message, (index,), hint=hint, severity=severity)


def unknown_op_type_warnings(
    entries: list[KeepDtypeEntry], known_ops: set[str] | frozenset[str], source: str | None
) -> list[Problem]:
    """`OpType::X` entries naming an op type neither the op info nor the ONNX schemas know (custom op?)."""
    return [
        Problem(
            f"op type {entry.op_type!r} is unknown to the op info and to the ONNX schemas; kept as written",
            file=source,
            line=entry.line,
            severity=Severity.WARNING,
        )
        for entry in entries
        if entry.op_type is not None and entry.op_type not in known_ops and not is_onnx_op(entry.op_type)
    ]
