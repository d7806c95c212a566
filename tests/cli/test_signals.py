"""Issue 18, signals: SIGTERM and SIGHUP end a command as Ctrl-C does. A rewrite killed while it writes leaves no
hidden staging folder (``.OUT.onnx.XXXX.tmp/``) and no partial file, and an output it already put in place gets
its previous content back (or is removed when it is new); the process then ends by the signal (exit 143 / 129 in a
shell; 130 for Ctrl-C).

Each case is a real ``ampconfig`` process killed by a real signal. To kill it at a known moment, the process runs
the real command line with one test-only pause wrapped around the output guard (``tests/signal_harness.py``):
after the output is complete in its staging folder, or after the first file was moved into place. Nothing in
onnx, ONNX Runtime or the rewrite is replaced.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as oh
from onnx import numpy_helper

from tests.graphs import FLOAT, make_model, tensor

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
HARNESS = Path(__file__).parents[1] / "signal_harness.py"


def _default_dispositions() -> None:
    """In the command's process before it starts: the signals as an interactive shell leaves them. A suite run
    under ``nohup`` or as a background job would otherwise hand them down ignored, and ampconfig rightly keeps an
    inherited ignored signal ignored (``files/interrupts.end_on_signals``)."""
    for each in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(each, signal.SIG_DFL if each != signal.SIGINT else signal.default_int_handler)


def _ended(process: subprocess.Popen[bytes]) -> bytes:
    """The process's stderr once it ended; killed if it outlives the wait, so a failing test leaves no process."""
    try:
        return process.communicate(timeout=120)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise


def small_model(features: int = 64) -> onnx.ModelProto:
    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((features, features), np.float32), "w")
    nodes = [oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"), oh.make_node("Relu", ["h"], ["y"], name="relu")]
    return make_model(nodes, [tensor("x", FLOAT, [2, features])], [tensor("y", FLOAT, [2, features])], [weights])


def snapshot(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (hidden ones included) with its content's digest."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        for path in sorted(folder.rglob("*"))
        if not path.is_fifo()
    }


def killed_at(folder: Path, args: list[str], pause: str, signum: int) -> subprocess.CompletedProcess[bytes]:
    """Run ``ampconfig ARGS`` in ``folder`` until the harness pauses at ``pause``, then send ``signum``."""
    paused, done = signalled_at(folder, args, pause, signum)
    assert paused, done.stderr.decode()
    return done


def signalled_at(
    folder: Path, args: list[str], pause: str, signum: int
) -> tuple[bool, subprocess.CompletedProcess[bytes]]:
    """As :func:`killed_at`; the first item says whether the command reached the pause (a refused input ends it
    before anything is written)."""
    marker = folder / "paused.marker"
    env = {**os.environ, "TMPDIR": str(folder / "tmp"), "AMPCONFIG_TEST_PAUSE": f"{pause}:{marker}"}
    process = subprocess.Popen(
        [sys.executable, str(HARNESS), *args],
        cwd=folder / "work",
        env=env,
        stderr=subprocess.PIPE,
        preexec_fn=_default_dispositions,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        if process.poll() is not None:
            return False, subprocess.CompletedProcess(process.args, process.returncode, b"", process.communicate()[1])
        assert time.monotonic() < deadline, "the command never reached the pause"
        time.sleep(0.05)
    marker.unlink()
    process.send_signal(signum)
    errors = _ended(process)
    return True, subprocess.CompletedProcess(process.args, process.returncode, b"", errors)


def expected_code(signum: int) -> int:
    return 130 if signum == signal.SIGINT else -signum  # Ctrl-C: typer's 130; the others: died by the signal


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "work").mkdir()
    onnx.save(small_model(), tmp_path / "work" / "m.onnx")
    return tmp_path


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_while_the_output_is_staged_leaves_nothing(folder: Path, signum: int) -> None:
    work = folder / "work"
    (work / "out.onnx").write_bytes(b"the previous output")
    before = snapshot(work)
    done = killed_at(folder, ["rewrite", "m.onnx", "-m", "force_fp16", "-o", "out.onnx"], "staged", signum)
    assert done.returncode == expected_code(signum), done.stderr.decode()
    assert b"Traceback" not in done.stderr
    assert snapshot(work) == before  # no .out.onnx.XXXX.tmp/ folder, the previous output untouched


@pytest.mark.parametrize("signum", [signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_after_an_output_was_moved_into_place_takes_it_back(folder: Path, signum: int) -> None:
    """A model with external data: its .data file is moved into place first; killed right then, the previous
    .data comes back and the model file was never touched."""
    work = folder / "work"
    onnx.save(small_model(), work / "big.onnx", save_as_external_data=True, location="big.weights", size_threshold=0)
    (work / "out.onnx").write_bytes(b"the previous output")
    (work / "out.onnx.data").write_bytes(b"the previous output's weights")
    before = snapshot(work)
    done = killed_at(folder, ["rewrite", "big.onnx", "-m", "force_fp16", "-o", "out.onnx"], "committed", signum)
    assert done.returncode == expected_code(signum), done.stderr.decode()
    assert f"stopped by {signal.Signals(signum).name}" in done.stderr.decode()
    assert snapshot(work) == before


def test_a_new_output_moved_into_place_is_removed_again(folder: Path) -> None:
    work = folder / "work"
    before = snapshot(work)
    done = killed_at(folder, ["rewrite", "m.onnx", "-m", "force_fp16", "-o", "new.onnx"], "committed", signal.SIGTERM)
    assert done.returncode == -signal.SIGTERM, done.stderr.decode()
    assert snapshot(work) == before


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_signal_while_a_stream_waits_for_its_reader_removes_the_staged_copy(folder: Path) -> None:
    """The FIFO has no reader: the command waits in open(); its staged copy sits in the temporary folder."""
    os.mkfifo(folder / "work" / "pipe")
    process = subprocess.Popen(
        [sys.executable, "-m", "ampconfig", "rewrite", "m.onnx", "-o", "pipe"],
        cwd=folder / "work",
        env={**os.environ, "TMPDIR": str(folder / "tmp")},
        stderr=subprocess.PIPE,
        preexec_fn=_default_dispositions,
    )
    deadline = time.monotonic() + 120
    while not any(staged.is_file() for staged in (folder / "tmp").rglob("*")):
        assert process.poll() is None, process.communicate()[1].decode()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    errors = _ended(process)
    assert process.returncode == -signal.SIGTERM, errors.decode()
    assert list((folder / "tmp").iterdir()) == []
