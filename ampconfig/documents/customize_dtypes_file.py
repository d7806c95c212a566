"""customize_dtypes: per-node (or per-op-type) input and output dtypes, in Ascend's ``--customize_dtypes`` format.

One entry per line, as in ATC's file (https://www.hiascend.com/document/detail/en/canncommercial/800/devaids/atc/
atlasatcparam_16_0075.html)::

    Opname::InputDtype:float16,float16,OutputDtype:float16
    OpType::MatMul:InputDtype:float16,float16,OutputDtype:float16

- ``Opname::`` entries name a node; ``OpType::TypeName:`` entries every node of that op type (the name read
  through the op-name table of docs/op-names.md, so ``OpType::MatMulV2`` is ONNX MatMul). For one node, its
  ``Opname`` entry wins over an ``OpType`` entry (Ascend's rule).
- One dtype per input and per output of the node, in order (optional inputs the node leaves out are skipped):
  the dtypes a node's compute type variable binds (MatMul's A, B and Y) are the dtype the node computes in, and
  must agree; every other input or output (a shape, Resize's scales, LayerNormalization's Mean) keeps its own
  dtype, which the entry restates.
- Precedence (Ascend's): customize_dtypes > keep_dtype > precision_mode + modify_mixlist.

Decisions where Ascend's documentation is silent, as for keep_dtype: blank lines and ``#`` comment lines are
skipped, edges are stripped, a repeated entry is a warning. Dtype spellings: Ascend's and ONNX's (``float16``,
``float32``/``float``, ``bfloat16``, ``fp16``/``fp32``/``bf16``, and the integer and bool names a restated input
uses). Parsing needs no model; :func:`check_against_model` then checks every entry against the nodes it names
(node exists, dtype counts, schema and the target's kernels) with located errors.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ampconfig.documents.mixlist_file import OP_KEY_PATTERN, normalise_op_key
from ampconfig.documents.parsing import closest, closest_node_name, read_text
from ampconfig.errors import AmpconfigError, Problem, Severity
from ampconfig.opinfo.op_names import AmbiguousOpName, file_vocabulary, read_as_onnx_note, read_op_name

OP_TYPE_PREFIX = "OpType::"
INPUT_KEY = "InputDtype"
OUTPUT_KEY = "OutputDtype"

#: Every spelling read, and the dtype name used everywhere else (ONNX's names, as reports write them).
DTYPE_NAMES: Mapping[str, str] = {
    **dict.fromkeys(("float16", "fp16", "half"), "float16"),
    **dict.fromkeys(("float32", "float", "fp32"), "float32"),
    **dict.fromkeys(("bfloat16", "bf16"), "bfloat16"),
    **dict.fromkeys(("float64", "double", "fp64"), "float64"),
    **{name: name for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")},
    "string": "string",
}
#: The dtypes a node may be customised to compute in.
COMPUTE_DTYPES = ("float32", "float16", "bfloat16")

_FORMAT_HINT = (
    "write Opname::InputDtype:float16,float16,OutputDtype:float16 or "
    "OpType::MatMul:InputDtype:float16,float16,OutputDtype:float16"
)
_SPEC = re.compile(r"(?:^|(?<=,))(InputDtype|OutputDtype):", re.IGNORECASE)


@dataclass(frozen=True)
class CustomizeEntry:
    """One line: the node (or op type) it names and the dtypes it gives each input and output."""

    name: str | None  # node name; None for an OpType:: entry
    op_type: str | None  # ONNX op key for an OpType:: entry
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    line: int | None = None
    written_op_type: str | None = None  # the TensorFlow/Ascend name the line used, when mapped

    @property
    def target(self) -> str:
        if self.op_type is not None:
            return f"{OP_TYPE_PREFIX}{self.written_op_type or self.op_type}"
        return f"{self.name}::"

    def __str__(self) -> str:
        spec = f"{INPUT_KEY}:{','.join(self.inputs)},{OUTPUT_KEY}:{','.join(self.outputs)}"
        return f"{self.target}:{spec}" if self.op_type is not None else f"{self.name}::{spec}"


def _dtype_list(text: str, what: str) -> tuple[str, ...]:
    names = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not name for name in names):
        raise AmpconfigError(f"{what} lists an empty dtype", hint="one dtype per " + what[:-5].lower() + ", by commas")
    read = []
    for name in names:
        dtype = DTYPE_NAMES.get(name.lower())
        if dtype is None:
            suggestion = closest(name.lower(), DTYPE_NAMES)
            raise AmpconfigError(
                f"unknown dtype {name!r} in {what}",
                hint=(f"did you mean {suggestion!r}? " if suggestion else "") + "dtypes: float16, float32, bfloat16, "
                "and the integer or bool dtype of an input that is not float",
            )
        read.append(dtype)
    return tuple(read)


def _spec(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``InputDtype:a,b,OutputDtype:c`` -> ((a, b), (c,)); both parts are required, in that order."""
    marks = list(_SPEC.finditer(text))
    keys = [mark.group(1) for mark in marks]
    if keys != [INPUT_KEY, OUTPUT_KEY] or marks[0].start() != 0:
        wrong_case = [key for key in keys if key not in (INPUT_KEY, OUTPUT_KEY)]
        if wrong_case:
            raise AmpconfigError(
                f"{wrong_case[0]!r} is not Ascend's spelling", hint=f"write {INPUT_KEY} and {OUTPUT_KEY}"
            )
        raise AmpconfigError(f"expected {INPUT_KEY}:...,{OUTPUT_KEY}:... after the name", hint=_FORMAT_HINT)
    inputs = text[marks[0].end() : marks[1].start()]
    inputs = inputs[:-1] if inputs.endswith(",") else inputs  # the one comma before OutputDtype
    outputs = text[marks[1].end() :]
    return _dtype_list(inputs, INPUT_KEY), _dtype_list(outputs, OUTPUT_KEY)


def parse_entry(text: str, line: int | None = None) -> CustomizeEntry:
    """One stripped line; an invalid one raises AmpconfigError with the reason and a hint."""
    try:
        if text.startswith(OP_TYPE_PREFIX):
            rest = text[len(OP_TYPE_PREFIX) :]
            head, sep, spec = _split(rest, ":")
            op_type = head.strip()
            if not sep or not op_type:
                raise AmpconfigError(f"{OP_TYPE_PREFIX} needs an op type and its dtypes", hint=_FORMAT_HINT)
            if not re.match(OP_KEY_PATTERN, op_type):
                raise AmpconfigError(f"{op_type!r} is not an op type name", hint="OpType::Op, or OpType::domain::Op")
            inputs, outputs = _spec(spec)
            return CustomizeEntry(None, normalise_op_key(op_type), inputs, outputs, line)
        if text.lower().startswith(OP_TYPE_PREFIX.lower()):
            raise AmpconfigError(
                f"{text[: len(OP_TYPE_PREFIX)]!r} is not Ascend's op type prefix",
                hint=f"write {OP_TYPE_PREFIX} (case-sensitive)",
            )
        head, sep, spec = _split(text, "::")
        if not sep or not head:
            raise AmpconfigError("expected NodeName::InputDtype:...,OutputDtype:...", hint=_FORMAT_HINT)
        inputs, outputs = _spec(spec)
        return CustomizeEntry(head, None, inputs, outputs, line)
    except AmpconfigError as exc:
        raise AmpconfigError(exc.message, line=line, hint=exc.hint) from None


def _split(text: str, separator: str) -> tuple[str, str, str]:
    """Split at the separator that comes right before ``InputDtype:``/``OutputDtype:`` (names may hold ``::``)."""
    for mark in re.finditer(re.escape(separator) + r"(?=(?:InputDtype|OutputDtype):)", text, re.IGNORECASE):
        return text[: mark.start()], separator, text[mark.end() :]
    return text, "", ""


def is_customize_text(text: str) -> bool:
    """True when the first line that is not blank or a comment reads as a customize_dtypes entry."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return _SPEC.search(stripped) is not None
    return False


def customize_problems(text: str, source: str | None = None) -> tuple[list[CustomizeEntry], list[Problem]]:
    """Every entry of a customize_dtypes file and every finding that needs no model (format errors, repeats)."""
    entries: list[CustomizeEntry] = []
    problems: list[Problem] = []
    seen: dict[str, int | None] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            entry = parse_entry(stripped, number)
        except AmpconfigError as exc:
            problems.append(Problem(exc.message, file=source, line=number, hint=exc.hint))
            continue
        if entry.target in seen:
            problems.append(
                Problem(
                    f"{entry.target} is customised twice (first on line {seen[entry.target]}): the first wins",
                    file=source,
                    line=number,
                    severity=Severity.WARNING,
                )
            )
            continue
        seen[entry.target] = number
        entries.append(entry)
    if not entries and not problems:
        problems.append(Problem("customize_dtypes file lists no entries", file=source, severity=Severity.WARNING))
    return entries, problems


def read_customize_names(
    entries: Sequence[CustomizeEntry], op_names: str | None, source: str | None
) -> tuple[list[CustomizeEntry], list[Problem]]:
    """``OpType::`` entries read through the op-name table: mapped names become their ONNX op (a note), a name
    without an ONNX op is dropped (a warning), an ambiguous name is an error."""
    read: list[CustomizeEntry] = []
    problems: list[Problem] = []
    vocabulary = file_vocabulary((entry.op_type for entry in entries if entry.op_type is not None), op_names)
    by_op: dict[str, CustomizeEntry] = {}  # the first entry of each ONNX op type
    for entry in entries:
        if entry.op_type is None:
            read.append(entry)
            continue
        try:
            name = read_op_name(entry.op_type, vocabulary)
        except AmbiguousOpName as exc:
            problems.append(Problem(f"{OP_TYPE_PREFIX}{entry.op_type}: {exc}", source, entry.line, hint=exc.hint))
            continue
        note = read_as_onnx_note(entry.op_type, op_names)
        if note is not None:
            problems.append(Problem(f"{OP_TYPE_PREFIX}{note}", source, entry.line, severity=Severity.NOTE))
        if name.foreign is not None and name.onnx is None:
            message = f"{name.describe(OP_TYPE_PREFIX)}: this entry customises nothing"
            problems.append(Problem(message, source, entry.line, severity=Severity.WARNING))
            continue
        if name.mapped and name.onnx is not None:
            problems.append(Problem(f"{name.describe(OP_TYPE_PREFIX)}", source, entry.line, severity=Severity.NOTE))
            entry = replace(entry, op_type=name.onnx, written_op_type=entry.op_type)
        op_type = entry.op_type or ""  # (never empty here: node entries were taken above)
        if op_type in by_op:  # two spellings of one ONNX op (MatMul, BatchMatMulV2): a repeat, as a repeated line
            problems.append(_same_op_twice(entry, by_op[op_type], source))
            continue
        by_op[op_type] = entry
        read.append(entry)
    return read, problems


def _same_op_twice(entry: CustomizeEntry, first: CustomizeEntry, source: str | None) -> Problem:
    differs = (entry.inputs, entry.outputs) != (first.inputs, first.outputs)
    return Problem(
        f"{entry.target} customises ONNX {entry.op_type}, as {first.target} on line {first.line} does"
        + (" with other dtypes" if differs else "")
        + ": the first wins",
        source,
        entry.line,
        hint="keep one line per op type",
        severity=Severity.WARNING,
    )


@dataclass(frozen=True)
class CustomizeFile:
    """A read customize_dtypes file: its entries and where they came from."""

    entries: tuple[CustomizeEntry, ...]
    source: str | None
    notes: tuple[Problem, ...] = ()  # op names mapped, entries dropped (warnings)


def load_customize_dtypes(path: str | Path, op_names: str | None = None) -> CustomizeFile:
    """Read and parse a customize_dtypes file; format errors and ambiguous op names raise (every one located)."""
    path = Path(path)
    source = str(path)
    entries, problems = customize_problems(read_text(path, "customize_dtypes file"), source)
    entries, name_problems = read_customize_names(entries, op_names, source)
    problems = [*problems, *name_problems]
    errors = [problem for problem in problems if problem.severity is Severity.ERROR]
    if errors:
        raise AmpconfigError(errors[0].message, file=source, line=errors[0].line, hint=errors[0].hint, problems=errors)
    return CustomizeFile(tuple(entries), source, tuple(problems))


# ------------------------------------------------------------------------------------- against the model
@dataclass(frozen=True)
class NodeSignature:
    """What checking an entry needs to know of one node (built from the decision's node facts)."""

    name: str
    op_key: str
    input_dtypes: tuple[str | None, ...]  # present inputs in order: their dtype name (None: unknown)
    output_dtypes: tuple[str | None, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    compute_inputs: frozenset[int]  # indices into input_dtypes bound to the compute type variable
    compute_outputs: frozenset[int]
    schema_allows: frozenset[str]  # float dtypes the schema allows the compute variable
    kernel_dtypes: frozenset[str] | None  # float dtypes the target has kernels for; None: unknown
    blocker: str | None = None  # why the node can never be customised (a custom op, a Cast...), if it cannot


@dataclass(frozen=True)
class Customization:
    """What an entry decides for one node: the dtype it computes in, and the line that said so."""

    node: str
    dtype: str
    entry: CustomizeEntry

    @property
    def reason(self) -> str:
        return f"customize_dtypes{f' line {self.entry.line}' if self.entry.line else ''}: {self.entry}"


def check_against_model(
    file: CustomizeFile, nodes: Collection[NodeSignature], target: str
) -> tuple[dict[str, Customization], list[Problem]]:
    """Every node an entry customises, with its compute dtype, and every error (located at the entry's line): a node
    name the model does not have, an op type with no node (a warning), a dtype count that is not the node's input
    or output count, dtypes of the compute type variable that disagree, a dtype the schema or ``target``'s kernels
    do not allow, and a restated input or output that is not its own dtype."""
    by_name = {node.name: node for node in nodes}
    chosen: dict[str, Customization] = {}
    problems: list[Problem] = []
    by_op: dict[str, list[NodeSignature]] = {}
    for node in nodes:
        by_op.setdefault(node.op_key, []).append(node)
    # Node entries first: Ascend's rule is that a node's own entry wins over its op type's.
    for entry in sorted(file.entries, key=lambda e: e.op_type is not None):
        if entry.name is not None:
            named = by_name.get(entry.name)
            if named is None:
                suggestion = closest_node_name(entry.name, by_name)
                problems.append(
                    Problem(
                        f"no node named {entry.name!r} in the model",
                        file.source,
                        entry.line,
                        hint=(f"did you mean {suggestion!r}? " if suggestion else "")
                        + "Opname is the node's name in the ONNX model (as Netron shows it)",
                    )
                )
                continue
            matched = [named]
        else:
            matched = [node for node in by_op.get(entry.op_type or "", []) if node.name not in chosen]
            if not by_op.get(entry.op_type or ""):
                problems.append(
                    Problem(
                        f"{entry.target}: the model has no node of op type {entry.op_type!r}",
                        file.source,
                        entry.line,
                        severity=Severity.WARNING,
                    )
                )
        for node in matched:
            dtype, found = _check_node(entry, node, target, file.source)
            problems.extend(found)
            if dtype is not None and not found:
                chosen[node.name] = Customization(node.name, dtype, entry)
    return chosen, problems


def _check_node(
    entry: CustomizeEntry, node: NodeSignature, target: str, source: str | None
) -> tuple[str | None, list[Problem]]:
    def problem(message: str, hint: str | None = None) -> Problem:
        where = f"node {node.name!r} ({node.op_key})" if entry.op_type is not None else f"node {node.name!r}"
        return Problem(f"{where}: {message}", source, entry.line, hint=hint)

    if node.blocker is not None:
        return None, [problem(f"cannot be customised: {node.blocker}", hint="remove the line")]
    counts = []
    for given, actual, what in (
        (entry.inputs, node.input_dtypes, "input"),
        (entry.outputs, node.output_dtypes, "output"),
    ):
        if len(given) != len(actual):
            counts.append(
                problem(
                    f"{len(given)} {what} dtype{'s' if len(given) != 1 else ''} given, but the node has "
                    f"{len(actual)} {what}{'s' if len(actual) != 1 else ''}",
                    hint=f"one dtype per {what}, in order: now " + ",".join(dtype or "?" for dtype in actual),
                )
            )
    if counts:
        return None, counts
    compute = {entry.inputs[i] for i in node.compute_inputs} | {entry.outputs[i] for i in node.compute_outputs}
    problems = []
    for given, actual, names, bound, what in (
        (entry.inputs, node.input_dtypes, node.input_names, node.compute_inputs, "input"),
        (entry.outputs, node.output_dtypes, node.output_names, node.compute_outputs, "output"),
    ):
        for index, (dtype, original) in enumerate(zip(given, actual)):
            if index not in bound and original is not None and dtype != original:
                problems.append(
                    problem(
                        f"{what} {index} ({names[index]!r}) is {original} and keeps its own type (it does not follow "
                        f"the dtype the node computes in); {dtype} cannot be set",
                        hint=f"write {original} there",
                    )
                )
    if not compute:
        problems.append(problem("computes on no float tensor: nothing to customise", hint="remove the line"))
        return None, problems
    if len(compute) > 1:
        problems.append(
            problem(
                "its inputs and outputs that share the compute type are given different dtypes ("
                + ", ".join(sorted(compute))
                + "): a node computes in one dtype, so they must agree",
                hint="give them one dtype; a cast before or after the node is ampconfig's to insert",
            )
        )
        return None, problems
    (dtype,) = compute
    if dtype not in COMPUTE_DTYPES:
        problems.append(problem(f"cannot compute in {dtype}", hint="choose " + ", ".join(COMPUTE_DTYPES)))
    elif dtype not in node.schema_allows:
        problems.append(
            problem(
                f"the ONNX schema of {node.op_key} does not allow {dtype} there",
                hint="allowed: " + (", ".join(sorted(node.schema_allows)) or "no float dtype"),
            )
        )
    elif node.kernel_dtypes is not None and dtype not in node.kernel_dtypes:
        problems.append(
            problem(
                f"the {target} op info has no {dtype} kernel for {node.op_key}",
                hint=f"{target} runs it in "
                + (", ".join(sorted(node.kernel_dtypes)) or "no float dtype")
                + "; `ampconfig ops-info show` lists the kernels",
            )
        )
    return dtype, problems
