"""The garbage collector is process-wide: the library never switches it; the command line pauses it around a
command and restores it; library users opt in with ``ampconfig.gc_paused()``."""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

import ampconfig
from ampconfig import rewrite_model_detailed
from ampconfig.cli import app
from tests.graphs import transformer_block

runner = CliRunner()


def _rewrite_seeing_the_collector(seen: list[bool]) -> None:
    """A real rewrite whose float16 encoder (called in the middle of the rewrite) records the collector's state."""

    def encoder(array: np.ndarray) -> np.ndarray:
        seen.append(gc.isenabled())
        return array.astype(np.float16)

    rewrite_model_detailed(transformer_block(), "force_fp16", target="cpu", float16_encoder=encoder)
    assert seen, "the encoder was never called: the check saw nothing"


def test_the_library_leaves_the_collector_alone() -> None:
    assert gc.isenabled()
    seen: list[bool] = []
    _rewrite_seeing_the_collector(seen)
    assert set(seen) == {True} and gc.isenabled()


@pytest.mark.parametrize("enabled_before", [True, False])
def test_gc_paused_is_opt_in_and_restores_the_collector(enabled_before: bool) -> None:
    seen: list[bool] = []
    (gc.enable if enabled_before else gc.disable)()
    try:
        with ampconfig.gc_paused():
            _rewrite_seeing_the_collector(seen)
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable()
    assert set(seen) == {False}


def test_collector_is_restored_when_the_block_raises() -> None:
    assert gc.isenabled()
    with pytest.raises(ValueError), ampconfig.gc_paused():
        assert not gc.isenabled()
        raise ValueError("boom")
    assert gc.isenabled()


@contextmanager
def _collections_counted() -> Iterator[list[int]]:
    """Counts the collections the interpreter starts (automatic ones only: nothing here calls gc.collect)."""
    started: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(callback)
    try:
        yield started
    finally:
        gc.callbacks.remove(callback)


class _CollectorState(logging.Handler):
    """Notes whether the collector is on each time the rewrite logs its decision summary (inside the command)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen: list[bool] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(gc.isenabled())


def test_the_command_line_pauses_the_collector_around_a_command(tmp_path: Path) -> None:
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    state = _CollectorState()
    logging.getLogger("ampconfig.engine.in_place").addHandler(state)
    try:
        result = runner.invoke(app, ["-v", "explain", str(model), "-m", "allow_mix_precision", "--json"])
    finally:
        logging.getLogger("ampconfig.engine.in_place").removeHandler(state)
    assert result.exit_code == 0, result.output
    assert state.seen == [False]  # the rewrite ran with the collector paused
    assert gc.isenabled()  # and it is back on after the command


def test_tune_keeps_the_collector_running(tmp_path: Path) -> None:
    """tune rewrites many times: paused, every discarded graph (and its converted weights) would live to the end."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    args = ["tune", str(model), "-m", "force_fp16", "--target", "cpu", "--device", "cpu", "--max-runs", "6"]
    with _collections_counted() as collections:
        result = runner.invoke(app, [*args, "--keep-dtype-out", str(tmp_path / "keep.cfg"), "--json"])
    assert result.exit_code in (0, 1), result.output
    assert collections, "no collection ran during tune"


def test_a_block_before_the_process_ends_leaves_nothing_to_collect() -> None:
    """freeze_after (the ampconfig script, whose process ends with its command): what the block leaves, cyclic
    garbage included, is out of the collector's reach, and the collector is back on."""
    assert gc.isenabled() and gc.get_freeze_count() == 0
    try:
        with ampconfig.gc_paused(freeze_after=True):
            cycle: list[object] = []
            cycle.append(cycle)
            del cycle
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
        assert gc.collect() == 0  # the cycle is frozen, not collected
    finally:
        gc.unfreeze()
    assert gc.collect() >= 1  # unfrozen, the cycle is garbage again


def test_the_script_freezes_what_its_command_leaves(tmp_path: Path) -> None:
    """`ampconfig` run as a script: its command's graph is frozen at the end rather than collected on the way out."""
    model = tmp_path / "block.onnx"
    onnx.save(transformer_block(), model)
    probe = (
        "import gc, sys\n"
        "from ampconfig.cli import main\n"
        "sys.argv = ['ampconfig', 'explain', sys.argv[1], '-m', 'force_fp16', '--json']\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print('frozen', gc.get_freeze_count(), 'enabled', gc.isenabled(), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(model)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    frozen = int(done.stderr.split("frozen ")[1].split()[0])
    assert frozen > 1000 and "enabled True" in done.stderr
