"""The console script's prediction of whether a command will run a model (:func:`ampconfig.entry.runs_models`): it
forks ONNX Runtime's worker at start-up for such a command, while the process has one thread. The prediction comes
from the table of shared options (each says whether it runs a model, and through which config key), so a session
config that asks for a run is predicted as the flag is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest

from ampconfig.cli.options import uses
from ampconfig.entry import ALWAYS_RUN, RUN_WHEN_ASKED, runs_models
from ampconfig.settings.flags import COMMANDS, SHARED_OPTIONS
from tests.graphs import transformer_block
from tests.worker_faults import run_console

#: A config that runs nothing, and the same asking for values to be measured, by format.
QUIET = {".yaml": "precision_mode: force_fp16\n", ".json": '{"precision_mode": "force_fp16"}', ".toml": ""}
MEASURING = {
    ".yaml": "precision_mode: force_fp16\nrun:\n  shapes: {x: [1, 8, 32]}\n",
    ".json": '{"precision_mode": "force_fp16", "run": {"data": "samples"}}',
    ".toml": 'precision_mode = "force_fp16"\n[run]\ncalibration_data = "samples"\n',
}


@pytest.mark.parametrize("command", sorted(RUN_WHEN_ASKED))
def test_each_option_the_table_says_runs_a_model_is_predicted_to(command: str) -> None:
    """Every option whose entry runs a model, given to a command that runs one when asked, is predicted to run one;
    the command alone, or with an option that runs nothing, is not. A command that always runs is predicted to."""
    assert not runs_models([command])
    assert not runs_models([command, "--seed", "3", "--json"])
    running = [flag for option in uses(command).options if option.runs_model for flag in option.flags()]
    assert running, command
    for flag in [*running, *RUN_WHEN_ASKED[command]]:
        assert runs_models([command, flag, "x"]) and runs_models(["-v", command, f"{flag}=x"]), flag
    assert all(runs_models([name]) for name in ALWAYS_RUN)
    assert not any(runs_models([name, "--help"]) for name in COMMANDS)


@pytest.mark.parametrize("suffix", sorted(MEASURING))
def test_a_config_that_asks_for_values_is_predicted_to_run_a_model(tmp_path: Path, suffix: str) -> None:
    """``rewrite --config session.yaml`` whose config sets ``run.shapes`` (or ``run.data``, ``run.calibration_data``,
    ``run.inputs``) runs the fp32 model for its values as ``--shape`` does. On main at 73f8c17 the prediction read
    only the command line: False for each of these, so the worker was started later as a new interpreter."""
    measuring, quiet = tmp_path / f"measuring{suffix}", tmp_path / f"quiet{suffix}"
    measuring.write_text(MEASURING[suffix])
    quiet.write_text(QUIET[suffix])
    for spelled in (["-c", str(measuring)], ["--config", str(measuring)], [f"--config={measuring}"]):
        assert runs_models(["rewrite", *spelled, "-o", "out.onnx"]), spelled
        assert runs_models(["explain", *spelled])
    assert not runs_models(["rewrite", "-c", str(quiet), "-o", "out.onnx"])
    assert not runs_models(["lists", "-c", str(measuring)])  # lists never runs a model


def test_a_config_the_prediction_cannot_read_predicts_no_run(tmp_path: Path) -> None:
    """A missing, malformed or oversized config predicts no run, and raises nothing: the command reads it and
    reports what is wrong with it."""
    broken = tmp_path / "broken.yaml"
    broken.write_text("run: [unclosed\n")
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"run": {"data": "samples"}, "pad": "x" * (2 << 20)}))
    for config in (tmp_path / "missing.yaml", broken, huge, tmp_path):
        assert not runs_models(["explain", "-c", str(config)]), config


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_config_that_is_a_fifo_or_a_device_is_not_waited_on(tmp_path: Path) -> None:
    """A FIFO with no writer, or a device that never ends, named as the config: the prediction reads only a regular
    file, so it predicts no run at once, and the command refuses the config with exit 2 and its path. At 1d0a1eb
    the prediction read the FIFO before the command started, and ``explain --config FIFO`` waited forever."""
    fifo = tmp_path / "session.yaml"
    os.mkfifo(fifo)
    for config in (fifo, Path("/dev/zero")):
        assert not runs_models(["explain", "-c", str(config)]), config
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    done = run_console(
        ["explain", str(model), "--config", str(fifo)], cwd=tmp_path, environment=dict(os.environ), timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert str(fifo) in done.stderr and "not a regular file" in done.stderr, done.stderr


def test_the_worker_is_forked_at_start_up_for_a_config_that_measures(tmp_path: Path) -> None:
    """End to end: ``ampconfig -v explain --config session.yaml`` whose config gives run.shapes forks the worker at
    start-up (the -v log names how it started); on main it was spawned as a new interpreter."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    config = tmp_path / "session.yaml"
    config.write_text(f"model: {model}\nprecision_mode: force_fp16\nrun:\n  device: cpu\n  shapes: {{x: [1, 8, 32]}}\n")
    done = run_console(["-v", "explain", "--config", str(config), "--json"], cwd=tmp_path, environment=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert "range_analysis" in json.loads(done.stdout)
    assert "ONNX Runtime worker (forked" in done.stderr, done.stderr


def test_every_shared_option_that_runs_a_model_names_its_flags() -> None:
    """The prediction reads each running option's flags from its declaration: none may be empty."""
    assert all(option.flags() for option in SHARED_OPTIONS if option.runs_model)


def test_the_commands_that_run_models_are_commands_of_the_table() -> None:
    assert ALWAYS_RUN | set(RUN_WHEN_ASKED) <= set(COMMANDS) and not ALWAYS_RUN & set(RUN_WHEN_ASKED)
