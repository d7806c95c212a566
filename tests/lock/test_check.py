"""`lock --check` and `diff`: each kind of drift is detected and put down to its cause (the mixlist or keep_dtype
line, the config key, the model's graph or weights, the op info), and the report formats are snapshot-tested."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ampconfig
from ampconfig.documents.lock_file import load_lock, lock_data, lock_text
from ampconfig.examples import DEFAULT_EXAMPLE, example_path
from ampconfig.lock.record import decide_lock
from ampconfig.opinfo.library import ReduceFlag, load_ops_info
from ampconfig.settings.resolve import Flags, resolve
from tests import value_models
from tests.exporter_models import EXPORTER_MODELS
from tests.lock_trees import (
    Tree,
    changed_names,
    checked_tree,
    cli,
    cli_json,
    copy_tree,
    edit_lock,
    example_tree,
    files_of,
    line_of,
    working_directory,
)
from tests.model_zoo import ZOO
from tests.unusual_models import UNUSUAL_MODELS

DATA = Path(__file__).parents[1] / "data"
BASE_MIXLIST = {"white-list": {"to-add": ["MatMul"]}}  # MatMul is white already: changes nothing

#: Per model, one op type whose move to the black list changes some nodes but not all.
EDITS = {"example": "Erf", "cnn": "HardSigmoid", "gpt2": "Tanh", "ocr": "Softmax"}


def _model(name: str) -> onnx.ModelProto:
    return onnx.load(example_path(DEFAULT_EXAMPLE)) if name == "example" else EXPORTER_MODELS[name]()


def _dtypes(model: onnx.ModelProto, mixlist: dict) -> dict[str, str | None]:
    result = ampconfig.rewrite_model_detailed(model, "allow_mix_precision", modify_mixlist=mixlist, target="cuda")
    return {decision.name: decision.dtype for decision in result.decisions}


def _same(first: str | None, second: Path) -> bool:
    return first is not None and Path(first).resolve() == second.resolve()


@pytest.mark.parametrize("name", list(EDITS))
def test_a_mixlist_edit_is_exactly_the_nodes_whose_dtype_changed_with_the_line_named(tmp_path: Path, name: str) -> None:
    model = _model(name)
    tree = Tree(tmp_path)
    tree.write_model(model)
    tree.write_mixlist(BASE_MIXLIST)
    base = tmp_path / "base-mixlist.json"
    base.write_text(tree.mixlist.read_text(encoding="utf-8"), encoding="utf-8")
    tree.lock_it("--modify-mixlist", tree.mixlist)
    edited = {**BASE_MIXLIST, "black-list": {"to-add": [EDITS[name]]}}
    tree.write_mixlist(edited)
    edit_line = line_of(tree.mixlist, EDITS[name])
    before, after = _dtypes(model, BASE_MIXLIST), _dtypes(model, edited)
    expected = {node for node in after if before.get(node) != after[node]}
    assert expected, f"the edit changes nothing on {name}"

    code, check = tree.check()
    diff_code, diff = cli_json("diff", tree.model, "--base-mixlist", base, "--modify-mixlist", tree.mixlist)
    assert code == 1 and diff_code == 0
    for payload in (check, diff):
        assert changed_names(payload) == expected
        assert payload["added"] == payload["removed"] == []
        for change in payload["changed"]:
            cause = change["cause"]
            assert cause["kind"] == "mixlist" and _same(cause["file"], tree.mixlist), change
            assert cause["line"] == edit_line, change
        assert payload["summary"]["low_precision_nodes"]["new"] < payload["summary"]["low_precision_nodes"]["old"]
    causes = [cause for cause in check["causes"] if cause["line"] == edit_line]
    assert len(causes) == 1 and set(causes[0]["nodes"]) >= expected


def test_an_ascend_named_mixlist_edit_names_its_line(tmp_path: Path) -> None:
    """A mixlist written with Ascend's op names (SoftmaxV2 is ONNX's Softmax), read as the lock records it."""
    tree = example_tree(tmp_path, BASE_MIXLIST)
    tree.lock_it("--modify-mixlist", tree.mixlist, "--op-names", "ascend")
    assert '"op_names": {"value": "ascend", "source": "command line"}' in tree.lock.read_text(encoding="utf-8")
    tree.write_mixlist({**BASE_MIXLIST, "black-list": {"to-add": ["SoftmaxV2"]}})
    code, payload = tree.check()
    assert code == 1 and changed_names(payload) == {"attn/Softmax"}
    cause = payload["changed"][0]["cause"]
    assert cause["line"] == line_of(tree.mixlist, "SoftmaxV2") and "to-add SoftmaxV2" in cause["message"]


def test_the_formats_name_the_mixlist_line_and_the_lock_lines(tmp_path: Path) -> None:
    """Snapshots of --format markdown and --format github (tests/data/lock_check.*); set
    AMPCONFIG_UPDATE_SNAPSHOTS=1 to rewrite them after an intended change."""
    tree = example_tree(tmp_path, BASE_MIXLIST)
    tree.lock_it("--modify-mixlist", tree.mixlist)
    tree.write_mixlist({**BASE_MIXLIST, "black-list": {"to-add": ["Erf"]}})
    with working_directory(tmp_path):
        outputs = {
            fmt: cli("lock", "--check", "models/precision.lock.json", "--format", fmt) for fmt in ("markdown", "github")
        }
    for fmt, suffix in (("markdown", "md"), ("github", "github.txt")):
        result = outputs[fmt]
        assert result.exit_code == 1, result.output
        snapshot = DATA / f"lock_check.{suffix}"
        if os.environ.get("AMPCONFIG_UPDATE_SNAPSHOTS"):
            snapshot.write_text(result.stdout, encoding="utf-8")
        assert result.stdout == snapshot.read_text(encoding="utf-8"), f"{snapshot.name} drifted"
    github = outputs["github"].stdout
    assert f"::error file=models/mixlist.json,line={line_of(tree.mixlist, 'Erf')}," in github
    assert "::error file=models/precision.lock.json,line=" in github


def test_a_keep_dtype_edit_names_its_line(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    tree.keep.write_text("ln_1\n", encoding="utf-8")
    tree.lock_it("--keep-dtype", tree.keep)
    tree.keep.write_text("ln_1\n# the GELU stays exact\nmlp.gelu/Erf\n", encoding="utf-8")
    code, payload = tree.check()
    assert code == 1
    changes = {change["name"]: change for change in payload["changed"] + payload["rule_changed"]}
    erf = changes["mlp.gelu/Erf"]
    assert erf["new"]["rule"] == "keep_dtype" and erf["new"]["dtype"] == "float32"
    assert erf["cause"]["kind"] == "keep_dtype" and erf["cause"]["line"] == 3 and _same(erf["cause"]["file"], tree.keep)
    assert all(change["cause"]["kind"] == "keep_dtype" for change in changes.values())


def test_a_customize_dtypes_edit_names_its_line(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    custom = tree.folder / "customize_dtypes.cfg"
    custom.write_text("ln_1::InputDtype:float32,float32,float32,OutputDtype:float32\n", encoding="utf-8")
    tree.lock_it("--customize-dtypes", custom)
    assert '"customize_dtypes": {"path": "customize_dtypes.cfg"' in tree.lock.read_text(encoding="utf-8")
    custom.write_text(custom.read_text(encoding="utf-8") + "mlp.gelu/Erf::InputDtype:float32,OutputDtype:float32\n")
    code, payload = tree.check()
    assert code == 1
    erf = next(change for change in payload["changed"] if change["name"] == "mlp.gelu/Erf")
    assert (erf["new"]["dtype"], erf["new"]["rule"]) == ("float32", "customized")
    assert erf["cause"]["kind"] == "customize_dtypes" and erf["cause"]["line"] == 2
    assert _same(erf["cause"]["file"], custom)


def test_a_mode_change_in_the_config_names_the_config_line(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    header = "# decided for the GPU\ntarget: cuda\n"
    tree.config.write_text(header + "precision_mode: allow_mix_precision\n", encoding="utf-8")
    tree.lock_it("--config", tree.config)
    tree.config.write_text(header + "precision_mode: force_fp32\n", encoding="utf-8")
    code, payload = tree.check()
    assert code == 1 and payload["changed"]
    for change in payload["changed"]:
        cause = change["cause"]
        assert cause["kind"] == "config" and "precision mode allow_mix_precision -> force_fp32" in cause["message"]
        assert _same(cause["file"], tree.config) and cause["line"] == 3
    assert payload["summary"]["low_precision_nodes"]["new"] == 0


def _renamed(model: onnx.ModelProto, old: str, new: str) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if node.name == old:
            node.name = new
    return copy


def test_a_changed_graph_is_told_apart_from_changed_weights(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    tree.lock_it()
    model = onnx.load(tree.model)
    tree.write_model(_renamed(model, "ln_2", "ln_2_reexported"))
    code, payload = tree.check()
    assert code == 1
    assert payload["model"] == {"structure_changed": True, "weights_changed": False}
    assert changed_names(payload, ("added",)) == {"ln_2_reexported"}
    assert changed_names(payload, ("removed",)) == {"ln_2"}
    assert {change["cause"]["kind"] for change in payload["added"] + payload["removed"]} == {"model_structure"}
    # Retrained weights: same graph, other values. The lock no longer describes the model: exit 1, no node changed.
    for tensor in model.graph.initializer:
        if tensor.data_type == TensorProto.FLOAT:
            array = numpy_helper.to_array(tensor) * np.float32(1.01)
            tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    tree.write_model(model)
    code, payload = tree.check()
    assert code == 1 and payload["model"] == {"structure_changed": False, "weights_changed": True}
    assert payload["changed"] == payload["added"] == payload["removed"] == []
    assert [cause["kind"] for cause in payload["moved"]] == ["model_weights"]
    assert "the model changed, no decision did" in cli("lock", "--check", tree.lock).stdout


def _pow_model(exponent: float) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.random.default_rng(0).normal(0, 0.1, (8, 8)).astype(np.float32), "W")
    power = numpy_helper.from_array(np.array(exponent, dtype=np.float32), "E")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["a"], name="mm1"),
        helper.make_node("Pow", ["a", "E"], ["p"], name="pow"),
        helper.make_node("MatMul", ["p", "W"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes,
        "pow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [weight, power],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_a_decision_moved_by_the_weights_alone_is_put_down_to_them(tmp_path: Path) -> None:
    """Pow(x, 0.5) is no range hazard, Pow(x, 3) is: a retrained exponent moves the node to float32."""
    tree = Tree(tmp_path)
    tree.write_model(_pow_model(0.5))
    tree.lock_it()
    tree.write_model(_pow_model(3.0))
    code, payload = tree.check()
    assert code == 1 and changed_names(payload) == {"pow"}
    change = payload["changed"][0]
    assert (change["old"]["dtype"], change["new"]["dtype"]) == ("float16", "float32")
    assert change["cause"]["kind"] == "model_weights" and _same(change["cause"]["file"], tree.model)


def test_an_op_info_release_change_is_put_down_to_the_op_info(tmp_path: Path) -> None:
    """A lock made with an older op info (ONNX Runtime 1.26, whose CUDA LayerNormalization summed in float16:
    black) against today's, where it is gray."""
    tree = example_tree(tmp_path)
    current = load_ops_info("cuda")
    entry = dataclasses.replace(current.entries["LayerNormalization"], precision_reduce=ReduceFlag("false"))
    old = dataclasses.replace(
        current, onnxruntime_version="1.26.0", entries={**current.entries, "LayerNormalization": entry}
    )
    settings = resolve(Flags(model=tree.model))
    tree.lock.write_text(lock_text(decide_lock(settings, tree.lock, op_info=old).lock), encoding="utf-8")
    code, payload = tree.check()
    assert code == 1 and {"ln_1", "ln_2"} <= changed_names(payload)
    for change in payload["changed"]:
        assert change["cause"]["kind"] == "op_info", change
        assert f"ONNX Runtime 1.26.0 -> {current.onnxruntime_version}" in change["cause"]["message"]
    result = cli("lock", "--check", tree.lock, "--update")
    assert result.exit_code == 0 and "updated" in result.stdout
    assert tree.check()[0] == 0


def test_versions_that_moved_without_a_decision_are_notes_unless_strict(tmp_path: Path) -> None:
    """An upgrade moves versions, not decisions: named by JSON path, a note; --strict fails on it."""
    tree = example_tree(tmp_path)
    tree.lock_it("--modify-mixlist", tree.mixlist)
    text = tree.lock.read_text(encoding="utf-8")
    tree.lock.write_text(text.replace(f'"ampconfig": "{ampconfig.__version__}"', '"ampconfig": "0.0.1"'), "utf-8")
    code, payload = tree.check()
    assert code == 0 and not payload["drifted"]
    assert [(item["json_path"], item["old"], item["fails"]) for item in payload["fields"]] == [
        ("$.versions.ampconfig", "0.0.1", False)
    ]
    assert payload["fields"][0]["line"] == line_of(tree.lock, '"ampconfig": "0.0.1"')
    assert any("ampconfig 0.0.1 ->" in cause["message"] for cause in payload["moved"])
    assert any("$.versions.ampconfig" in note and "--update records them" in note for note in payload["notes"])
    text_report = cli("lock", "--check", tree.lock).stdout
    assert f'$.versions.ampconfig: "0.0.1" -> "{ampconfig.__version__}" (only --strict fails on it)' in text_report
    assert tree.check("--strict")[0] == 1
    assert cli("lock", "--check", tree.lock, "--update").exit_code == 0
    assert tree.check("--strict")[0] == 0


def test_a_settings_file_that_changed_without_a_decision_is_drift_named_by_its_digest(tmp_path: Path) -> None:
    """The lock's digest no longer matches the file it names: whitespace or a hand-edited digest alike, the lock
    no longer records today's files. Exit 1, the digest's JSON path named; --update records the new digest."""
    tree = example_tree(tmp_path)
    tree.lock_it("--modify-mixlist", tree.mixlist)
    tree.mixlist.write_text(tree.mixlist.read_text(encoding="utf-8") + "\n\n", encoding="utf-8")  # whitespace only
    code, payload = tree.check()
    assert code == 1 and payload["drifted"] and payload["changed"] == []
    assert [(item["json_path"], item["fails"]) for item in payload["fields"]] == [
        ("$.settings.modify_mixlist.sha256", True)
    ]
    assert payload["fields"][0]["line"] == line_of(tree.lock, '"modify_mixlist"')
    assert [item["setting"] for item in payload["files"]] == ["modify_mixlist"]
    assert cli("lock", "--check", tree.lock, "--update").exit_code == 0
    assert tree.check("--strict")[0] == 0


def test_diff_compares_configs_and_lock_files_and_runs_both_sides(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    base_config = tree.folder / "base.yaml"
    base_config.write_text("precision_mode: allow_mix_precision\n", encoding="utf-8")
    tree.config.write_text("precision_mode: allow_mix_precision\nmodify_mixlist: mixlist.json\n", encoding="utf-8")
    code, payload = cli_json(
        "diff", tree.model, "--base-config", base_config, "--config", tree.config, "--run", "--device", "cpu",
        "--shape", "input_ids=1x8",
    )  # fmt: skip
    assert code == 0 and payload["sides"] == ["base", "new"]
    assert "attn/Softmax" in changed_names(payload)
    assert all(_same(change["cause"]["file"], tree.mixlist) for change in payload["changed"])
    run = payload["runs"]
    assert run["device"] == "cpu" and [output["name"] for output in run["outputs"]] == ["logits"]
    assert run["outputs"][0]["base"]["rel_l2"] is not None and run["outputs"][0]["new"]["rel_l2"] is not None
    assert cli("diff", tree.model, "--base-config", base_config, "--config", tree.config, "--exit-code").exit_code == 1
    html = cli("diff", tree.model, "--base-config", base_config, "--config", tree.config, "--format", "html").stdout
    assert html.startswith("<!DOCTYPE html>") and "attn/Softmax" in html and "http" not in html
    assert "<title>ampconfig diff: " in html
    markdown = cli("diff", tree.model, "--base-config", base_config, "--config", tree.config, "--format", "markdown")
    heading = markdown.stdout.splitlines()[0]  # settings compared on a model: no lock is involved (issue 31)
    assert heading.startswith("### ampconfig diff: ") and "lock" not in heading
    # Two lock files.
    base_lock = tree.folder / "base.lock.json"
    assert cli("lock", tree.model, "-c", base_config, "-o", base_lock).exit_code == 0
    tree.lock_it("-c", tree.config)
    code, payload = cli_json("diff", "--base-lock", base_lock, "--lock", tree.lock)
    assert code == 0 and "attn/Softmax" in changed_names(payload)
    locks = cli("diff", "--base-lock", base_lock, "--lock", tree.lock, "--format", "markdown").stdout
    assert locks.startswith("### ampconfig precision locks: ")
    assert all(change["cause"]["kind"] == "mixlist" for change in payload["changed"])


def test_diff_usage_errors(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    assert "nothing to compare" in cli("diff", tree.model).stderr
    assert cli("diff", "--base-lock", tree.mixlist).exit_code == 2
    assert cli("diff", tree.model, "--base-mixlist", tree.mixlist, "--format", "pdf").exit_code == 2
    missing = cli("diff", tree.model, "--base-mixlist", tree.folder / "gone.json", "--modify-mixlist", tree.mixlist)
    assert missing.exit_code == 2 and "gone.json" in missing.stderr


# ------------------------------------------------------------------------------ locks keep what decided (issue 36)
@pytest.fixture(scope="module")
def front_end(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.underflow_models import write_front_end

    folder = tmp_path_factory.mktemp("front_end_lock")
    return write_front_end(folder)


def test_a_lock_of_underflow_decisions_passes_its_check_without_the_ranges_file(front_end: tuple[Path, Path]) -> None:
    model, data = front_end
    folder = model.parent
    ranges, lock = folder / "ranges.json", folder / "front_end.lock.json"
    assert cli("calibrate", model, "--calibration-data", data, "-o", ranges).exit_code == 0
    made = cli("lock", model, "-m", "allow_mix_precision", "--ranges", ranges, "-o", lock)
    assert made.exit_code == 0, made.output
    recorded = load_lock(lock)[0]
    assert recorded.values is not None and recorded.values.below_normal is not None
    assert {"re", "im", "re2", "im2", "power_out"} <= set(recorded.values.below_normal)
    assert all(spread.exponents for spread in recorded.values.below_normal.values())
    assert cli("lock", "--check", lock).exit_code == 0  # with the file
    ranges.unlink()
    code, payload = cli_json("lock", "--check", lock)
    assert code == 0, payload
    assert any("is gone: decided with the values the lock recorded" in note for note in payload["notes"])


def test_a_lock_from_a_run_on_data_passes_its_check(front_end: tuple[Path, Path]) -> None:
    model, data = front_end
    lock = model.parent / "run.lock.json"
    ran = cli("run", model, "-m", "allow_mix_precision", "--data", data, "--warmup", "0", "--iterations", "1")
    assert ran.exit_code == 0, ran.output
    made = cli("run", model, "-m", "allow_mix_precision", "--data", data, "--warmup", "0", "--iterations", "1",
               "--lock-out", lock)  # fmt: skip
    assert made.exit_code == 0, made.output
    assert cli("lock", "--check", lock).exit_code == 0
    decided = {node.name: node.rule for node in load_lock(lock)[0].nodes}
    assert decided["cqt_re"] == decided["power"] == "range_underflows"


def test_a_version_1_lock_still_reads_and_passes(tmp_path: Path) -> None:
    tree = example_tree(tmp_path, BASE_MIXLIST)
    tree.lock_it("--modify-mixlist", tree.mixlist)
    data = lock_data(load_lock(tree.lock)[0])
    data["format_version"] = 1
    del data["values"]["below_normal"]
    tree.lock.write_text(json.dumps(data, indent=1), encoding="utf-8")
    code, payload = tree.check()
    assert code == 0, payload


# ------------------------------------------------------------------------------ tampered locks (issue 38)
@pytest.fixture(scope="module")
def checked_pristine(tmp_path_factory: pytest.TempPathFactory) -> Tree:
    return checked_tree(tmp_path_factory.mktemp("checked_lock"))


@pytest.fixture
def checked(checked_pristine: Tree, tmp_path: Path) -> Tree:
    """A lock whose values were checked with a ranges file (``y`` beyond the margin), copied for one test."""
    return copy_tree(checked_pristine, tmp_path)


def _node_named(data: dict, name: str) -> dict:
    return next(node for node in data["nodes"] if node["name"] == name)


def _refused(tree: Tree, json_paths: set[str], said: str) -> None:
    """Exit 2 at each of ``json_paths`` (the first saying ``said``), with --update and without; nothing written."""
    before = files_of(tree.root)
    for options in ((), ("--update",)):
        code, payload = tree.check(*options)
        assert code == 2, payload
        assert {problem["json_path"] for problem in payload["problems"]} == json_paths, payload
        assert said in payload["error"]["message"] and payload["error"]["line"] is not None, payload
        assert payload["error"]["file"] == str(tree.lock) and "version control" in payload["error"]["hint"]
        assert files_of(tree.root) == before
    validated = cli("validate", tree.lock)
    assert validated.exit_code == 2 and all(path in validated.stdout for path in json_paths), validated.output


def test_value_names_the_model_lacks_are_refused(checked: Tree) -> None:
    def extra_values(data: dict) -> None:
        data["values"]["beyond_margin"]["no_such_value"] = 70000.0
        data["values"]["below_normal"]["nor_this/one"] = {"zeros": 0, "exponents": {"-20": 4}}

    edit_lock(checked.lock, extra_values)
    _refused(
        checked,
        {"$.values.beyond_margin.no_such_value", '$.values.below_normal["nor_this/one"]'},
        "the model has no value 'no_such_value'",
    )


def test_an_edited_op_is_refused_while_the_model_is_the_one_locked_and_drift_once_it_is_not(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    tree.lock_it()
    index = [node.name for node in load_lock(tree.lock)[0].nodes].index("attn.q/Add")
    edit_lock(tree.lock, lambda data: data["nodes"][index].update(op="Sub"))
    _refused(tree, {f"$.nodes[{index}].op"}, "the model's node 'attn.q/Add' has op Add, not Sub")
    # Re-exported (a node renamed): the lock no longer names this graph, and its op is one difference among others.
    tree.write_model(_renamed(onnx.load(tree.model), "ln_2", "ln_2_reexported"))
    code, payload = tree.check()
    assert code == 1 and payload["model"]["structure_changed"]
    (edited,) = payload["record_changed"]
    assert edited["name"] == "attn.q/Add" and edited["json_path"] == f"$.nodes[{index}]"
    assert edited["fields"] == [{"json_path": f"$.nodes[{index}].op", "old": "Sub", "new": "Add", "fails": True}]


def _formats(tree: Tree) -> dict[str, tuple[int, str]]:
    """``lock --check`` of the tree in every format, from the tree's root (paths as CI has them)."""
    with working_directory(tree.root):
        lock = tree.lock.relative_to(tree.root)
        outputs = {fmt: cli("lock", "--check", lock, "--format", fmt) for fmt in ("text", "github", "markdown")}
        outputs["json"] = cli("lock", "--check", lock, "--json")
    return {fmt: (result.exit_code, result.stdout) for fmt, result in outputs.items()}


def test_a_zeroed_digest_of_a_file_that_is_there_is_drift_named_in_every_format(checked: Tree) -> None:
    """An all-zero digest is no proof of tampering by itself; that it is not the digest of the file it names is."""
    edit_lock(checked.lock, lambda data: data["values"]["ranges"].update(sha256="0" * 64))
    before = files_of(checked.root)
    shown = _formats(checked)
    assert files_of(checked.root) == before
    real = hashlib.sha256(checked.ranges.read_bytes()).hexdigest()
    line = line_of(checked.lock, '"0000000000')
    assert all(code == 1 for code, _ in shown.values()), shown
    assert f"$.values.ranges.sha256: 000000000000 -> {real[:12]}" in shown["text"][1]
    assert "no decision changed, 1 recorded value did" in shown["text"][1]
    assert (
        f"::error file=models/precision.lock.json,line={line},title=ampconfig precision lock::$.values.ranges"
        in (shown["github"][1])
    )
    assert f"- `$.values.ranges.sha256`: `000000000000` -> `{real[:12]}`" in shown["markdown"][1]
    payload = json.loads(shown["json"][1])
    assert payload["drifted"] and payload["fields"] == [
        {"json_path": "$.values.ranges.sha256", "old": "0" * 64, "new": real, "fails": True, "line": line}
    ]
    # The file gone: the digest cannot be judged, the check decides with the recorded values and says so.
    checked.ranges.unlink()
    code, payload = checked.check()
    assert code == 0 and any("is gone" in note for note in payload["notes"]), payload


def test_edits_ampconfig_could_have_written_are_drift_named_in_every_format(checked: Tree) -> None:
    """A node's dtype and colour, a setting the config gives, a settings file's digest and a recorded value,
    each edited by hand: exit 1, each named by its JSON path (and its line) in text, GitHub, Markdown and JSON;
    --update writes the lock as made now, which passes --strict."""

    def edits(data: dict) -> None:
        _node_named(data, "mm0")["dtype"] = "float32"
        _node_named(data, "relu0")["colour"] = "black"
        data["settings"]["precision_mode"]["value"] = "allow_mix_precision_fp16"
        data["settings"]["modify_mixlist"]["sha256"] = "0" * 64
        data["values"]["beyond_margin"]["y"] = 70000.5

    edit_lock(checked.lock, edits)
    before = files_of(checked.root)
    shown = _formats(checked)
    assert files_of(checked.root) == before
    fields = ["$.settings.precision_mode.value", "$.settings.modify_mixlist.sha256", "$.values.beyond_margin.y"]
    for fmt in ("text", "github", "markdown"):
        code, out = shown[fmt]
        assert code == 1, out
        for path in ("$.nodes[0]", "$.nodes[2]", *fields):
            assert path in out, (fmt, path, out)
    assert "mm0 (MatMul) at $.nodes[0]  float32 -> float16" in shown["text"][1]
    assert 'relu0 (Relu) at $.nodes[2]  float16  [follows_inputs]  colour "black" -> "clear"' in shown["text"][1]
    assert '$.settings.precision_mode.value: "allow_mix_precision_fp16" -> "allow_mix_precision"' in shown["text"][1]
    assert "$.values.beyond_margin.y: 70000.5 -> 229353.0625" in shown["text"][1]
    github = shown["github"][1]
    for path, fragment in zip(fields, ('"allow_mix_precision_fp16"', '"0000000000', "70000.5")):
        assert f"line={line_of(checked.lock, fragment)},title=ampconfig precision lock::{path}" in github, github
    payload = json.loads(shown["json"][1])
    assert [change["json_path"] for change in payload["changed"]] == ["$.nodes[0]"]
    assert [change["json_path"] for change in payload["record_changed"]] == ["$.nodes[2]"]
    assert payload["record_changed"][0]["fields"] == [
        {"json_path": "$.nodes[2].colour", "old": "black", "new": "clear", "fails": True}
    ]
    assert [item["json_path"] for item in payload["fields"]] == fields
    assert all(item["fails"] and item["line"] for item in payload["fields"])
    assert cli("lock", "--check", checked.lock, "--update").exit_code == 0
    assert checked.check("--strict")[0] == 0


def test_a_proof_whose_data_changed_is_drift_and_update_drops_it(tmp_path: Path) -> None:
    tree = example_tree(tmp_path)
    inputs = tree.folder / "inputs.npz"
    np.savez(inputs, input_ids=np.arange(8, dtype=np.int64).reshape(1, 8))
    ran = cli("run", tree.model, "--device", "cpu", "--warmup", "0", "--iterations", "1", "--inputs", inputs,
              "--lock-out", tree.lock)  # fmt: skip
    assert ran.exit_code == 0, ran.output
    assert tree.check("--strict")[0] == 0
    np.savez(inputs, input_ids=np.arange(1, 9, dtype=np.int64).reshape(1, 8))
    code, payload = tree.check()
    assert code == 1 and [item["json_path"] for item in payload["fields"]] == ["$.proof.data.npz.sha256"]
    assert any("the recorded proof no longer holds" in note for note in payload["notes"])
    assert cli("lock", "--check", tree.lock, "--update").exit_code == 0
    assert load_lock(tree.lock)[0].proof is None and tree.check("--strict")[0] == 0


LOCKED_MODELS = {**ZOO, **UNUSUAL_MODELS}


@pytest.mark.parametrize("mode", ["allow_mix_precision", "allow_mix_precision_bf16", "force_fp16"])
@pytest.mark.parametrize("name", list(LOCKED_MODELS))
def test_a_lock_ampconfig_writes_passes_its_strict_check(tmp_path: Path, name: str, mode: str) -> None:
    """No false alarm: every rule of the strict reader holds for what ampconfig writes, on every test model."""
    tree = Tree(tmp_path)
    tree.write_model(LOCKED_MODELS[name]())
    made = cli("lock", tree.model, "-m", mode, "-o", tree.lock)
    assert made.exit_code == 0, made.output
    code, payload = tree.check("--strict")
    assert code == 0 and payload["fields"] == [] and payload["changed"] == payload["record_changed"] == [], payload


@pytest.mark.parametrize("build", [value_models.vad_if, value_models.char_lstm_loop, value_models.branch_named_main])
@pytest.mark.parametrize("unnamed", [False, True], ids=["named", "unnamed"])
def test_a_lock_of_values_inside_bodies_passes_its_check(
    tmp_path: Path, build: Callable[[], onnx.ModelProto], unnamed: bool
) -> None:
    """Values inside If and Loop bodies (keys spelled with the body's path, an unnamed owner's path by the name
    ampconfig gives it) are values of the model; a ranges file's value the model lacks is left out of the lock."""
    model = build()
    for node in model.graph.node:
        if unnamed and node.op_type in ("If", "Loop"):
            node.name = ""
    tree = Tree(tmp_path)
    tree.write_model(model)
    assert cli("calibrate", tree.model, *_inputs_of(build, tree), "-o", tree.ranges).exit_code == 0
    ranges = json.loads(tree.ranges.read_text(encoding="utf-8"))
    peak = max(ranges["values"].values(), key=lambda value: value["max_abs"])
    ranges["values"]["a_value_of_another_model"] = peak
    tree.ranges.write_text(json.dumps(ranges), encoding="utf-8")
    made = cli("lock", tree.model, "--ranges", tree.ranges, "--data-max", "0.5", "-o", tree.lock)
    assert made.exit_code == 0, made.output
    recorded = load_lock(tree.lock)[0].values
    assert recorded is not None and "a_value_of_another_model" not in recorded.beyond_margin
    assert any("/" in key for key in recorded.beyond_margin), recorded.beyond_margin  # a body's values are there
    assert tree.check("--strict")[0] == 0
    tree.ranges.unlink()  # decided with the recorded values alone
    code, payload = tree.check()
    assert code == 0 and payload["fields"] and not any(item["fails"] for item in payload["fields"]), payload


def _inputs_of(build: Callable[[], onnx.ModelProto], tree: Tree) -> list[str | Path]:
    if build is not value_models.vad_if:
        return []
    path = tree.folder / "inputs.npz"
    np.savez(path, **value_models.vad_inputs())
    return ["--inputs", path]
