"""Nodes inside If, Loop and Scan bodies are seen by range analysis, compare and tune (issue 19): their values are
exposed scope by scope, named by keys, replayed for the sensitivity, and pinned by name in keep_dtype files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.diagnose.graph_values import float_constants, graph_nodes
from ampconfig.instrument.expose import FLAT, expose_keys
from ampconfig.instrument.inject import injection_model
from ampconfig.rewrite.names import with_node_names
from ampconfig.runner.intermediates import run_with_intermediates
from tests.graphs import make_model, run, tensor
from tests.value_models import char_lstm_loop, if_overflow, vad_if, vad_inputs

runner = CliRunner()


def _save(folder: Path, name: str, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[Path, Path]:
    path, data = folder / f"{name}.onnx", folder / f"{name}.npz"
    onnx.save_model(model, path)
    np.savez(data, **feeds)
    return path, data


def _tokens() -> dict[str, np.ndarray]:
    return {"tokens": (np.arange(10, dtype=np.int64)[None] * 7) % 100}


# ---------------------------------------------------------------------------------------------- exposing values


def test_graph_nodes_walk_every_body_before_its_owner() -> None:
    model = with_node_names(vad_if())
    nodes = graph_nodes(model)
    owner = nodes[-1]
    assert owner.name == "rate_branch" and owner.op_type == "If" and owner.scope == ""
    assert "rate_branch.then_branch/hi_prob" in owner.inputs and "rate_branch.else_branch/lo_prob" in owner.inputs
    branch_nodes = [node for node in nodes if node.scope]
    assert {node.scope for node in branch_nodes} == {"rate_branch.then_branch", "rate_branch.else_branch"}
    # An outer value keeps its main-graph key inside the branch; the branch's own values are scoped.
    frames = next(node for node in nodes if node.name == "hi_frames")
    assert frames.inputs[0] == "audio" and frames.outputs == ("rate_branch.then_branch/hi_frames_out",)
    assert "rate_branch.then_branch/hi_stft_real" in float_constants(model)


def test_the_branch_that_ran_comes_back_and_the_other_empty() -> None:
    model = with_node_names(vad_if())
    values = run_with_intermediates(model, vad_inputs()).values
    assert values["rate_branch.then_branch/hi_log_mag_out"].size > 0
    assert values["rate_branch.else_branch/lo_log_mag_out"].size == 0
    # The exposed copy leaves the model's own outputs alone.
    np.testing.assert_allclose(values["prob"], run(model, vad_inputs())[0], rtol=1e-6)


def test_loop_values_come_back_one_slice_per_iteration() -> None:
    model = with_node_names(char_lstm_loop())
    result = run_with_intermediates(model, _tokens())
    softmax = result.values["chars_loop.body/step.softmax_out"]
    assert softmax.shape == (10, 1, 12) and "chars_loop.body/step.softmax_out" in result.per_iteration
    np.testing.assert_allclose(softmax, result.outputs["probs"], rtol=1e-6)  # the scan output it is
    assert result.values["chars_loop.body/h_in"].shape == (10, 1, 1, 24)  # the carried state, where it enters


def _growing_loop() -> onnx.ModelProto:
    """A Loop whose body value grows by one element per iteration: one slice per iteration cannot hold it."""
    body = oh.make_graph(
        [
            oh.make_node("Add", ["i", "one"], ["count"], name="count"),
            oh.make_node("Range", ["zero", "count", "one"], ["steps"], name="steps"),
            oh.make_node("Cast", ["steps"], ["steps_f"], name="steps_f", to=TensorProto.FLOAT),
            oh.make_node("Mul", ["steps_f", "x"], ["scaled"], name="scaled"),
            oh.make_node("ReduceSum", ["scaled"], ["total"], name="total", keepdims=0),
            oh.make_node("Identity", ["cond"], ["cond_out"], name="cond_out"),
        ],
        "body",
        [tensor("i", TensorProto.INT64, []), tensor("cond", TensorProto.BOOL, [])],
        [tensor("cond_out", TensorProto.BOOL, []), tensor("total", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array(0, np.int64), "zero")],
    )
    return make_model(
        [oh.make_node("Loop", ["trips", ""], ["totals"], name="loop", body=body)],
        [tensor("trips", TensorProto.INT64, []), tensor("x", TensorProto.FLOAT, [])],
        [tensor("totals", TensorProto.FLOAT, ["n"])],
    )


def test_a_loop_value_whose_shape_changes_comes_back_flattened() -> None:
    model = with_node_names(_growing_loop())
    result = run_with_intermediates(model, {"trips": np.array(4, np.int64), "x": np.array(2.0, np.float32)})
    assert "loop.body/scaled" in result.flattened and not result.per_iteration
    np.testing.assert_allclose(result.values["loop.body/scaled"], [0, 0, 2, 0, 2, 4, 0, 2, 4, 6])
    np.testing.assert_allclose(result.outputs["totals"], [0, 2, 6, 12])


def test_flat_layout_is_asked_for_explicitly_too() -> None:
    exposed = expose_keys(with_node_names(char_lstm_loop()), ["chars_loop.body/step.head_out"], FLAT)
    assert exposed.flattened == {"chars_loop.body/step.head_out"}
    outputs = run(exposed.model, _tokens())
    assert outputs[-1].shape == (10 * 12,)


def test_replay_slices_each_iteration_and_gives_the_reference_back() -> None:
    model = with_node_names(char_lstm_loop())
    reference = run_with_intermediates(model, _tokens())
    chosen = ["step.lstm", "step.head", "step.softmax"]
    shapes = {key: value.shape for key, value in reference.values.items()}
    copy = injection_model(model, chosen, {}, shapes, reference.per_iteration)
    assert set(copy.outputs) == set(chosen)
    feeds = dict(_tokens())
    for name, (key, dtype) in copy.feeds.items():
        feeds[name] = reference.values[key].astype(dtype)
    names = [value.name for value in copy.model.graph.output]
    replayed = {copy.keys[name]: array for name, array in zip(names, run(copy.model, feeds), strict=True)}
    for node in chosen:
        for key in copy.outputs[node]:
            np.testing.assert_allclose(replayed[key], reference.values[key], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------- the commands


def test_range_check_finds_the_overflow_inside_an_if_branch(tmp_path: Path) -> None:
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32) * 4, "flag": np.array(True)}
    path, data = _save(tmp_path, "if_overflow", if_overflow(), feeds)
    result = runner.invoke(
        app, ["explain", str(path), "-m", "force_fp16", "--range-check", "--inputs", str(data), "--json"]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    decisions = {d["name"]: d for d in payload["nodes"]}
    assert decisions["scale_up"]["scope"] == "branch.then_branch"
    assert decisions["scale_up"]["rule"] == "range_exceeds" and "'big'" in decisions["scale_up"]["reason"]
    findings = json.loads(result.stdout)["range_analysis"]["findings"]
    assert {"node": "scale_up", "value": "branch.then_branch/big"}.items() <= findings[0].items()
    run_args = ["run", str(path), "-m", "force_fp16", "--inputs", str(data), "--warmup", "0", "--iterations", "1"]
    assert runner.invoke(app, [*run_args, "--no-range-check"]).exit_code == 1  # the branch's Mul overflows to inf
    assert runner.invoke(app, run_args).exit_code == 0  # run records the values and keeps the branch float32


def test_compare_names_the_nodes_inside_a_loop_body(tmp_path: Path) -> None:
    path, data = _save(tmp_path, "char", char_lstm_loop(), _tokens())
    result = runner.invoke(app, ["compare", str(path), "-m", "force_fp16", "--inputs", str(data), "--json"])
    assert result.exit_code == 0, result.output
    nodes = {node["name"]: node for node in json.loads(result.stdout)["localization"]["nodes"]}
    assert nodes["step.head"]["scope"] == "chars_loop.body" and nodes["step.head"]["dtype"] == "float16"
    assert nodes["step.head"]["error"] > 0


@pytest.mark.parametrize(
    ("model", "feeds", "tolerance"),
    [(vad_if(), vad_inputs(), "2e-4"), (char_lstm_loop(), _tokens(), "7e-4")],
    ids=["if_branch", "loop_body"],
)
def test_tune_pins_nodes_inside_bodies_and_run_accepts_them(
    tmp_path: Path, model: onnx.ModelProto, feeds: dict[str, np.ndarray], tolerance: str
) -> None:
    """About half the all-low error: the answer pins body nodes by name; run with that keep_dtype file passes."""
    path, data = _save(tmp_path, "model", model, feeds)
    keep = tmp_path / "keep.cfg"
    args = ["-m", "force_fp16", "--inputs", str(data), "--tolerance", tolerance]
    result = runner.invoke(app, ["tune", str(path), *args, "--keep-dtype-out", str(keep), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["outcome"] == "found" and payload["model_runs"] <= 20
    assert "nothing to tune" not in result.output and "low precision itself" not in result.output
    pins = [line for line in keep.read_text().splitlines() if line and not line.startswith("#")]
    bodies = {node.name for node in graph_nodes(with_node_names(model)) if node.scope}
    assert pins and set(pins) <= bodies
    assert payload["all_low_error"] > float(tolerance)
    checked = runner.invoke(
        app, ["run", str(path), *args, "--keep-dtype", str(keep), "--warmup", "0", "--iterations", "1"]
    )
    assert checked.exit_code == 0, checked.output


def test_value_peaks_computed_in_the_session_match_the_exposed_values() -> None:
    """run's range check reads one number per value (inside bodies too), not every intermediate."""
    from ampconfig.decide.value_ranges import peak
    from ampconfig.runner.intermediates import run_samples_with_intermediates, run_value_stats

    for model, samples in (
        (vad_if(), [vad_inputs(16000), vad_inputs(8000)]),
        (char_lstm_loop(), [_tokens()]),
        (if_overflow(), [{"x": np.full((4, 8), -3.4e38, np.float32), "flag": np.array(True)}]),
    ):
        named = with_node_names(model)
        peaks = {key: value.peak for key, value in run_value_stats(named, samples).items()}
        exposed = run_samples_with_intermediates(named, samples)
        wanted = {key: peak(array) for key, array in exposed.values.items() if np.asarray(array).dtype.kind == "f"}
        assert wanted.keys() <= peaks.keys()
        assert all(np.isclose(peaks[key], value, rtol=1e-6) for key, value in wanted.items()), model.graph.name
