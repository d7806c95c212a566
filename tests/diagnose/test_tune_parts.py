"""The pieces behind tune, each on its own: the kernel cost model, the isolated-node copy, the sensitivity
arithmetic, the followers of a pin, the search logic, and the trial session options."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest

from ampconfig.api import rewrite_model_detailed
from ampconfig.diagnose.graph_values import GraphNode, graph_nodes
from ampconfig.diagnose.latency import estimate_us, node_flops, original_us, value_shapes
from ampconfig.diagnose.ranges import RangeFinding
from ampconfig.diagnose.sensitivity import damaged_nodes, sensitivities, value_error
from ampconfig.diagnose.tune.forecast import tune_command
from ampconfig.diagnose.tune.ranking import amplifying_consumers, pin_followers
from ampconfig.diagnose.tune.search import Candidate, ErrorModel, PrefixSearch, rank_pins
from ampconfig.diagnose.tune.trials import EXPOSED, PLAIN, Budget, BudgetSpent, computes_low
from ampconfig.instrument.inject import INJECTED_SUFFIX, injection_model
from ampconfig.opinfo.costs import ELEMENTWISE_US, MATRIX_US, NORMALIZATION_US, cast_us, kernel_us
from ampconfig.rewrite.names import with_node_names
from ampconfig.runner.intermediates import run_with_intermediates
from ampconfig.settings.flags import Flags
from ampconfig.settings.resolve import resolve
from ampconfig.worker.server import CUDA_PROVIDER, provider_list
from tests.exporter_models import gpt2, ocr
from tests.graphs import run, transformer_block
from tests.package_readings import estimated_error

# ------------------------------------------------------------------------------------------------ cost model


def test_costs_hit_the_measured_points_and_interpolate() -> None:
    for table, op in ((ELEMENTWISE_US, "Add"), (NORMALIZATION_US, "Softmax")):
        for dtype, points in table.items():
            for elements, micros in points:
                assert kernel_us(op, dtype, elements) == pytest.approx(micros)
    (x0, y0), (x1, y1) = ELEMENTWISE_US["float32"][2:4]
    assert kernel_us("Mul", "float32", (x0 + x1) // 2) == pytest.approx((y0 + y1) / 2, rel=1e-6)
    assert kernel_us("Relu", "float32", 10) == ELEMENTWISE_US["float32"][0][1]  # launch-bound below the table
    big = ELEMENTWISE_US["float32"][-1][0] * 2
    assert kernel_us("Relu", "float32", big) > ELEMENTWISE_US["float32"][-1][1]  # grows beyond it
    assert kernel_us("Relu", "float16", big) < kernel_us("Relu", "float32", big)  # half the bytes
    assert kernel_us("Relu", "bfloat16", big) == kernel_us("Relu", "float16", big)
    assert kernel_us("Reshape", "float32", big) == 0.0
    assert cast_us(big) == kernel_us("Add", "float32", big)  # the source says: cost a Cast like an elementwise op
    flops, micros = MATRIX_US["float16"][-1]
    assert kernel_us("MatMul", "float16", 1, flops) == pytest.approx(micros)
    assert kernel_us("MatMul", "float16", 1, flops) < kernel_us("MatMul", "float32", 1, flops)


def test_latency_estimate_counts_casts_and_flops() -> None:
    model = with_node_names(transformer_block())
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 32)).astype(np.float32)}
    values = run_with_intermediates(model, feeds).values
    shapes = value_shapes(model, values)
    flops = node_flops(model, shapes)
    assert flops["q_proj"] == 2 * 8 * 32 * 32  # [1, 8, 32] x [32, 32]
    assert flops["fc1"] == 2 * 8 * 32 * 128
    outputs = {node.name: list(node.output) for node in model.graph.node}
    mixed = rewrite_model_detailed(model, "allow_mix_precision")
    fp32 = original_us(model, mixed.decisions, shapes, flops)
    estimate = estimate_us(mixed.model, mixed.decisions, shapes, flops, outputs)
    casts = sum(1 for node in mixed.model.graph.node if node.op_type == "Cast")
    assert casts == mixed.stats.casts_inserted > 0
    # Every tensor here is below the table's smallest size: each Cast costs the launch-bound minimum, and each
    # lowered node the difference between its two launch-bound minimums (a small MatMul is slower in float16).
    changed = [d for d in mixed.decisions if d.changed]
    kernels = sum(kernel_us(d.op_type, d.dtype, 1, flops.get(d.name)) for d in changed)
    kernels -= sum(kernel_us(d.op_type, d.original_dtype, 1, flops.get(d.name)) for d in changed)
    assert estimate == pytest.approx(fp32 + casts * cast_us(1) + kernels, rel=1e-9)
    assert kernels > 0 and estimate > fp32


# ------------------------------------------------------------------------------------ the isolated-node copy


def test_injection_copy_feeds_every_chosen_node_and_isolates_it() -> None:
    model = with_node_names(gpt2())
    feeds = {"input_ids": np.arange(16, dtype=np.int64)[None, :]}
    reference = run_with_intermediates(model, feeds).values
    nodes = graph_nodes(model)
    outputs = {node.name: list(node.outputs) for node in nodes}
    chosen = [node.name for node in nodes if node.op_type in ("MatMul", "Add", "Softmax", "Sub")]
    copy = injection_model(model, chosen, outputs, {name: value.shape for name, value in reference.items()})
    onnx.checker.check_model(copy.model, full_check=True)
    fed = dict(feeds)
    for name, (source, dtype) in copy.feeds.items():
        assert name == source + INJECTED_SUFFIX and dtype == "float32"
        fed[name] = reference[source].astype(dtype)
    replayed = dict(zip([value.name for value in copy.model.graph.output], run(copy.model, fed), strict=True))
    for name in chosen:  # fed the reference values, every chosen node gives its reference output back
        for output in outputs[name]:
            np.testing.assert_allclose(replayed[output], reference[output], rtol=1e-5, atol=1e-5)
    # Perturb one injected value: only its own consumers' outputs move (no error reaches a chosen node otherwise).
    victim = "h0.ln_1.mul_out"  # read by the chosen Add h0.ln_1.add (and nothing else)
    fed[victim + INJECTED_SUFFIX] = fed[victim + INJECTED_SUFFIX] * 1.01
    moved = dict(zip([value.name for value in copy.model.graph.output], run(copy.model, fed), strict=True))
    changed = {name for name in chosen for out in outputs[name] if not np.allclose(moved[out], replayed[out])}
    assert changed == {node.name for node in nodes if victim in node.inputs and node.name in chosen} == {"h0.ln_1.add"}


# ------------------------------------------------------------------------------------------------ sensitivity

CHAIN = [GraphNode("a", "Mul", ("x",), ("va",)), GraphNode("b", "Sub", ("va",), ("vb",))]


def test_sensitivity_separates_own_rounding_from_amplification() -> None:
    rng = np.random.default_rng(0)
    x = 100.0 + rng.standard_normal(4096)
    va = x.copy()  # a: identity-like
    vb = va - 100.0  # b cancels the offset: a relative error of va comes out ~100x larger
    noise_a = 1e-4 * rng.standard_normal(4096)
    low_va = va * (1 + noise_a)
    replay_vb = low_va - 100.0  # b exact on a's rounded output
    low_vb = replay_vb * (1 + 1e-4 * rng.standard_normal(4096))  # b's own rounding
    reference = {"x": x, "va": va, "vb": vb}
    low = {"x": x, "va": low_va, "vb": low_vb}
    replay = {"va": va, "vb": replay_vb}  # a read exact x: its replay is the reference
    found = sensitivities(CHAIN, ["a", "b"], reference, low, replay, ["vb"])
    a, b = found["a"], found["b"]
    assert a.local_error == pytest.approx(1e-4, rel=0.05) and b.local_error == pytest.approx(1e-4, rel=0.05)
    assert b.transmission == pytest.approx(100.0, rel=0.05) and b.amplification == 1.0
    assert a.amplification == pytest.approx(100.0, rel=0.05)
    assert a.contribution > 50 * b.contribution  # the node upstream of the cancellation is the one to pin
    measured = value_error(vb, low_vb, 65504.0)
    assert estimated_error([a.contribution, b.contribution]) == pytest.approx(measured, rel=0.1)


def test_value_error_treats_saturated_values_alike() -> None:
    mask = np.array([-3.4e38, 1.0, 2.0])
    assert value_error(mask, np.array([-65504.0, 1.0, 2.0]), 65504.0) == 0.0
    assert value_error(np.array([7e4, 1.0]), np.array([np.inf, 1.0]), 65504.0) == math.inf


def test_damaged_nodes_need_a_real_inf() -> None:
    nodes = [GraphNode("mask", "Where", ("c", "s"), ("m",)), GraphNode("pow", "Pow", ("v",), ("p",))]
    findings = [
        RangeFinding("mask", "Where", "c", "constant", 3.4e38, 65504.0),
        RangeFinding("mask", "Where", "m", "output", 3.4e38, 65504.0),
        RangeFinding("pow", "Pow", "p", "output", 1e6, 65504.0),
    ]
    reference = {"m": np.array([-3.4e38, 1.0]), "p": np.array([1e6, 1.0]), "v": np.array([1e3, 1.0])}
    low = {"m": np.array([-65504.0, 1.0]), "p": np.array([np.inf, 1.0]), "v": np.array([1e3, 1.0])}
    damaged = damaged_nodes(findings, nodes, ["mask", "pow"], reference, low)
    assert list(damaged) == ["pow"] and "inf/NaN" in damaged["pow"]


# --------------------------------------------------------------------------------------------- pin followers


@pytest.mark.parametrize("build", [transformer_block, gpt2])
def test_pin_followers_match_the_rewrite(build) -> None:  # type: ignore[no-untyped-def]
    model = with_node_names(build())
    base = rewrite_model_detailed(model, "allow_mix_precision")
    lowered = [d.name for d in base.decisions if d.changed and not d.scope]
    followers = pin_followers(graph_nodes(model), base.decisions, lowered)
    exact = 0
    for name in lowered:
        pinned = rewrite_model_detailed(model, "allow_mix_precision", keep_dtype=[name])
        back = {d.name for d in pinned.decisions if d.name in set(lowered) and d.dtype == "float32"}
        # The estimate follows Ascend's and TensorFlow's rules; the cast-aware island pass can only give some of
        # those nodes back to low precision, so the estimate is an upper bound, and exact where no island forms.
        assert back <= followers[name] and name in back, name
        exact += followers[name] == back
    assert exact >= 0.9 * len(lowered)
    assert any(len(taken) > 1 for taken in followers.values())  # pins do drag gray nodes along here


def test_force_modes_pin_one_node_each() -> None:
    model = with_node_names(ocr())
    base = rewrite_model_detailed(model, "force_fp16")
    lowered = [d.name for d in base.decisions if d.changed and not d.scope]
    assert all(taken == {name} for name, taken in pin_followers(graph_nodes(model), base.decisions, lowered).items())


# ------------------------------------------------------------------------------------------------ the search


@dataclass(frozen=True)
class _Judged:
    passed: bool
    error: float
    low_nodes: int


class _QuadratureModel:
    """A stand-in evaluator with a known answer: the error is the quadrature sum of the unpinned contributions
    times ``scale`` (the search's own assumption, off by ``scale``), budget ``max_runs``."""

    def __init__(self, contributions: dict[str, float], tolerance: float, scale: float, max_runs: int) -> None:
        self.contributions, self.tolerance, self.scale, self.max_runs = contributions, tolerance, scale, max_runs
        self.runs = 0

    def trial(self, candidate: Candidate, step: str) -> _Judged:
        self.runs += 1
        left = [value for name, value in self.contributions.items() if name not in candidate.pins]
        error = self.scale * estimated_error(left)
        return _Judged(error <= self.tolerance, error, len(self.contributions) - len(candidate.pins))

    def can_run(self, reserve: int = 0) -> bool:
        return self.runs + 1 + reserve <= self.max_runs


@pytest.mark.parametrize("scale", [0.7, 1.0, 3.0])
def test_prefix_search_finds_the_shortest_passing_prefix(scale: float) -> None:
    rng = np.random.default_rng(1)
    contributions = {f"n{i}": float(value) for i, value in enumerate(rng.pareto(1.5, 200) * 1e-4)}
    all_low = estimated_error(list(contributions.values()))
    tolerance = all_low / 2
    evaluator = _QuadratureModel(contributions, tolerance, scale, max_runs=16)
    followers = {name: frozenset({name}) for name in contributions}
    ranking = rank_pins(contributions, followers, {name: 1.0 for name in contributions})
    search = PrefixSearch(
        evaluator, ranking, contributions, (), tolerance, scale * all_low, lambda c: float(len(c.pins))
    )
    result = search.run(known_failing=0)
    assert result.found and result.candidate is not None and evaluator.runs <= 15
    # The best possible: the shortest prefix of the ranking (largest first) that passes.
    ordered = sorted(contributions.values(), reverse=True)
    shortest = next(k for k in range(201) if scale * estimated_error(ordered[k:]) <= tolerance)
    assert len(result.candidate.pins) <= shortest


def test_error_model_is_exact_where_measured_and_scales_between() -> None:
    contributions = {"a": 4.0, "b": 3.0, "c": 0.0}
    followers = {name: frozenset({name}) for name in contributions}
    ranking = rank_pins(contributions, followers, {name: 1.0 for name in contributions})
    model = ErrorModel(ranking, contributions, (), start_error=10.0)  # the all-low run: twice the quadrature sum
    assert [pin.name for pin in ranking][:2] == ["a", "b"]
    assert model.predicted(0) == 10.0 and math.isclose(model.predicted(1), 6.0)  # 2 x 3
    model.record(1, 4.5)  # measured: the contributions left add less than predicted
    assert model.predicted(1) == 4.5 and model.scale(2) == (1.5, 1)
    assert model.smallest(0, 3, 5.0) == 1 and model.smallest(0, 0, 5.0) is None
    assert "fitted to the measured top 1" in model.why(1, 5.0)


def test_search_bisects_once_a_predicted_pass_misses() -> None:
    """The ranking says one node carries the error; the truth is that the last node carries it too: the first
    guess (top 1) misses, the model is no longer trusted, and the search bisects instead of walking prefix by
    prefix."""
    contributions = {f"n{i}": (1.0 if i == 0 else 1e-3) for i in range(16)}
    truth = dict(contributions, n15=0.9)
    evaluator = _QuadratureModel(truth, 0.5, 1.0, max_runs=12)
    followers = {name: frozenset({name}) for name in contributions}
    ranking = rank_pins(contributions, followers, {name: 1.0 for name in contributions})
    start = estimated_error(list(truth.values()))
    search = PrefixSearch(evaluator, ranking, contributions, (), 0.5, start, lambda c: float(len(c.pins)))
    result = search.run(known_failing=0)
    assert result.found and result.candidate is not None and "n15" in result.candidate.pins
    prefixes = [step for step in result.steps if step.what.startswith("pin ")]
    assert all("bisect" in step.why for step in prefixes[2:]) and len(prefixes) <= 2 + math.ceil(math.log2(16))


def test_tune_command_repeats_what_run_was_given(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(transformer_block(), model)
    flags = Flags(model=model, precision_mode="force_fp16", target="cpu", seed=3, tolerance=2e-3, data_max=1000.0)
    settings = resolve(Flags(**{**flags.__dict__, "shapes": ("x=1x8x32",)}))
    assert tune_command(settings, range_check=False, keep_out="k.cfg") == [
        "ampconfig", "tune", str(model), "-m", "force_fp16", "--target", "cpu", "--tolerance", "0.002",
        "--shape", "x=1x8x32", "--seed", "3", "--data-max", "1000", "--no-range-check", "--keep-dtype-out", "k.cfg",
    ]  # fmt: skip


def test_a_model_that_casts_to_float16_itself_computes_low() -> None:
    assert not computes_low(transformer_block())
    assert computes_low(ocr()) is False
    half = transformer_block()
    half.graph.node.append(onnx.helper.make_node("Cast", [half.graph.output[0].name], ["h"], to=10, name="to16"))
    assert computes_low(half)


def test_trial_sessions_ask_for_heuristic_conv_search() -> None:
    cuda = provider_list("cuda", False, "HEURISTIC")[0]
    assert cuda == (CUDA_PROVIDER, {"use_tf32": "0", "cudnn_conv_algo_search": "HEURISTIC"})
    assert provider_list("cuda", True)[0] == (CUDA_PROVIDER, {"use_tf32": "1"})  # run's sessions: ORT's default
    assert provider_list("cpu", False, "HEURISTIC") == ["CPUExecutionProvider"]
    with pytest.raises(ValueError):
        provider_list("cuda", False, "FAST")


# ------------------------------------------------------------------------------------------------ the budget


class _Clock:
    """A clock the test moves by hand: the budget's arithmetic without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_budget_foresees_exposed_runs_by_their_own_time() -> None:
    """The budget times plain and exposed runs apart: one slow exposed run does not make plain trials look slow,
    and the rest of the fixed pipeline is foreseen before it is started (the H100 BERT-base tune overran its
    --max-seconds 200 by 70 s because each exposed run took about 65 s)."""
    clock = _Clock()
    budget = Budget(max_runs=20, max_seconds=200.0, clock=clock)
    assert budget.allows(1) and budget.typical(EXPOSED) == 0.0  # nothing measured: the first run may start
    clock.now += 2.0
    budget.record(PLAIN, 2.0)
    assert budget.typical(EXPOSED) == 2.0  # before an exposed run, the plain one is all there is to go by
    clock.now += 65.0
    budget.record(EXPOSED, 65.0)
    assert (budget.typical(PLAIN), budget.typical(EXPOSED), budget.elapsed) == (2.0, 65.0, 67.0)
    assert budget.foreseen(exposed=2, plain=2) == pytest.approx(67.0 + 130.0 + 4.0)
    assert budget.allows(1, kind=EXPOSED) and not budget.allows(19)  # runs cap: 2 + 19 > 20
    assert budget.allows(10, reserve=1)  # eleven plain runs: 67 + 22 s
    with pytest.raises(BudgetSpent) as spent:
        budget.require_time_for(2, 2, "the rest")
    message = str(spent.value)
    assert "(--max-seconds 200) cannot hold the rest" in message and "takes 65.0 s" in message
    assert "--max-seconds 242 or more" in message and "--calibration-batch" in message  # 1.2 x 201 s, rounded up
    budget.require_time_for(1, 2, "less")  # 67 + 65 + 4 s fits: no refusal
    assert Budget(max_runs=20, clock=clock).foreseen(exposed=100) == 0.0  # no time limit: nothing is foreseen


def test_budget_counts_runs_and_says_which_limit_stopped_it() -> None:
    clock = _Clock()
    budget = Budget(max_runs=3, max_seconds=10.0, clock=clock)
    for _ in range(3):
        clock.now += 1.0
        budget.record(PLAIN, 1.0)
    assert budget.runs == 3 and not budget.allows(1) and "--max-runs 3" in budget.why_not()
    timed = Budget(max_runs=20, max_seconds=10.0, clock=clock)
    clock.now += 9.5
    timed.record(PLAIN, 9.5)
    assert not timed.allows(1) and "--max-seconds 10" in timed.why_not()


def test_a_pin_takes_its_amplifying_consumers_along() -> None:
    """shift -> unshift (a cancelling subtraction, transmission 100) -> out: pinning shift must pin unshift too, and
    a consumer that only passes the error on (transmission 1) is not taken."""
    nodes = [
        GraphNode("shift", "Add", ("x",), ("s",)),
        GraphNode("unshift", "Sub", ("s",), ("u",)),
        GraphNode("scale", "Mul", ("u",), ("y",)),
    ]
    transmission = {"shift": 1.0, "unshift": 100.0, "scale": 1.0}
    along = amplifying_consumers(nodes, ["shift", "unshift", "scale"], transmission)
    assert along == {"shift": frozenset({"unshift"}), "unshift": frozenset(), "scale": frozenset()}
    ranking = rank_pins({"shift": 0.02, "unshift": 0.0, "scale": 1e-4}, {}, {}, along)
    assert ranking[0].name == "shift" and ranking[0].pins == {"shift", "unshift"} and ranking[0].cost == 2.0
