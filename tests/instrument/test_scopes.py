"""Value keys: one definition (``decide.value_ranges.value_key``) for the decisions and the runs, unique across
scopes: a body's parts escaped, and a main-graph value named like a branch's value kept apart from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from ampconfig.api import rewrite_model_detailed
from ampconfig.decide.value_ranges import escape_key_part, subgraph_key_path, value_key
from ampconfig.documents.ranges_file import load_ranges
from ampconfig.instrument.expose import float_value_keys
from tests.lock_trees import cli
from tests.value_models import COLLIDING_NAME, branch_named_main


def test_main_graph_keys_are_names_and_body_parts_are_escaped() -> None:
    assert value_key("", "/model/layer.0/MatMul_output_0") == "/model/layer.0/MatMul_output_0"
    path = subgraph_key_path(subgraph_key_path("", "/model/Loop.body"), "If_2.else_branch")
    assert path == "\\/model\\/Loop.body/If_2.else_branch"
    assert value_key(path, "a/b\\c") == "\\/model\\/Loop.body/If_2.else_branch/a\\/b\\\\c"
    assert escape_key_part("x") == "x"
    # a body key never starts with an unescaped "/", so one put in front cannot meet another body key
    assert value_key("if0.then_branch", "t2", {"if0.then_branch/t2"}) == "/if0.then_branch/t2"
    assert value_key("if0.then_branch", "t2", {"if0.then_branch/t2", "/if0.then_branch/t2"}) == "//if0.then_branch/t2"


def test_a_main_value_named_like_a_branch_value_gets_a_key_of_its_own(tmp_path: Path) -> None:
    model = branch_named_main()
    keys = float_value_keys(model)
    assert COLLIDING_NAME in keys and "/" + COLLIDING_NAME in keys and len(set(keys)) == len(keys)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / "in.npz", x=np.array([1.0, -2.0, 3.0, 0.5], np.float32), cond=np.array(True))
    assert cli("calibrate", path, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "r.json").exit_code == 0
    ranges, _ = load_ranges(tmp_path / "r.json")
    assert ranges.values[COLLIDING_NAME].max_abs == 9e4 and ranges.values["/" + COLLIDING_NAME].max_abs == 7.0
    decided = {
        d.name: (d.dtype, d.rule.value)
        for d in rewrite_model_detailed(model, "force_fp16", target="cpu", ranges=tmp_path / "r.json").decisions
    }
    assert decided["main_blow_up"] == decided["main_scale_back"] == ("float32", "range_exceeds")
    assert decided["branch_shift"] == decided["branch_double"] == ("float16", "mode_lowers")
