"""runner.worker and runner.ort_worker: every ONNX Runtime session of a user's model lives in one worker process
that ampconfig outlives. Real sessions, real crashes (injected from the tests: ``tests/faults/sitecustomize.py``),
real signals, the real console script."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ampconfig.errors import AmpconfigError
from ampconfig.runner import worker
from ampconfig.runner.channel import Channel, large_bytes
from ampconfig.runner.sessions import LOAD_FAILED, create_session, run_once
from ampconfig.runner.worker import Phase, WorkerCrashed
from tests.worker_faults import console_script, fault_environment, fresh_worker, inject, run_console

__all__ = ["fresh_worker"]  # the fixture, used by name


def _relu() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


X = {"x": np.array([-1.0, 2.0], np.float32)}


def _counts() -> dict[str, int]:
    return worker.current().ask("count", {}, Phase.RUN, "the count")  # type: ignore[no-any-return]


def test_messages_cross_the_channel_whole_with_their_arrays_out_of_band() -> None:
    read_a, write_b = os.pipe()
    read_b, write_a = os.pipe()
    a, b = Channel(read_a, write_a), Channel(read_b, write_b)
    message = {
        "float": np.arange(12, dtype=np.float32).reshape(3, 4),
        "strided": np.arange(20, dtype=np.float64)[::3],  # not contiguous: goes inside the pickle
        "half": np.array([1.5, -2.0], np.float16),
        "bfloat16": np.array([1.5, 3.0], ml_dtypes.bfloat16),
        "text": np.array(["a", "bcd"]),
        "flags": np.array([True, False]),
        "scalar": np.float32(3.0),
        "empty": np.zeros((0, 3), np.int64),
        "bytes": large_bytes(b"\x00model bytes" * 1000),
        "large": np.ones(3_000_000, np.float32),  # 12 MB: more than a pipe's buffer, so writer and reader alternate
    }
    import threading

    sender = threading.Thread(target=b.send, args=(message,))
    sender.start()
    received = a.recv()
    sender.join()
    for name in ("float", "strided", "half", "text", "flags", "empty", "large"):
        np.testing.assert_array_equal(received[name], message[name])
        assert received[name].dtype == message[name].dtype
    assert received["bfloat16"].dtype == ml_dtypes.bfloat16
    assert received["scalar"] == 3.0
    assert bytes(received["bytes"]) == b"\x00model bytes" * 1000
    b.close()
    with pytest.raises(EOFError):
        a.recv()
    a.close()


def test_sessions_are_built_once_in_the_worker_and_freed_when_dropped(fresh_worker: None) -> None:
    session = create_session(_relu(), "cpu", what="the relu model")
    process = worker.current()
    assert process.pid != os.getpid()
    np.testing.assert_array_equal(run_once(session, X)["y"], [0.0, 2.0])
    latency = session.time(X, warmup=1, iterations=4)
    assert latency.iterations == 4 and latency.median_ms > 0
    assert _counts() == {"built": 1, "open": 1}  # run, time and count asked the same session
    del session
    assert _counts() == {"built": 1, "open": 0}


def test_a_refusal_is_onnx_runtimes_words_and_the_worker_lives_on(fresh_worker: None) -> None:
    with pytest.raises(AmpconfigError) as refused:
        create_session(b"not a model", "cpu")
    assert refused.value.message.startswith(LOAD_FAILED)
    pid = worker.current().pid
    run_once(create_session(_relu(), "cpu"), X)
    assert worker.current().pid == pid


@pytest.mark.parametrize(
    ("fault", "phase", "death"), [("load:segv:any", Phase.LOAD, "SIGSEGV"), ("run:abort:any", Phase.RUN, "SIGABRT")]
)
def test_a_crash_names_the_model_the_phase_and_the_signal_and_the_next_request_gets_a_new_worker(
    fresh_worker: None, monkeypatch: pytest.MonkeyPatch, fault: str, phase: Phase, death: str
) -> None:
    inject(monkeypatch, fault)
    folder = worker.current().folder
    with pytest.raises(WorkerCrashed) as crashed:
        run_once(create_session(_relu(), "cpu", what="the relu model"), X)
    assert crashed.value.phase is phase and crashed.value.death.startswith(f"killed by {death}")
    assert f"ONNX Runtime crashed (killed by {death}" in crashed.value.message
    assert crashed.value.message.endswith(f"while {'loading' if phase is Phase.LOAD else 'running'} the relu model")
    assert not folder.exists()  # the dead worker's folder is gone
    monkeypatch.delenv("AMPCONFIG_FAULT")
    worker.shutdown()
    np.testing.assert_array_equal(run_once(create_session(_relu(), "cpu"), X)["y"], [0.0, 2.0])


MARKED = ("json", "numpy", "onnx", "onnxruntime")


def _marker_modules(folder: Path) -> None:
    """Modules named like what ampconfig imports, each of which leaves a marker file when imported."""
    for name in MARKED:
        (folder / f"{name}.py").write_text(
            f"import pathlib\npathlib.Path(__file__).with_name('imported-{name}').write_text('imported')\n"
        )


def test_a_spawned_worker_imports_nothing_from_the_working_folder(
    fresh_worker: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _marker_modules(tmp_path)
    monkeypatch.chdir(tmp_path)
    run_once(create_session(_relu(), "cpu"), X)
    assert worker.current().how == "spawned"  # this test process has threads: no fork
    assert sorted(p.name for p in tmp_path.glob("imported-*")) == []


def test_the_console_script_forks_its_worker_and_imports_nothing_from_the_working_folder(tmp_path: Path) -> None:
    work, temporary = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    temporary.mkdir()
    _marker_modules(work)
    done = run_console(
        ["-vv", "run", "-m", "allow_mix_precision", "--warmup", "1", "--iterations", "2"],
        cwd=work,
        environment=fault_environment(None, tmpdir=temporary),
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in work.glob("imported-*")) == []
    # No second interpreter, and each model's session built once: the range run's copy, the fp32 model, the
    # rewritten model and its CPU accuracy copy
    assert re.search(r"ONNX Runtime worker \(forked, pid \d+\): 4 session\(s\) built", done.stderr), done.stderr
    assert "new interpreter" not in done.stderr
    assert list(temporary.iterdir()) == []  # nothing left behind


def test_ctrl_c_while_the_worker_runs_is_exit_130_and_ends_the_worker(tmp_path: Path) -> None:
    temporary, marker = tmp_path / "tmp", tmp_path / "paused"
    temporary.mkdir()
    process = subprocess.Popen(
        [console_script(), "run", "-m", "force_fp16", "--no-range-check", "--warmup", "1", "--iterations", "1"],
        cwd=tmp_path,
        env=fault_environment("run:pause:any", marker=marker, tmpdir=temporary),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), process.communicate()[1].decode()
        worker_pid = int(marker.read_text())
        os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr.decode()
    assert b"interrupted" in stderr and b"Traceback" not in stderr and b"crashed" not in stderr
    with pytest.raises(ProcessLookupError):
        os.kill(worker_pid, 0)
    assert list(temporary.iterdir()) == []


def test_ctrl_c_during_start_up_is_a_quiet_exit_130(tmp_path: Path) -> None:
    """Ctrl-C while the command line's own modules are being imported (paused as typer is imported): no
    KeyboardInterrupt traceback, exit 130 as at every later moment."""
    marker = tmp_path / "importing"
    process = subprocess.Popen(
        [console_script(), "validate", "--help"],
        env=fault_environment("import:pause:typer", marker=marker),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), process.communicate()[1].decode()
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr.decode()
    assert b"Traceback" not in stderr and b"interrupted" in stderr


def test_runs_that_write_over_the_last_outputs_return_each_runs_own_values() -> None:
    """On the CPU a session's later runs write into its previous run's outputs (one output's worth of memory): each
    run still returns its own values, an output that is also an input is its own copy, an initializer output stays
    itself, and a dynamic output whose shape changes gets new buffers."""
    constant = np.array([5.0, 6.0, 7.0], np.float32)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "aliases",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [3]),
        ],
        [onnx.numpy_helper.from_array(constant, "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    session = create_session(model, "cpu")
    feeds = [np.array([1.0, -2.0, 3.0], np.float32), np.array([-4.0, 5.0, -6.0], np.float32)]
    first, second = (run_once(session, {"x": x}) for x in feeds)
    session.time({"x": feeds[0]}, warmup=1, iterations=2)
    longer = np.arange(-3.0, 4.0, dtype=np.float32)
    for x, got in ((feeds[0], first), (feeds[1], second), (longer, run_once(session, {"x": longer}))):
        np.testing.assert_array_equal(got["y"], np.maximum(x, 0))
        np.testing.assert_array_equal(got["x"], x)
        np.testing.assert_array_equal(got["c"], constant)
