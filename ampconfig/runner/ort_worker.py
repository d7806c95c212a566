"""The worker process: every ONNX Runtime session of a user's model (or of a copy made from it) is built and run here.

ONNX Runtime is C++: a segfault in its optimiser or an abort in a kernel kills the process that called it, with
no exception to catch. So ampconfig's main process never hands a user's model to ONNX Runtime; it asks this
process (:mod:`ampconfig.runner.worker` starts it and talks to it) to build sessions, run them and time them, and
outlives it. The worker owns its sessions for the life of the command, so no session is built twice.

Requests arrive on a :class:`~ampconfig.runner.channel.Channel` as ``(verb, arguments, released, listening)``:
``released`` lists sessions the main process no longer holds, freed before the request runs (their weights go
before the next model loads its own); ``listening`` says whether the main process shows progress. Each request
gets one answer, ``("ok", value, peak)`` or ``("error", ONNX Runtime's words, the name of its exception's class,
peak)``, where ``peak`` is the most memory the worker has used (bytes), after any number of ``("alive", peak)``
heartbeats (one a second while the request runs, from a thread of their own: ONNX Runtime computes without
Python's lock) and ``("progress", label, done, total)`` messages (at most ten a second, and none when nobody
listens). The verb ``release`` frees sessions and gets no answer. The worker ignores Ctrl-C: the user's interrupt is
the main process's to handle, and the main process ends the worker.

When the main process goes first (its channel ends, a heartbeat finds the pipe closed, the parent-death signal
SIGTERM) or the worker gets SIGTERM or SIGHUP, the worker removes its own folder before it ends.

This module imports only what sessions need (NumPy, onnxruntime and ampconfig's light modules; ml_dtypes and onnx
when a bfloat16 value comes), so a worker forked before the command's own imports, or started afresh, is ready
quickly.
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import Any

import numpy as np
import onnxruntime as ort

from ampconfig.runner.channel import Channel
from ampconfig.runner.timing import timed_runs

#: ONNX Runtime's own default severity for its process-wide logger (warning).
_ORT_DEFAULT_LOG_SEVERITY = 2
#: Fatal only: ORT's placement warnings are not the user's business, and a failure reaches the user once, as
#: ampconfig's own located error carrying ORT's words, not first as ORT's raw coloured log line.
SESSION_LOG_SEVERITY = 4

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
#: ONNX Runtime's session option that resolves a model's external data in a folder when the model comes as bytes.
EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"
#: cuDNN's convolution algorithm searches ONNX Runtime's CUDA provider knows.
CONV_ALGO_SEARCHES = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
#: Graph optimisation levels by the name a request gives (None: ONNX Runtime's default, every optimisation).
OPTIMIZATION_LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@contextmanager
def _quiet_ort() -> Iterator[None]:
    """Silence ORT's process-wide logger (its CUDA library load errors) while a session is built."""
    ort.set_default_logger_severity(4)
    try:
        yield
    finally:
        ort.set_default_logger_severity(_ORT_DEFAULT_LOG_SEVERITY)


def provider_list(
    device: str, tf32: bool, conv_algo_search: str | None = None
) -> list[str | tuple[str, dict[str, str]]]:
    """The ``providers`` argument of a session on ``device``; ``conv_algo_search`` None keeps ORT's default."""
    if device == "cuda":
        options = {"use_tf32": "1" if tf32 else "0"}
        if conv_algo_search is not None:
            if conv_algo_search not in CONV_ALGO_SEARCHES:
                raise ValueError(f"unknown cudnn_conv_algo_search {conv_algo_search!r}")
            options["cudnn_conv_algo_search"] = conv_algo_search
        return [(CUDA_PROVIDER, options), CPU_PROVIDER]
    return [CPU_PROVIDER]


def session_options(
    config: Mapping[str, str] | None = None,
    in_node_order: bool = False,
    folder: str | None = None,
    optimization: str | None = None,
) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.log_severity_level = SESSION_LOG_SEVERITY
    if in_node_order:
        options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    if folder is not None:
        options.add_session_config_entry(EXTERNAL_DATA_FOLDER, folder)
    if optimization is not None:
        options.graph_optimization_level = OPTIMIZATION_LEVELS[optimization]
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    return options


def _probe_model() -> bytes:
    """A one-Relu model (IR 10, opset 17): what :func:`cuda_unavailable_reason` asks the CUDA provider to load."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "cuda_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


def cuda_unavailable_reason() -> str | None:
    """``None`` when a CUDA session can really be built here, else why not (in words). onnxruntime-gpu lists the
    CUDA provider even where its libraries cannot be loaded, and then runs on the CPU: only a built session's
    ``get_providers()`` tells."""
    if CUDA_PROVIDER not in ort.get_available_providers():
        return f"this onnxruntime build ({ort.get_device()}) has no {CUDA_PROVIDER}"
    try:
        with _quiet_ort():
            session = ort.InferenceSession(_probe_model(), session_options(), providers=[CUDA_PROVIDER, CPU_PROVIDER])
    except Exception as exc:  # noqa: BLE001 (ORT's exception types share no base class below Exception)
        return f"creating a CUDA session failed: {exc}"
    if CUDA_PROVIDER not in session.get_providers():
        return (
            f"onnxruntime lists {CUDA_PROVIDER} but could not load it (CUDA 13 / cuDNN 9 libraries missing "
            "or no GPU); the session got only " + ", ".join(session.get_providers())
        )
    return None


def feed(array: np.ndarray) -> np.ndarray | ort.OrtValue:
    """``array`` as ONNX Runtime's Python API takes it: as it is, or, for a bfloat16 array (ml_dtypes), an OrtValue
    over its bits, since ORT's numpy bridge refuses it. The OrtValue does not copy: the C-contiguous ``array`` must
    outlive it."""
    if array.dtype.name != "bfloat16":  # ml_dtypes' bfloat16, imported only when such an array comes
        return array
    from onnx import TensorProto

    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), TensorProto.BFLOAT16)


class BoundRun:
    """One model with its inputs bound: calling it runs the model once; :meth:`outputs` fetches the results.

    On CUDA the inputs live on the device and the outputs are bound to the device (IOBinding), so a call times
    the model and not the host copies; on the CPU it is a plain ``session.run``. A model with a bfloat16 output
    has its outputs bound to host memory on either device: numpy has no bfloat16, so ORT's Python API cannot hand
    one back, and it is read from the OrtValue's memory instead (:func:`_host_array`).
    """

    def __init__(self, session: ort.InferenceSession, device: str, feeds: Mapping[str, np.ndarray]) -> None:
        self._session = session
        self._device = device
        self._output_names = [arg.name for arg in session.get_outputs()]
        self._arrays = {name: np.ascontiguousarray(array) for name, array in feeds.items()}  # kept alive: see feed
        self._feeds = {name: feed(array) for name, array in self._arrays.items()}
        self._last: list[np.ndarray] | None = None
        self._ran = False
        self._binding: ort.IOBinding | None = None
        self._bound_inputs: list[ort.OrtValue] = []
        self._bfloat16_outputs = any(arg.type == "tensor(bfloat16)" for arg in session.get_outputs())
        if device == "cuda" or self._bfloat16_outputs:
            self._bind()

    def _bind(self) -> None:
        binding = self._session.io_binding()
        for name, array in self._arrays.items():
            value = self._feeds[name]
            if isinstance(value, np.ndarray):
                value = ort.OrtValue.ortvalue_from_numpy(array, self._device, 0)
            # else a bfloat16 host value (ORT makes no device copy of one from numpy): ORT copies it to the device
            self._bound_inputs.append(value)  # keep the buffers alive
            binding.bind_ortvalue_input(name, value)
        for name in self._output_names:
            binding.bind_output(name, "cpu" if self._bfloat16_outputs else self._device, 0)
        self._binding = binding

    def __call__(self) -> None:
        if self._binding is not None:
            self._session.run_with_iobinding(self._binding)
            self._binding.synchronize_outputs()
        else:
            self._last = self._session.run(None, self._feeds)
        self._ran = True

    def outputs(self) -> dict[str, np.ndarray]:
        """Run once if nothing ran yet, then return the outputs of the last run as host arrays by name."""
        if not self._ran:
            self()
        if self._binding is None:
            values = self._last or []
        elif self._bfloat16_outputs:
            values = [_host_array(value) for value in self._binding.get_outputs()]
        else:
            values = self._binding.copy_outputs_to_cpu()
        return dict(zip(self._output_names, values, strict=True))


def _host_array(value: ort.OrtValue) -> np.ndarray:
    """A host OrtValue as a numpy array (copied); a bfloat16 one through its memory, as ml_dtypes' bfloat16."""
    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    import ml_dtypes

    shape = tuple(value.shape())
    count = math.prod(shape)
    if count == 0:
        return np.empty(shape, ml_dtypes.bfloat16)
    bits = (ctypes.c_uint16 * count).from_address(value.data_ptr())
    return np.frombuffer(bits, np.uint16).copy().view(ml_dtypes.bfloat16).reshape(shape)


#: Seconds between two heartbeats, and at least between two progress messages.
HEARTBEAT_S = 1.0
PROGRESS_INTERVAL_S = 0.1


def peak_memory() -> int:
    """The most memory (resident, bytes) this process has used so far; 0 where the platform does not say."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB elsewhere


class Worker:
    """The sessions this process holds, by the number the main process knows them by, and how many were built.
    ``listening``: whether the request being answered has a listener for progress."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.sessions: dict[int, tuple[ort.InferenceSession, str]] = {}
        self.built = 0
        self.listening = False

    def open(
        self,
        model: bytes | bytearray | memoryview | str,
        device: str,
        tf32: bool,
        conv_algo_search: str | None,
        config: Mapping[str, str] | None,
        in_node_order: bool,
        folder: str | None,
        optimization: str | None,
    ) -> dict[str, Any]:
        options = session_options(config, in_node_order, folder, optimization)
        providers = provider_list(device, tf32, conv_algo_search)
        source = model if isinstance(model, str) else bytes(model)  # ORT takes bytes, no other buffer
        del model
        with _quiet_ort():
            session = ort.InferenceSession(source, options, providers=providers)
        self.built += 1
        number = self.built
        self.sessions[number] = (session, device)
        return {
            "id": number,
            "providers": list(session.get_providers()),
            "outputs": [arg.name for arg in session.get_outputs()],
        }

    def run(self, id: int, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        session, device = self.sessions[id]
        return BoundRun(session, device, feeds).outputs()

    def stats(
        self,
        id: int,
        feeds: Mapping[str, np.ndarray],
        keys: Mapping[str, str],
        groups: list[tuple[str, list[str], list[tuple[int, ...]]]],
        fed: bool,
    ) -> dict[str, Any]:
        """One run, and the numbers of its values counted here, where the arrays are (only the numbers cross the
        pipe): ``keys`` names each output by its value's key, each group is an output joining values of known
        shapes along their first dimension, ``fed`` counts the feeds too. ``misfit``: a group came back in another
        shape (its shapes were inferred wrongly): nothing is counted."""
        from ampconfig.value_counts import float_counts  # NumPy only; imported on the first such request

        session, device = self.sessions[id]
        results = BoundRun(session, device, feeds).outputs()
        arrays: dict[str, np.ndarray] = dict(feeds) if fed else {}
        arrays.update({keys[name]: array for name, array in results.items() if name in keys})
        for output, members, shapes in groups:
            joined, offset = results[output], 0
            if tuple(joined.shape) != (sum(shape[0] for shape in shapes), *shapes[0][1:]):
                return {"misfit": True, "stats": {}}
            for key, shape in zip(members, shapes, strict=True):
                arrays[key] = joined[offset : offset + shape[0]]
                offset += shape[0]
        return {"misfit": False, "stats": float_counts(arrays)}

    def time(self, id: int, feeds: Mapping[str, np.ndarray], warmup: int, iterations: int, label: str) -> list[float]:
        """The milliseconds of each timed run (after ``warmup`` untimed ones), progress sent as it goes."""
        session, device = self.sessions[id]
        bound = BoundRun(session, device, feeds)
        if not self.listening:
            return timed_runs(bound, warmup=warmup, iterations=iterations, label=label)
        sent = -math.inf

        def progress(what: str, done: int, total: int) -> None:
            nonlocal sent
            now = time.monotonic()
            if done >= total or now - sent >= PROGRESS_INTERVAL_S:
                sent = now
                self.channel.send(("progress", what, done, total))

        return timed_runs(bound, warmup=warmup, iterations=iterations, label=label, progress=progress)

    def answer(self, verb: str, arguments: dict[str, Any]) -> Any:
        if verb == "open":
            return self.open(**arguments)
        if verb == "run":
            return self.run(**arguments)
        if verb == "time":
            return self.time(**arguments)
        if verb == "stats":
            return self.stats(**arguments)
        if verb == "cuda_probe":
            return cuda_unavailable_reason()
        if verb == "count":
            return {"built": self.built, "open": len(self.sessions)}
        raise ValueError(f"unknown request {verb!r}")


class _Heartbeat:
    """A thread that sends ``("alive", peak)`` every :data:`HEARTBEAT_S` while a request runs. A heartbeat that
    finds the pipe closed (the main process died while the worker computes) ends the worker, its folder removed."""

    def __init__(self, channel: Channel, folder: str | None) -> None:
        self._channel = channel
        self._folder = folder
        self._lock = threading.Lock()
        self._busy = False
        self._changed = threading.Condition(self._lock)
        threading.Thread(target=self._beat, name="ampconfig-heartbeat", daemon=True).start()

    @contextmanager
    def running(self) -> Iterator[None]:
        """Heartbeats while the block runs; none once it has ended (the answer follows the last one)."""
        with self._lock:
            self._busy = True
            self._changed.notify()
        try:
            yield
        finally:
            with self._lock:
                self._busy = False

    def _beat(self) -> None:
        with self._lock:
            while True:
                while not self._busy:
                    self._changed.wait()
                self._changed.wait(HEARTBEAT_S)
                if not self._busy:
                    continue
                try:
                    self._channel.send(("alive", peak_memory()))
                except OSError:
                    leave(self._folder)


def leave(folder: str | None, code: int = 0) -> None:
    """End the worker now, its folder removed (the main process is gone and cannot remove it)."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    os._exit(code)


def serve(channel: Channel, folder: str | None = None) -> None:
    """Answer requests until the main process closes the channel (or dies: the pipe ends the same way); then remove
    ``folder``, the worker's own."""
    worker = Worker(channel)
    heartbeat = _Heartbeat(channel, folder)
    while True:
        try:
            verb, arguments, released, worker.listening = channel.recv()
        except EOFError:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            return
        for number in released:
            worker.sessions.pop(number, None)
        if verb == "release":
            continue
        try:
            with heartbeat.running():
                value = worker.answer(verb, arguments)
        except Exception as exc:  # noqa: BLE001 (ONNX Runtime's own types, no common base: its words go back)
            answer: tuple[Any, ...] = ("error", str(exc), type(exc).__name__, peak_memory())
        else:
            answer = ("ok", value, peak_memory())
        try:
            channel.send(answer)
        except OSError:  # the main process is gone
            leave(folder)


def become_worker(
    read_fd: int, write_fd: int, folder: str | None = None, blocked: set[int] | set[signal.Signals] | None = None
) -> None:
    """This process is a worker from now on: Ctrl-C is the main process's, SIGTERM and SIGHUP end it with its
    ``folder`` removed, and answers go to the channel. ``blocked``: the signal mask to go back to (the signals held
    back while it was forked are let through once its handlers exist)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def end(signum: int, frame: FrameType | None) -> None:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), end)
    if blocked is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    serve(Channel(read_fd, write_fd), folder)


def main() -> None:
    """A worker started as a fresh interpreter (:func:`ampconfig.runner.worker.spawn`): its arguments are the
    channel's two descriptors (read, write) and its folder. ``stdio`` for the descriptors (Windows, which passes
    none): the channel is its standard input and output, which are then pointed at the null device so that nothing
    printed corrupts a message."""
    read, write, folder = sys.argv[3:6]
    if read == "stdio":
        read_fd, write_fd = os.dup(0), os.dup(1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the process's own stdout, open until it ends)
    else:
        read_fd, write_fd = int(read), int(write)
    become_worker(read_fd, write_fd, folder)
