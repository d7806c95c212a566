"""Data sets (--data, --calibration-data): folders of .npz samples, one .npz with a sample axis, Polygraphy JSON;
every sample judged by the one judge (passes when every sample passes), per-output spreads in the reports, one
preparation path for run, explain, compare and tune, and a hint naming the dimension to set when generated
inputs do not fit the model."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.errors import AmpconfigError
from ampconfig.inputs import datasets
from ampconfig.inputs.datasets import load_data
from ampconfig.prove.accuracy import Tolerance
from ampconfig.prove.verdict import samples_verdict
from ampconfig.runner.proof import PROGRESS_SAMPLES, sample_outputs
from ampconfig.runner.sessions import create_session
from tests.graphs import make_model, tensor
from tests.value_models import if_overflow, vad_if, vad_inputs

runner = CliRunner()
FAST = ["--warmup", "0", "--iterations", "1"]
#: Sample 2 takes the If branch whose Mul overflows float16; the others take the Relu branch.
OVERFLOWING_SAMPLE = 2


def _if_samples(count: int = 4) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    return [
        {"x": (rng.standard_normal((4, 8)) * 4).astype(np.float32), "flag": np.array(index == OVERFLOWING_SAMPLE)}
        for index in range(count)
    ]


@pytest.fixture
def if_case(tmp_path: Path) -> tuple[Path, Path]:
    """The If model and a folder of four .npz samples, one of which overflows in float16."""
    path = tmp_path / "if_overflow.onnx"
    onnx.save_model(if_overflow(), path)
    folder = tmp_path / "samples"
    folder.mkdir()
    for index, sample in enumerate(_if_samples()):
        np.savez(folder / f"sample_{index:03d}.npz", **sample)
    return path, folder


# ------------------------------------------------------------------------------------------------ reading data


def _polygraphy_array(array: np.ndarray) -> dict[str, str]:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return {"array": base64.b64encode(buffer.getvalue()).decode(), "polygraphy_class": "ndarray"}


def test_the_three_layouts_read_the_same_samples(tmp_path: Path, if_case: tuple[Path, Path]) -> None:
    model = if_overflow()
    samples = _if_samples()
    stacked = tmp_path / "stacked.npz"
    np.savez(stacked, x=np.stack([s["x"] for s in samples]), flag=np.stack([s["flag"] for s in samples]))
    polygraphy = tmp_path / "feeds.json"
    polygraphy.write_text(json.dumps([{k: _polygraphy_array(v) for k, v in s.items()} for s in samples]))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps([{k: v.tolist() for k, v in s.items()} for s in samples]))
    for source in (if_case[1], stacked, polygraphy, plain):
        loaded = load_data(source, model)
        assert len(loaded) == 4
        for got, want in zip(loaded.samples, samples, strict=True):
            np.testing.assert_array_equal(got["x"], want["x"])
            assert got["flag"].dtype == np.bool_ and bool(got["flag"]) == bool(want["flag"])


def test_an_npz_of_the_model_rank_is_read_one_batch_entry_per_sample(tmp_path: Path) -> None:
    model = vad_if()
    batch = {name: np.stack([vad_inputs(seed=i)[name] for i in range(3)]) for name in ("audio", "sr", "state")}
    batch["audio"] = batch["audio"][:, 0]  # [3, 256]: the model's rank, its batch axis read entry by entry
    path = tmp_path / "batch.npz"
    np.savez(path, **batch)
    loaded = load_data(path, model)
    assert len(loaded) == 3 and loaded.samples[1]["audio"].shape == (1, 256) and loaded.samples[1]["sr"].shape == ()


@pytest.mark.parametrize(
    ("write", "needle"),
    [
        (lambda p: np.savez(p / "a.npz", x=np.zeros((4, 8), np.float32)), "missing flag"),
        (
            lambda p: np.savez(p / "a.npz", x=np.zeros((4, 8), np.float32), flag=np.array(True), y=np.zeros(1)),
            "not model inputs: y",
        ),
        (lambda p: np.savez(p / "a.npz", x=np.zeros((4, 9), np.float32), flag=np.array(True)), "fixes it to 8"),
        (lambda p: None, "holds no .npz file"),
    ],
    ids=["missing", "extra", "wrong_dim", "empty"],
)
def test_bad_samples_are_located_errors(tmp_path: Path, write, needle: str) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    write(folder)
    with pytest.raises(AmpconfigError, match=needle) as caught:
        load_data(folder, if_overflow())
    assert str(folder) in caught.value.message or caught.value.file == str(folder)


def test_a_json_that_is_no_list_of_feeds_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "feeds.json"
    path.write_text("[1, 2]")
    with pytest.raises(AmpconfigError, match="list of feeds"):
        load_data(path, if_overflow())
    path.write_text('[{"x": {"array": "not base64 !"}, "flag": true}]')
    with pytest.raises(AmpconfigError, match=r"not a \.npy array|neither base64"):
        load_data(path, if_overflow())


def test_a_json_array_of_python_objects_is_refused_without_numpy_s_pickle_advice(tmp_path: Path) -> None:
    """numpy says "allow_pickle=False"; ampconfig has no such switch and loads no pickles (issue 31)."""
    stream = io.BytesIO()
    np.save(stream, np.array([[1.0, "x"]], dtype=object), allow_pickle=True)
    path = tmp_path / "feeds.json"
    feed = {"x": {"array": base64.b64encode(stream.getvalue()).decode()}, "flag": True}
    path.write_text(json.dumps([feed]))
    with pytest.raises(AmpconfigError, match="holds Python objects") as caught:
        load_data(path, if_overflow())
    assert "allow_pickle" not in caught.value.message and "allow_pickle" not in (caught.value.hint or "")
    path.write_text('[{"x": {"array": "no npy header"}, "flag": true}]')  # bytes numpy would take for a pickle
    with pytest.raises(AmpconfigError, match=r"not a \.npy array") as caught:
        load_data(path, if_overflow())
    assert "allow_pickle" not in caught.value.message


# ------------------------------------------------------------------------------------------------- the judge


def test_the_judge_passes_only_when_every_sample_passes() -> None:
    references = [{"y": np.full(8, 1.0)} for _ in range(5)]
    errors = [0.001, 0.002, 0.05, 0.004, 0.003]
    candidates = [{"y": np.full(8, 1.0 + error)} for error in errors]
    judgement = samples_verdict(references, candidates, ["y"], Tolerance(rel_l2=0.01))
    assert not judgement.passed and judgement.samples == 5
    spread = judgement.spreads[0]
    assert spread.worst_sample == 2 and spread.failing_samples == 1
    assert spread.worst == pytest.approx(0.05) and spread.median == pytest.approx(0.003)
    assert judgement.outputs[0].rel_l2 == pytest.approx(0.05)  # the worst sample's metrics
    assert judgement.failures == ["sample 2 (worst of the 1 failing of 5): y: rel_l2 0.05 > 0.01"]
    assert samples_verdict(references, candidates, ["y"], Tolerance(rel_l2=0.1)).passed


def test_long_data_sets_report_their_progress() -> None:
    model = if_overflow()
    session = create_session(model, "cpu")
    seen: list[tuple[str, int, int]] = []
    samples = _if_samples(PROGRESS_SAMPLES)
    sample_outputs(session, samples, model, progress=lambda *event: seen.append(event), label="fp32 reference")
    assert seen[0] == ("fp32 reference: samples", 0, PROGRESS_SAMPLES)
    assert seen[-1] == ("fp32 reference: samples", PROGRESS_SAMPLES, PROGRESS_SAMPLES)
    seen.clear()
    sample_outputs(session, samples[:2], model, progress=lambda *event: seen.append(event))
    assert not seen  # two samples: nothing to wait for


# ---------------------------------------------------------------------------------------------- the commands


def test_run_judges_every_sample_and_names_the_worst(if_case: tuple[Path, Path]) -> None:
    path, folder = if_case
    args = ["run", str(path), "-m", "force_fp16", "--data", str(folder), "--no-range-check"]
    result = runner.invoke(app, [*args, "--json", *FAST])
    assert result.exit_code == 1, result.output
    payload = json.loads(result.stdout)
    assert payload["samples"] == 4
    (spread,) = payload["spread"]
    assert spread["worst_sample"] == OVERFLOWING_SAMPLE and spread["failing_samples"] == 1
    assert spread["rel_l2_worst"] == "inf" and spread["rel_l2_median"] < 1e-2
    assert any(failure.startswith(f"sample {OVERFLOWING_SAMPLE} ") for failure in payload["failures"])
    keep = folder.parent / "keep.cfg"
    keep.write_text("scale_up\nscale_down\n")  # the branch kept float32: every sample passes
    result = runner.invoke(app, [*args, "--keep-dtype", str(keep), *FAST])
    assert result.exit_code == 0, result.output
    assert "rel L2 over 4 samples" in result.stdout
    # By default run records the values of the calibration samples (here all four) and keeps the branch itself.
    result = runner.invoke(app, [*args[:-1], "--json", *FAST])
    assert result.exit_code == 0, result.output
    assert "the first 8 samples" not in result.stdout


def test_compare_tune_and_explain_take_the_data_set(if_case: tuple[Path, Path], tmp_path: Path) -> None:
    path, folder = if_case
    data = ["-m", "force_fp16", "--data", str(folder)]
    compared = runner.invoke(app, ["compare", str(path), *data, "--json", "--no-range-check"])
    assert compared.exit_code == 1, compared.output
    assert json.loads(compared.stdout)["spread"][0]["worst_sample"] == OVERFLOWING_SAMPLE
    keep = tmp_path / "tuned.cfg"
    tune = ["tune", str(path), *data, "--keep-dtype-out", str(keep), "--json", "--min-low-fraction", "0.3"]
    tuned = runner.invoke(app, [*tune, "--no-range-check"])  # the branch's two nodes pinned, the Relu kept low
    assert tuned.exit_code == 0, tuned.output
    assert json.loads(tuned.stdout)["verified_spread"][0]["samples"] == 4
    assert "scale_up" in keep.read_text()
    # --data implies the range check in explain: the overflowing sample's values decide.
    explained = runner.invoke(app, ["explain", str(path), *data, "--json"])
    assert explained.exit_code == 0, explained.output
    decisions = {node["name"]: node for node in json.loads(explained.stdout)["nodes"]}
    assert decisions["scale_up"]["rule"] == "range_exceeds" and "--data" in decisions["scale_up"]["reason"]


def test_calibration_data_is_split_from_the_evaluation_data(if_case: tuple[Path, Path], tmp_path: Path) -> None:
    path, folder = if_case
    calm = tmp_path / "calm.npz"  # no sample takes the overflowing branch: the ranges see nothing to keep
    samples = [s for i, s in enumerate(_if_samples()) if i != OVERFLOWING_SAMPLE]
    np.savez(calm, x=np.stack([s["x"] for s in samples]), flag=np.stack([s["flag"] for s in samples]))
    args = ["explain", str(path), "-m", "force_fp16", "--data", str(folder), "--calibration-data", str(calm)]
    explained = runner.invoke(app, [*args, "--json"])
    assert explained.exit_code == 0, explained.output
    payload = json.loads(explained.stdout)
    assert "--calibration-data" in payload["range_analysis"]["calibration"]
    assert {node["name"]: node for node in payload["nodes"]}["scale_up"]["rule"] == "mode_lowers"
    # ... and run, judging every sample of --data, meets the overflow the calibration never saw.
    run = ["run", str(path), "-m", "force_fp16", "--data", str(folder), "--calibration-data", str(calm), *FAST]
    assert runner.invoke(app, run).exit_code == 1


def test_data_and_inputs_together_are_a_usage_error(if_case: tuple[Path, Path], tmp_path: Path) -> None:
    path, folder = if_case
    batch = tmp_path / "one.npz"
    np.savez(batch, **_if_samples(1)[0])
    result = runner.invoke(app, ["run", str(path), "--data", str(folder), "--inputs", str(batch), *FAST])
    assert result.exit_code == 2 and "--inputs" in result.output


def test_an_output_over_a_sample_is_refused(if_case: tuple[Path, Path]) -> None:
    path, folder = if_case
    victim = folder / "sample_000.npz"
    before = victim.read_bytes()
    result = runner.invoke(app, ["run", str(path), "--data", str(folder), "-o", str(victim), *FAST])
    assert result.exit_code == 2 and "data set" in result.output
    assert victim.read_bytes() == before


def test_a_generated_dimension_the_model_cannot_take_is_named(tmp_path: Path) -> None:
    model = make_model(
        [oh.make_node("Reshape", ["x", "shape"], ["y"], name="fold")],
        [tensor("x", TensorProto.FLOAT, ["batch", "n"])],
        [tensor("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(np.array([4, 8], np.int64), "shape")],
    )
    path = tmp_path / "fold.onnx"
    onnx.save_model(model, path)
    for command in ("run", "compare"):
        result = runner.invoke(app, [command, str(path), *(FAST if command == "run" else [])])
        assert result.exit_code == 2, result.output
        assert "input 'x' dimension 1 ('n') took 16" in result.output and "--shape" in result.output
    result = runner.invoke(app, ["run", str(path), "--shape", "x=1x32", *FAST])
    assert result.exit_code == 0, result.output


def test_a_data_set_in_another_float_type_is_converted_with_one_warning_per_input(
    if_case: tuple[Path, Path], tmp_path: Path
) -> None:
    """float64 samples (numpy's default) are narrowed to the model's float32, as --input files are: values that
    change are a warning, once per input, naming the first sample and how many others changed."""
    path, _ = if_case
    folder = tmp_path / "float64"
    folder.mkdir()
    for index, sample in enumerate(_if_samples()):
        exact = {"x": sample["x"].astype(np.float64), "flag": sample["flag"]}
        if index > 0:
            exact["x"] = exact["x"] + 1e-9  # not representable in float32: these samples change
        np.savez(folder / f"sample_{index:03d}.npz", **exact)
    data = load_data(folder, onnx.load(str(path)))
    assert all(sample["x"].dtype == np.float32 for sample in data.samples)
    (warning,) = data.warnings
    assert "sample_001.npz" in warning and "'x'" in warning and "(and in 2 more sample(s))" in warning
    result = runner.invoke(app, ["run", str(path), "-m", "force_fp16", "--data", str(folder), "--json", *FAST])
    assert result.exit_code == 0, result.output
    assert any("(and in 2 more sample(s))" in line for line in json.loads(result.stdout)["warnings"])


def test_data_sets_in_a_config_are_read_from_the_configs_folder(
    if_case: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run.data and run.calibration_data were read from the working folder (issue 31): here the working folder
    holds a set of the same name whose overflowing sample would decide, and the config's folder a calm one."""
    path, _ = if_case
    samples = _if_samples()
    np.savez(tmp_path / "set.npz", x=np.stack([s["x"] for s in samples]), flag=np.stack([s["flag"] for s in samples]))
    configs = tmp_path / "configs"
    configs.mkdir()
    calm = [s for i, s in enumerate(samples) if i != OVERFLOWING_SAMPLE]
    np.savez(configs / "set.npz", x=np.stack([s["x"] for s in calm]), flag=np.stack([s["flag"] for s in calm]))
    config = configs / "session.yaml"
    config.write_text(
        f"model: {path}\nprecision_mode: force_fp16\nrun:\n  data: set.npz\n  calibration_data: set.npz\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    explained = runner.invoke(app, ["explain", "--config", str(config), "--json"])
    assert explained.exit_code == 0, explained.output
    payload = json.loads(explained.stdout)
    assert str(configs / "set.npz") in payload["range_analysis"]["calibration"]
    assert {node["name"]: node for node in payload["nodes"]}["scale_up"]["rule"] == "mode_lowers"
    ran = runner.invoke(app, ["run", "--config", str(config), *FAST, "--json"])
    assert ran.exit_code == 0, ran.output  # the calm set passes; the working folder's would fail


# ------------------------------------------------------------------------------- progress while reading (issue 31)
def test_a_data_folder_slow_to_read_reports_its_progress(
    if_case: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past PROGRESS_AFTER_S, reading a folder reports each file to the progress callback (the command line's
    bar); a folder read faster reports nothing."""
    _, folder = if_case
    seen: list[tuple[str, int, int]] = []
    monkeypatch.setattr(datasets, "PROGRESS_AFTER_S", 0.0)
    samples = load_data(folder, if_overflow(), progress=lambda *event: seen.append(event))
    assert len(samples) == 4
    assert seen == [(f"--data {folder}: reading samples", done, 4) for done in range(1, 5)]
    seen.clear()
    monkeypatch.setattr(datasets, "PROGRESS_AFTER_S", 3600.0)
    load_data(folder, if_overflow(), progress=lambda *event: seen.append(event))
    assert seen == []
