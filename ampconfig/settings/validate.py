"""``ampconfig validate``: every problem of every file in one pass, located (file, line, JSON path).

Kinds: session configs (.yaml/.yml/.toml, or .json with config keys), mixlists (.json with ``*-list`` keys),
keep_dtype files (.cfg/.txt), op info (.json with ``ops`` and ``provider``), precision locks (``*.lock.json``, or
.json with ``"format": "ampconfig-precision-lock"``: here only their format is checked; the command line decides
again and compares, :mod:`ampconfig.lock.check`). A config's referenced mixlist and
keep_dtype files are validated too, and its mode/mixlist pairing is checked.

Exit codes: 0 clean (warnings allowed); 1 findings (a file parsed but breaks a rule); 2 a file could not be
used at all (missing, a directory, not UTF-8, a syntax error, an empty file, an unknown kind). A syntax
error is 2, not 1, because nothing after it can be checked: "parsed but invalid" is 1, "unreadable or
unparseable" is 2. A referenced file (a config's mixlist) that cannot be read counts the same as one named
on the command line, and the config gets an error at the key that names it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ampconfig.documents.customize_dtypes_file import customize_problems, is_customize_text, read_customize_names
from ampconfig.documents.format_tags import LOCK_FORMAT, RANGES_FORMAT
from ampconfig.documents.keep_dtype_file import (
    keep_dtype_list_problems,
    keep_dtype_problems,
    read_keep_dtype_names,
    unknown_op_type_warnings,
)
from ampconfig.documents.mixlist_file import (
    OP_KEY_PATTERN,
    Mixlist,
    apply_mixlist,
    mixlist_from_data,
    mixlist_from_document,
    mixlist_from_text,
    mixlist_problems,
)
from ampconfig.documents.numeric_limits import FILE_KINDS
from ampconfig.documents.parsing import (
    RELATIVE_TO_CONFIG,
    Document,
    SourceMap,
    parse_document,
    read_text,
    validation_problems,
)
from ampconfig.documents.tf_env_lists import is_tf_lists_text
from ampconfig.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE, AmpconfigError, Problem, Severity
from ampconfig.files.bounded import MAX_DOCUMENT_BYTES, MAX_LOCK_BYTES
from ampconfig.files.paths import UNNAMEABLE, path_kind, resolve_path
from ampconfig.files.sniff import ONNX_TEXT_SUFFIXES, Content, content_of
from ampconfig.opinfo.library import DEFAULT_TARGET, TARGETS, OpLists, load_ops_info
from ampconfig.opinfo.op_names import OP_NAME_CHOICES
from ampconfig.precision_modes import V1_NAMES, V2_ALIASES, PrecisionMode

FileKind = Literal["config", "mixlist", "keep-dtype", "ops-info", "lock", "ranges"]
#: How a precision lock's name ends (``precision.lock.json``).
LOCK_SUFFIX = ".lock.json"

_KEEP_DTYPE_SUFFIXES = (".cfg", ".txt")
_MIXLIST_KEYS = frozenset({"black-list", "white-list", "gray-list"})


@cache
def _config_keys() -> frozenset[str]:
    """The keys a session config may have (the config model is imported only when a file needs it: validating
    a mixlist loads none of the config's or the lock's models, a tenth of the command's start-up)."""
    from ampconfig.documents.session_config import SessionConfig

    return frozenset(info.alias or name for name, info in SessionConfig.model_fields.items()) - {"$schema"}


@dataclass
class FileReport:
    """The findings about one file."""

    path: str
    kind: str | None
    problems: list[Problem] = field(default_factory=list)
    unusable: bool = False  # could not be read or parsed: nothing after that could be checked
    referenced_by: str | None = None
    referenced_key: tuple[str, ...] = ()  # the config key that names this file

    @property
    def errors(self) -> int:
        return sum(problem.severity is Severity.ERROR for problem in self.problems)

    @property
    def warnings(self) -> int:
        return sum(problem.severity is Severity.WARNING for problem in self.problems)

    @property
    def status(self) -> str:
        return "unusable" if self.unusable else "invalid" if self.errors else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "status": self.status,
            "errors": self.errors,
            "warnings": self.warnings,
            "referenced_by": self.referenced_by,
        }


@dataclass
class ValidationReport:
    files: list[FileReport]

    @property
    def problems(self) -> list[Problem]:
        return [problem for report in self.files for problem in report.problems]

    @property
    def errors(self) -> int:
        return sum(report.errors for report in self.files)

    @property
    def warnings(self) -> int:
        return sum(report.warnings for report in self.files)

    @property
    def exit_code(self) -> int:
        if any(report.unusable for report in self.files):
            return EXIT_USAGE
        return EXIT_CHECK_FAILED if self.errors else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": [report.to_dict() for report in self.files],
            "problems": [problem.to_dict() for problem in self.problems],
            "errors": self.errors,
            "warnings": self.warnings,
        }


@dataclass
class _Context:
    """What checking needs besides the file: the target's op lists, and which files were done already."""

    target: str | None
    op_names: str | None = None  # --op-names: whose op names every file uses (a config's op_names for its files)
    done: set[tuple[Path, str | None]] = field(default_factory=set)  # a file, as the kind it was read as
    lists_cache: dict[str, OpLists | Problem] = field(default_factory=dict)

    def lists_for(self, target: str) -> OpLists | Problem:
        """The target's op lists, or a warning saying why op types cannot be checked against them."""
        if target not in self.lists_cache:
            try:
                self.lists_cache[target] = load_ops_info(target).lists()
            except AmpconfigError as exc:
                self.lists_cache[target] = Problem(
                    f"op types not checked against the {target} op info: {exc.message}",
                    severity=Severity.WARNING,
                )
        return self.lists_cache[target]


def validate_paths(
    paths: Sequence[str | Path], kind: str | None = None, target: str | None = None, op_names: str | None = None
) -> ValidationReport:
    """Validate files; ``kind`` forces every file's kind, ``target`` picks the op info to check against,
    ``op_names`` says whose op type names the files use (docs/op-names.md)."""
    if kind is not None and kind not in FILE_KINDS:
        raise AmpconfigError(f"unknown file kind {kind!r}", hint="kinds: " + ", ".join(FILE_KINDS))
    if target is not None and target not in TARGETS:
        raise AmpconfigError(f"unknown target {target!r}", hint="targets: " + ", ".join(TARGETS))
    if op_names is not None and op_names not in OP_NAME_CHOICES:
        raise AmpconfigError(f"unknown --op-names {op_names!r}", hint="choices: " + ", ".join(OP_NAME_CHOICES))
    context = _Context(target, op_names)
    reports: list[FileReport] = []
    for path in paths:
        reports.extend(_validate_file(Path(path), kind, context))
    return ValidationReport(reports)


_WHAT = {
    "config": "config file",
    "mixlist": "mixlist file",
    "keep-dtype": "keep_dtype file",
    "customize-dtypes": "customize_dtypes file",
    "lock": "precision lock",
    "ranges": "value ranges file",
}
_LINE_FILES = ("keep-dtype", "customize-dtypes", "lock")


def _validate_file(
    path: Path,
    kind: str | None,
    context: _Context,
    referenced_by: str | None = None,
    target: str | None = None,
    op_names: str | None = None,
) -> list[FileReport]:
    key = (resolve_path(path), kind)  # a symbolic link loop is reported by reading it, below
    if key in context.done:
        return []
    context.done.add(key)
    report = FileReport(str(path), kind, referenced_by=referenced_by)
    if report.kind is None and path.name.lower().endswith(LOCK_SUFFIX):
        report.kind = "lock"
    try:
        limit = MAX_LOCK_BYTES if report.kind in ("lock", "ranges") else MAX_DOCUMENT_BYTES
        _refuse_binary(path, report.kind)
        text = read_text(path, _WHAT.get(report.kind or "", "file"), max_bytes=limit)
        tf_lists = report.kind in (None, "mixlist") and is_tf_lists_text(text)
        if tf_lists:
            report.kind = "mixlist"  # TensorFlow's list variables, whatever the suffix
        if report.kind is None and (is_customize_text(text) or "customize" in path.name.lower()):
            report.kind = "customize-dtypes"  # Name::InputDtype:... lines, or so named, whatever the suffix
        if report.kind is None:
            report.kind = _kind_from_suffix(path)
        document = None if report.kind in _LINE_FILES or tf_lists else _parse(path, text, report.kind)
        if report.kind is None:
            report.kind = _kind_from_content(path, document)
        if report.kind == "lock":  # any flaw makes a lock unusable: nothing can be compared with it
            from ampconfig.documents.lock_file import parse_lock

            parse_lock(text, str(path))
            return [report]
        if report.kind == "ranges":  # as a lock: a flawed ranges file decides nothing
            from ampconfig.documents.ranges_file import parse_ranges

            parse_ranges(text, str(path))
            return [report]
    except AmpconfigError as exc:
        report.unusable = True
        report.problems = exc.as_problems()
        report.kind = report.kind or _kind_from_name(path)
        return [report]
    names = context.op_names or op_names
    referenced = _check(report, path, text, document, context, target or context.target or DEFAULT_TARGET, names)
    report.problems.sort(key=lambda problem: problem.line or 0)
    return [report, *referenced]


def _refuse_binary(path: Path, kind: str | None) -> None:
    """Every kind validate reads is a text document: a model or an .npz (a path in the wrong place, arguments
    swapped) is said as such rather than as the byte that is not UTF-8."""
    content = content_of(path, _WHAT.get(kind or "", "file"))
    if content.kind in ("text", "empty"):
        return
    what = f"a {_WHAT[kind]}" if kind in _WHAT else "a settings file"
    models = " (a model goes to the model commands: ampconfig explain MODEL.onnx)" if content.kind == "protobuf" else ""
    raise AmpconfigError(
        f"holds {content.describe()}, not {what}",
        file=str(path),
        hint="validate checks configs, mixlists, keep_dtype, customize_dtypes, op info, locks and ranges files"
        + models,
    )


def _parse(path: Path, text: str, kind: str | None) -> Document:
    # Mixlists and op info are JSON whatever their suffix; a config's format follows its suffix.
    if kind in (None, "mixlist", "ops-info"):
        return parse_document(text, str(path), "json")
    from ampconfig.documents.session_config import CONFIG_FORMATS

    return parse_document(text, str(path), CONFIG_FORMATS.get(path.suffix.lower(), "yaml"))


def _kind_from_suffix(path: Path) -> str | None:
    suffix = path.suffix.lower()
    if suffix in _KEEP_DTYPE_SUFFIXES:
        return "keep-dtype"
    if suffix in (".yaml", ".yml", ".toml"):
        return "config"
    if suffix == ".json":
        return None  # decided by the content
    raise AmpconfigError(
        f"cannot tell what kind of file {path.suffix or '(no suffix)'!r} is",
        file=str(path),
        hint="configs are .yaml/.yml/.toml/.json, mixlists and op info .json, keep_dtype files .cfg/.txt; "
        "or pass --kind",
    )


def _kind_from_content(path: Path, document: Document | None) -> str:
    data = document.data if document is not None else None
    keys = set(data) if isinstance(data, Mapping) else set()
    if isinstance(data, Mapping) and data.get("format") == LOCK_FORMAT:
        return "lock"
    if isinstance(data, Mapping) and data.get("format") == RANGES_FORMAT:
        return "ranges"
    if keys & _MIXLIST_KEYS:
        return "mixlist"
    if {"ops", "provider"} <= keys:
        return "ops-info"
    if keys & _config_keys():
        return "config"
    by_name = _kind_from_name(path)
    if by_name is not None:
        return by_name
    raise AmpconfigError(
        "cannot tell whether this JSON file is a session config, a mixlist or op info",
        file=str(path),
        hint="a mixlist has black-list/white-list/gray-list keys, a config precision_mode or target; or pass --kind",
    )


def _kind_from_name(path: Path) -> str | None:
    name = path.name.lower()
    if "mixlist" in name:
        return "mixlist"
    if "ops_info" in name or "ops-info" in name:
        return "ops-info"
    if "customize" in name:
        return "customize-dtypes"
    if "keep_dtype" in name or "keep-dtype" in name:
        return "keep-dtype"
    return None


def _check(
    report: FileReport,
    path: Path,
    text: str,
    document: Document | None,
    context: _Context,
    target: str,
    op_names: str | None,
) -> list[FileReport]:
    """Fill ``report`` with findings; return the reports of files it references."""
    if report.kind == "keep-dtype":
        report.problems = _keep_dtype_file_problems(text, str(path), context, target, op_names)
        return []
    if report.kind == "customize-dtypes":
        # Without the model only the format and the op names can be checked; the commands that open the model
        # check each entry against its node (ampconfig.decide.customized).
        entries, problems = customize_problems(text, str(path))
        report.problems = [*problems, *read_customize_names(entries, op_names, str(path))[1]]
        return []
    if report.kind == "mixlist":
        mixlist, problems = mixlist_from_text(text, str(path)) if document is None else mixlist_from_document(document)
        report.problems = (
            problems if mixlist is None else [*problems, *_mixlist_content_problems(mixlist, context, target, op_names)]
        )
        return []
    assert document is not None
    if report.kind == "ops-info":
        report.problems = _ops_info_problems(document)
        return []
    problems, referenced = _config_problems(path, document, context)
    report.problems = problems
    return referenced


# ------------------------------------------------------------------------------------------------ per kind
def _mixlist_content_problems(mixlist: Mixlist, context: _Context, target: str, op_names: str | None) -> list[Problem]:
    lists = context.lists_for(target)
    if isinstance(lists, Problem):
        return [*mixlist_problems(mixlist, op_names=op_names), _located(lists, mixlist.origin)]
    problems = mixlist_problems(mixlist, known_ops=lists.colours.keys(), op_names=op_names)
    if any(problem.severity is Severity.ERROR for problem in problems):
        return problems
    # Applying adds the warnings that need the lists: removing an op from a list it is not on.
    return apply_mixlist(lists, mixlist, op_names)[1]


def _located(problem: Problem, origin: SourceMap) -> Problem:
    return Problem(problem.message, file=origin.file, severity=problem.severity, hint=problem.hint)


def _keep_dtype_file_problems(
    text: str, source: str, context: _Context, target: str, op_names: str | None
) -> list[Problem]:
    entries, problems = keep_dtype_problems(text, source)
    entries, name_problems = read_keep_dtype_names(entries, op_names, SourceMap(source))
    lists = context.lists_for(target)
    known = frozenset(lists.colours) if isinstance(lists, OpLists) else frozenset()
    return [*problems, *name_problems, *unknown_op_type_warnings(entries, known, source)]


def _ops_info_problems(document: Document) -> list[Problem]:
    from ampconfig.opinfo.ops_info_file import OpsInfoFile  # its models are built for an op info file only

    problems = list(document.problems)
    try:
        model = OpsInfoFile.model_validate(document.data)
    except ValidationError as exc:
        return [*problems, *validation_problems(exc, document.source, OpsInfoFile)]
    for key in model.ops:
        if not re.match(OP_KEY_PATTERN, key):
            problems.append(
                document.source.problem(
                    f"{key!r} is not an op type name", ("ops", key), hint="`Op`, or `domain::Op` outside ONNX"
                )
            )
    return problems


def _config_problems(path: Path, document: Document, context: _Context) -> tuple[list[Problem], list[FileReport]]:
    """Findings of a config, and the reports of the files it names.

    The parts (mode pairing, mixlist, keep_dtype, model path) are checked from the parsed data, each on its
    own, so a wrong type in one key does not hide the problems of the others.
    """
    from ampconfig.documents.session_config import session_config_from_document
    from ampconfig.settings.resolve import Flags, resolve_with_problems

    config, problems = session_config_from_document(document, path.parent)
    data: Mapping[str, Any] = document.data if isinstance(document.data, Mapping) else {}
    origin = document.source
    problems.extend(_no_mode_warning(data, origin))
    if config is not None:  # the settings every command would resolve from this config
        flags = Flags(config=path, target=context.target, op_names=context.op_names)
        settings, findings = resolve_with_problems(flags, config)
        target, op_names = settings.target, settings.op_names
        problems.extend(findings)
    else:  # parts of the config are invalid: check what can be checked from the raw data
        raw_target, raw_names = data.get("target"), data.get("op_names")
        target = context.target or (raw_target if raw_target in TARGETS else DEFAULT_TARGET)
        op_names = context.op_names or (raw_names if raw_names in OP_NAME_CHOICES else None)
        problems.extend(_raw_mode_problems(data, origin))
    referenced: list[FileReport] = []
    mixlist_value = data.get("modify_mixlist")
    if isinstance(mixlist_value, str) and mixlist_value.strip():
        file = _resolve(path.parent, mixlist_value)
        referenced.extend(_referenced(file, "mixlist", ("modify_mixlist",), str(path), context, target, op_names))
    elif isinstance(mixlist_value, Mapping):
        inline, _ = mixlist_from_data(mixlist_value, origin.nested(("modify_mixlist",)))
        if inline is not None:  # structural problems were reported by the config's own validation
            problems.extend(_mixlist_content_problems(inline, context, target, op_names))
    customize_value = data.get("customize_dtypes")
    if isinstance(customize_value, str) and customize_value.strip():
        file = _resolve(path.parent, customize_value)
        key = ("customize_dtypes",)
        referenced.extend(_referenced(file, "customize-dtypes", key, str(path), context, target, op_names))
    keep_value = data.get("keep_dtype")
    if isinstance(keep_value, str) and keep_value.strip():
        file = _resolve(path.parent, keep_value)
        referenced.extend(_referenced(file, "keep-dtype", ("keep_dtype",), str(path), context, target, op_names))
    elif isinstance(keep_value, list) and all(isinstance(item, str) for item in keep_value):
        problems.extend(_keep_dtype_list_findings(keep_value, origin, context, target, op_names))
    ranges_value = data.get("ranges")
    if isinstance(ranges_value, str) and ranges_value.strip():
        file = _resolve(path.parent, ranges_value)
        referenced.extend(_referenced(file, "ranges", ("ranges",), str(path), context, target, op_names))
    problems.extend(_path_problems(data, path.parent, origin))
    problems.extend(
        origin.problem(
            f"{report.referenced_key[0]} names a file that cannot be used: {report.problems[0].message}",
            report.referenced_key,
            hint=RELATIVE_TO_CONFIG,
        )
        for report in referenced
        if report.unusable
    )
    return problems, referenced


def _resolve(folder: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else folder / path


def _referenced(
    file: Path, kind: str, key: tuple[str], config_file: str, context: _Context, target: str, op_names: str | None
) -> list[FileReport]:
    """Validate a file the config names, against the config's target and with its op names."""
    reports = _validate_file(file, kind, context, referenced_by=config_file, target=target, op_names=op_names)
    for report in reports:
        report.referenced_key = key
    return reports


def _mode_of(data: Mapping[str, Any]) -> PrecisionMode | None:
    v1, v2 = data.get("precision_mode"), data.get("precision_mode_v2")
    if v1 is not None and v2 is not None:
        return None  # reported by the config validation
    if isinstance(v1, str) and v1 in V1_NAMES:
        return PrecisionMode(v1)
    if isinstance(v2, str) and v2 in V2_ALIASES:
        return V2_ALIASES[v2]
    return None


def _no_mode_warning(data: Mapping[str, Any], origin: SourceMap) -> list[Problem]:
    if data.get("precision_mode") is not None or data.get("precision_mode_v2") is not None:
        return []
    from ampconfig.settings.resolve import DEFAULT_MODE

    return [
        origin.problem(
            "no precision mode: neither precision_mode nor precision_mode_v2 is set; --precision-mode "
            f"(or the default, {DEFAULT_MODE.value}) decides",
            severity=Severity.WARNING,
            hint="add e.g. `precision_mode: allow_mix_precision`",
        )
    ]


def _raw_mode_problems(data: Mapping[str, Any], origin: SourceMap) -> list[Problem]:
    """The mode/mixlist pairing of a config that did not validate as a whole (the resolver needs a valid one)."""
    mode = _mode_of(data)
    if mode is None:
        return []
    from ampconfig.documents.session_config import mode_mixlist_problem

    problem = mode_mixlist_problem(
        mode,
        data.get("modify_mixlist") is not None,
        origin.file,
        origin.line_of(("modify_mixlist",)),
        origin.json_path(("modify_mixlist",)),
    )
    return [problem] if problem is not None else []


def _keep_dtype_list_findings(
    values: list[str], origin: SourceMap, context: _Context, target: str, op_names: str | None
) -> list[Problem]:
    nested = origin.nested(("keep_dtype",))
    entries, problems = keep_dtype_list_problems(values, nested)
    entries, name_problems = read_keep_dtype_names(entries, op_names, nested)
    problems = [*problems, *name_problems]
    lists = context.lists_for(target)
    known = frozenset(lists.colours) if isinstance(lists, OpLists) else frozenset()
    warnings = unknown_op_type_warnings(entries, known, origin.file)
    line = origin.line_of(("keep_dtype",))
    return [
        *problems,
        *(Problem(w.message, w.file, line, nested.json_path(()), severity=w.severity) for w in warnings),
    ]


#: What each config path that is not a settings document must hold, by the content's kind (files/sniff.py).
_HOLDS: dict[str, tuple[str, ...]] = {
    "model file": ("protobuf", "binary"),  # onnx and onnx-ir read it; validate loads neither
    "inputs file": ("zip",),
    "data set": ("zip", "text"),  # an .npz, or a Polygraphy JSON list of feeds
    "calibration data set": ("zip", "text"),
}
_WANTED = {
    "model file": "an ONNX model",
    "inputs file": "an .npz of input arrays",
    "data set": "a folder of .npz files, an .npz or a Polygraphy JSON",
    "calibration data set": "a folder of .npz files, an .npz or a Polygraphy JSON",
}


def _path_problems(data: Mapping[str, Any], folder: Path, origin: SourceMap) -> list[Problem]:
    """The config's paths (against its folder, as the commands read them) that name nothing usable: the model and
    run.inputs must be files, a data set a file or a folder, each holding what its key wants (a model, an .npz);
    the output need not exist. The settings files (mixlist, keep_dtype, customize_dtypes, ranges) are validated
    as files of their own."""
    run = data.get("run")
    run = run if isinstance(run, Mapping) else {}
    candidates = {
        ("model",): (data.get("model"), "model file"),
        ("run", "inputs"): (run.get("inputs"), "inputs file"),
        ("run", "data"): (run.get("data"), "data set"),
        ("run", "calibration_data"): (run.get("calibration_data"), "calibration data set"),
        ("output",): (data.get("output"), "output"),  # need not exist: only a name no file can have is wrong
    }
    problems = []
    for key, (value, what) in candidates.items():
        if not isinstance(value, str) or not value.strip():
            continue
        file = _resolve(folder, value)
        kind = path_kind(file)
        if kind == "file" and what != "output":
            if what == "inputs file" and file.suffix.lower() != ".npz":
                continue  # the config's own check says it must be an .npz
            problem = _content_problem(file, what)
            if problem is not None:
                problems.append(origin.problem(problem, key, hint=RELATIVE_TO_CONFIG))
            continue
        if kind == "file" or (kind == "folder" and what.endswith("data set")):
            continue
        if what == "output" and kind not in UNNAMEABLE:
            continue
        wrong = {"folder": "is a directory, not a file", "other": "is not a regular file (a device, pipe or socket)"}
        why = UNNAMEABLE.get(kind) or wrong.get(kind, "does not exist")
        problems.append(origin.problem(f"{what} {str(file)!r} {why}", key))
    return problems


def _content_problem(file: Path, what: str) -> str | None:
    """Why the file a config names for ``what`` does not hold what it should (None: it does, as far as its first
    bytes tell)."""
    try:
        content = content_of(file, what)
    except AmpconfigError as exc:
        return f"{what} {str(file)!r}: {exc.message}"
    if content.kind in _HOLDS[what] or _onnx_text(file, what, content):
        return None
    return f"{what} {str(file)!r} holds {content.describe()}, not {_WANTED[what]}"


def _onnx_text(file: Path, what: str, content: Content) -> bool:
    """ONNX's own text formats (.onnxtxt, .textproto, a .json model) are models too."""
    return what == "model file" and content.kind == "text" and file.suffix.lower() in ONNX_TEXT_SUFFIXES
