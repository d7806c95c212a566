"""Models loaded and run once in a child process first, so that a native crash of ONNX Runtime (a segfault while
it optimises or runs a graph) ends in a message instead of a dead ``ampconfig``.

ONNX Runtime is C++: a crash inside it kills the Python process that called it, with no exception to catch. So
before ``run`` builds its sessions, one child interpreter (``python -m ampconfig.runner.crash_guard``) builds each
model's session exactly as :func:`ampconfig.runner.sessions.create_session` does and runs it once on the first
sample, model after model, writing a line to a status file before each phase. A child that dies by a signal left
the model and the phase (load or run) it was in as its last line. One child checks every model of a request:
one interpreter start-up, not one per model; later runs (timing, further samples) stay in-process.

The guard reports ONNX Runtime's refusals too (a Python exception in the child), so that a caller can tell a
model that crashes from one that is refused; what to do about either is the caller's (``ampconfig.prove``).

``AMPCONFIG_TEST_NATIVE_CRASH`` (tests only) makes the child crash on purpose with a null pointer read:
``load`` or ``run`` crashes every model in that phase, ``load:Op:dtype`` only a model with an ``Op`` node whose
first input has element type ``dtype`` (a rewrite that lowered that op). It stands in for ONNX Runtime's own
crashes, which no small model reproduces reliably.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from ampconfig.errors import AmpconfigError

#: Tests only: crash the child on purpose (see the module docstring).
TEST_CRASH_VARIABLE = "AMPCONFIG_TEST_NATIVE_CRASH"


class Phase(str, Enum):
    LOAD = "load"
    RUN = "run"


class Outcome(str, Enum):
    OK = "ok"
    REFUSED = "refused"  # ONNX Runtime raised an exception (a Python error: the process lives on)
    CRASHED = "crashed"  # the child died (a signal, or an exit without a word)


@dataclass(frozen=True)
class GuardedModel:
    """A model to check: a label for messages, its file, and the feeds of its first sample (its input dtypes)."""

    label: str
    path: Path
    feeds: Mapping[str, np.ndarray] | None
    tf32: bool = False  # as the in-process session will have it (CUDA only)


@dataclass(frozen=True)
class ModelCheck:
    """What happened to one model in the child: ``phase`` is where it failed (None when it ran)."""

    label: str
    outcome: Outcome
    phase: Phase | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK


def check_in_child(models: Sequence[GuardedModel], device: str) -> list[ModelCheck]:
    """Load and run each model once, in order, in one child process on ``device``. Returns one check per model up
    to the first crash (a crash ends the child: the models after it are not checked and get no entry)."""
    with tempfile.TemporaryDirectory(prefix="ampconfig-guard-") as folder:
        plan = Path(folder) / "plan.pickle"
        status = Path(folder) / "status.jsonl"
        entries = []
        for index, model in enumerate(models):
            feeds_path = None
            if model.feeds is not None:
                feeds_path = str(Path(folder) / f"feeds{index}.pickle")
                with open(feeds_path, "wb") as stream:
                    pickle.dump({name: np.ascontiguousarray(a) for name, a in model.feeds.items()}, stream)
            entries.append({"path": str(model.path), "feeds": feeds_path, "tf32": model.tf32})
        with open(plan, "wb") as stream:
            pickle.dump({"device": device, "models": entries}, stream)
        done = subprocess.run(
            [sys.executable, "-m", "ampconfig.runner.crash_guard", str(plan), str(status)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            check=False,
            # What the child leaves in its temporary folder goes with this one (importing onnxruntime-gpu writes
            # a .ses file there).
            env={**os.environ, "TMPDIR": folder},
        )
        lines = status.read_text(encoding="utf-8").splitlines() if status.is_file() else []
    return _read_status(lines, models, done.returncode, done.stderr.decode("utf-8", "replace"))


def _read_status(lines: list[str], models: Sequence[GuardedModel], returncode: int, stderr: str) -> list[ModelCheck]:
    checks: list[ModelCheck] = []
    started: tuple[int, Phase] | None = None
    for line in lines:
        record = json.loads(line)
        if record["event"] == "begin":
            started = (record["index"], Phase(record["phase"]))
        else:
            phase = Phase(record["phase"]) if record["phase"] else None
            label = models[record["index"]].label
            checks.append(ModelCheck(label, Outcome(record["outcome"]), phase, record["message"]))
            started = None
    if returncode != 0 and started is not None:
        index, phase = started
        checks.append(ModelCheck(models[index].label, Outcome.CRASHED, phase, _death(returncode, stderr)))
    elif returncode != 0:  # died before its first model (it could not start): say so rather than guess
        raise AmpconfigError(
            f"the child process that checks models for ONNX Runtime crashes failed before its first model: "
            f"{_death(returncode, stderr)}",
            hint=f"check that {sys.executable} -m ampconfig.runner.crash_guard can start (same environment)",
        )
    return checks


def _death(returncode: int, stderr: str) -> str:
    """How the child died, in words: its signal's name (SIGSEGV), or its exit status and last line of stderr."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    last = stderr.strip().splitlines()[-1:] or [""]
    return f"exited with status {returncode}" + (f": {last[0][:300]}" if last[0] else "")


# ------------------------------------------------------------------------------------------------ the child


def _crash_on_purpose(phase: Phase, path: str) -> None:
    """The test hook (``AMPCONFIG_TEST_NATIVE_CRASH``): a real native crash, a read through a null pointer."""
    wanted = os.environ.get(TEST_CRASH_VARIABLE, "")
    if not wanted:
        return
    spec = wanted.split(":")
    if spec[0] != phase.value:
        return
    if len(spec) == 3 and not _has_node_in(path, spec[1], spec[2]):
        return
    import ctypes

    ctypes.string_at(0)  # SIGSEGV


def _has_node_in(path: str, op_type: str, dtype: str) -> bool:
    import onnx

    from ampconfig.dtypes import Dtype

    model = onnx.shape_inference.infer_shapes(onnx.load(path, load_external_data=False))
    graph = model.graph
    elems = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.value_info, *graph.output)}
    elems.update({t.name: t.data_type for t in graph.initializer})
    elem = Dtype(dtype).elem_type
    return any(node.op_type == op_type and node.input and elems.get(node.input[0]) == elem for node in graph.node)


def _child(plan_path: str, status_path: str) -> None:
    from ampconfig.runner.sessions import create_session, run_once

    with open(plan_path, "rb") as stream:
        plan = pickle.load(stream)
    with open(status_path, "a", encoding="utf-8") as status:

        def say(**record: object) -> None:
            status.write(json.dumps(record) + "\n")
            status.flush()
            os.fsync(status.fileno())  # the parent reads it after this process has died

        for index, entry in enumerate(plan["models"]):
            say(event="begin", index=index, phase=Phase.LOAD.value)
            _crash_on_purpose(Phase.LOAD, entry["path"])
            try:
                session = create_session(Path(entry["path"]), plan["device"], tf32=entry["tf32"])
            except Exception as exc:
                message = getattr(exc, "message", str(exc))
                say(event="end", index=index, outcome=Outcome.REFUSED.value, phase=Phase.LOAD.value, message=message)
                continue
            if entry["feeds"] is not None:
                say(event="begin", index=index, phase=Phase.RUN.value)
                _crash_on_purpose(Phase.RUN, entry["path"])
                with open(entry["feeds"], "rb") as stream:
                    feeds = pickle.load(stream)
                try:
                    run_once(session, feeds)
                except Exception as exc:
                    message = getattr(exc, "message", str(exc))
                    say(event="end", index=index, outcome=Outcome.REFUSED.value, phase=Phase.RUN.value, message=message)
                    continue
            del session
            say(event="end", index=index, outcome=Outcome.OK.value, phase=None, message="")


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
