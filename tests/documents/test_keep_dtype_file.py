"""keep_dtype files (Ascend keep_dtype.cfg format) and keep_dtype lists in configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ampconfig.documents.keep_dtype_file import (
    KeepDtypeEntry,
    keep_dtype_from_config,
    keep_dtype_list_problems,
    keep_dtype_problems,
    load_keep_dtype,
    parse_keep_dtype,
    unknown_op_type_warnings,
)
from ampconfig.documents.parsing import SourceMap
from ampconfig.errors import AmpconfigError, Severity


def test_node_names_op_types_comments_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "keep_dtype.cfg"
    path.write_text(
        "# Set the operator name.\n"
        "fp32_vars/Relu\n"
        "\n"
        "   # indented comment\n"
        "  /encoder/layer.0/Softmax  \n"
        "# Set the operator type.\n"
        "OpType::Softmax\n"
        "OpType::com.microsoft::FusedMatMul\n"
        "name#with#hashes\n",
        encoding="utf-8",
    )
    entries = load_keep_dtype(path)
    assert entries == [
        KeepDtypeEntry("fp32_vars/Relu", None, 2),
        KeepDtypeEntry("/encoder/layer.0/Softmax", None, 5),
        KeepDtypeEntry(None, "Softmax", 7),
        KeepDtypeEntry(None, "com.microsoft::FusedMatMul", 8),
        KeepDtypeEntry("name#with#hashes", None, 9),
    ]


def test_entry_matching() -> None:
    by_name = KeepDtypeEntry("n1", None, 1)
    by_type = KeepDtypeEntry(None, "Softmax", 2)
    assert by_name.matches("n1", "MatMul") and not by_name.matches("n2", "MatMul")
    assert by_type.matches("any", "Softmax") and not by_type.matches("Softmax", "MatMul")
    assert str(by_type) == "OpType::Softmax" and str(by_name) == "n1"


def test_default_domain_op_type_is_normalised() -> None:
    (entry,) = parse_keep_dtype("OpType::ai.onnx::Softmax\n", "k.cfg")
    assert entry.op_type == "Softmax"


@pytest.mark.parametrize(
    ("line", "fragment", "hint"),
    [
        ("OpType::", "`OpType::` with no op type", "OpType::Softmax"),
        ("OpType::Soft max", "'Soft max' is not an op type name", "OpType::Op"),
        ("optype::Softmax", "'optype::' is not Ascend's op type prefix", "write OpType::Softmax"),
    ],
)
def test_invalid_lines_are_errors_with_their_line_number(tmp_path: Path, line: str, fragment: str, hint: str) -> None:
    path = tmp_path / "keep.cfg"
    path.write_text(f"node_a\n\n{line}\nnode_b\n", encoding="utf-8")
    with pytest.raises(AmpconfigError) as raised:
        load_keep_dtype(path)
    (problem,) = raised.value.problems
    assert problem.file == str(path) and problem.line == 3
    assert fragment in problem.message and hint in (problem.hint or "")


def test_every_invalid_line_is_reported() -> None:
    entries, problems = keep_dtype_problems("OpType::\nok\noptype::X\n", "k.cfg")
    assert [problem.line for problem in problems] == [1, 3]
    assert [str(entry) for entry in entries] == ["ok"]


def test_repeated_entry_is_a_warning() -> None:
    entries, problems = keep_dtype_problems("a\nOpType::Relu\na\n", "k.cfg")
    (warning,) = problems
    assert warning.severity is Severity.WARNING and warning.line == 3
    assert "'a' is listed twice (first on line 1)" in warning.message
    assert len(entries) == 3


def test_empty_file_warns() -> None:
    entries, problems = keep_dtype_problems("# nothing\n\n", "k.cfg")
    assert entries == [] and problems[0].severity is Severity.WARNING and "no entries" in problems[0].message


def test_unreadable_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cfg"
    bad.write_bytes(b"node_a\nnode_\xff\n")
    with pytest.raises(AmpconfigError) as raised:
        load_keep_dtype(bad)
    assert raised.value.line == 2 and "not UTF-8" in raised.value.message
    with pytest.raises(AmpconfigError, match="keep_dtype file not found"):
        load_keep_dtype(tmp_path / "missing.cfg")
    with pytest.raises(AmpconfigError, match="is a directory"):
        load_keep_dtype(tmp_path)


def test_from_config_list_and_path(tmp_path: Path) -> None:
    assert keep_dtype_from_config(None) == []
    assert keep_dtype_from_config(["n1", "OpType::Erf"]) == [
        KeepDtypeEntry("n1", None, None),
        KeepDtypeEntry(None, "Erf", None),
    ]
    path = tmp_path / "k.txt"
    path.write_text("n2\n", encoding="utf-8")
    assert keep_dtype_from_config(path) == [KeepDtypeEntry("n2", None, 1)]


def test_config_list_problems_carry_the_json_path() -> None:
    origin = SourceMap("cfg.yaml", {("keep_dtype",): 4, ("keep_dtype", 1): 6}).nested(("keep_dtype",))
    entries, problems = keep_dtype_list_problems(["a", "OpType::", ""], origin)
    assert [str(entry) for entry in entries] == ["a"]
    assert [(p.json_path, p.line) for p in problems] == [("$.keep_dtype[1]", 6), ("$.keep_dtype[2]", 4)]
    with pytest.raises(AmpconfigError) as raised:
        keep_dtype_from_config(["a", "OpType::"], origin)
    assert raised.value.problems[0].json_path == "$.keep_dtype[1]"


def test_unknown_op_types_warn() -> None:
    entries = parse_keep_dtype("OpType::Softmax\nOpType::MyCustomOp\nOpType::com.x::Y\nnode\n", "k.cfg")
    warnings = unknown_op_type_warnings(entries, frozenset({"com.x::Y"}), "k.cfg")
    assert [(w.line, w.severity) for w in warnings] == [(2, Severity.WARNING)]
    assert "'MyCustomOp'" in warnings[0].message
