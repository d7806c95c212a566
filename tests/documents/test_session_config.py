"""Session config: formats, relative paths, modes, the mode/mixlist pairing, and located errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from ampconfig.documents.keep_dtype_file import KeepDtypeEntry, keep_dtype_from_config
from ampconfig.documents.mixlist_file import Mixlist
from ampconfig.documents.parsing import parse_document
from ampconfig.documents.session_config import (
    RunOptions,
    SessionConfig,
    check_mode_accepts_mixlist,
    load_session_config,
    mode_mixlist_problem,
    session_config_from_data,
)
from ampconfig.errors import AmpconfigError
from ampconfig.precision_modes import V1_NAMES, V2_ALIASES, PrecisionMode

YAML = """\
precision_mode: allow_mix_precision
target: cuda
model: models/bert.onnx
output: out/bert.fp16.onnx
modify_mixlist: mixlist.json
keep_dtype: [node_a, OpType::Softmax]
keep_io_types: false
allow_tf32: true
tolerance:
  rel_l2: 0.02
  max_abs: 0.5
run:
  warmup: 1
  iterations: 5
  seed: 7
  inputs: data/inputs.npz
  shapes:
    input_ids: [8, 128]
  int_low: 0
  int_high: 30522
"""
JSON = """\
{
  "precision_mode": "allow_mix_precision",
  "target": "cuda",
  "model": "models/bert.onnx",
  "output": "out/bert.fp16.onnx",
  "modify_mixlist": "mixlist.json",
  "keep_dtype": ["node_a", "OpType::Softmax"],
  "keep_io_types": false,
  "allow_tf32": true,
  "tolerance": {"rel_l2": 0.02, "max_abs": 0.5},
  "run": {"warmup": 1, "iterations": 5, "seed": 7, "inputs": "data/inputs.npz",
          "shapes": {"input_ids": [8, 128]}, "int_low": 0, "int_high": 30522}
}
"""
TOML = """\
precision_mode = "allow_mix_precision"
target = "cuda"
model = "models/bert.onnx"
output = "out/bert.fp16.onnx"
modify_mixlist = "mixlist.json"
keep_dtype = ["node_a", "OpType::Softmax"]
keep_io_types = false
allow_tf32 = true

[tolerance]
rel_l2 = 0.02
max_abs = 0.5

[run]
warmup = 1
iterations = 5
seed = 7
inputs = "data/inputs.npz"
shapes = { input_ids = [8, 128] }
int_low = 0
int_high = 30522
"""


def write(folder: Path, name: str, text: str | bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def load_error(path: Path) -> AmpconfigError:
    with pytest.raises(AmpconfigError) as raised:
        load_session_config(path)
    return raised.value


@pytest.mark.parametrize(("name", "text"), [("s.yaml", YAML), ("s.yml", YAML), ("s.json", JSON), ("s.toml", TOML)])
def test_formats_load_the_same_config_with_paths_resolved(tmp_path: Path, name: str, text: str) -> None:
    folder = tmp_path / "configs"
    config = load_session_config(write(folder, name, text))
    assert config.resolved_mode() is PrecisionMode.ALLOW_MIX_PRECISION
    assert config.target == "cuda"
    assert config.model == folder / "models/bert.onnx"
    assert config.output == folder / "out/bert.fp16.onnx"
    assert config.modify_mixlist == folder / "mixlist.json"
    assert config.run.inputs == folder / "data/inputs.npz"
    assert config.keep_dtype == ["node_a", "OpType::Softmax"]
    assert config.keep_io_types is False and config.allow_tf32 is True
    assert config.tolerance.rel_l2 == 0.02 and config.tolerance.max_abs == 0.5
    assert config.tolerance.min_cosine is None
    assert (config.run.warmup, config.run.iterations, config.run.seed) == (1, 5, 7)
    assert config.run.shapes == {"input_ids": [8, 128]}
    assert (config.run.int_low, config.run.int_high) == (0, 30522)
    assert config.source_file == str(folder / name)
    entries = keep_dtype_from_config(config.keep_dtype, config.source.nested(("keep_dtype",)))
    assert entries == [KeepDtypeEntry("node_a", None), KeepDtypeEntry(None, "Softmax")]


def test_defaults_and_absolute_paths(tmp_path: Path) -> None:
    absolute = tmp_path / "elsewhere" / "m.onnx"
    config = load_session_config(write(tmp_path / "c", "s.yaml", f"precision_mode: force_fp16\nmodel: {absolute}\n"))
    assert config.model == absolute
    assert config.target is None and config.modify_mixlist is None and config.keep_dtype is None
    assert config.keep_io_types is True and config.allow_tf32 is False
    assert config.tolerance.rel_l2 == 1e-2
    assert (config.run.warmup, config.run.iterations, config.run.seed, config.run.shapes) == (3, 20, 0, {})


def test_keep_dtype_path_is_resolved_and_read(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    write(folder, "keep.cfg", "OpType::Erf\n")
    config = load_session_config(write(folder, "s.yaml", "precision_mode: force_fp16\nkeep_dtype: keep.cfg\n"))
    assert config.keep_dtype == folder / "keep.cfg"
    assert keep_dtype_from_config(config.keep_dtype) == [KeepDtypeEntry(None, "Erf", 1)]


def _path_fields(model: type[BaseModel]) -> list[str]:
    """The fields of ``model`` that can hold a path (found from their types, so a new one is not forgotten)."""
    return [name for name, info in model.model_fields.items() if "Path" in str(info.annotation)]


def test_every_path_of_the_config_is_relative_to_its_folder(tmp_path: Path) -> None:
    """run.data and run.calibration_data were resolved against the working folder (issue 31)."""
    folder = tmp_path / "configs"
    top, run = _path_fields(SessionConfig), _path_fields(RunOptions)
    assert {"model", "output", "modify_mixlist", "keep_dtype", "customize_dtypes"} <= set(top)
    assert {"inputs", "data", "calibration_data"} <= set(run)
    lines = [f"{name}: {name}.file" for name in top]
    lines += ["run:"] + [f"  {name}: {name}.npz" for name in run]
    config = load_session_config(write(folder, "s.yaml", "precision_mode: force_fp16\n" + "\n".join(lines) + "\n"))
    for name in top:
        assert getattr(config, name) == folder / f"{name}.file", name
    for name in run:
        assert getattr(config.run, name) == folder / f"{name}.npz", name


def test_inline_mixlist_and_mixlist_file(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    inline = load_session_config(
        write(
            folder,
            "inline.yaml",
            "precision_mode: allow_mix_precision\nmodify_mixlist:\n  black-list:\n    to-add: [Softmax]\n",
        )
    )
    assert isinstance(inline.modify_mixlist, Mixlist)
    assert inline.mixlist().black_list.to_add == ["Softmax"]
    # Findings about an inline mixlist point into the config file.
    assert inline.modify_mixlist.origin.file == str(folder / "inline.yaml")
    assert (
        inline.modify_mixlist.origin.json_path(("black-list", "to-add", 0)) == "$.modify_mixlist.black-list.to-add[0]"
    )
    assert inline.modify_mixlist.origin.line_of(("black-list", "to-add", 0)) == 4
    write(folder, "m.json", '{"white-list": {"to-add": ["Erf"]}}')
    from_file = load_session_config(
        write(folder, "f.yaml", "precision_mode: allow_mix_precision\nmodify_mixlist: m.json\n")
    )
    assert from_file.mixlist().white_list.to_add == ["Erf"]


# -------------------------------------------------------------------------------------------------- modes
@pytest.mark.parametrize("name", V1_NAMES)
def test_every_v1_name(name: str) -> None:
    assert session_config_from_data({"precision_mode": name}).resolved_mode() is PrecisionMode(name)


@pytest.mark.parametrize(("name", "mode"), V2_ALIASES.items())
def test_every_v2_name(name: str, mode: PrecisionMode) -> None:
    assert session_config_from_data({"precision_mode_v2": name}).resolved_mode() is mode


def test_v1_and_v2_together_is_an_error_at_the_v2_key(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", "precision_mode: force_fp16\nprecision_mode_v2: fp16\n")
    error = load_error(path)
    (problem,) = error.problems
    assert problem.message == "precision_mode and precision_mode_v2 are both given"
    assert (problem.file, problem.line, problem.json_path) == (str(path), 2, "$.precision_mode_v2")


def test_v2_name_in_precision_mode_hints_at_precision_mode_v2(tmp_path: Path) -> None:
    (problem,) = load_error(write(tmp_path, "s.yaml", "target: cpu\nprecision_mode: mixed_float16\n")).problems
    assert problem.message == "'mixed_float16' is a precision_mode_v2 name, not a precision_mode name"
    assert problem.line == 2 and problem.json_path == "$.precision_mode"
    assert "precision_mode_v2: mixed_float16" in problem.hint and "allow_mix_precision_fp16" in problem.hint


def test_v1_name_in_precision_mode_v2_is_an_error(tmp_path: Path) -> None:
    (problem,) = load_error(write(tmp_path, "s.json", '{"precision_mode_v2": "force_fp16"}')).problems
    assert "is a precision_mode name, not a precision_mode_v2 name" in problem.message


def test_unknown_mode_suggests_the_closest(tmp_path: Path) -> None:
    (problem,) = load_error(write(tmp_path, "s.yaml", "precision_mode: allow_mix_precison\n")).problems
    assert problem.message == "unknown precision mode 'allow_mix_precison'"
    assert problem.hint.startswith("did you mean 'allow_mix_precision'?")


def test_no_mode_is_allowed_in_the_file_but_resolving_needs_one(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", "target: cpu\n")
    config = load_session_config(path)
    with pytest.raises(AmpconfigError) as raised:
        config.resolved_mode()
    assert raised.value.message.startswith("no precision mode")
    assert raised.value.file == str(path) and "--precision-mode" in raised.value.hint
    assert config.resolved_mode("mixed_bfloat16") is PrecisionMode.ALLOW_MIX_PRECISION_BF16


def test_override_wins_and_is_checked() -> None:
    config = session_config_from_data({"precision_mode": "force_fp32"})
    assert config.resolved_mode("force_fp16") is PrecisionMode.FORCE_FP16
    with pytest.raises(AmpconfigError, match="unknown precision mode"):
        config.resolved_mode("fp64")


MIXED = {
    PrecisionMode.ALLOW_MIX_PRECISION,
    PrecisionMode.ALLOW_MIX_PRECISION_FP16,
    PrecisionMode.ALLOW_MIX_PRECISION_BF16,
}


@pytest.mark.parametrize("mode", list(PrecisionMode), ids=lambda mode: mode.value)
@pytest.mark.parametrize("has_mixlist", [True, False])
def test_every_mode_and_mixlist_pairing(mode: PrecisionMode, has_mixlist: bool) -> None:
    if has_mixlist and mode not in MIXED:
        with pytest.raises(AmpconfigError) as raised:
            check_mode_accepts_mixlist(mode, has_mixlist, "cfg.yaml")
        assert f"precision mode '{mode.value}' does not accept a modify_mixlist" in raised.value.message
        assert raised.value.file == "cfg.yaml"
    else:
        check_mode_accepts_mixlist(mode, has_mixlist, "cfg.yaml")
        assert mode_mixlist_problem(mode, has_mixlist) is None


def test_pairing_is_checked_after_the_override(tmp_path: Path) -> None:
    write(tmp_path, "m.json", "{}")
    config = load_session_config(write(tmp_path, "s.yaml", "precision_mode: force_fp16\nmodify_mixlist: m.json\n"))
    with pytest.raises(AmpconfigError):
        check_mode_accepts_mixlist(config.resolved_mode(), config.has_mixlist, config.source_file)
    check_mode_accepts_mixlist(config.resolved_mode("allow_mix_precision"), config.has_mixlist)


# ------------------------------------------------------------------------------------------ located errors
@pytest.mark.parametrize(
    ("name", "text", "line", "json_path", "fragment"),
    [
        ("s.yaml", "precision_mode: force_fp16\nrun:\n  warmpu: 3\n", 3, "$.run.warmpu", "unknown key 'warmpu'"),
        ("s.json", '{\n  "precision_mode": "force_fp16",\n  "targte": "cpu"\n}', 3, "$.targte", "unknown key"),
        ("s.toml", 'precision_mode = "force_fp16"\n[run]\nwarmup = "3"\n', 3, "$.run.warmup", 'got string "3"'),
        ("s.yaml", "precision_mode: force_fp16\nkeep_io_types: 'yes'\n", 2, "$.keep_io_types", "valid boolean"),
        ("s.yaml", "precision_mode: force_fp16\ntarget: gpu\n", 2, "$.target", "'cpu' or 'cuda', got string"),
        ("s.yaml", "precision_mode: force_fp16\nrun: {iterations: 0}\n", 2, "$.run.iterations", "greater than"),
        ("s.yaml", "precision_mode: force_fp16\nrun:\n  warmup: null\n", 3, "$.run.warmup", "integer, got null"),
        ("s.yaml", "precision_mode: force_fp16\nrun:\n  inputs: x.npy\n", 3, "$.run.inputs", "must be a .npz"),
        ("s.yaml", "precision_mode: force_fp16\nrun:\n  int_low: 5\n  int_high: 5\n", 4, "$.run.int_high", "greater"),
        ("s.yaml", "precision_mode: force_fp16\ntolerance:\n  rel_l2: -1\n", 3, "$.tolerance.rel_l2", "greater"),
        ("s.yaml", "precision_mode: force_fp16\nmodel: ''\n", 2, "$.model", "empty path"),
        ("s.yaml", "precision_mode: force_fp16\nmodify_mixlist: 3\n", 2, "$.modify_mixlist", "path of a mixlist"),
        ("s.yaml", "precision_mode: force_fp16\nkeep_dtype: [1]\n", 2, "$.keep_dtype[0]", "valid string"),
        (
            "s.yaml",
            "precision_mode: allow_mix_precision\nmodify_mixlist:\n  black-list:\n    to_add: [X]\n",
            4,
            "$.modify_mixlist.black-list.to_add",
            "unknown key 'to_add'",
        ),
        ("s.yaml", "precision_mode: force_fp16\nprecision_mode: force_fp32\n", 2, "$.precision_mode", "duplicate key"),
        ("s.yaml", "- precision_mode\n", 1, "$", "a session config is a mapping"),
    ],
)
def test_invalid_configs_are_located(
    tmp_path: Path, name: str, text: str, line: int, json_path: str, fragment: str
) -> None:
    path = write(tmp_path, name, text)
    error = load_error(path)
    matching = [p for p in error.problems if p.json_path == json_path]
    assert matching, [p.format() for p in error.problems]
    assert matching[0].line == line and matching[0].file == str(path)
    assert fragment in matching[0].message


def test_a_null_is_named_once(tmp_path: Path) -> None:
    (problem,) = load_error(write(tmp_path, "s.yaml", "precision_mode: force_fp16\nrun:\n  seed: null\n")).problems
    assert problem.message.endswith("got null")  # not "got null null" (issue 31)


def test_unknown_key_hint_lists_valid_keys(tmp_path: Path) -> None:
    (problem,) = load_error(write(tmp_path, "s.yaml", "precision_mode: force_fp16\ntolerence: {}\n")).problems
    assert problem.hint.startswith("did you mean 'tolerance'?") and "valid keys here:" in problem.hint


def test_all_problems_at_once(tmp_path: Path) -> None:
    error = load_error(write(tmp_path, "s.yaml", "precision_mode: nope\ntarget: gpu\nrun: {warmup: -1}\nx: 1\n"))
    assert sorted(problem.line for problem in error.problems) == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("name", "content", "fragment", "line"),
    [
        ("s.yaml", "", "file is empty", None),
        ("s.yaml", "# only a comment\n", "file is empty", None),
        ("s.json", "  \n", "file is empty", None),
        ("s.toml", "# nothing\n", "file is empty", None),
        ("s.yaml", "precision_mode: force_fp16\nrun: [1\n", "not valid YAML", 3),
        ("s.json", '{"precision_mode": "force_fp16",}', "not valid JSON", 1),
        ("s.json", '{\n  // mode\n  "precision_mode": "force_fp16"\n}', "comments are not allowed in JSON", 2),
        ("s.toml", 'precision_mode = "force_fp16"\ntarget = \n', "not valid TOML", 2),
        ("s.yaml", b"precision_mode: force_fp16\nmodel: m\xe9.onnx\n", "not UTF-8", 2),
        ("s.ini", "precision_mode = force_fp16\n", "unsupported config file type '.ini'", None),
    ],
)
def test_unusable_config_files(
    tmp_path: Path, name: str, content: str | bytes, fragment: str, line: int | None
) -> None:
    error = load_error(write(tmp_path, name, content))
    assert fragment in str(error)
    assert error.line == line


def test_unsupported_suffix_names_the_accepted_ones(tmp_path: Path) -> None:
    error = load_error(write(tmp_path, "s.ini", "x"))
    assert all(suffix in error.hint for suffix in (".yaml", ".yml", ".json", ".toml"))


def test_directory_and_missing(tmp_path: Path) -> None:
    folder = tmp_path / "c.yaml"
    folder.mkdir()
    assert "is a directory" in load_error(folder).message
    assert "config file not found" in load_error(tmp_path / "none.yaml").message


def test_direct_construction_validates_too() -> None:
    with pytest.raises(ValueError):
        SessionConfig(precision_mode="force_fp16", precision_mode_v2="fp16")
    with pytest.raises(AmpconfigError) as raised:
        session_config_from_data({"precision_mode": "force_fp16", "bogus": 1}, source="api")
    assert raised.value.problems[0].json_path == "$.bogus"


# ------------------------------------------------------------------------------- documents (shared loaders)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(data=st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4), indent=st.sampled_from([None, 1, 2]))
def test_json_key_lines_match_the_text(data: dict, indent: int | None) -> None:
    text = json.dumps(data, indent=indent)
    document = parse_document(text, "x.json", "json")
    assert document.data == data and document.problems == ()
    lines = text.splitlines()
    for key in data:
        line = document.source.line_of((key,))
        assert json.dumps(key) in lines[line - 1]


@settings(max_examples=150, deadline=None)
@given(data=st.dictionaries(st.sampled_from(["precision_mode", "target", "run", "model", "x"]), JSON_VALUES))
def test_random_configs_never_crash(data: dict) -> None:
    try:
        session_config_from_data(data, source="random.yaml")
    except AmpconfigError as error:
        assert all(problem.json_path and problem.json_path.startswith("$") for problem in error.problems)


def test_yaml_lines_of_nested_keys_and_items() -> None:
    text = "precision_mode: force_fp16\nrun:\n  shapes:\n    ids:\n      - 1\n      - 0\n"
    document = parse_document(text, "s.yaml", "yaml")
    assert document.source.line_of(("run", "shapes", "ids", 1)) == 6
    assert document.source.line_of(("run", "missing")) == 2  # nearest ancestor
    assert document.source.json_path(("run", "shapes", "a b")) == '$.run.shapes["a b"]'


def test_toml_lines_follow_tables() -> None:
    text = 'precision_mode = "x"\n\n[run]\nwarmup = 1\n\n[tolerance]\nrel_l2 = 0.1\n'
    document = parse_document(text, "s.toml", "toml")
    assert document.source.line_of(("run", "warmup")) == 4
    assert document.source.line_of(("tolerance", "rel_l2")) == 7
