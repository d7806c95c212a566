"""``rewrite_model_detailed``'s safety net: a changed node the ONNX checker rejects keeps its dtype, every such
node found at once by structure, and the model is rewritten once more; what the checker says is only shown. And the
API's arguments are checked as the command line checks its flags: a hostile call is a located error naming the
argument, never a bare TypeError or ValueError. And the public functions' signatures: keywords after the model and
the mode, each parameter documented in an ``Args:`` section."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh

import ampconfig
import ampconfig.rewrite.steps.apply_plan
from ampconfig import MixedPrecisionPass, rewrite_model
from ampconfig.api import rewrite_model_detailed
from ampconfig.decide.decisions import Rule
from ampconfig.errors import AmpconfigError
from tests.graphs import FLOAT, make_model, one_relu, run, tensor
from tests.lock_trees import cli
from tests.value_models import mlp
from tests.worker_faults import (
    fresh_worker,
    inject,
    process_gone,
    reads_float32,
    transpose_model,
    transpose_model_file,
)

__all__ = ["fresh_worker"]  # the fixture, used by name


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


# ------------------------------------------------------------------ the API checks what the CLI checks (issue 36)
HOSTILE_OPTIONS: list[tuple[str, object]] = [
    *[("modify_mixlist", value) for value in (42, ["MatMul"], "x\0y.json", "a" * 300 + ".json", {"black-list": 3})],
    *[("keep_dtype", value) for value in (42, [1, 2], "x\0y.cfg", {"a": 1}, b"x")],
    *[("target", value) for value in (42, "nope", None)],
    *[("keep_io_types", value) for value in ("yes", 2, None)],
    *[("overflow_nodes", value) for value in (["a"], {"a": 1}, 42)],
    *[("float16_encoder", value) for value in (42, "f")],
    *[("op_names", value) for value in (42, "klingon")],
    *[("op_info", value) for value in ("cpu", 42)],
    *[("customize_dtypes", value) for value in (42, "x\0y.cfg")],
    *[("judges", value) for value in (42, ["x"])],
    *[("value_ranges", value) for value in ({"a": 1.0}, 42)],
    *[("clamp_values", value) for value in ("yes", 1)],
    *[("ranges", value) for value in (42, "x\0y.json", "a" * 300 + ".json", "/no/such/ranges.json")],
    *[("data_max", value) for value in (math.nan, math.inf, -math.inf, -1.0, 0.0, True, "12", 1e9)],
    *[("with_cost", value) for value in ("no",)],
    *[("runtime_refused", value) for value in (["a"], 42)],
    *[("precision_mode", value) for value in (42, None, "nope", True)],
    *[("model", value) for value in (42, None, b"m.onnx", "x\0y.onnx", "a" * 300 + ".onnx", "/no/such/model.onnx")],
]


def _hostile_call(entry: str, key: str, value: object, model: onnx.ModelProto) -> None:
    mode: object = "allow_mix_precision"
    given: object = model
    options: dict[str, object] = {}
    if key == "model":
        given = value
    elif key == "precision_mode":
        mode = value
    else:
        options[key] = value
    if entry == "rewrite_model_detailed":
        rewrite_model_detailed(given, mode, **options)  # type: ignore[arg-type]
    elif entry == "rewrite_model":
        rewrite_model(given, mode, **options)  # type: ignore[arg-type]
    else:
        MixedPrecisionPass(mode, **options)(ir.from_proto(model))  # type: ignore[arg-type]


#: Which entry takes which argument: rewrite_model its few keywords, the pass everything but the model.
_TAKES = {
    "rewrite_model_detailed": lambda key: True,
    "rewrite_model": lambda key: (
        key in ("model", "precision_mode", "modify_mixlist", "keep_dtype", "target")
        or key in ("keep_io_types", "clamp_values", "ranges", "data_max")
    ),
    "MixedPrecisionPass": lambda key: key != "model",
}
HOSTILE_CALLS = [(entry, key, value) for entry in _TAKES for key, value in HOSTILE_OPTIONS if _TAKES[entry](key)]


@pytest.mark.parametrize(
    ("entry", "key", "value"), HOSTILE_CALLS, ids=[f"{e}-{k}-{v!r:.20}" for e, k, v in HOSTILE_CALLS]
)
def test_a_hostile_api_call_is_a_located_error_never_a_bare_one(entry: str, key: str, value: object) -> None:
    with pytest.raises(AmpconfigError) as raised:
        _hostile_call(entry, key, value, mlp())
    problem = raised.value
    said = f"{problem.message} {problem.hint or ''} {problem.file or ''}".replace("-", "_").lower()
    named = key.split("_")[-1] if key != "data_max" else "data_max"  # modify_mixlist: "mixlist file: ..."
    assert named in said or key == "precision_mode", said


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e9"])
def test_the_api_refuses_a_margin_with_the_command_lines_message(value: str, tmp_path: Path) -> None:
    onnx.save(mlp(), tmp_path / "mlp.onnx")
    refused = cli("rewrite", tmp_path / "mlp.onnx", "-o", tmp_path / "out.onnx", "--data-max", value)
    assert refused.exit_code == 2
    with pytest.raises(AmpconfigError) as raised:
        rewrite_model(tmp_path / "mlp.onnx", "allow_mix_precision", data_max=float(value))
    assert raised.value.message.replace("data_max", "--data-max") in refused.output
    assert raised.value.hint is not None and raised.value.hint in refused.output


def _relu_file(folder: Path) -> Path:
    path = folder / "relu.onnx"
    onnx.save_model(one_relu(), path)
    return path


def test_close_ends_the_apis_worker_and_the_next_call_starts_another(tmp_path: Path) -> None:
    """On main the API's worker (about 90 MB) lived as long as the calling process."""
    from ampconfig.worker import client as worker

    model = _relu_file(tmp_path)
    ampconfig.calibrate_model(model, tmp_path / "first.json")
    first = worker.current()
    ampconfig.close()
    assert process_gone(first.pid) and not first.folder.exists()
    with ampconfig.onnx_runtime_worker():
        ampconfig.calibrate_model(model, tmp_path / "second.json")
        second = worker.current()
        assert second.pid != first.pid and not process_gone(second.pid)
    assert process_gone(second.pid) and not second.folder.exists()


# ---------------------------------------------------------------------------------------- the load check (issue 43)


def test_the_api_keeps_a_node_whose_float16_form_crashes_onnx_runtime(
    monkeypatch: pytest.MonkeyPatch, fresh_worker: None
) -> None:
    """On main the API built no session: the fault never fired and the float16 Transpose came back."""
    inject(monkeypatch, "load:segv:lowered:Transpose")
    result = rewrite_model_detailed(transpose_model(), "force_fp16", target="cpu")
    by_name = {d.name: d for d in result.decisions}
    assert (by_name["transpose"].dtype, by_name["transpose"].rule) == ("float32", Rule.RUNTIME_REFUSES)
    assert (by_name["matmul"].dtype, by_name["relu"].dtype) == ("float16", "float16")
    assert (
        "node transpose kept float32 (rule runtime_refuses): ONNX Runtime crashed (killed by SIGSEGV) while "
        "loading the rewritten model with it in float16" in result.warnings
    )
    assert reads_float32(rewrite_model(transpose_model(), "force_fp16", target="cpu"), "Transpose")


def test_a_crash_no_node_explains_raises_a_located_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_worker: None
) -> None:
    path = transpose_model_file(tmp_path)
    inject(monkeypatch, "load:segv:any")
    with pytest.raises(AmpconfigError, match="crashed \\(killed by SIGSEGV\\) while loading the rewritten") as caught:
        rewrite_model_detailed(path, "force_fp16", target="cpu")
    assert caught.value.file == str(path) and "load_check=False" in (caught.value.hint or "")
    unchecked = rewrite_model(path, "force_fp16", target="cpu", load_check=False)  # builds no session
    assert not reads_float32(unchecked, "Transpose")


#: What a public function may take by position (anything else is keyword-only): the model and the mode, and for the
#: ranges functions the files in and out; every other public function takes no positional argument.
POSITIONAL = {
    "rewrite_model": ("model", "precision_mode"),
    "rewrite_model_detailed": ("model", "precision_mode"),
    "MixedPrecisionPass": ("precision_mode",),  # the model comes with the call, as onnx-ir passes take it
    "calibrate_model": ("model", "output"),
    "merge_ranges": ("shards", "output"),
}
#: The public functions, and the pass (the classes of results and judgements are data, built by ampconfig).
PUBLIC_CALLABLES = [name for name in ampconfig.__all__ if inspect.isfunction(getattr(ampconfig, name))]
PUBLIC_CALLABLES.append("MixedPrecisionPass")


def _documented_parameters(function: Callable[..., object]) -> list[str]:
    """The names of a Google-style ``Args:`` section, in order (its entries are ``name: ...`` one indent in)."""
    lines = (inspect.getdoc(function) or "").splitlines()
    if "Args:" not in lines:
        return []
    names = []
    for line in lines[lines.index("Args:") + 1 :]:
        if line and not line.startswith(" "):
            break  # the next section
        entry = line.removeprefix("    ")
        if entry and not entry.startswith(" "):
            names.append(entry.partition(":")[0].lstrip("*"))
    return names


@pytest.mark.parametrize("name", PUBLIC_CALLABLES)
def test_every_public_function_takes_keywords_after_the_model_and_documents_each_argument(name: str) -> None:
    """On main at 73f8c17 ``rewrite_model_detailed`` took 14 parameters by position and documented none in an
    ``Args:`` section."""
    public = getattr(ampconfig, name)
    parameters = list(inspect.signature(public).parameters.values())
    keywords = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD)
    positional = [p.name for p in parameters if p.kind not in keywords]
    assert positional == list(POSITIONAL.get(name, ()))
    assert _documented_parameters(public) == [p.name for p in parameters]
