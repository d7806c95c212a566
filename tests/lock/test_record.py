"""`ampconfig lock`: the precision lock file is deterministic (runs, working directories, copies of the tree, hash
seeds), matches its schema, passes its own check, records a run's proof, is updated only through the output guard,
and a hostile lock is a located exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from ampconfig.documents.document_limits import MAX_NESTING_DEPTH
from ampconfig.documents.format_tags import LOCK_FORMAT
from ampconfig.documents.lock_file import LOCK_FORMAT_VERSION, load_lock
from ampconfig.files.bounded import MAX_LOCK_BYTES
from ampconfig.settings.json_schemas import SCHEMA_KINDS, generate_schema
from tests.lock_trees import Tree, cli, cli_json, example_tree, line_of, working_directory


def _full_tree(root: Path) -> Tree:
    """The example with a mixlist, a keep_dtype file and a session config naming both."""
    tree = example_tree(root, {"black-list": {"to-add": ["Erf"]}, "white-list": {"to-remove": ["Add"]}})
    tree.keep.write_text("# pinned\nln_2\n", encoding="utf-8")
    tree.config.write_text(
        "precision_mode: allow_mix_precision\nmodify_mixlist: mixlist.json\nkeep_dtype: keep_dtype.cfg\n",
        encoding="utf-8",
    )
    return tree


def test_lock_records_settings_versions_identity_nodes_and_summary(tmp_path: Path) -> None:
    tree = _full_tree(tmp_path)
    result = cli("lock", tree.model, "--config", tree.config, "--target", "cuda", "-o", tree.lock)
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stderr and "casts" in result.stderr
    data = json.loads(tree.lock.read_text(encoding="utf-8"))
    assert "$schema" not in data  # the tree keeps no schemas: no address an editor would try to fetch
    assert (data["format"], data["format_version"]) == (LOCK_FORMAT, LOCK_FORMAT_VERSION) == (LOCK_FORMAT, 2)
    settings = data["settings"]
    assert settings["precision_mode"] == {"value": "allow_mix_precision", "source": "config"}
    assert settings["target"] == {"value": "cuda", "source": "command line"}
    assert settings["keep_io_types"] == {"value": True, "source": "default"}
    assert settings["config"]["path"] == "session.yaml"
    assert settings["modify_mixlist"]["path"] == "mixlist.json" and settings["modify_mixlist"]["source"] == "config"
    assert settings["keep_dtype"]["path"] == "keep_dtype.cfg"
    assert data["versions"]["op_info"]["target"] == "cuda" and data["versions"]["op_info"]["onnxruntime"]
    model = data["model"]
    assert model["path"] == "model.onnx" and model["structure_sha256"] != model["weights_sha256"]
    nodes = {node["name"]: node for node in data["nodes"]}
    assert nodes["ln_2"]["rule"] == "keep_dtype" and nodes["ln_2"]["dtype"] == "float32"
    assert nodes["mlp.gelu/Erf"]["rule"] == "black_list"
    assert set(nodes["attn.q/MatMul"]) == {"scope", "name", "op", "colour", "from", "dtype", "rule", "cause"}
    summary = data["summary"]
    assert summary["nodes"] == len(data["nodes"])
    assert summary["low_precision_nodes"] == sum(node["dtype"] == "float16" for node in data["nodes"])
    assert summary["casts"] > 0 and summary["estimated_us"] > 0
    assert data["proof"] is None
    Draft202012Validator(generate_schema("lock")).validate(data)
    # One node per line: each node's line holds its name.
    text = tree.lock.read_text(encoding="utf-8")
    assert all(f'"name": {json.dumps(node["name"])}' in line for node, line in zip(data["nodes"], _node_lines(text)))


def _node_lines(text: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index('  "nodes": [') + 1
    return lines[start : lines.index("  ],", start)]


def test_lock_is_byte_identical_across_runs_working_directories_and_copies(tmp_path: Path) -> None:
    first, second = _full_tree(tmp_path / "a"), _full_tree(tmp_path / "elsewhere" / "b")
    with working_directory(first.folder):  # relative paths, from the lock's own folder
        assert cli("lock", "model.onnx", "-c", "session.yaml", "-o", "precision.lock.json").exit_code == 0
    once = first.lock.read_bytes()
    with working_directory(first.root):  # again, from another folder, with other spellings of the same paths
        assert cli("lock", "models/../models/model.onnx", "-c", "models/session.yaml", "-o", first.lock).exit_code == 0
    assert first.lock.read_bytes() == once
    with working_directory(tmp_path):  # a copy of the tree elsewhere, absolute paths
        assert cli("lock", second.model.resolve(), "-c", second.config.resolve(), "-o", second.lock).exit_code == 0
    assert second.lock.read_bytes() == once


def test_lock_is_byte_identical_across_python_hash_seeds(tmp_path: Path) -> None:
    """Set and dict orders follow the hash seed: nothing in a lock may."""
    tree = _full_tree(tmp_path)
    written = []
    for seed in ("0", "4242"):
        out = tmp_path / f"seed{seed}.lock.json"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        command = [sys.executable, "-m", "ampconfig", "lock", str(tree.model), "-c", str(tree.config), "-o", str(out)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        written.append(out.read_text(encoding="utf-8"))
    assert written[0] == written[1]


def test_an_unchanged_tree_passes_and_an_update_changes_nothing(tmp_path: Path) -> None:
    tree = _full_tree(tmp_path)
    tree.lock_it("-c", tree.config)
    before = tree.lock.read_bytes()
    code, payload = tree.check()
    assert code == 0 and payload["ok"] and not payload["drifted"]
    assert payload["changed"] == payload["added"] == payload["removed"] == []
    result = cli("lock", "--check", tree.lock)
    assert result.exit_code == 0 and "no decision changed" in result.stdout
    assert cli("lock", "--check", tree.lock, "--update", "--strict").exit_code == 0
    assert tree.lock.read_bytes() == before
    assert cli("validate", tree.lock).exit_code == 0


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_a_lock_written_and_checked_through_a_symbolic_link_records_paths_from_the_real_file(tmp_path: Path) -> None:
    """The guard writes through a link to its target, so the paths the lock records are relative to the target's
    folder (issue 38: they were relative to the link's, wrong for the file itself); reading the lock through the
    link or directly finds the same files."""
    tree = _full_tree(tmp_path)
    real_folder = tmp_path / "locks" / "deep"  # another depth than the link's folder: the paths differ
    real_folder.mkdir(parents=True)
    real = real_folder / "precision.lock.json"
    link = tree.folder / "linked.lock.json"
    link.symlink_to(os.path.relpath(real, tree.folder))
    result = cli("lock", tree.model, "-c", tree.config, "-o", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and real.is_file()
    data = json.loads(real.read_text(encoding="utf-8"))
    assert data["model"]["path"] == "../../models/model.onnx"
    assert data["settings"]["config"]["path"] == "../../models/session.yaml"
    assert data["settings"]["modify_mixlist"]["path"] == "../../models/mixlist.json"
    for lock in (link, real):  # the same lock, by either name: nothing drifted, nothing to update
        assert cli("lock", "--check", lock, "--update", "--strict").exit_code == 0
    assert json.loads(real.read_text(encoding="utf-8")) == data


def test_the_bundled_example_without_a_model_is_recorded_by_name(tmp_path: Path) -> None:
    lock = tmp_path / "example.lock.json"
    assert cli("lock", "-o", lock).exit_code == 0
    data = json.loads(lock.read_text(encoding="utf-8"))
    assert data["model"]["path"] is None and data["model"]["example"] == "transformer_block"
    assert cli("lock", "--check", lock).exit_code == 0


def test_run_lock_out_records_the_proof_and_the_check_keeps_it(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    result = cli(
        "run", tree.model, "--modify-mixlist", tree.mixlist, "--device", "cpu", "--warmup", "0", "--iterations", "1",
        "--shape", "input_ids=1x8", "--lock-out", tree.lock,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lock, _ = load_lock(tree.lock)
    assert lock.proof is not None and lock.proof.device == "cpu" and lock.proof.passed
    assert lock.proof.tolerance.rel_l2 == 0.01
    assert lock.proof.data.shapes == {"input_ids": [1, 8]} and lock.proof.data.seed == 0
    assert [output.name for output in lock.proof.outputs] == ["logits"]
    assert lock.proof.outputs[0].rel_l2 is not None and lock.proof.outputs[0].passed
    before = tree.lock.read_bytes()
    assert cli("lock", "--check", tree.lock, "--update").exit_code == 0
    assert tree.lock.read_bytes() == before  # the proof holds for the same decisions: kept


# ------------------------------------------------------------------------------------------ the output guard
def test_a_lock_is_never_written_over_an_input(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    before = tree.mixlist.read_bytes()
    result = cli("lock", tree.model, "--modify-mixlist", tree.mixlist, "-o", tree.mixlist)
    assert result.exit_code == 2 and "mixlist" in result.stderr
    assert tree.mixlist.read_bytes() == before
    result = cli("run", tree.model, "--lock-out", tree.model)
    assert result.exit_code == 2 and tree.model.is_file()
    custom = tree.folder / "customize_dtypes.cfg"
    custom.write_text("ln_1::InputDtype:float32,float32,float32,OutputDtype:float32\n", encoding="utf-8")
    before = custom.read_bytes()
    for command in ("lock", "rewrite"):
        result = cli(command, tree.model, "--customize-dtypes", custom, "-o", custom)
        assert result.exit_code == 2 and "customize_dtypes" in result.stderr, result.output
        assert custom.read_bytes() == before


def test_update_never_overwrites_an_input(tmp_path: Path) -> None:
    """A lock that records itself as its keep_dtype file: --update would write over an input, and is refused
    before anything is decided."""
    tree = example_tree(tmp_path)
    tree.keep.write_text("ln_1\n", encoding="utf-8")
    tree.lock_it("--keep-dtype", tree.keep)
    data = json.loads(tree.lock.read_text(encoding="utf-8"))
    data["settings"]["keep_dtype"]["path"] = tree.lock.name
    tree.lock.write_text(json.dumps(data), encoding="utf-8")
    before = tree.lock.read_bytes()
    result = cli("lock", "--check", tree.lock, "--update")
    assert result.exit_code == 2 and "keep_dtype" in result.stderr
    assert tree.lock.read_bytes() == before


def test_check_takes_no_settings_flags(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    tree.lock_it()
    result = cli("lock", "--check", tree.lock, "--precision-mode", "force_fp16")
    assert result.exit_code == 2 and "takes its settings from the lock" in result.stderr
    assert cli("lock", tree.model, "--update").exit_code == 2


# ------------------------------------------------------------------------------------------ hostile locks
def _located(result_code: int, payload: dict, fragment: str, line: int | None = None) -> None:
    assert result_code == 2 and payload["exit_code"] == 2, payload
    error = payload["error"]
    assert fragment in error["message"], error
    assert error["file"] is not None
    if line is not None:
        assert error["line"] == line, error


@pytest.fixture
def locked(tmp_path: Path) -> Tree:
    tree = example_tree(tmp_path)
    tree.lock_it("--modify-mixlist", tree.mixlist)
    return tree


def test_truncated_lock(locked: Tree) -> None:
    text = locked.lock.read_text(encoding="utf-8")
    locked.lock.write_text(text[: len(text) // 2], encoding="utf-8")
    code, payload = locked.check()
    _located(code, payload, "not valid JSON")
    assert payload["error"]["line"] is not None


def test_lock_of_another_format_version(locked: Tree) -> None:
    text = locked.lock.read_text(encoding="utf-8").replace('"format_version": 2', '"format_version": 3')
    locked.lock.write_text(text, encoding="utf-8")
    code, payload = locked.check()
    _located(
        code,
        payload,
        "written by a newer ampconfig (format 3; this one reads up to 2)",
        line_of(locked.lock, "format_version"),
    )
    assert payload["error"]["json_path"] == "$.format_version"
    assert "upgrade ampconfig" in payload["error"]["hint"] and "edit" not in str(payload["error"])


def test_lock_with_wrong_types(locked: Tree) -> None:
    data = json.loads(locked.lock.read_text(encoding="utf-8"))
    data["nodes"][3]["dtype"] = 16
    data["summary"]["casts"] = "many"
    locked.lock.write_text(json.dumps(data, indent=1), encoding="utf-8")
    code, payload = locked.check()
    assert code == 2
    paths = {problem["json_path"] for problem in payload["problems"]}
    assert {"$.nodes[3].dtype", "$.summary.casts"} <= paths
    assert all(problem["line"] for problem in payload["problems"])


def test_lock_with_an_unknown_key_and_a_file_that_is_no_lock(locked: Tree) -> None:
    data = json.loads(locked.lock.read_text(encoding="utf-8"))
    data["summray"] = {}
    locked.lock.write_text(json.dumps(data, indent=1), encoding="utf-8")
    code, payload = locked.check()
    _located(code, payload, "unknown key 'summray'")
    code, payload = cli_json("lock", "--check", locked.mixlist)
    _located(code, payload, "not an ampconfig precision lock", 1)


def test_lock_with_a_repeated_key_or_a_comment(locked: Tree) -> None:
    text = locked.lock.read_text(encoding="utf-8")
    repeated = text.replace('"format_version": 2,', '"format_version": 2,\n  "format_version": 2,')
    locked.lock.write_text(repeated, encoding="utf-8")
    code, payload = locked.check()
    _located(code, payload, "duplicate key 'format_version'", line_of(locked.lock, "format_version") + 1)
    locked.lock.write_text(text.replace('"format_version": 2,', '"format_version": 2, // v2'), "utf-8")
    code, payload = locked.check()
    _located(code, payload, "comments are not allowed", line_of(locked.lock, "format_version"))


def test_huge_lock_is_refused_from_its_size(locked: Tree) -> None:
    with locked.lock.open("r+b") as handle:
        handle.truncate(MAX_LOCK_BYTES + 1)
    code, payload = locked.check()
    _located(code, payload, "too large")


def test_deeply_nested_lock(locked: Tree) -> None:
    depth = MAX_NESTING_DEPTH + 1
    locked.lock.write_text('{"format": "x",\n"nodes": ' + "[" * depth + "]" * depth + "}", encoding="utf-8")
    code, payload = locked.check()
    _located(code, payload, "nesting too deep", 2)


def test_missing_model_or_settings_file_is_located(locked: Tree) -> None:
    locked.mixlist.unlink()
    code, payload = locked.check()
    _located(code, payload, "not found")
    assert payload["error"]["file"].endswith("mixlist.json")
    assert f"precision.lock.json:{line_of(locked.lock, 'mixlist.json')}" in payload["error"]["hint"]
    locked.model.unlink()
    code, payload = locked.check()
    _located(code, payload, "not found")
    assert payload["error"]["file"].endswith("model.onnx")
    code, payload = cli_json("lock", "--check", locked.folder / "nowhere.lock.json")
    _located(code, payload, "not found")


def test_validate_reports_a_hostile_lock_as_unusable(locked: Tree) -> None:
    text = locked.lock.read_text(encoding="utf-8").replace('"format_version": 2', '"format_version": "2"')
    locked.lock.write_text(text, encoding="utf-8")
    result = cli("validate", locked.lock)
    assert result.exit_code == 2 and "format version" in result.stdout
    shutil.copyfile(locked.lock, locked.folder / "other.json")  # found by its content, whatever its name
    assert cli("validate", locked.folder / "other.json").exit_code == 2


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("format_version", True, "format version true"),  # true == 1 in Python: no version
        ("nodes", True, "valid integer, got boolean true"),
        ("casts", "2", "valid integer, got string"),
        ("estimated_us", False, "valid number, got boolean false"),
    ],
)
def test_lock_counts_that_are_booleans_or_strings(locked: Tree, key: str, value: object, fragment: str) -> None:
    data = json.loads(locked.lock.read_text(encoding="utf-8"))
    section = data if key == "format_version" else data["model"] if key == "nodes" else data["summary"]
    section[key] = value
    locked.lock.write_text(json.dumps(data, indent=1), encoding="utf-8")
    code, payload = locked.check()
    _located(code, payload, fragment, line_of(locked.lock, f'"{key}"'))
    assert cli("validate", locked.lock).exit_code == 2


@pytest.mark.parametrize("name", ["mo\0del.onnx", "a" * 300 + ".onnx", "a" * 300 + "/model.onnx"])
@pytest.mark.parametrize("record", ["model", "modify_mixlist"])
def test_recorded_path_with_a_nul_or_a_name_too_long(locked: Tree, name: str, record: str) -> None:
    data = json.loads(locked.lock.read_text(encoding="utf-8"))
    (data["model"] if record == "model" else data["settings"]["modify_mixlist"])["path"] = name
    locked.lock.write_text(json.dumps(data, indent=1), encoding="utf-8")
    code, payload = locked.check()
    _located(code, payload, "NUL character" if "\0" in name else "longer than the file system allows")
    assert payload["error"]["file"] == str(locked.folder / name)
    assert f"precision.lock.json:{line_of(locked.lock, json.dumps(name))}" in payload["error"]["hint"]
    result = cli("validate", locked.lock)
    assert result.exit_code == 2 and "1 error" in result.stdout, result.stdout
    assert cli("lock", "--check", locked.lock).exit_code == 2


def test_a_named_model_is_never_checked_against_the_bundled_example(tmp_path: Path) -> None:
    """The tree's model is a copy of the example: judged against the example, the check passed, and --update
    wrote "example" into the lock of a named model."""
    tree = example_tree(tmp_path)
    tree.config.write_text("model: model.onnx\nprecision_mode: allow_mix_precision\n", encoding="utf-8")
    assert cli("lock", "--config", tree.config, "-o", tree.lock).exit_code == 0
    tree.config.write_text("precision_mode: allow_mix_precision\n", encoding="utf-8")
    before = tree.lock.read_bytes()
    for options in ((), ("--update",)):
        code, payload = tree.check(*options)
        _located(code, payload, "made for the model 'model.onnx'", line_of(tree.lock, '"model.onnx"'))
        assert "bundled example" in payload["error"]["message"] and "session.yaml" in payload["error"]["message"]
    assert tree.lock.read_bytes() == before
    result = cli("validate", tree.lock)
    assert result.exit_code == 2 and "names no model" in result.stdout


def test_a_lock_refers_to_the_repositorys_schema_by_relative_path(tmp_path: Path) -> None:
    """With ampconfig's schemas written into the repository (``schema --write``), a lock's ``$schema`` is their
    relative path, which an editor resolves offline, and the lock is valid against the schema it names."""
    import jsonschema

    tree = _full_tree(tmp_path)
    (tmp_path / ".git").mkdir()
    (tmp_path / "schemas").mkdir()
    assert cli("schema", "--write", str(tmp_path / "schemas")).exit_code == 0
    result = cli("lock", tree.model, "--config", tree.config, "-o", tree.lock)
    assert result.exit_code == 0, result.output
    data = json.loads(tree.lock.read_text(encoding="utf-8"))
    schema_file = (tree.lock.parent / data["$schema"]).resolve()
    assert schema_file == (tmp_path / "schemas" / SCHEMA_KINDS["lock"].filename).resolve()
    jsonschema.validate(data, json.loads(schema_file.read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    ("spread", "said"),
    [
        ({"zeros": 0, "exponents": {"500": 1}}, "lies outside float32's exponents"),
        ({"zeros": 0, "exponents": {"-1.5": 1}}, "below_normal"),
        ({"zeros": "none", "exponents": {}}, "below_normal"),
        ({"zeros": 0, "exponents": {"3": 0}}, "below_normal"),
        ([1, 2], "below_normal"),
    ],
)
def test_a_hostile_underflow_record_is_located(locked: Tree, spread: object, said: str) -> None:
    data = json.loads(locked.lock.read_text(encoding="utf-8"))
    data["values"]["below_normal"] = {"x": spread}
    locked.lock.write_text(json.dumps(data, indent=1), encoding="utf-8")
    code, payload = locked.check()
    assert code == 2
    assert said in payload["error"]["message"] or said in str(payload["error"]["json_path"]), payload
    assert payload["error"]["line"] is not None
