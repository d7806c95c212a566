"""One decision everywhere: value ranges as a recorded input (issue: the model you prove is the model you ship).

A log-mel front end (``tests/spectrum_models.py``) overflows float16 only on loud, real-looking frames. Every
deciding command must decide it the same way from the same values: ``run --inputs``, ``rewrite --ranges`` (the file
``calibrate`` made from the same inputs), ``rewrite --inputs``, ``explain --inputs``, and a lock's check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ampconfig.errors import AmpconfigError
from tests.spectrum_models import POWER_NODES, loud_frames, write_power_spectrum

RUN = ["--warmup", "0", "--iterations", "1"]


def ampconfig(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ampconfig", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def spectrum(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The model, its loud inputs and the ranges ``calibrate`` made from them, in one folder."""
    folder = tmp_path_factory.mktemp("spectrum")
    model, inputs = write_power_spectrum(folder)
    done = ampconfig("calibrate", model, "--inputs", inputs, "-o", "ranges.json", cwd=folder)
    assert done.returncode == 0, done.stderr
    return model, inputs, folder / "ranges.json"


def _run_output(model: Path) -> np.ndarray:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"frames": loud_frames()})[0])


def test_calibrate_writes_every_float_value_with_model_and_data_identity(spectrum: tuple[Path, Path, Path]) -> None:
    _, _, ranges = spectrum
    data = json.loads(ranges.read_text())
    assert data["format"] == "ampconfig-value-ranges" and data["format_version"] == 3
    assert data["model"]["path"] == "log_mel.onnx" and len(data["model"]["structure_sha256"]) == 64
    assert data["data"]["samples"] == 1 and len(data["data"]["sha256"]) == 64
    power = data["values"]["power"]
    assert power["max_abs"] > 1e6 and power["min"] >= 0 and power["nonfinite"] == 0
    frames = loud_frames()
    assert data["values"]["frames"]["min"] == float(frames.min())
    assert data["values"]["frames"]["max_abs"] == float(np.abs(frames).max())


def test_calibrate_through_a_symbolic_link_records_the_model_relative_to_the_real_file(
    spectrum: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The ranges file is written at the link's target; the model path in it holds from there (issue 38), and a
    command reading the file by its real name finds the model it names."""
    model, inputs, _ = spectrum
    real = tmp_path / "measured" / "deep" / "ranges.json"
    real.parent.mkdir(parents=True)
    links = tmp_path / "links"
    links.mkdir()
    (links / "ranges.json").symlink_to(real)
    done = ampconfig("calibrate", model, "--inputs", inputs, "-o", links / "ranges.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    recorded = json.loads(real.read_text())["model"]["path"]
    assert (real.parent / recorded).resolve() == model.resolve()
    assert recorded.startswith("../../")


def test_rewrite_with_ranges_writes_the_model_run_proved(spectrum: tuple[Path, Path, Path]) -> None:
    model, inputs, ranges = spectrum
    folder = model.parent
    run = ampconfig("run", model, "--inputs", inputs, "-o", "run.onnx", *RUN, cwd=folder)
    assert run.returncode == 0, run.stdout + run.stderr
    from_file = ampconfig("rewrite", model, "--ranges", ranges, "-o", "ranged.onnx", cwd=folder)
    from_data = ampconfig("rewrite", model, "--inputs", inputs, "-o", "data.onnx", cwd=folder)
    plain = ampconfig("rewrite", model, "-o", "plain.onnx", cwd=folder)
    assert from_file.returncode == from_data.returncode == plain.returncode == 0
    shipped = (folder / "run.onnx").read_bytes()
    assert (folder / "ranged.onnx").read_bytes() == shipped
    assert (folder / "data.onnx").read_bytes() == shipped
    # The point of it: the shipped model is finite on the data, and what it keeps float32 is what overflows.
    assert np.isfinite(_run_output(folder / "ranged.onnx")).all()
    unchecked = ampconfig("run", model, "--inputs", inputs, "--no-range-check", *RUN, "--json", cwd=folder)
    assert unchecked.returncode == 1, unchecked.stdout  # float16 storage of the power spectrum: inf
    assert json.loads(unchecked.stdout)["outputs"][0]["nonfinite"] > 0
    # Without values the rewrite warns, naming the options that would check them.
    assert "warning: activations were not checked" in plain.stderr and "--ranges" in plain.stderr
    assert "activations were not checked" not in from_file.stderr


def test_explain_and_run_report_the_same_dtype_and_rule_for_every_node(spectrum: tuple[Path, Path, Path]) -> None:
    model, inputs, ranges = spectrum
    folder = model.parent
    explained = ampconfig("explain", model, "--inputs", inputs, "--json", cwd=folder)
    from_file = ampconfig("explain", model, "--ranges", ranges, "--json", cwd=folder)
    run = ampconfig("run", model, "--inputs", inputs, *RUN, "--lock-out", "explain.lock.json", cwd=folder)
    assert explained.returncode == from_file.returncode == run.returncode == 0, explained.stderr + run.stderr
    lock = json.loads((folder / "explain.lock.json").read_text())
    by_run = {node["name"]: (node["dtype"], node["rule"]) for node in lock["nodes"]}
    for payload in (json.loads(explained.stdout), json.loads(from_file.stdout)):
        by_explain = {node["name"]: (node["dtype"], node["rule"]) for node in payload["nodes"]}
        assert by_explain == by_run
    assert {name for name, (_, rule) in by_run.items() if rule == "range_exceeds"} >= set(POWER_NODES)


@pytest.mark.parametrize("clamp", [False, True])
def test_a_lock_from_run_passes_its_own_check(spectrum: tuple[Path, Path, Path], clamp: bool) -> None:
    model, inputs, _ = spectrum
    folder = model.parent
    lock = f"run-{clamp}.lock.json"
    extra = ["--clamp-values"] if clamp else []
    run = ampconfig("run", model, "--inputs", inputs, *RUN, *extra, "--lock-out", lock, cwd=folder)
    assert run.returncode == 0, run.stderr
    recorded = json.loads((folder / lock).read_text())
    assert recorded["values"]["checked"] is True and {"re2", "im2", "power"} <= set(recorded["values"]["beyond_margin"])
    assert recorded["settings"]["clamp_values"] == {"value": clamp, "source": "command line" if clamp else "default"}
    check = ampconfig("lock", "--check", lock, "--strict", cwd=folder)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_changed_ranges_file_is_named_as_the_cause(spectrum: tuple[Path, Path, Path]) -> None:
    model, _, ranges = spectrum
    folder = model.parent
    mine = folder / "mine.json"
    mine.write_text(ranges.read_text())
    made = ampconfig("lock", model, "--ranges", mine, "-o", "ranges.lock.json", cwd=folder)
    assert made.returncode == 0, made.stderr
    assert ampconfig("lock", "--check", "ranges.lock.json", cwd=folder).returncode == 0
    quiet = folder / "quiet.npz"  # the same frames a thousand times quieter: no value passes float16's range
    np.savez(quiet, frames=loud_frames() / 1000)
    assert ampconfig("calibrate", model, "--inputs", quiet, "-o", mine, cwd=folder).returncode == 0
    check = ampconfig("lock", "--check", "ranges.lock.json", cwd=folder)
    assert check.returncode == 1
    changed = [line for line in check.stdout.splitlines() if line.strip().startswith("changed")]
    assert changed and all("the value ranges file changed" in line for line in changed)
    assert "the decision rules differ" not in check.stdout


def test_ranges_of_another_model_structure_are_refused(spectrum: tuple[Path, Path, Path]) -> None:
    model, _, ranges = spectrum
    folder = model.parent
    other = onnx.load(model)
    other.graph.node[-1].name = "renamed_log"
    onnx.save(other, folder / "other.onnx")
    done = ampconfig("rewrite", "other.onnx", "--ranges", ranges, "-o", "x.onnx", cwd=folder)
    assert done.returncode == 2
    recorded = json.loads(ranges.read_text())["model"]["structure_sha256"]
    assert recorded in done.stderr and "another model structure" in done.stderr
    assert not (folder / "x.onnx").exists()


def test_validate_checks_a_ranges_file(spectrum: tuple[Path, Path, Path]) -> None:
    _, _, ranges = spectrum
    folder = ranges.parent
    assert ampconfig("validate", ranges, cwd=folder).returncode == 0
    broken = json.loads(ranges.read_text())
    broken["values"]["power"]["nonfinite"] = -1
    (folder / "broken.json").write_text(json.dumps(broken, indent=1))
    done = ampconfig("validate", "broken.json", cwd=folder)
    assert done.returncode != 0 and "nonfinite" in done.stdout + done.stderr


def test_the_api_and_the_pass_read_ranges_as_the_commands_do(spectrum: tuple[Path, Path, Path]) -> None:
    import ampconfig as api

    model, _, ranges = spectrum
    shipped = api.rewrite_model(model, "allow_mix_precision", ranges=ranges)
    command = model.parent / "ranged.onnx"
    if not command.exists():
        assert ampconfig("rewrite", model, "--ranges", ranges, "-o", command, cwd=model.parent).returncode == 0
    assert shipped.SerializeToString(deterministic=True) == onnx.load(command).SerializeToString(deterministic=True)


def test_a_clamped_lock_passes_its_check_and_records_the_setting(tmp_path: Path) -> None:
    """A BatchNormalization variance beyond float16: with --clamp-values the lock records the clamp, and its check
    decides with it (it failed at once with 'mode_lowers -> value_out_of_range' when the setting went unrecorded)."""
    from tests.value_models import detector_bn, pixels

    onnx.save(detector_bn(), tmp_path / "detector.onnx")
    np.savez(tmp_path / "image.npz", image=pixels())
    run = ampconfig(
        "run", "detector.onnx", "-m", "force_fp16", "--inputs", "image.npz", "--clamp-values", *RUN,
        "--lock-out", "clamped.lock.json", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr
    lock = json.loads((tmp_path / "clamped.lock.json").read_text())
    assert lock["settings"]["clamp_values"] == {"value": True, "source": "command line"}
    assert not any(node["rule"] == "value_out_of_range" for node in lock["nodes"])
    check = ampconfig("lock", "--check", "clamped.lock.json", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    # The same lock made by `lock --clamp-values` decides the same nodes.
    made = ampconfig(
        "lock", "detector.onnx", "-m", "force_fp16", "--inputs", "image.npz", "--clamp-values",
        "-o", "made.lock.json", cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert json.loads((tmp_path / "made.lock.json").read_text())["nodes"] == lock["nodes"]


def test_the_pass_reads_ranges_as_the_command_does(spectrum: tuple[Path, Path, Path]) -> None:
    import onnx_ir as ir

    from ampconfig import MixedPrecisionPass

    model, _, ranges = spectrum
    result = MixedPrecisionPass("allow_mix_precision", ranges=ranges)(ir.load(model))
    assert result.rewrite is not None
    decided = {d.name: (d.dtype, d.rule.value) for d in result.rewrite.decisions}
    assert all(decided[name] == ("float32", "range_exceeds") for name in POWER_NODES)


def test_a_film_block_ships_the_model_run_proved_and_its_lock_passes(tmp_path: Path) -> None:
    """The second property the issue names: a norm-times-scale product that overflows float16 on data."""
    from tests.value_models import film_block, film_inputs

    onnx.save(film_block(), tmp_path / "film.onnx")
    np.savez(tmp_path / "film.npz", **film_inputs())
    steps = {
        "calibrate": ("calibrate", "film.onnx", "--inputs", "film.npz", "-o", "film.ranges.json"),
        "run": ("run", "film.onnx", "--inputs", "film.npz", "-o", "run.onnx", *RUN, "--lock-out", "film.lock.json"),
        "rewrite": ("rewrite", "film.onnx", "--ranges", "film.ranges.json", "-o", "ranged.onnx"),
        "check": ("lock", "--check", "film.lock.json", "--strict"),
    }
    for name, args in steps.items():
        done = ampconfig(*args, cwd=tmp_path)
        assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"
    assert (tmp_path / "ranged.onnx").read_bytes() == (tmp_path / "run.onnx").read_bytes()
    lock = json.loads((tmp_path / "film.lock.json").read_text())
    assert any(node["rule"] == "range_exceeds" and node["name"] == "film.mul" for node in lock["nodes"])


def test_the_api_calibrates_as_the_command_does(spectrum: tuple[Path, Path, Path], tmp_path: Path) -> None:
    import ampconfig as api

    model, inputs, ranges = spectrum
    written = api.calibrate_model(model, tmp_path / "api.json", inputs=inputs)
    assert set(written.values) == set(json.loads(ranges.read_text())["values"])
    got = json.loads((tmp_path / "api.json").read_text())
    want = json.loads(ranges.read_text())
    assert got["values"] == want["values"] and got["data"]["sha256"] == want["data"]["sha256"]
    shipped = api.rewrite_model(model, "allow_mix_precision", ranges=tmp_path / "api.json")
    assert shipped == api.rewrite_model(model, "allow_mix_precision", ranges=ranges)
    before = model.read_bytes()
    with pytest.raises(AmpconfigError):
        api.calibrate_model(model, model, inputs=inputs)  # never over an input
    assert model.read_bytes() == before


@pytest.fixture(scope="module")
def uneven(spectrum: tuple[Path, Path, Path]) -> Path:
    """The spectrum's ranges without the value 'mel' and with a value the model lacks."""
    _, _, ranges = spectrum
    data = json.loads(ranges.read_text())
    data["values"]["no_such_value"] = data["values"].pop("mel")
    path = ranges.parent / "uneven.ranges.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("command", ["rewrite", "lock", "explain", "diff", "run", "compare", "tune"])
def test_every_deciding_command_says_what_the_file_does_not_cover(
    spectrum: tuple[Path, Path, Path], uneven: Path, command: str
) -> None:
    model, inputs, _ = spectrum
    folder = model.parent
    args: list[str | Path] = {
        "rewrite": ["rewrite", model, "-o", f"{command}.onnx"],
        "lock": ["lock", model, "-o", f"{command}.lock.json"],
        "explain": ["explain", model],
        "diff": ["diff", model, "--base-precision-mode", "force_fp32"],
        "run": ["run", model, "--inputs", inputs, *RUN],
        "compare": ["compare", model, "--inputs", inputs],
        "tune": ["tune", model, "--inputs", inputs, "--max-runs", "8", "-o", f"{command}.mixlist.json"],
    }[command]
    done = ampconfig(*args, "-m", "allow_mix_precision", "--ranges", uneven, cwd=folder)
    assert done.returncode in (0, 1), done.stderr
    said = done.stdout + done.stderr
    assert "1 float value(s) are not in the ranges file" in said and "'mel'" in said, said
    assert "names 1 value(s) the model does not have" in said and "'no_such_value'" in said, said


def test_the_api_and_the_pass_say_it_too(spectrum: tuple[Path, Path, Path], uneven: Path) -> None:
    import onnx_ir as ir

    from ampconfig import MixedPrecisionPass
    from ampconfig.api import rewrite_model_detailed

    model, _, _ = spectrum
    rewritten = ir.load(model)
    MixedPrecisionPass("allow_mix_precision", ranges=uneven)(rewritten)
    for warnings in (
        rewrite_model_detailed(model, "allow_mix_precision", ranges=uneven).warnings,
        MixedPrecisionPass.result_of(rewritten).warnings,
    ):
        assert sum("not in the ranges file" in w or "the model does not have" in w for w in warnings) == 2, warnings


def test_explain_compare_and_tune_decide_from_the_calibration_run_makes(tmp_path: Path) -> None:
    """One measurement path: the decisions of explain (the calibration alone), explain --compare, compare and tune
    (the calibration of their reference runs) on the same data are run's, underflow included."""
    from tests.underflow_models import FRONT_END, write_front_end

    model, data = write_front_end(tmp_path)
    common = ["-m", "allow_mix_precision", "--data", data, "--json"]

    def payload(*args: str | Path) -> dict:
        done = ampconfig(*args, *common, cwd=tmp_path)
        assert done.returncode in (0, 1), done.stderr
        return json.loads(done.stdout)

    explained = payload("explain", model)
    compared = payload("explain", model, "--compare")
    decided = {node["name"]: (node["dtype"], node["rule"]) for node in explained["nodes"]}
    assert decided == {node["name"]: (node["dtype"], node["rule"]) for node in compared["nodes"]}
    assert {name for name, (_, rule) in decided.items() if rule == "range_underflows"} == set(FRONT_END) - {"log"}
    located = payload("compare", model)["localization"]["nodes"]
    assert {node["name"]: node["dtype"] for node in located} == {name: d for name, (d, _) in decided.items()}
    ran = payload("run", model, *RUN)
    assert ran["passed"] and "6 by range_underflows" in " ".join(ran["notes"])
    tuned = payload("tune", model, "--max-runs", "8", "-o", tmp_path / "tuned.mixlist.json")
    assert tuned["range_analysis"] == compared["range_analysis"]


def test_the_ranges_file_holds_the_numbers_counted_in_this_process(spectrum: tuple[Path, Path, Path]) -> None:
    """``calibrate`` counts each value where ONNX Runtime made it (the worker, ``ampconfig.value_counts``); every
    value's line of its file is the line of the same value's array brought back and counted here by
    ``decide.value_ranges.value_stats``, to the byte."""
    from ampconfig.decide.value_ranges import value_stats
    from ampconfig.documents.ranges_file import parse_ranges, ranges_text
    from ampconfig.prove.calibration import value_range
    from ampconfig.runner.intermediates import run_with_intermediates

    model, inputs, ranges = spectrum
    written = parse_ranges(ranges.read_text(), str(ranges))
    arrays = run_with_intermediates(onnx.load(model), dict(np.load(inputs))).values
    here = written.model_copy(update={"values": {key: value_range(value_stats(arrays[key])) for key in written.values}})
    assert len(written.values) > 5
    assert ranges_text(here) == ranges.read_text()
