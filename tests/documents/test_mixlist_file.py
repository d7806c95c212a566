"""modify_mixlist: parsing, the eleven valid per-op combinations, and applying (docs/design.md §4)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ampconfig.documents.mixlist_file import Mixlist, apply_mixlist, load_mixlist, mixlist_problems, parse_mixlist
from ampconfig.errors import AmpconfigError, Severity
from ampconfig.opinfo.library import Colour, OpLists

EDITS = ("add-black", "add-white", "add-gray", "remove-black", "remove-white", "remove-gray")

# Written out from the design document, independently of ampconfig.documents.mixlist_file.VALID_COMBINATIONS.
VALID = {
    frozenset({"remove-black"}),
    frozenset({"remove-white"}),
    frozenset({"add-gray"}),
    frozenset({"add-gray", "remove-black"}),
    frozenset({"add-gray", "remove-white"}),
    frozenset({"add-white"}),
    frozenset({"add-white", "remove-gray"}),
    frozenset({"add-white", "remove-black"}),
    frozenset({"add-black"}),
    frozenset({"add-black", "remove-gray"}),
    frozenset({"add-black", "remove-white"}),
}
ALL_COMBINATIONS = [
    frozenset(combo) for size in range(1, len(EDITS) + 1) for combo in itertools.combinations(EDITS, size)
]


def mixlist_json(op: str, combination: frozenset[str]) -> str:
    """A mixlist file putting ``op`` in every array named by ``combination``, one key per line."""
    data: dict[str, dict[str, list[str]]] = {}
    for edit in sorted(combination):
        action, colour = edit.split("-")
        data.setdefault(f"{colour}-list", {})[f"to-{action}"] = [op]
    return json.dumps(data, indent=2)


def write(tmp_path: Path, text: str | bytes, name: str = "mixlist.json") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def errors_of(problems):
    return [problem for problem in problems if problem.severity is Severity.ERROR]


def warnings_of(problems):
    return [problem for problem in problems if problem.severity is Severity.WARNING]


BASE = OpLists(
    {
        "MatMul": Colour.WHITE,
        "Conv": Colour.WHITE,
        "Softmax": Colour.BLACK,
        "Erf": Colour.BLACK,
        "Add": Colour.GRAY,
        "Cast": Colour.CLEAR,
        "Relu": Colour.CLEAR,
        "A": Colour.WHITE,
    }
)


# ------------------------------------------------------------------------------------------- combinations
def test_there_are_eleven_valid_combinations_out_of_63() -> None:
    assert len(ALL_COMBINATIONS) == 63
    assert len(VALID) == 11 and set(ALL_COMBINATIONS) >= VALID


@pytest.mark.parametrize("combination", ALL_COMBINATIONS, ids=lambda c: "+".join(sorted(c)))
def test_exactly_the_eleven_valid_combinations_pass(tmp_path: Path, combination: frozenset[str]) -> None:
    path = write(tmp_path, mixlist_json("Foo", combination))
    problems = mixlist_problems(load_mixlist(path), known_ops={"Foo"})
    errors = errors_of(problems)
    if combination in VALID:
        assert errors == []
        lists, _ = apply_mixlist(OpLists({"Foo": Colour.WHITE}), load_mixlist(path))
        assert lists.colour_of("Foo") in set(Colour)
    else:
        assert len(errors) == 1
        error = errors[0]
        assert "invalid mixlist combination for op 'Foo'" in error.message
        assert error.file == str(path)
        assert error.line is not None and error.json_path.startswith("$.")
        for edit in combination:
            action, colour = edit.split("-")
            assert f"{colour}-list to-{action}" in error.message
        with pytest.raises(AmpconfigError) as raised:
            apply_mixlist(OpLists({"Foo": Colour.WHITE}), load_mixlist(path))
        assert "Foo" in str(raised.value) and str(path) in str(raised.value)


@pytest.mark.parametrize(
    ("combination", "reason"),
    [
        ({"add-white", "add-black"}, "added to the black and white lists"),
        ({"add-black", "remove-black"}, "both added to and removed from the black list"),
        ({"remove-black", "remove-white"}, "removed from the black and white lists"),
        ({"remove-gray"}, "removing it from the gray list alone moves it nowhere"),
    ],
)
def test_invalid_combination_says_why(tmp_path: Path, combination: set[str], reason: str) -> None:
    path = write(tmp_path, mixlist_json("Foo", frozenset(combination)))
    (error,) = errors_of(mixlist_problems(load_mixlist(path), known_ops={"Foo"}))
    assert reason in error.message
    assert error.hint and "valid per op" in error.hint


def test_apply_raises_with_every_invalid_op_listed(tmp_path: Path) -> None:
    text = json.dumps(
        {"black-list": {"to-add": ["MatMul", "Softmax"]}, "white-list": {"to-add": ["MatMul", "Softmax"]}}
    )
    with pytest.raises(AmpconfigError) as raised:
        apply_mixlist(BASE, load_mixlist(write(tmp_path, text)))
    messages = [problem.message for problem in raised.value.problems]
    assert len(messages) == 2
    assert any("'MatMul'" in message for message in messages)
    assert any("'Softmax'" in message for message in messages)


# ------------------------------------------------------------------------------------------------ applying
def test_ascend_documentation_example_in_onnx_names(tmp_path: Path) -> None:
    text = """{
  "black-list": {"to-add": ["MatMul", "Cast", "A"]},
  "white-list": {"to-remove": ["Conv", "A"]}
}"""
    lists, problems = apply_mixlist(BASE, load_mixlist(write(tmp_path, text)))
    assert lists.colour_of("MatMul") is Colour.BLACK
    assert lists.colour_of("Cast") is Colour.BLACK
    assert lists.colour_of("Conv") is Colour.GRAY
    assert lists.colour_of("A") is Colour.BLACK
    assert errors_of(problems) == []
    # Untouched ops keep their colour.
    assert lists.colour_of("Softmax") is Colour.BLACK and lists.colour_of("Relu") is Colour.CLEAR


@pytest.mark.parametrize(
    ("op", "combination", "expected", "noop_warning"),
    [
        ("MatMul", {"remove-white"}, Colour.GRAY, False),  # removed from its own list
        ("Softmax", {"remove-white"}, Colour.BLACK, True),  # not on white: nothing changes
        ("Softmax", {"remove-black"}, Colour.GRAY, False),
        ("Relu", {"remove-white"}, Colour.CLEAR, True),  # a clear op is in neither list
        ("Relu", {"add-white"}, Colour.WHITE, False),  # adding moves a clear op
        ("Softmax", {"add-white", "remove-black"}, Colour.WHITE, False),
        ("Softmax", {"add-white", "remove-gray"}, Colour.WHITE, True),  # black op is not on gray
        ("Add", {"add-black", "remove-gray"}, Colour.BLACK, False),
        ("MatMul", {"add-black", "remove-white"}, Colour.BLACK, False),
        ("Softmax", {"add-gray"}, Colour.GRAY, False),  # gray to-add alone is honoured
        ("MatMul", {"add-gray", "remove-white"}, Colour.GRAY, False),
        ("Unlisted", {"add-white"}, Colour.WHITE, False),
        ("Unlisted", {"remove-black"}, Colour.GRAY, True),  # unknown ops are gray
    ],
)
def test_apply_semantics(tmp_path: Path, op: str, combination: set[str], expected: Colour, noop_warning: bool) -> None:
    mixlist = load_mixlist(write(tmp_path, mixlist_json(op, frozenset(combination))))
    lists, problems = apply_mixlist(BASE, mixlist)
    assert lists.colour_of(op) is expected
    noop = [problem for problem in problems if "changes nothing" in problem.message]
    assert bool(noop) is noop_warning
    if noop:
        assert noop[0].severity is Severity.WARNING and f"'{op}'" in noop[0].message


def test_gray_to_add_alone_warns_that_ascend_ignores_it(tmp_path: Path) -> None:
    mixlist = load_mixlist(write(tmp_path, '{"gray-list": {"to-add": ["Softmax"]}}'))
    (warning,) = warnings_of(mixlist_problems(mixlist, known_ops=set(BASE.colours)))
    assert "Ascend ignores this; ampconfig honours it" in warning.message
    assert warning.line == 1 and warning.json_path == "$.gray-list.to-add[0]"


def test_unknown_op_is_a_warning_with_a_suggestion(tmp_path: Path) -> None:
    mixlist = load_mixlist(write(tmp_path, '{"black-list": {\n  "to-add": [\n    "Matmul"\n  ]\n}}'))
    problems = mixlist_problems(mixlist, known_ops=set(BASE.colours))
    assert errors_of(problems) == []
    (warning,) = warnings_of(problems)
    assert "'Matmul' is unknown" in warning.message
    assert warning.hint and "did you mean 'MatMul'" in warning.hint
    assert warning.line == 3 and warning.json_path == "$.black-list.to-add[0]"


@pytest.mark.parametrize(
    ("op", "known", "unknown_warning"),
    [
        ("Gelu", set(), False),  # an ONNX schema
        ("ai.onnx.ml::LabelEncoder", set(), False),  # an ONNX schema in another domain
        ("com.microsoft::FusedMatMul", {"com.microsoft::FusedMatMul"}, False),  # known to the op info
        ("com.example::MyOp", set(), True),
    ],
)
def test_unknown_op_check_uses_op_info_and_onnx_schemas(op: str, known: set[str], unknown_warning: bool) -> None:
    mixlist = parse_mixlist(json.dumps({"black-list": {"to-add": [op]}}), "m.json")
    warnings = [p for p in mixlist_problems(mixlist, known_ops=known) if "unknown" in p.message]
    assert bool(warnings) is unknown_warning


def test_default_domain_prefix_is_normalised_with_a_warning() -> None:
    mixlist = parse_mixlist('{"white-list": {"to-add": ["ai.onnx::Softmax"]}}', "m.json")
    lists, problems = apply_mixlist(BASE, mixlist)
    assert lists.colour_of("Softmax") is Colour.WHITE
    assert any("write it as 'Softmax'" in problem.message for problem in problems)


def test_same_op_twice_in_one_array_is_a_warning() -> None:
    mixlist = parse_mixlist('{"black-list": {"to-add": ["Add", "Add"]}}', "m.json")
    problems = mixlist_problems(mixlist, known_ops={"Add"})
    assert errors_of(problems) == []
    assert any("listed twice in black-list to-add" in problem.message for problem in problems)


def test_empty_mixlist_warns_it_changes_nothing() -> None:
    (warning,) = mixlist_problems(parse_mixlist("{}", "m.json"))
    assert warning.severity is Severity.WARNING and "changes nothing" in warning.message


# ------------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("text", "line", "marker"),
    [
        ('{\n  // keep MatMul in fp32\n  "black-list": {"to-add": ["MatMul"]}\n}', 2, "//"),
        ('{\n  "black-list": {"to-add": ["MatMul"]}\n  /* a\n  block */\n}', 3, "/* */"),
        ('{\n\n\n  "black-list": {"to-add": ["MatMul"]} # trailing\n}', 4, "#"),
    ],
)
def test_comments_are_rejected_with_their_line(tmp_path: Path, text: str, line: int, marker: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(AmpconfigError) as raised:
        load_mixlist(path)
    assert raised.value.line == line and raised.value.file == str(path)
    assert f"{marker} comment" in str(raised.value) and "comments are not allowed in JSON" in str(raised.value)


def test_comment_markers_inside_strings_are_not_comments() -> None:
    mixlist = parse_mixlist('{"$schema": "https://example.com/#/x//y", "black-list": {"to-add": ["Add"]}}', "m")
    assert mixlist.black_list.to_add == ["Add"]


def test_bad_json_reports_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, '{\n  "black-list": {"to-add": ["MatMul"]}\n  "white-list": {}\n}')
    with pytest.raises(AmpconfigError) as raised:
        load_mixlist(path)
    assert raised.value.line == 3
    assert "not valid JSON" in raised.value.message and "column 3" in raised.value.message


def test_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    path = write(tmp_path, '{\n  "black-list": {\n    "to_add": ["MatMul"]\n  }\n}')
    with pytest.raises(AmpconfigError) as raised:
        load_mixlist(path)
    (problem,) = raised.value.problems
    assert problem.message == "unknown key 'to_add'"
    assert problem.hint and "did you mean 'to-add'" in problem.hint
    assert problem.line == 3 and problem.json_path == "$.black-list.to_add"


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write(tmp_path, '{"blacklist": {"to-add": ["MatMul"]}}')
    with pytest.raises(AmpconfigError) as raised:
        load_mixlist(path)
    assert raised.value.problems[0].hint.startswith("did you mean 'black-list'?")


@pytest.mark.parametrize(
    ("text", "json_path", "fragment"),
    [
        ('{"black-list": {"to-add": "MatMul"}}', "$.black-list.to-add", 'valid list, got string "MatMul"'),
        ('{"black-list": {"to-add": [1]}}', "$.black-list.to-add[0]", "valid string, got integer 1"),
        ('{"black-list": ["MatMul"]}', "$.black-list", "got array"),
        (
            '{"white-list": {"to-remove": ["Mat Mul"]}}',
            "$.white-list.to-remove[0]",
            "'Mat Mul' is not an op type",
        ),
        ("[]", "$", "a mixlist is a JSON object"),
    ],
)
def test_wrong_types_are_reported_with_the_json_path(text: str, json_path: str, fragment: str) -> None:
    with pytest.raises(AmpconfigError) as raised:
        parse_mixlist(text, "m.json")
    (problem,) = raised.value.problems
    assert problem.json_path == json_path and fragment in problem.message and problem.file == "m.json"


def test_every_structural_problem_is_reported_at_once() -> None:
    text = '{\n "black-list": {"to-add": [1]},\n "white-list": {"to-ad": []},\n "grey-list": {}\n}'
    with pytest.raises(AmpconfigError) as raised:
        parse_mixlist(text, "m.json")
    assert sorted(problem.line for problem in raised.value.problems) == [2, 3, 4]


def test_duplicate_keys_are_rejected_with_both_lines() -> None:
    text = '{\n  "black-list": {"to-add": ["MatMul"]},\n  "black-list": {"to-add": ["Conv"]}\n}'
    with pytest.raises(AmpconfigError) as raised:
        parse_mixlist(text, "m.json")
    (problem,) = raised.value.problems
    assert problem.line == 3 and "duplicate key 'black-list' (first defined on line 2)" in problem.message


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("", "file is empty"),
        ("   \n", "file is empty"),
        (b'{"black-list": {"to-add": ["Ma\xfftMul"]}}', "not UTF-8"),
    ],
)
def test_unusable_files(tmp_path: Path, content: str | bytes, fragment: str) -> None:
    with pytest.raises(AmpconfigError) as raised:
        load_mixlist(write(tmp_path, content))
    assert fragment in raised.value.message


def test_directory_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(AmpconfigError, match="is a directory"):
        load_mixlist(tmp_path)
    with pytest.raises(AmpconfigError, match="mixlist file not found"):
        load_mixlist(tmp_path / "nope.json")


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, '\ufeff{"black-list": {"to-add": ["MatMul"]}}'.encode())
    assert load_mixlist(path).black_list.to_add == ["MatMul"]


def test_schema_key_is_allowed() -> None:
    mixlist = parse_mixlist('{"$schema": "https://ampconfig.dev/schemas/mixlist.schema.json"}', "m")
    assert isinstance(mixlist, Mixlist)


# ---------------------------------------------------------------------------------------------- properties
OPS = st.sampled_from(["MatMul", "Conv", "Softmax", "Add", "Relu", "Cast", "Foo", "com.x::Y", "bad name", ""])
ARRAY = st.one_of(st.lists(OPS, max_size=4), st.integers(), st.text(max_size=3), st.none())
LIST_EDIT = st.one_of(
    st.dictionaries(st.sampled_from(["to-add", "to-remove", "to_add"]), ARRAY, max_size=3), st.integers()
)
RANDOM_MIXLIST = st.dictionaries(
    st.sampled_from(["black-list", "white-list", "gray-list", "blacklist"]), LIST_EDIT, max_size=3
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=RANDOM_MIXLIST)
def test_random_mixlists_never_crash_and_follow_the_rules(data: dict) -> None:
    try:
        mixlist = parse_mixlist(json.dumps(data), "random.json")
        lists, _ = apply_mixlist(BASE, mixlist)
    except AmpconfigError as error:
        assert error.as_problems() and all(problem.message for problem in error.as_problems())
        return
    for op in {*mixlist.black_list.to_add, *mixlist.white_list.to_add, *mixlist.gray_list.to_add}:
        if op in mixlist.black_list.to_add:
            assert lists.colour_of(op) is Colour.BLACK
        elif op in mixlist.white_list.to_add:
            assert lists.colour_of(op) is Colour.WHITE
        else:
            assert lists.colour_of(op) is Colour.GRAY
    untouched = set(BASE.colours) - {
        *mixlist.black_list.to_add,
        *mixlist.white_list.to_add,
        *mixlist.gray_list.to_add,
        *mixlist.black_list.to_remove,
        *mixlist.white_list.to_remove,
        *mixlist.gray_list.to_remove,
    }
    assert all(lists.colour_of(op) is BASE.colour_of(op) for op in untouched)
