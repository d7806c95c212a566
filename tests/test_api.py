"""``rewrite_model_detailed``'s safety net: a changed node the ONNX checker rejects keeps its dtype, every such
node found at once by structure, and the model is rewritten once more; what the checker says is only shown."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper as oh

import ampconfig.rewrite.steps.apply_plan
from ampconfig.api import rewrite_model_detailed
from ampconfig.decide.decisions import Rule
from tests.graphs import FLOAT, make_model, run, tensor


def _random_like_nodes() -> onnx.ModelProto:
    """RandomNormalLike and Bernoulli with a ``dtype`` attribute of float32: their schemas allow float16, but the
    attribute fixes the output type, so in float16 the checker rejects both (a gap the op info does not see)."""
    return make_model(
        [
            oh.make_node("Relu", ["x"], ["r"], name="relu"),
            oh.make_node("RandomNormalLike", ["r"], ["noise"], name="noise", dtype=FLOAT, scale=1e-6),
            oh.make_node("Sigmoid", ["x"], ["p"], name="sigmoid"),
            oh.make_node("Bernoulli", ["p"], ["coin"], name="coin", dtype=FLOAT),
            oh.make_node("Add", ["noise", "coin"], ["sum"], name="add"),
            oh.make_node("Mul", ["sum", "x"], ["y"], name="mul"),
        ],
        [tensor("x", FLOAT, [2, 3])],
        [tensor("y", FLOAT, [2, 3])],
    )


@pytest.fixture
def pipeline_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the rewrite applied a plan (one per run of the pipeline)."""
    runs: list[int] = []
    apply_plan = ampconfig.rewrite.steps.apply_plan.apply_plan

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return apply_plan(*args, **kwargs)

    monkeypatch.setattr(ampconfig.rewrite.steps.apply_plan, "apply_plan", counted)
    return runs


def test_every_node_the_checker_rejects_keeps_its_dtype_after_one_more_run(pipeline_runs: list[int]) -> None:
    result = rewrite_model_detailed(_random_like_nodes(), "force_fp16", target="cuda")
    rules = {d.name: d.rule for d in result.decisions}
    assert rules["noise"] is Rule.CHECKER_REJECTS and rules["coin"] is Rule.CHECKER_REJECTS
    assert {d.name for d in result.decisions if d.dtype == "float16"} >= {"relu", "sigmoid", "add", "mul"}
    assert len(pipeline_runs) == 2  # the first rewrite, then one with both nodes kept
    assert sorted(w.split()[1] for w in result.warnings if "the ONNX checker rejected" in w) == ["coin", "noise"]
    onnx.checker.check_model(result.model, full_check=True)
    x = np.full((2, 3), 2.0, dtype=np.float32)
    (y,) = run(result.model, {"x": x})
    # (noise of scale 1e-6 + a coin of 0 or 1) times x: each element 0 or 2, as the float32 model computes it
    assert np.all(np.isclose(y, 0.0, atol=1e-2) | np.isclose(y, 2.0, atol=1e-2)), y


def test_a_rewrite_the_checker_accepts_runs_once(pipeline_runs: list[int]) -> None:
    result = rewrite_model_detailed(_random_like_nodes(), "allow_mix_precision", target="cuda")
    assert len(pipeline_runs) == 1
    assert not [d for d in result.decisions if d.rule is Rule.CHECKER_REJECTS]


def test_an_input_with_a_checker_complaint_is_held_only_to_new_ones(pipeline_runs: list[int]) -> None:
    """The input declares a stale shape for its output (the checker rejects it; ONNX Runtime loads and runs it).
    The rewrite keeps that complaint, and the nodes the checker rejects in float16 are still found and kept."""
    model = _random_like_nodes()
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 4
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.checker.check_model(model, full_check=True)
    result = rewrite_model_detailed(model, "force_fp16", target="cuda")
    assert {d.name for d in result.decisions if d.rule is Rule.CHECKER_REJECTS} == {"noise", "coin"}
    assert len(pipeline_runs) == 2
    assert any("does not pass the ONNX checker" in w for w in result.warnings)


def _gray_only() -> onnx.ModelProto:
    nodes = [oh.make_node("Softmax", ["x"], ["s"], name="sm", axis=-1), oh.make_node("Exp", ["s"], ["y"], name="ex")]
    return make_model(nodes, [tensor("x", FLOAT, [4, 8])], [tensor("y", FLOAT, [4, 8])], [], opset=17)


@pytest.mark.parametrize(
    ("mode", "warned"),
    [("allow_mix_precision", True), ("allow_mix_precision_bf16", True), ("force_fp32", False), ("force_fp16", False)],
)
def test_a_lowering_mode_that_lowers_nothing_says_why(mode: str, warned: bool) -> None:
    """No white op to start from: the mixed modes keep every node float32, and say so with the rules, rather
    than write an all-float32 model without a word. force_fp16 lowers both; force_fp32 lowers nothing by design."""
    result = rewrite_model_detailed(_gray_only(), mode, target="cuda")
    said = [warning for warning in result.warnings if warning.startswith("no node computes in")]
    assert bool(said) == warned, result.warnings
    if warned:
        (warning,) = said
        assert f"in {result.low_dtype}" in warning and "all 2 float32 nodes" in warning
        assert all(f"{d.rule.value} 1" in warning for d in result.decisions)
