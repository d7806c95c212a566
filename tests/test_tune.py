"""compare, range analysis and tune on a model whose Pow overflows float16 (real ONNX Runtime CPU runs).

The numbers this test pins down (see tests/overflow_model.py): the rewrite lowers 11 nodes; compare names
``square`` as the first bad node; range analysis keeps it float32 (rule range_overflow); tune needs 3 model runs
(reference, the seeded trial, the verification from the written files) where the bisection baseline over the 11
lowered nodes needs 9 (reference, as configured, all pinned, 4 bisection steps, the culprit alone, verification).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.settings.validate import validate_paths
from tests.overflow_model import CULPRIT, write_case

runner = CliRunner()


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_case(tmp_path_factory.mktemp("overflow"))


def _json(args: list[str]) -> tuple[int, dict]:
    result = runner.invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


def test_ops_are_lowered_on_the_cpu_target() -> None:
    from ampconfig.opinfo.library import load_ops_info

    library = load_ops_info("cpu")
    for op in ("MatMul", "Add", "Relu", "Pow"):
        assert library.has_kernel(op, "float16") is True, op


def test_compare_names_the_overflowing_node_first(case: dict[str, Path]) -> None:
    code, payload = _json(["compare", str(case["model"]), "-c", str(case["config"]), "--json"])
    assert code == 1  # the output y overflows: the tolerance is not met
    assert payload["first_bad_node"] == CULPRIT
    localization = payload["localization"]
    assert localization["ranked"][0] == CULPRIT
    assert CULPRIT in localization["overflow_nodes"]
    square = next(node for node in localization["nodes"] if node["name"] == CULPRIT)
    assert square["dtype"] == "float16" and square["error"] == "inf" and square["nonfinite"] > 0
    assert square["reference_max_abs"] > 65504 and square["exceeds_low_range"]
    # Every node before it stays within float16 rounding: the error jumps at square, nowhere earlier.
    before = [node for node in localization["nodes"] if node["name"] != CULPRIT]
    assert len(before) == 10 and all(node["error"] < 1e-2 for node in before)
    assert not payload["passed"] and payload["outputs"][0]["nonfinite"] > 0


def test_range_analysis_keeps_the_node_fp32_in_explain(case: dict[str, Path]) -> None:
    base = ["explain", str(case["model"]), "-c", str(case["config"]), "--json"]
    _, plain = _json(base)
    assert next(n for n in plain["nodes"] if n["name"] == CULPRIT)["dtype"] == "float16"
    code, checked = _json([*base, "--range-check"])
    assert code == 0
    square = next(n for n in checked["nodes"] if n["name"] == CULPRIT)
    assert (square["rule"], square["dtype"]) == ("range_overflow", "float32")
    assert "65504" in square["reason"]
    assert list(checked["range_analysis"]["overflow_nodes"]) == [CULPRIT]
    assert checked["summary"]["by_rule"]["range_overflow"] == 1
    # A data_max above every value seen flags nothing.
    _, loose = _json([*base, "--range-check", "--data-max", "65504"])
    _, tight = _json([*base, "--range-check", "--data-max", "100"])
    assert len(tight["range_analysis"]["overflow_nodes"]) > len(loose["range_analysis"]["overflow_nodes"])


def _tune(case: dict[str, Path], out: Path, *extra: str) -> tuple[int, dict]:
    return _json(["tune", str(case["model"]), "-c", str(case["config"]), "-o", str(out), "--json", *extra])


def test_tune_beats_bisection_and_its_files_pass(case: dict[str, Path], tmp_path: Path) -> None:
    code, tuned = _tune(case, tmp_path / "tuned.mixlist.json")
    assert code == 0 and tuned["succeeded"] and tuned["verified"]
    assert tuned["black_list_to_add"] == ["Pow"] and tuned["keep_dtype_nodes"] == []
    code, bisected = _tune(case, tmp_path / "bisect.mixlist.json", "--strategy", "bisect")
    assert code == 0 and bisected["succeeded"] and bisected["black_list_to_add"] == ["Pow"]
    code, ranked_only = _tune(case, tmp_path / "ranked.mixlist.json", "--no-range-check")
    assert code == 0 and ranked_only["black_list_to_add"] == ["Pow"]

    # Runs: the plain fp32 reference (what run judges against) and the exposed fp32 calibration run; each trial
    # is judged by one plain run, and a failing one costs one more run that exposes intermediates.
    lowered = 11
    bisection_steps = math.ceil(math.log2(lowered))  # all four fail on this model
    assert bisected["model_runs"] == 2 + 2 + 1 + 2 * bisection_steps + 1 + 1 == 15
    assert tuned["model_runs"] == 4  # references, seeded trial, verification
    assert ranked_only["model_runs"] == 6  # references, as configured (fails), pin the first bad node, verification
    assert tuned["model_runs"] < ranked_only["model_runs"] < bisected["model_runs"]

    written = tmp_path / "tuned.mixlist.json"
    assert json.loads(written.read_text()) == {"black-list": {"to-add": ["Pow"]}}
    assert validate_paths([written], kind="mixlist", target="cpu").errors == 0
    validated = runner.invoke(app, ["validate", str(written)])
    assert validated.exit_code == 0, validated.output
    # Independent proof with `run`: the config's mixlist fails, the tuned one passes.
    run = ["run", str(case["model"]), "-c", str(case["config"]), "--iterations", "1", "--warmup", "0"]
    assert runner.invoke(app, run).exit_code == 1
    assert runner.invoke(app, [*run, "--modify-mixlist", str(written)]).exit_code == 0
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary files


def test_tune_node_pins_and_modes_without_mixlist(case: dict[str, Path], tmp_path: Path) -> None:
    keep = tmp_path / "keep_dtype.cfg"
    config = tmp_path / "fp16.yaml"
    config.write_text("precision_mode: force_fp16\ntarget: cpu\nkeep_io_types: false\n", encoding="utf-8")
    code, payload = _json(["tune", str(case["model"]), "-c", str(config), "--keep-dtype-out", str(keep), "--json"])
    # force_fp16 lowers every node; range analysis pins square; Pow has one node so OpType::Pow says the same.
    assert code == 0 and payload["succeeded"]
    assert payload["keep_dtype_op_types"] == ["Pow"] or payload["keep_dtype_nodes"] == [CULPRIT]
    assert validate_paths([keep], kind="keep-dtype", target="cpu").errors == 0
    refused = runner.invoke(app, ["tune", str(case["model"]), "-c", str(config), "-o", str(tmp_path / "m.json")])
    assert refused.exit_code == 2 and "does not accept a modify_mixlist" in refused.output
    assert not (tmp_path / "m.json").exists()


def test_tune_exits_1_and_writes_nothing_when_the_budget_is_spent(case: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "never.json"
    # The references and the rewrite as configured (which fails, and is located): no run is left to pin anything.
    code, payload = _tune(case, out, "--no-range-check", "--max-runs", "4")
    assert code == 1 and not payload["found"] and "budget" in payload["reason"]
    assert payload["model_runs"] == 4 and not out.exists()


def test_tune_pins_node_by_node_for_a_tight_tolerance(case: dict[str, Path], tmp_path: Path) -> None:
    # Below float16 rounding every lowered node matters: the search keeps pinning until the error is gone.
    code, payload = _tune(case, tmp_path / "tight.json", "--tolerance", "1e-9", "--keep-dtype-out", str(tmp_path / "k"))
    assert code == 0 and payload["verified_rel_l2"] <= 1e-9
    assert payload["low_precision_nodes"]["after"] < payload["low_precision_nodes"]["before"]
