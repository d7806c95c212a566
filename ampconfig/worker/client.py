"""ampconfig's side of its ONNX Runtime worker: the one process that builds and runs every session of a user's model.

ONNX Runtime is C++: a crash inside it (a segfault in its optimiser, an abort in a kernel) kills the process that
called it. So every session of a user's model, or of a copy made from it, lives in a worker process
(:mod:`ampconfig.worker.server`) that owns the sessions for the command's life; this process decides, writes
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

Its channel (:mod:`ampconfig.worker.channel`) is a pair of pipes of its own, never a standard stream: what an
interpreter prints at start-up (a ``sitecustomize``, a ``.pth`` file) goes to the null device.
``AMPCONFIG_WORKER_START=spawn`` makes the command line spawn its worker too (what macOS and Windows do; CI runs
the worker's tests both ways).

Liveness: while a request runs, the worker sends a heartbeat every second, with the peak memory it has used. No
byte for :func:`deadline_s` seconds (``AMPCONFIG_WORKER_DEADLINE``, 120 by default; five times that while a session
is built) is :class:`WorkerStopped`: the worker is killed, and the command ends with exit 2 naming the phase. A
worker killed by SIGKILL that this process did not kill is said to be that, with a memory hint and its last peak:
the kernel's out-of-memory killer sends SIGKILL.

Signals: the worker ignores Ctrl-C; the user's interrupt is this process's, which ends the worker. A worker that
dies while this process received an ending signal died of that signal, not of a crash
(:func:`ampconfig.files.interrupts.received_signal`). A request cut short by an exception (Ctrl-C while the worker
computes) leaves the conversation in an unknown state: that worker is killed, and the next request starts a new one.

Each worker gets a private temporary folder (its ``TMPDIR``: what ONNX Runtime leaves there, and the worker's
standard error, whose last line goes into a crash message), named after this process
(``ampconfig-worker-<pid>-...``), with the worker's pid in it. It is removed when the worker ends: by this process,
or by the worker itself when this process goes first (its channel ends, the parent-death signal, SIGTERM or SIGHUP).
What neither could remove (both killed at once) is swept by the next worker's start once both are gone.

A worker with no session held ends after :func:`idle_s` seconds without a request (``AMPCONFIG_WORKER_IDLE``, 60
by default; 0 keeps it); :func:`shutdown` (the API's ``ampconfig.close()``) ends it at once. A process forked from
this one (a ``multiprocessing`` pool) gets a worker of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
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
from enum import Enum
from pathlib import Path
from typing import Any

from ampconfig.errors import AmpconfigError, printable
from ampconfig.files.interrupts import Terminated, received_signal
from ampconfig.worker.channel import Channel, ChannelBroken, ChannelSilent, pipe
from ampconfig.worker.timed import ProgressCallback

log = logging.getLogger(__name__)

#: ``progress(label, done, total)``, as the worker's timed runs call it.
Progress = ProgressCallback

_STDERR = "stderr.txt"
#: The file in a worker's folder that holds the worker's pid (the folder's name holds its parent's).
_PID_FILE = "worker.pid"
FOLDER_PREFIX = "ampconfig-worker-"
#: How long a worker whose channel was closed may take to end before it is killed.
_END_WAIT_S = 5.0
#: Linux's prctl option that sends a signal to a process when its parent thread ends.
_PR_SET_PDEATHSIG = 1
_SIGKILL = getattr(signal, "SIGKILL", 9)

DEADLINE_VARIABLE = "AMPCONFIG_WORKER_DEADLINE"
IDLE_VARIABLE = "AMPCONFIG_WORKER_IDLE"
START_VARIABLE = "AMPCONFIG_WORKER_START"
#: Seconds without a sign of life from a worker that computes before it is declared stopped.
DEFAULT_DEADLINE_S = 120.0
#: Building a session may hold Python's lock in ONNX Runtime's C++ for longer (a large model's protobuf parse).
LOAD_DEADLINE_FACTOR = 5
DEFAULT_IDLE_S = 60.0


class Phase(str, Enum):
    LOAD = "load"
    RUN = "run"


_WHILE = {Phase.LOAD: "loading", Phase.RUN: "running"}


#: How a death by SIGKILL starts: the kernel's out-of-memory killer sends it, ONNX Runtime never does.
KILLED = "killed by SIGKILL"


class WorkerCrashed(AmpconfigError):
    """The worker died while it loaded or ran a model: ``death`` says how ("killed by SIGSEGV", or an exit status),
    ``phase`` when, ``what`` which model ("the fp32 model")."""

    def __init__(self, death: str, phase: Phase, what: str) -> None:
        if death.startswith(KILLED):
            super().__init__(
                f"ONNX Runtime's worker was {death} while {_WHILE[phase]} {what}",
                hint="SIGKILL almost always comes from the system's out-of-memory killer (`dmesg` says so): give the "
                "command more memory, or use smaller inputs (--shape, fewer samples)",
            )
        else:
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


class WorkerStopped(AmpconfigError):
    """The worker gave no sign of life for the deadline while it loaded or ran a model (stopped, or stuck where no
    heartbeat runs); it was killed."""

    def __init__(self, phase: Phase, what: str, seconds: float) -> None:
        super().__init__(
            f"ONNX Runtime's worker stopped responding while {_WHILE[phase]} {what} (no sign of life for "
            f"{seconds:g} s); it was killed",
            hint=f"a worker that computes answers every second; set {DEADLINE_VARIABLE} (seconds) to wait longer",
        )


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
        #: The most memory the worker said it has used (bytes; 0 before its first answer).
        self.peak_bytes = 0
        self._released: list[int] = []
        self._held: set[int] = set()  # the sessions this process holds in the worker
        self._lock = threading.Lock()
        self._ending = threading.Lock()
        self._idle: threading.Timer | None = None

    @property
    def how(self) -> str:
        return "spawned" if self.popen is not None else "forked"

    def release(self, number: int) -> None:
        """The session ``number`` is no longer held here: the worker frees it now, or before its next request when
        one is running. (Called from ``__del__``: it never waits for the lock a request holds.)"""
        if self.owner != os.getpid():  # a forked copy's garbage: the session is its parent's
            return
        self._held.discard(number)
        if not self._lock.acquire(blocking=False):
            self._released.append(number)
            return
        try:
            if self.alive:
                self.channel.send(("release", {}, [number], False), timeout=deadline_s(Phase.RUN))
        except (OSError, ChannelSilent, AmpconfigError):  # a dead or stopped worker: the next request finds out
            pass
        except BaseException:  # a signal's exception, perhaps half-way through the frame: the channel is unusable
            self.end(kill=True)
            raise
        finally:
            self._lock.release()
        with contextlib.suppress(AmpconfigError):  # a bad AMPCONFIG_WORKER_IDLE: said by the next request
            self._arm_idle_end()

    def ask(
        self, verb: str, arguments: dict[str, Any], phase: Phase, what: str, progress: Progress | None = None
    ) -> Any:
        """The worker's answer to one request. ``phase`` and ``what`` name the request in a crash message."""
        seconds = deadline_s(phase)
        with self._lock:
            if not self.alive:
                raise WorkerCrashed("it had ended before", phase, what)
            self._disarm_idle_end()
            released, self._released = self._released, []
            try:
                self.channel.send((verb, arguments, released, progress is not None), seconds)
                while True:
                    message = self.channel.recv(seconds)
                    if message[0] == "alive":
                        self.peak_bytes = message[1]
                    elif message[0] == "progress":
                        if progress is not None:
                            progress(*message[1:])
                    else:
                        break
            except ChannelSilent:
                self.end(kill=True)
                raise WorkerStopped(phase, what, seconds) from None
            except ChannelBroken:
                self.end(kill=True)
                raise
            except (EOFError, OSError):
                death = self._died()
                if (signum := received_signal()) is not None:
                    raise Terminated(signum) from None  # this process's signal ended the worker too
                raise WorkerCrashed(death, phase, what) from None
            except BaseException:
                self.end(kill=True)  # the conversation stopped half-way: this worker is of no further use
                raise
            self.peak_bytes = message[-1]
            if message[0] == "error":
                raise WorkerRefused(message[1], message[2])
            if verb == "open":
                self._held.add(message[1]["id"])
        self._arm_idle_end()
        return message[1]

    def end(self, kill: bool = False) -> None:
        """End the worker (closing its channel ends it; ``kill``, or one that does not end, is killed) and remove
        its folder."""
        with self._ending:
            if not self.alive:
                return
            self.alive = False
        self._disarm_idle_end()
        self.channel.close()
        if kill:
            self._kill()
        self._wait(_END_WAIT_S)
        shutil.rmtree(self.folder, ignore_errors=True)

    def _arm_idle_end(self) -> None:
        """End the worker after :func:`idle_s` seconds without a request, if no session is held in it."""
        seconds = idle_s()
        if not seconds or self._held or not self.alive:
            return
        self._disarm_idle_end()
        timer = threading.Timer(seconds, self._end_when_idle)
        timer.daemon = True
        self._idle = timer
        timer.start()

    def _disarm_idle_end(self) -> None:
        timer, self._idle = self._idle, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()

    def _end_when_idle(self) -> None:
        if not self._lock.acquire(blocking=False):  # a request runs: it arms the timer again when done
            return
        try:
            if self._held or self._idle is not threading.current_thread() or self.owner != os.getpid():
                return
            self._idle = None
            _forget(self)  # the next request starts a new worker rather than finding this one ended
            log.debug("ending the idle ONNX Runtime worker (pid %d)", self.pid)
            self.end()
        finally:
            self._lock.release()

    def _died(self) -> str:
        """The worker's channel broke: wait for its end and say how it died (its signal, or its exit status and last
        line of standard error)."""
        self.alive = False
        self._disarm_idle_end()
        self.channel.close()
        code = self._wait(_END_WAIT_S)
        last = _last_line(self.folder / _STDERR)
        shutil.rmtree(self.folder, ignore_errors=True)
        said = f'; it said "{last}"' if last else ""
        if code is None:
            return "its channel closed" + said
        if code == -_SIGKILL:
            from ampconfig.memory import format_bytes

            peak = f"{format_bytes(self.peak_bytes)} as it last reported" if self.peak_bytes else "not reported yet"
            return f"{KILLED}, most likely for want of memory (its peak memory: {peak}){said}"
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
            os.kill(self.pid, _SIGKILL)

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


def _forget(process: WorkerProcess) -> None:
    """``process`` is no longer this process's worker (it is being ended)."""
    global _current
    with _lock:
        if _current is process:
            _current = None


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


@functools.lru_cache(maxsize=1)
def cuda_unavailable_reason() -> str | None:
    """``None`` when a CUDA session can really be built here, else why not (in words); asked of the worker, where
    the sessions run."""
    return current().ask("cuda_probe", {}, Phase.LOAD, "a one-node CUDA probe model")


def _seconds_from(variable: str, default: float) -> float:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise AmpconfigError(
            f"{variable}={printable(text)!r} is not a number of seconds",
            hint=f"set {variable} to a number of seconds (such as {default:g}), or unset it",
        )
    return seconds


def deadline_s(phase: Phase) -> float:
    """How long a worker may give no sign of life during a request of ``phase`` (``AMPCONFIG_WORKER_DEADLINE``)."""
    seconds = _seconds_from(DEADLINE_VARIABLE, DEFAULT_DEADLINE_S)
    return seconds * LOAD_DEADLINE_FACTOR if phase is Phase.LOAD else seconds


def idle_s() -> float:
    """How long a worker holding no session waits for a request before it ends (``AMPCONFIG_WORKER_IDLE``; 0:
    it does not end)."""
    return _seconds_from(IDLE_VARIABLE, DEFAULT_IDLE_S)


def _private_folder() -> Path:
    """A new worker's folder, named after this process, once the folders of gone owners are swept."""
    _sweep(Path(tempfile.gettempdir()))
    return Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process, alive
        return False
    return False


def _sweep(temporary: Path) -> None:
    """Remove the worker folders in ``temporary`` that are this user's and whose process and worker are both gone
    (both were killed at once, or the machine lost power). A folder of another naming is left alone."""
    if sys.platform == "win32":  # os.kill there ends the process it is asked about
        return
    try:
        entries = list(os.scandir(temporary))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(FOLDER_PREFIX):
            continue
        owner = entry.name[len(FOLDER_PREFIX) :].split("-", 1)[0]
        try:
            if not owner.isdigit() or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            worker_pid = (Path(entry.path) / _PID_FILE).read_text(encoding="ascii").strip()
        except FileNotFoundError:
            worker_pid = ""
        except OSError:
            continue
        if _gone(int(owner)) and (not worker_pid.isdigit() or _gone(int(worker_pid))):
            shutil.rmtree(entry.path, ignore_errors=True)


def _record_pid(folder: Path, pid: int) -> None:
    with contextlib.suppress(OSError):
        (folder / _PID_FILE).write_text(str(pid), encoding="ascii")


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


#: The signals held back while the worker is forked: one that arrives then is delivered once the worker is known (its
#: folder is then removed by whoever outlives the other), never between the folder's making and the fork.
_FORK_BLOCKED = {getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)}


def prestart() -> bool:
    """Fork the worker now, if this process may (Linux, one thread, no worker yet, no ``AMPCONFIG_WORKER_START=spawn``):
    the command line's start-up, before its imports. True when it did."""
    global _current
    if (
        not sys.platform.startswith("linux")
        or _current is not None
        or os.environ.get(START_VARIABLE) == "spawn"
        or _thread_count() != 1
    ):
        return False
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _FORK_BLOCKED)
    try:
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
                from ampconfig.worker.server import become_worker

                become_worker(to_worker[0], from_worker[1], str(folder), held)
            except BaseException:  # noqa: BLE001 (whatever ends the worker: the main process reads why)
                import traceback

                traceback.print_exc()  # into the folder's stderr file: the main process says its last line
                code = 1
            finally:
                os._exit(code)
        os.close(to_worker[0])
        os.close(from_worker[1])
        _record_pid(folder, pid)
        _current = WorkerProcess(pid, Channel(from_worker[0], to_worker[1]), folder, None)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    log.debug("forked the ONNX Runtime worker (pid %d)", pid)
    return True


def _settle_forked_child(folder: Path, parent: int) -> None:
    """The forked worker's process state: no terminal streams, its own temporary folder, the default ending
    signals (the command line's handlers are the main process's), and death with the main process (SIGTERM, on
    which the worker removes its folder)."""
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

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # no prctl: the worker still ends when its channel closes
        pass
    if os.getppid() != parent:  # the main process died before the line above: end now
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(0)


#: The spawned worker's first lines: the working folder off the import path (Python 3.10 has no ``-P``), the
#: package's own root on it where the import system would not find this very ampconfig, then the worker (its
#: channel's descriptors and its folder are the arguments after those two).
_BOOT = """\
import importlib.util, sys
root, init = sys.argv[1], sys.argv[2]
while "" in sys.path:
    sys.path.remove("")
spec = importlib.util.find_spec("ampconfig")
if spec is None or spec.origin != init:
    sys.path.insert(0, root)
from ampconfig.worker.server import main
main()
"""


def spawn() -> WorkerProcess:
    """A worker in a fresh interpreter; its channel is a pair of pipes passed as descriptors of their own (on Windows,
    which passes no descriptors, its standard input and output, which it points at the null device first)."""
    # The package this module belongs to (its __init__ and the folder above it), named without importing it.
    package = Path(__file__).resolve().parent.parent
    init = str(package / "__init__.py")
    root = str(package.parent)
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    folder = _private_folder()
    ends: list[int] = []
    try:
        to_worker = pipe()
        ends += to_worker
        from_worker = pipe()
        ends += from_worker
        passed = os.name == "posix"
        descriptors = [str(to_worker[0]), str(from_worker[1])] if passed else ["stdio", "stdio"]
        with open(folder / _STDERR, "wb") as errors:
            popen = subprocess.Popen(
                [sys.executable, *safe_path, "-c", _BOOT, root, init, *descriptors, str(folder)],
                stdin=subprocess.DEVNULL if passed else to_worker[0],
                stdout=subprocess.DEVNULL if passed else from_worker[1],
                stderr=errors,
                env={**os.environ, "TMPDIR": str(folder)},
                close_fds=True,
                pass_fds=(to_worker[0], from_worker[1]) if passed else (),
            )
    except OSError as exc:  # no interpreter to start (an embedded Python), no processes left
        _discard(ends, folder)
        raise AmpconfigError(
            f"could not start ONNX Runtime's worker process ({sys.executable or 'no Python executable'}): {exc}",
            hint="ampconfig runs ONNX Runtime in a process of its own; check that this Python can start processes",
        ) from None
    except BaseException:  # a signal's exception: nothing of this start is left behind
        _discard(ends, folder)
        raise
    os.close(to_worker[0])
    os.close(from_worker[1])
    _record_pid(folder, popen.pid)
    log.debug("started the ONNX Runtime worker in a new interpreter (pid %d)", popen.pid)
    return WorkerProcess(popen.pid, Channel(from_worker[0], to_worker[1]), folder, popen)


def _discard(ends: list[int], folder: Path) -> None:
    for end in ends:
        with contextlib.suppress(OSError):
            os.close(end)
    shutil.rmtree(folder, ignore_errors=True)
