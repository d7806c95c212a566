"""Issue 18, signals: SIGTERM and SIGHUP end a command as Ctrl-C does. A rewrite killed while it writes leaves no
hidden staging folder (``.OUT.onnx.XXXX.tmp/``) and no partial file, and an output it already put in place gets
its previous content back (or is removed when it is new); the process then ends by the signal (exit 143 / 129 in a
shell; 130 for Ctrl-C).

Issue 31, something lost: a signal that arrived after the output was in place, while the command still printed its
summary, ended it (130, nothing on stderr) with the new content in place of the previous one. Now an output is
final only when the command ends successfully: at every moment the previous content is intact, or the new content
is complete and the command reports success; an interrupted command says so, and what it took back.

Each case is a real ``ampconfig`` process killed by a real signal. To kill it at a known moment, the process runs
the real command line with one test-only pause (``tests/signal_harness.py``): after the output is complete in its
staging folder, after the first file was moved into place, after the guarded block ended, after the command
returned, once the outputs are final, or at the N-th line of the writing and ending code. Nothing in onnx, ONNX
Runtime or the rewrite is replaced.
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

from tests.fresh_process import as_a_terminal_job
from tests.graphs import FLOAT, make_model, tensor

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
HARNESS = Path(__file__).parents[1] / "signal_harness.py"


def _ended(process: subprocess.Popen[bytes]) -> bytes:
    """The process's stderr once it ended; killed if it outlives the wait, so a failing test leaves no process."""
    try:
        return process.communicate(timeout=120)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise


def _ended_with_output(process: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    try:
        return process.communicate(timeout=120)
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
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=as_a_terminal_job,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        if process.poll() is not None:
            output, errors = process.communicate()
            return False, subprocess.CompletedProcess(process.args, process.returncode, output, errors)
        assert time.monotonic() < deadline, "the command never reached the pause"
        time.sleep(0.05)
    marker.unlink()
    process.send_signal(signum)
    output, errors = _ended_with_output(process)
    return True, subprocess.CompletedProcess(process.args, process.returncode, output, errors)


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
        preexec_fn=as_a_terminal_job,
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


# ------------------------------------------------------------------------------------- issue 31: late signals
REWRITE = ["rewrite", "m.onnx", "-m", "force_fp16", "-o", "prev.onnx"]
PREVIOUS = b"the previous output"


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, int]:
    """The output of the uninterrupted rewrite, and how many lines of the writing and ending code it runs (the
    points ``line:N`` can pause at)."""
    base = tmp_path_factory.mktemp("uninterrupted")
    (base / "tmp").mkdir()
    (base / "work").mkdir()
    onnx.save(small_model(), base / "work" / "m.onnx")
    (base / "work" / "prev.onnx").write_bytes(PREVIOUS)
    count = base / "count.txt"
    done = subprocess.run(
        [sys.executable, str(HARNESS), *REWRITE],
        cwd=base / "work",
        env={**os.environ, "TMPDIR": str(base / "tmp"), "AMPCONFIG_TEST_PAUSE": f"count:{count}"},
        capture_output=True,
        preexec_fn=as_a_terminal_job,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    return (base / "work" / "prev.onnx").read_bytes(), int(count.read_text())


def assert_whole(folder: Path, done: subprocess.CompletedProcess[bytes], new: bytes, signum: int) -> bool:
    """What issue 31 asks at every moment: the new content complete and the command reporting success, or the
    previous content intact and the command saying it was interrupted. Nothing else is left in the folder either
    way. Returns whether the command was interrupted."""
    work = folder / "work"
    assert sorted(path.name for path in work.iterdir()) == ["m.onnx", "prev.onnx"]  # no staging folder left
    assert list((folder / "tmp").iterdir()) == []
    errors = done.stderr.decode()
    assert "Traceback" not in errors
    content = (work / "prev.onnx").read_bytes()
    if done.returncode == 0:
        assert content == new
        assert "wrote prev.onnx" in done.stdout.decode()
        return False
    assert done.returncode == expected_code(signum), errors
    assert content == PREVIOUS, "interrupted, yet the previous content is gone"
    said = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    assert f"error: {said}" in errors
    return True


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("pause", ["exiting", "kept", "returned"])
def test_a_signal_after_the_output_is_in_place_gives_the_previous_content_back(
    folder: Path, rewritten: tuple[bytes, int], pause: str, signum: int
) -> None:
    """The issue's case: the new model is in place and the command still prints (``kept``) or has returned
    (``returned``), or the guard's exit was about to clean up (``exiting``: the signal's exception cuts that exit
    short before it holds the signals back): the signal takes it back, and stderr says so."""
    (folder / "work" / "prev.onnx").write_bytes(PREVIOUS)
    done = killed_at(folder, REWRITE, pause, signum)
    assert assert_whole(folder, done, rewritten[0], signum)
    assert "note: the output model (--output) prev.onnx has its previous content again" in done.stderr.decode()


def test_a_signal_once_the_outputs_are_final_changes_nothing(folder: Path, rewritten: tuple[bytes, int]) -> None:
    (folder / "work" / "prev.onnx").write_bytes(PREVIOUS)
    done = killed_at(folder, REWRITE, "ending", signal.SIGTERM)
    assert done.returncode == 0, done.stderr.decode()
    assert not assert_whole(folder, done, rewritten[0], signal.SIGTERM)


#: Where along the writing and ending code the sweep pauses: fractions of its lines (the last one included).
SWEEP_POINTS = (0.02, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.97, 1.0)
SWEEP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@pytest.mark.parametrize("point", SWEEP_POINTS)
def test_a_signal_at_any_line_of_the_write_keeps_one_whole_content(
    folder: Path, rewritten: tuple[bytes, int], point: float
) -> None:
    """The signal arrives at one line of the output guard, the signal handling and the command line, from the
    output's staging to the process's end (each point another line, each signal in turn)."""
    new, lines = rewritten
    line = max(1, round(point * lines))
    signum = SWEEP_SIGNALS[SWEEP_POINTS.index(point) % len(SWEEP_SIGNALS)]
    (folder / "work" / "prev.onnx").write_bytes(PREVIOUS)
    _, done = signalled_at(folder, REWRITE, f"line:{line}", signum)
    assert_whole(folder, done, new, signum)
