"""ampconfig's side of its ONNX Runtime worker: the one process that builds and runs every session of a user's model.

ONNX Runtime is C++: a crash inside it (a segfault in its optimiser, an abort in a kernel) kills the process that
called it. So every session of a user's model, or of a copy made from it, lives in a worker process
(:mod:`ampconfig.runner.ort_worker`) that owns the sessions for the command's life; this process decides, writes
and reports, and outlives it. A worker that dies while it answers is :class:`WorkerCrashed`, an
:class:`~ampconfig.errors.AmpconfigError` naming the model, the phase (load or run) and how it died: callers turn it
into an outcome (exit 2 for the fp32 model, the safety net for the rewritten one, a fallback for a measuring
copy), never a dead ``ampconfig``. The next request starts a new worker.

How a worker starts:

- **forked** by the command line at start-up (:func:`prestart`), before any heavy import and before anything
  started a thread (ONNX Runtime's import starts one; a fork of a threaded process may deadlock in the child).
  No second interpreter: the child imports what sessions need while this process imports the command's modules;
- **spawned** as a fresh interpreter everywhere else (the API, whose caller may hold threads or a CUDA context;
  tests that run the command line in-process; a replacement after a crash; platforms without fork). It runs
  ampconfig's own entry point, never the caller's ``__main__``, with an import path that leaves out the working
  folder (``-P`` where Python has it; the empty entry removed otherwise) and holds the package's own root.

Signals: the worker ignores Ctrl-C; the user's interrupt is this process's, which ends the worker. A worker that
dies while this process received an ending signal died of that signal, not of a crash
(:func:`ampconfig.files.interrupts.received_signal`). A request cut short by an exception (Ctrl-C while the worker
computes) leaves the conversation in an unknown state: that worker is killed, and the next request starts a new one.

Each worker gets a private temporary folder (its ``TMPDIR``: what ONNX Runtime leaves there, and the worker's
standard error, whose last line goes into a crash message); it is removed when the worker ends, whatever it died of.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

from ampconfig.errors import AmpconfigError, printable
from ampconfig.files.interrupts import Terminated, received_signal
from ampconfig.runner.channel import Channel, pipe

log = logging.getLogger(__name__)

#: ``progress(label, done, total)``, as :mod:`ampconfig.runner.timing` calls it.
Progress = Callable[[str, int, int], None]

_STDERR = "stderr.txt"
#: How long a worker whose channel was closed may take to end before it is killed.
_END_WAIT_S = 5.0
#: Linux's prctl option that sends a signal to a process when its parent thread ends.
_PR_SET_PDEATHSIG = 1


class Phase(str, Enum):
    LOAD = "load"
    RUN = "run"


_WHILE = {Phase.LOAD: "loading", Phase.RUN: "running"}


class WorkerCrashed(AmpconfigError):
    """The worker died while it loaded or ran a model: ``death`` says how ("killed by SIGSEGV", or an exit status),
    ``phase`` when, ``what`` which model ("the fp32 model")."""

    def __init__(self, death: str, phase: Phase, what: str) -> None:
        super().__init__(
            f"ONNX Runtime crashed ({death}) while {_WHILE[phase]} {what}",
            hint="a crash inside ONNX Runtime is not something the model's settings cause; check the model with "
            "onnxruntime.InferenceSession, and try another onnxruntime version or --device",
        )
        self.death = death
        self.phase = phase
        self.what = what
        self.sample = 0  # the sample it ran, when the caller runs several

    @property
    def phase_words(self) -> str:
        """ "loading" or "running"."""
        return _WHILE[self.phase]


class WorkerRefused(Exception):
    """ONNX Runtime raised an exception in the worker (it refused a model or its inputs): its words, and ``kind``,
    the name of its exception class (``NotImplemented``: no kernel for a node; ``InvalidGraph``, ``Fail``, ...)."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


class WorkerProcess:
    """One live worker: its channel, its process, its folder. Requests go one at a time (a lock)."""

    def __init__(self, pid: int, channel: Channel, folder: Path, popen: subprocess.Popen[bytes] | None) -> None:
        self.pid = pid
        self.channel = channel
        self.folder = folder
        self.popen = popen
        self.owner = os.getpid()  # a forked copy of this process must not talk to this process's worker
        self.alive = True
        self._released: list[int] = []
        self._lock = threading.Lock()

    @property
    def how(self) -> str:
        return "spawned" if self.popen is not None else "forked"

    def release(self, number: int) -> None:
        """The session ``number`` is no longer held here: the worker frees it before its next request. (Called
        from ``__del__``: it only records, so it never waits for the lock a request holds.)"""
        self._released.append(number)

    def ask(
        self, verb: str, arguments: dict[str, Any], phase: Phase, what: str, progress: Progress | None = None
    ) -> Any:
        """The worker's answer to one request. ``phase`` and ``what`` name the request in a crash message."""
        with self._lock:
            if not self.alive:
                raise WorkerCrashed("it had ended before", phase, what)
            released, self._released = self._released, []
            try:
                self.channel.send((verb, arguments, released))
                while True:
                    message = self.channel.recv()
                    if message[0] != "progress":
                        break
                    if progress is not None:
                        progress(*message[1:])
            except (EOFError, OSError):
                death = self._died()
                if (signum := received_signal()) is not None:
                    raise Terminated(signum) from None  # this process's signal ended the worker too
                raise WorkerCrashed(death, phase, what) from None
            except BaseException:
                self.end(kill=True)  # the conversation stopped half-way: this worker is of no further use
                raise
        if message[0] == "error":
            raise WorkerRefused(message[1], message[2])
        return message[1]

    def end(self, kill: bool = False) -> None:
        """End the worker (closing its channel ends it; ``kill``, or one that does not end, is killed) and remove
        its folder."""
        if not self.alive:
            return
        self.alive = False
        self.channel.close()
        if kill:
            self._kill()
        self._wait(_END_WAIT_S)
        shutil.rmtree(self.folder, ignore_errors=True)

    def _died(self) -> str:
        """The worker's channel broke: wait for its end and say how it died (its signal, or its exit status and last
        line of standard error)."""
        self.alive = False
        self.channel.close()
        code = self._wait(_END_WAIT_S)
        last = _last_line(self.folder / _STDERR)
        shutil.rmtree(self.folder, ignore_errors=True)
        said = f'; it said "{last}"' if last else ""
        if code is None:
            return "its channel closed" + said
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"killed by {name}{said}"
        return f"exited with status {code}{said}"

    def _kill(self) -> None:
        if self.popen is not None:
            self.popen.kill()  # TerminateProcess where there are no signals
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def _wait(self, seconds: float) -> int | None:
        """The worker's exit code (negative: the signal that ended it), killing it after ``seconds``."""
        if self.popen is not None:
            try:
                return self.popen.wait(seconds)
            except subprocess.TimeoutExpired:
                self._kill()
                return self.popen.wait()
        deadline = time.monotonic() + seconds
        while True:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: nothing left to tell
                return None
            if pid:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() > deadline:
                self._kill()
                deadline = math.inf
            time.sleep(0.005)


#: How much of the worker's last line of standard error a crash message quotes (its end: an assertion's words).
_QUOTED = 160


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as stream:
            stream.seek(0, os.SEEK_END)
            stream.seek(max(0, stream.tell() - 4096))
            lines = stream.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return ""
    last = printable(lines[-1].strip()) if lines else ""
    return last if len(last) <= _QUOTED else "..." + last[-_QUOTED:]


_lock = threading.Lock()
_current: WorkerProcess | None = None


def current() -> WorkerProcess:
    """The live worker of this process, started (spawned) when there is none."""
    global _current
    with _lock:
        if _current is None or not _current.alive or _current.owner != os.getpid():
            _current = spawn()
        return _current


def log_sessions() -> None:
    """Log (info) how many sessions this process's worker built, if it has a live one."""
    worker = _current
    if worker is None or not worker.alive or worker.owner != os.getpid() or not log.isEnabledFor(logging.INFO):
        return
    with contextlib.suppress(AmpconfigError):
        counts = worker.ask("count", {}, Phase.RUN, "the worker's count")
        log.info("ONNX Runtime worker (%s, pid %d): %d session(s) built", worker.how, worker.pid, counts["built"])


def shutdown() -> None:
    """End this process's worker, if it has one (the next request starts a new one)."""
    global _current
    with _lock:
        worker, _current = _current, None
    if worker is not None and worker.owner == os.getpid():
        worker.end()


atexit.register(shutdown)


def _private_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="ampconfig-worker-"))


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def prestart() -> bool:
    """Fork the worker now, if this process may (Linux, one thread, no worker yet): the command line's start-up,
    before its imports. True when it did."""
    global _current
    if not sys.platform.startswith("linux") or _current is not None or _thread_count() != 1:
        return False
    folder = _private_folder()
    to_worker = pipe()
    from_worker = pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the worker
        code = 0
        try:
            os.close(to_worker[1])
            os.close(from_worker[0])
            _settle_forked_child(folder, parent)
            from ampconfig.runner.ort_worker import become_worker

            become_worker(to_worker[0], from_worker[1])
        except BaseException:  # noqa: BLE001 (whatever ends the worker: the main process reads why)
            import traceback

            traceback.print_exc()  # into the folder's stderr file: the main process says its last line
            code = 1
        finally:
            os._exit(code)
    os.close(to_worker[0])
    os.close(from_worker[1])
    _current = WorkerProcess(pid, Channel(from_worker[0], to_worker[1]), folder, None)
    log.debug("forked the ONNX Runtime worker (pid %d)", pid)
    return True


def _settle_forked_child(folder: Path, parent: int) -> None:
    """The forked worker's process state: no terminal streams, its own temporary folder, the default ending
    signals (the command line's handlers are the main process's), and death with the main process."""
    null = os.open(os.devnull, os.O_RDWR)
    errors = os.open(folder / _STDERR, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(errors, 2)
    os.close(null)
    os.close(errors)
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None
    # ``python -m ampconfig`` put the working folder first on the path: the worker imports nothing from it
    # (ampconfig's own modules are found through the package, already imported)
    working = os.getcwd()
    sys.path[:] = [entry for entry in sys.path if entry not in ("", ".", working)]
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # no prctl: the worker still ends when its channel closes
        pass
    if os.getppid() != parent:  # the main process died before the line above: end now
        os._exit(0)


#: The spawned worker's first lines: the working folder off the import path (Python 3.10 has no ``-P``), the
#: package's own root on it where the import system would not find this very ampconfig, then the worker.
_BOOT = """\
import importlib.util, sys
root, init = sys.argv[1], sys.argv[2]
while "" in sys.path:
    sys.path.remove("")
spec = importlib.util.find_spec("ampconfig")
if spec is None or spec.origin != init:
    sys.path.insert(0, root)
from ampconfig.runner.ort_worker import main
main()
"""


def spawn() -> WorkerProcess:
    """A worker in a fresh interpreter; its channel is its standard input and output."""
    # The package this module belongs to (its __init__ and the folder above it), named without importing it.
    package = Path(__file__).resolve().parent.parent
    init = str(package / "__init__.py")
    root = str(package.parent)
    folder = _private_folder()
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    to_worker = pipe()
    from_worker = pipe()
    try:
        with open(folder / _STDERR, "wb") as errors:
            popen = subprocess.Popen(
                [sys.executable, *safe_path, "-c", _BOOT, root, init],
                stdin=to_worker[0],
                stdout=from_worker[1],
                stderr=errors,
                env={**os.environ, "TMPDIR": str(folder)},
                close_fds=True,
            )
    except OSError as exc:  # no interpreter to start (an embedded Python), no processes left
        for end in (*to_worker, *from_worker):
            os.close(end)
        shutil.rmtree(folder, ignore_errors=True)
        raise AmpconfigError(
            f"could not start ONNX Runtime's worker process ({sys.executable or 'no Python executable'}): {exc}",
            hint="ampconfig runs ONNX Runtime in a process of its own; check that this Python can start processes",
        ) from None
    os.close(to_worker[0])
    os.close(from_worker[1])
    log.debug("started the ONNX Runtime worker in a new interpreter (pid %d)", popen.pid)
    return WorkerProcess(popen.pid, Channel(from_worker[0], to_worker[1]), folder, popen)
