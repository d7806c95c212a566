"""worker.client and worker.server: every ONNX Runtime session of a user's model lives in one worker process
that ampconfig outlives. Real sessions, real crashes (injected from the tests: ``tests/faults/sitecustomize.py``),
real signals, the real console script."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ampconfig.errors import AmpconfigError
from ampconfig.runner.sessions import LOAD_FAILED, create_session, run_once
from ampconfig.worker import client as worker
from ampconfig.worker.channel import Channel, large_bytes
from ampconfig.worker.client import Phase, WorkerCrashed
from tests.fresh_process import as_a_terminal_job
from tests.worker_faults import (
    aborting_model,
    console_script,
    fault_environment,
    fresh_worker,
    inject,
    process_gone,
    run_console,
    wait_for_file,
    wait_until_gone,
    worker_folders,
    worker_start,
)

__all__ = ["fresh_worker", "worker_start"]  # the fixtures, used by name


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
        preexec_fn=as_a_terminal_job,
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


#: Import steps of the console script's start-up, in order: the entry's own first import (the package's
#: ``__init__`` imports nothing, so this is the first step of ampconfig's code), typing (which the package's
#: ``__init__`` imported before the entry's handler existed: a traceback until issue 43), and the command line's.
START_UP_IMPORTS = ("collections.abc", "typing", "typer")


@pytest.mark.parametrize("module", START_UP_IMPORTS)
def test_ctrl_c_during_start_up_is_a_quiet_exit_130(tmp_path: Path, module: str) -> None:
    """Ctrl-C while the console script imports ``module`` (a fault pauses there): no KeyboardInterrupt traceback,
    exit 130 as at every later moment."""
    marker = tmp_path / "importing"
    process = subprocess.Popen(
        [console_script(), "validate", "--help"],
        env=fault_environment(f"import:pause:{module}", marker=marker),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=as_a_terminal_job,
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


def _run_command(temporary: Path, cwd: Path, environment: dict[str, str]) -> subprocess.Popen[bytes]:
    """``ampconfig run`` on the bundled example, in a process group of its own, its worker's folder in ``temporary``."""
    return subprocess.Popen(
        [console_script(), "run", "-m", "force_fp16", "--no-range-check", "--warmup", "1", "--iterations", "1"],
        cwd=cwd,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def test_a_stopped_worker_ends_the_command_with_exit_2_once_the_deadline_passes(
    tmp_path: Path, worker_start: str
) -> None:
    """SIGSTOP the worker while it runs a model: on main the command waited with no limit."""
    temporary, marker = tmp_path / "tmp", tmp_path / "paused"
    temporary.mkdir()
    environment = fault_environment("run:pause:any", marker=marker, tmpdir=temporary, start=worker_start, deadline_s=3)
    process = _run_command(temporary, tmp_path, environment)
    try:
        wait_for_file(marker, process)
        worker_pid = int(marker.read_text())
        os.kill(worker_pid, signal.SIGSTOP)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    words = stderr.decode()
    assert process.returncode == 2, words
    assert re.search(
        r"ONNX Runtime's worker stopped responding while running the \w+ model \(no sign of life for 3 s\)", words
    ), words
    assert "Traceback" not in words
    assert wait_until_gone(temporary) == []
    assert process_gone(worker_pid)


def test_a_killed_command_leaves_no_worker_folder(tmp_path: Path, worker_start: str) -> None:
    """SIGKILL of ``ampconfig`` (what the out-of-memory killer sends) while its worker computes: the worker removes
    its own folder. On main the folder stayed (14 of 73 signal trials)."""
    temporary, marker = tmp_path / "tmp", tmp_path / "paused"
    temporary.mkdir()
    process = _run_command(
        temporary, tmp_path, fault_environment("run:pause:any", marker=marker, tmpdir=temporary, start=worker_start)
    )
    try:
        wait_for_file(marker, process)
        worker_pid = int(marker.read_text())
        assert len(worker_folders(temporary)) == 1
        process.kill()
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert wait_until_gone(temporary) == []
    deadline = time.monotonic() + 60
    while not process_gone(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_gone(worker_pid)


def test_sigterm_before_the_command_lines_handlers_exist_leaves_no_worker_folder(tmp_path: Path) -> None:
    """SIGTERM while the forked worker exists but the command line's handlers do not yet (paused as typer is
    imported): the process ends by the signal, and its worker, finding its channel closed, removes its folder. On
    main the folder stayed."""
    temporary, marker = tmp_path / "tmp", tmp_path / "importing"
    temporary.mkdir()
    process = _run_command(
        temporary, tmp_path, fault_environment("import:pause:typer", marker=marker, tmpdir=temporary)
    )
    try:
        wait_for_file(marker, process)
        assert len(worker_folders(temporary)) == 1  # the worker was forked before the pause
        process.terminate()
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGTERM
    assert wait_until_gone(temporary) == []


def test_folders_of_gone_owners_are_swept_when_a_worker_starts(
    fresh_worker: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What neither process could remove (both killed at once) goes at the next start; a live owner's stays."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(worker.tempfile, "tempdir", None)
    gone = subprocess.Popen(["true"])  # a pid whose process has ended
    gone.wait()
    orphan = tmp_path / f"ampconfig-worker-{gone.pid}-abcd"
    (orphan / "onnxruntime-leftover").mkdir(parents=True)
    live = tmp_path / f"ampconfig-worker-{os.getpid()}-efgh"
    live.mkdir()
    strange = tmp_path / "ampconfig-worker-notapid"
    strange.mkdir()
    run_once(create_session(_relu(), "cpu"), X)
    folders = {path.name for path in worker_folders(tmp_path)}
    assert orphan.name not in folders
    assert {live.name, strange.name, worker.current().folder.name} <= folders


POOL_SCRIPT = """\
import multiprocessing, sys
import ampconfig

def calibrate(index):
    ampconfig.calibrate_model(sys.argv[1], f"{sys.argv[2]}/ranges-{index}.json")
    return index

if __name__ == "__main__":
    calibrate("parent")  # the parent's worker exists when the pool forks
    with multiprocessing.get_context("fork").Pool(2) as pool:
        print(pool.map(calibrate, range(4)))
"""


def test_an_api_call_from_a_fork_pool_gets_its_own_worker_and_leaves_no_folder(tmp_path: Path) -> None:
    """Each pool process gets a worker of its own (not its parent's), and ends without removing it: the worker,
    finding its channel closed, removes its folder. On main one folder was left per pool process."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    model = tmp_path / "relu.onnx"
    onnx.save_model(_relu(), model)
    done = subprocess.run(
        [sys.executable, "-c", POOL_SCRIPT, str(model), str(tmp_path)],
        env=fault_environment(None, tmpdir=temporary),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 1, 2, 3]"
    assert len(list(tmp_path.glob("ranges-*.json"))) == 5
    assert wait_until_gone(temporary) == []


def test_a_worker_killed_by_sigkill_is_said_to_be_short_of_memory(
    fresh_worker: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not "ONNX Runtime crashed", as on main: SIGKILL almost always comes from the out-of-memory killer."""
    marker = tmp_path / "paused"
    inject(monkeypatch, "run:pause:any")
    monkeypatch.setenv("AMPCONFIG_FAULT_MARKER", str(marker))
    session = create_session(_relu(), "cpu", what="the relu model")

    def kill_when_paused() -> None:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.5)  # a heartbeat or two, with the worker's peak memory
        os.kill(int(marker.read_text()), signal.SIGKILL)

    killer = threading.Thread(target=kill_when_paused)
    killer.start()
    with pytest.raises(WorkerCrashed) as crashed:
        run_once(session, X)
    killer.join()
    message = crashed.value.message
    assert re.fullmatch(
        r"ONNX Runtime's worker was killed by SIGKILL, most likely for want of memory \(its peak memory: "
        r"\d+\.\d (MiB|GiB) as it last reported\) while running the relu model",
        message,
    ), message
    assert "out-of-memory killer" in (crashed.value.hint or "")


def test_a_printing_sitecustomize_hangs_nothing_in_the_api(tmp_path: Path) -> None:
    """On main the spawned worker's channel was its stdout: the printed line became a frame's sizes and the API
    waited for good (killed here after 120 s)."""
    model = tmp_path / "relu.onnx"
    onnx.save_model(_relu(), model)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import ampconfig, sys; ampconfig.calibrate_model(sys.argv[1], sys.argv[2])",
            str(model),
            str(tmp_path / "ranges.json"),
        ],
        env=fault_environment("start:print:any", tmpdir=tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "sitecustomize says hello\n"  # this process's own line; the worker's went nowhere
    assert (tmp_path / "ranges.json").exists()


def test_a_printing_sitecustomize_hangs_nothing_in_a_spawned_run(tmp_path: Path) -> None:
    """The user's own BLAS thread count forces a spawned worker (OPENBLAS_NUM_THREADS=2): on main it hung."""
    environment = fault_environment("start:print:any", tmpdir=tmp_path)
    environment["OPENBLAS_NUM_THREADS"] = "2"
    done = run_console(
        ["-vv", "run", "-m", "force_fp16", "--warmup", "1", "--iterations", "1"],
        cwd=tmp_path,
        environment=environment,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert "started the ONNX Runtime worker in a new interpreter" in done.stderr
    assert done.stdout.startswith("sitecustomize says hello\n")


def test_the_worker_ends_when_idle_with_no_session_held(fresh_worker: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMPCONFIG_WORKER_IDLE", "0.5")
    session = create_session(_relu(), "cpu")
    run_once(session, X)
    process = worker.current()
    time.sleep(1.5)
    assert process.alive  # a session is held: the worker stays
    del session
    deadline = time.monotonic() + 30
    while not process_gone(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_gone(process.pid) and not process.alive
    assert not process.folder.exists()


def test_the_console_script_starts_its_worker_either_way_and_leaves_nothing(tmp_path: Path, worker_start: str) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    done = run_console(
        ["-vv", "run", "-m", "force_fp16", "--no-range-check", "--warmup", "1", "--iterations", "1"],
        cwd=tmp_path,
        environment=fault_environment(None, tmpdir=temporary, start=worker_start),
    )
    assert done.returncode == 0, done.stderr
    how = "forked" if worker_start == "fork" else "spawned"
    assert re.search(rf"ONNX Runtime worker \({how}, pid \d+\): 3 session\(s\) built", done.stderr), done.stderr
    assert list(temporary.iterdir()) == []


def test_a_crash_in_the_console_scripts_worker_is_located_either_way(tmp_path: Path, worker_start: str) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    model = aborting_model(tmp_path / "aborts.onnx")
    done = run_console(
        ["run", str(model), "-m", "force_fp16", "--warmup", "1", "--iterations", "1"],
        cwd=tmp_path,
        environment=fault_environment(None, tmpdir=temporary, start=worker_start),
    )
    assert done.returncode == 2, done.stderr
    assert "ONNX Runtime crashed (killed by SIGABRT" in done.stderr and "Traceback" not in done.stderr
    assert list(temporary.iterdir()) == []


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf"])
def test_a_deadline_that_is_not_a_number_of_seconds_is_a_located_error(
    fresh_worker: None, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AMPCONFIG_WORKER_DEADLINE", value)
    with pytest.raises(AmpconfigError) as refused:
        create_session(_relu(), "cpu")
    assert refused.value.message == f"AMPCONFIG_WORKER_DEADLINE={value!r} is not a number of seconds"


def test_a_released_session_is_freed_at_once_not_at_the_next_request(fresh_worker: None) -> None:
    """On main a dropped session waited in the list the next request carried (its weights held until then)."""
    session = create_session(_relu(), "cpu")
    process = worker.current()
    del session
    assert process._released == []  # nothing waits for a next request: the release went when the session was dropped
    assert _counts() == {"built": 1, "open": 0}


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
