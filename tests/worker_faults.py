"""Faults injected into ampconfig's ONNX Runtime worker from the tests (``tests/faults/sitecustomize.py``), and the
real ``ampconfig`` console script, for tests that need a process of its own (a forked worker, a signal)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from ampconfig.worker import client as worker

FAULTS = Path(__file__).parent / "faults"


#: How the console script's worker starts: forked at start-up (Linux) or spawned (macOS, Windows, a user's BLAS thread
#: count; ``AMPCONFIG_WORKER_START=spawn`` forces it on Linux).
WORKER_STARTS = ("fork", "spawn")


def fault_environment(
    fault: str | None,
    *,
    marker: Path | None = None,
    tmpdir: Path | None = None,
    start: str = "fork",
    deadline_s: float | None = None,
) -> dict[str, str]:
    """``os.environ`` with the fault module first on ``PYTHONPATH`` and ``fault`` in ``AMPCONFIG_FAULT`` (None: no
    fault), a pause's ``marker`` file, ``TMPDIR``, the worker's ``start`` and its deadline."""
    environment = dict(os.environ)
    for name in ("AMPCONFIG_FAULT", "AMPCONFIG_WORKER_START", "AMPCONFIG_WORKER_DEADLINE", "AMPCONFIG_WORKER_IDLE"):
        environment.pop(name, None)
    if start == "spawn":
        environment["AMPCONFIG_WORKER_START"] = "spawn"
    if deadline_s is not None:
        environment["AMPCONFIG_WORKER_DEADLINE"] = str(deadline_s)
    if fault is not None:
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAULTS), environment.get("PYTHONPATH")]))
        environment["AMPCONFIG_FAULT"] = fault
    if marker is not None:
        environment["AMPCONFIG_FAULT_MARKER"] = str(marker)
    if tmpdir is not None:
        environment["TMPDIR"] = str(tmpdir)
    return environment


@pytest.fixture
def fresh_worker() -> Iterator[None]:
    """This process's worker ended before the test (the next request spawns one with the test's environment) and
    after it (a faulty worker does not outlive the test)."""
    worker.shutdown()
    yield
    worker.shutdown()


@pytest.fixture(params=[pytest.param(start, marks=pytest.mark.worker_start) for start in WORKER_STARTS])
def worker_start(request: pytest.FixtureRequest) -> str:
    """Each way the console script's worker starts (the test runs once forked, once spawned)."""
    return str(request.param)


def process_gone(pid: int) -> bool:
    """Whether no process has ``pid`` (ended and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def worker_folders(folder: Path) -> list[Path]:
    return sorted(folder.glob("ampconfig-worker-*"))


def wait_for_file(marker: Path, process: subprocess.Popen[bytes], seconds: float = 120) -> None:
    """Until ``marker`` exists (a fault paused there), failing with the process's stderr if it ended first."""
    deadline = time.monotonic() + seconds
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if not marker.exists():
        if process.poll() is None:
            process.kill()
        raise AssertionError(process.communicate()[1].decode())


def wait_until_gone(folder: Path, seconds: float = 60) -> list[Path]:
    """The worker folders left in ``folder`` once none is left or ``seconds`` passed (a hang guard, not a speed bar)."""
    deadline = time.monotonic() + seconds
    while worker_folders(folder) and time.monotonic() < deadline:
        time.sleep(0.05)
    return worker_folders(folder)


def inject(monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """The next worker this process spawns runs with ``fault`` (use with :func:`fresh_worker`)."""
    for name, value in fault_environment(fault).items():
        if os.environ.get(name) != value:
            monkeypatch.setenv(name, value)


def console_script() -> str:
    """The installed ``ampconfig`` script beside this interpreter (what a user runs), or the one on PATH."""
    beside = Path(sys.executable).parent / "ampconfig"
    found = str(beside) if beside.exists() else shutil.which("ampconfig")
    assert found, "the ampconfig console script is not installed"
    return found


def run_console(
    args: list[str], *, cwd: Path, environment: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [console_script(), *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def aborting_model(path: Path) -> Path:
    """A float32 model on which ONNX Runtime aborts when it runs: RandomNormalLike with scale 0 fails a C++ standard
    library assertion (the checker accepts it, and ONNX Runtime loads it)."""
    graph = helper.make_graph(
        [
            helper.make_node("RandomNormalLike", ["x"], ["noise"], name="noise", scale=0.0),
            helper.make_node("Add", ["x", "noise"], ["sum"], name="add"),
            helper.make_node("MatMul", ["sum", "w"], ["y"], name="mm"),
        ],
        "aborts",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.5] * 16)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    onnx.save_model(model, path)
    return path


def left_behind(folder: Path) -> list[Path]:
    """What is left in ``folder`` (a test's temporary folder) once this process's worker has ended: a live worker
    keeps its own folder there until then, and must remove it when it ends."""
    worker.shutdown()
    return sorted(folder.iterdir())


def transpose_model() -> onnx.ModelProto:
    """x [1, 8, 8] -> Transpose -> MatMul -> Relu -> y: force_fp16 for the CPU lowers all three, so the fault
    ``lowered:Transpose`` (ONNX Runtime crashing on a float16 Transpose, as its layout optimisation does on some
    real models) hits the rewrite and not the input."""
    graph = helper.make_graph(
        [
            helper.make_node("Transpose", ["x"], ["t"], name="transpose", perm=[0, 2, 1]),
            helper.make_node("MatMul", ["t", "w"], ["m"], name="matmul"),
            helper.make_node("Relu", ["m"], ["y"], name="relu"),
        ],
        "transposes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, [8, 8], [0.125 * (i % 7) for i in range(64)])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    return model


def transpose_model_file(folder: Path) -> Path:
    """:func:`transpose_model` saved in ``folder``."""
    path = folder / "transposes.onnx"
    onnx.save_model(transpose_model(), path)
    return path


def reads_float32(model: onnx.ModelProto, op_type: str) -> bool:
    """Whether the ``op_type`` node of ``model`` reads float32: a Cast to float32 feeds it, or the graph's float32
    input does."""
    node = next(node for node in model.graph.node if node.op_type == op_type)
    producer = {output: each for each in model.graph.node for output in each.output}.get(node.input[0])
    if producer is None:
        return any(
            i.name == node.input[0] and i.type.tensor_type.elem_type == TensorProto.FLOAT for i in model.graph.input
        )
    return producer.op_type == "Cast" and producer.attribute[0].i == TensorProto.FLOAT
