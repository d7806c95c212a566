"""Integer accumulators are bounded (issue 42, rule integer_accumulator_bound): the int32 output of a MatMulInteger
is never cast to float16, nor read by a float16 node, before its scale multiply, in any mode and without data;
data narrows the bound and never widens it. Real model: an LSTM spectrogram tagger built with onnx.helper and
quantized by ONNX Runtime's own quantize_dynamic (tests/quantized_models.py), run in ONNX Runtime to show its
accumulators pass float16's range."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from ampconfig.api import rewrite_model, rewrite_model_detailed
from ampconfig.cli import app
from ampconfig.decide.value_limits import ValueRanges
from ampconfig.precision_modes import PrecisionMode
from ampconfig.prove.calibration import calibrate_model
from tests.graphs import session
from tests.quantized_models import accumulator_reads_in_low, dynamic_lstm_tagger, tagger_inputs

runner = CliRunner()
FLOAT16_MAX = 65504.0
#: The head's accumulator: after the last quantizer, so no other rule keeps what reads it.
HEAD = "head_quant"
HEAD_CAST = "head_output_quantized_cast"
HEAD_SCALE = "head_quant_output_scale_mul"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("accumulators")
    np.savez(folder / "x.npz", **tagger_inputs())
    return folder


@pytest.fixture(scope="module")
def tagger(folder: Path) -> Path:
    return dynamic_lstm_tagger(folder)


def accumulator_peaks(path: Path) -> dict[str, int]:
    """The largest |x| of each MatMulInteger's int32 output on :func:`tagger_inputs`, by node name (exposed as
    graph outputs and run in ONNX Runtime)."""
    model = onnx.load(path)
    produced = {node.output[0]: node.name for node in model.graph.node if node.op_type == "MatMulInteger"}
    model.graph.output.extend(helper.make_tensor_value_info(name, TensorProto.INT32, None) for name in produced)
    results = session(model).run(list(produced), tagger_inputs())
    return {produced[name]: int(np.abs(result).max()) for name, result in zip(produced, results)}


def _decisions(path: Path, mode: str, *extra: str) -> dict[str, dict]:
    result = runner.invoke(app, ["explain", str(path), "--precision-mode", mode, "--json", *extra])
    assert result.exit_code == 0, result.output
    return {node["name"]: node for node in json.loads(result.stdout)["nodes"]}


def test_the_taggers_accumulators_pass_float16s_range(tagger: Path) -> None:
    """What makes the next tests mean something: on real inputs both int32 accumulators pass 65504 (the head's
    159696 at the time of writing)."""
    peaks = accumulator_peaks(tagger)
    assert set(peaks) == {"proj_quant", HEAD}
    assert all(peak > FLOAT16_MAX for peak in peaks.values()), peaks


@pytest.mark.parametrize("mode", [mode.value for mode in PrecisionMode])
def test_no_mode_casts_an_accumulator_to_float16_without_data(tagger: Path, mode: str) -> None:
    """At main (e3889b8) force_fp16 wrote 2 such nodes: the Cast of the head's accumulator retargeted to float16
    and the float16 scale Mul reading it; exposed, that Cast's output held 185 infinities of 192 values, and so did
    the logits. The other modes wrote none (the mixed and allow_fp32_to_fp16 modes left the scale Mul float32 by
    their lists). Now no mode writes one."""
    assert accumulator_reads_in_low(rewrite_model(tagger, mode)) == []


def test_the_checker_finds_a_cast_to_float16(tagger: Path) -> None:
    """The checker above can fail: the written model with the head's Cast edited to float16 is caught."""
    written = rewrite_model(tagger, "force_fp16")
    for node in written.graph.node:
        if node.name == HEAD_CAST:
            node.attribute[0].i = TensorProto.FLOAT16
    assert HEAD_CAST in accumulator_reads_in_low(written)


def test_explain_names_the_rule_and_the_bound(tagger: Path) -> None:
    nodes = _decisions(tagger, "force_fp16")
    kept = {name for name, node in nodes.items() if node["rule"] == "integer_accumulator_bound"}
    assert kept == {HEAD_CAST, HEAD_SCALE, "proj_output_quantized_cast", "proj_quant_output_scale_mul"}
    for name in kept:
        assert nodes[name]["dtype"] == "float32"
    reason = nodes[HEAD_CAST]["reason"]
    assert nodes[HEAD_CAST]["cause"] == HEAD
    # uint8 activations less a zero point known at run time, int8 weights less 0, 48 hidden units summed
    assert "255 (uint8, a zero point known at run time) x 128 (int8, zero point 0) x 48" in reason
    assert "= 1.56672e+06" in reason and "beyond float16's 65504" in reason
    # After the scale multiply the mode decides again: the bias Add is float16.
    assert nodes["head.bias"]["dtype"] == "float16"


def test_bfloat16_modes_keep_nothing_for_the_bound(tagger: Path) -> None:
    """bfloat16 has float32's exponents: 1.6e6 is in its range, and the rule keeps nothing."""
    for mode in ("allow_fp32_to_bf16", "allow_mix_precision_bf16"):
        rules = {node["rule"] for node in _decisions(tagger, mode).values()}
        assert "integer_accumulator_bound" not in rules


def test_data_narrows_the_bound(folder: Path) -> None:
    """A head whose weights centre on zero, one of them an outlier (the int8 grid is set by it, so the others take
    few steps): its accumulator peaks under half float16's range on the data (15403 at the time of writing), and
    with the data's ranges its Cast and scale Mul go float16; without data they stay float32."""
    tagger = dynamic_lstm_tagger(folder, head_mean=0.0, head_outlier=2.0)
    peak = accumulator_peaks(tagger)[HEAD]
    assert peak < FLOAT16_MAX / 2
    ranges = folder / "centred.ranges.json"
    calibrate_model(tagger, ranges, inputs=folder / "x.npz")
    without = _decisions(tagger, "force_fp16")
    assert without[HEAD_CAST]["rule"] == "integer_accumulator_bound"
    with_data = _decisions(tagger, "force_fp16", "--ranges", str(ranges))
    assert with_data[HEAD_CAST]["dtype"] == with_data[HEAD_SCALE]["dtype"] == "float16"
    assert "integer_accumulator_bound" not in {with_data[name]["rule"] for name in (HEAD_CAST, HEAD_SCALE)}


def test_data_beyond_the_range_keeps_the_cast_and_says_the_peak(folder: Path, tagger: Path) -> None:
    ranges = folder / "tagger.ranges.json"
    calibrate_model(tagger, ranges, inputs=folder / "x.npz")
    nodes = _decisions(tagger, "force_fp16", "--ranges", str(ranges))
    cast = nodes[HEAD_CAST]
    assert cast["dtype"] == "float32" and cast["rule"] == "integer_accumulator_bound"
    peak = accumulator_peaks(tagger)[HEAD]
    assert f"at most {peak:.6g} on data, so |x| <= {peak:.6g}" in cast["reason"]
    assert nodes[HEAD_SCALE]["dtype"] == "float32"  # range_exceeds, measured, speaks first


def test_data_never_widens_the_bound(tagger: Path) -> None:
    """A peak claimed far beyond what the operands can give (1e12) leaves the bound at 1.56672e+06."""
    ranges = ValueRanges({f"{HEAD_CAST}_output": 1e12}, source="a claimed peak")
    result = rewrite_model_detailed(tagger, "force_fp16", value_ranges=ranges)
    cast = next(decision for decision in result.decisions if decision.name == HEAD_CAST)
    assert "at most 1e+12 on data, so |x| <= 1.56672e+06" in cast.reason


def test_run_for_a_float16_device_passes_without_data(folder: Path, tagger: Path) -> None:
    """``run --target cuda --no-range-check`` in force_fp16, measured on the rounding copy: at main (e3889b8) FAIL,
    185 inf of the 192 logits; now the logits are finite and within 1e-2, and the note counts the nodes kept."""
    args = ["run", str(tagger), "--precision-mode", "force_fp16", "--target", "cuda", "--no-range-check"]
    result = runner.invoke(
        app, [*args, "--inputs", str(folder / "x.npz"), "--json", "--warmup", "0", "--iterations", "1"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (logits,) = report["outputs"]
    assert logits["nonfinite"] == 0 and logits["rel_l2"] < 1e-2
    note = next(note for note in report["notes"] if "the model is quantized" in note)
    assert "4 node(s) holding integer accumulators' values compute in float32" in note
