"""The worker process: every ONNX Runtime session of a user's model (or of a copy made from it) is built and run here.

ONNX Runtime is C++: a segfault in its optimiser or an abort in a kernel kills the process that called it, with
no exception to catch. So ampconfig's main process never hands a user's model to ONNX Runtime; it asks this
process (:mod:`ampconfig.worker.client` starts it and talks to it) to build sessions, run them and time them, and
outlives it. The worker owns its sessions for the life of the command, so no session is built twice.

Requests arrive on a :class:`~ampconfig.worker.channel.Channel` as ``(verb, arguments, released, listening)``:
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
import functools
import math
import mmap
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import Any

import numpy as np
import onnxruntime as ort

from ampconfig.worker.channel import Channel
from ampconfig.worker.providers import CPU_PROVIDER, CUDA_PROVIDER
from ampconfig.worker.timed import timed_runs

#: ONNX Runtime's own default severity for its process-wide logger (warning).
_ORT_DEFAULT_LOG_SEVERITY = 2
#: Fatal only: ORT's placement warnings are not the user's business, and a failure reaches the user once, as
#: ampconfig's own located error carrying ORT's words, not first as ORT's raw coloured log line.
SESSION_LOG_SEVERITY = 4

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
    optimized_path: str | None = None,
) -> ort.SessionOptions:
    """``optimized_path``: where ONNX Runtime writes the graph it runs, after its optimisations."""
    options = ort.SessionOptions()
    options.log_severity_level = SESSION_LOG_SEVERITY
    if optimized_path is not None:
        options.optimized_model_filepath = optimized_path
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
    """A one-Relu model (IR 10, opset 17): what :func:`cuda_probe` asks the CUDA provider to load."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "cuda_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()


def cuda_probe() -> str | None:
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
    the model and not the host copies; on the CPU it runs on OrtValues (``run_with_ort_values``), so a run makes no
    numpy copy of its outputs until they are asked for (sequences, maps and strings go through ``session.run``). A
    model with a bfloat16 output has its outputs bound to host memory on either device: numpy has no bfloat16, so
    ORT's Python API cannot hand one back, and it is read from the OrtValue's memory instead (:func:`_host_array`).
    """

    def __init__(
        self,
        session: ort.InferenceSession,
        device: str,
        feeds: Mapping[str, np.ndarray],
        reuse: list[ort.OrtValue] | None = None,
    ) -> None:
        self._session = session
        self._device = device
        self._output_names = [arg.name for arg in session.get_outputs()]
        self._arrays = {name: np.ascontiguousarray(array) for name, array in feeds.items()}  # kept alive: see feed
        self._feeds = {name: feed(array) for name, array in self._arrays.items()}
        self._last: list[Any] | None = None
        # On the CPU, tensors in and out run as OrtValues: a timed run then leaves its outputs in ONNX Runtime's
        # memory (no numpy copy of every output on every run); they become numpy arrays once, when asked for.
        args = (*session.get_inputs(), *session.get_outputs())
        tensors = all(arg.type.startswith("tensor(") and arg.type != "tensor(string)" for arg in args)
        self._values: dict[str, ort.OrtValue] | None = None
        self._reused: ort.IOBinding | None = None
        # A graph input that is also an output comes back as the input's own OrtValue: copied, never written over.
        self._aliased = {arg.name for arg in session.get_inputs()} & set(self._output_names)
        if tensors and all(isinstance(array, np.ndarray) for array in self._arrays.values()):
            self._values = {name: _ort_value(array) for name, array in self._arrays.items()}
        self._ran = False
        self._binding: ort.IOBinding | None = None
        self._bound_inputs: list[ort.OrtValue] = []
        self._bfloat16_outputs = any(arg.type == "tensor(bfloat16)" for arg in session.get_outputs())
        if device == "cuda" or self._bfloat16_outputs:
            self._bind()
        elif reuse is not None and self._values is not None and not self._aliased:
            self._reused = self._reusing_binding(reuse)  # an earlier request's outputs: written over, not beside
            self._last = reuse

    def _reusing_binding(self, outputs: list[ort.OrtValue]) -> ort.IOBinding:
        """The next runs on the CPU write into the first run's outputs (same inputs, same shapes): ONNX Runtime's arena
        then holds one run's worth of memory, not a new output beside each last one."""
        binding = self._session.io_binding()
        assert self._values is not None
        for name, value in self._values.items():
            binding.bind_ortvalue_input(name, value)
        for name, value in zip(self._output_names, outputs, strict=True):
            binding.bind_ortvalue_output(name, value)
        return binding

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
            # A request's first run hands the arena's unused memory back when it ends (what an earlier request's run
            # left there, and the blocks ONNX Runtime's memory pattern replaces after a first run): the worker then
            # holds about one run's worth. Later (timed) runs reuse the arena as ONNX Runtime does.
            options = None if self._ran else _shrinking_run()
            if self._reused is not None:
                try:
                    self._session.run_with_iobinding(self._reused, options)
                except Exception:  # noqa: BLE001 (the outputs' shapes changed): a run of its own says what is wrong
                    self._reused = self._last = None
                    self()
                    return
            elif self._values is not None:
                self._last = self._session.run_with_ort_values(None, self._values, options)
                if not self._aliased:
                    self._reused = self._reusing_binding(self._last)  # the next runs write into these outputs
            else:
                self._last = None  # the last run's outputs go before this run makes its own
                self._last = self._session.run(None, self._feeds, options)
        self._ran = True

    @property
    def ort_outputs(self) -> list[ort.OrtValue] | None:
        """The last CPU run's outputs as OrtValues (None when they are not: bound to a device, or sequences)."""
        return self._last if self._values is not None and self._binding is None and not self._aliased else None

    def outputs(self) -> dict[str, np.ndarray]:
        """Run once if nothing ran yet, then return the outputs of the last run as host arrays by name."""
        if not self._ran:
            self()
        if self._binding is None:
            values = [
                (_host_array(value) if name in self._aliased else _output_view(value))
                if isinstance(value, ort.OrtValue)
                else value
                for name, value in zip(self._output_names, self._last or [], strict=False)
            ]
        elif self._bfloat16_outputs:
            values = [_host_array(value) for value in self._binding.get_outputs()]
        else:
            values = self._binding.copy_outputs_to_cpu()
        return dict(zip(self._output_names, values, strict=True))


def _shrinking_run() -> ort.RunOptions:
    """Options of a run that releases the CPU arena's unused memory when it ends."""
    options = ort.RunOptions()
    options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return options


def _ort_value(array: np.ndarray) -> ort.OrtValue:
    value = feed(array)
    return value if isinstance(value, ort.OrtValue) else ort.OrtValue.ortvalue_from_numpy(value)


#: numpy's dtype of each ONNX Runtime tensor type an output may be viewed in without a copy.
_VIEWED_DTYPES = {
    f"tensor({name})": np.dtype(dtype)
    for name, dtype in (
        ("float", "float32"),
        ("float16", "float16"),
        ("double", "float64"),
        ("int8", "int8"),
        ("int16", "int16"),
        ("int32", "int32"),
        ("int64", "int64"),
        ("uint8", "uint8"),
        ("uint16", "uint16"),
        ("uint32", "uint32"),
        ("uint64", "uint64"),
        ("bool", "bool"),
    )
}


def _output_view(value: ort.OrtValue) -> np.ndarray:
    """A host OrtValue as a numpy array over its own memory where its type allows (else copied): an output is sent
    from where ONNX Runtime wrote it, with no copy in this process. The array's buffer keeps the OrtValue alive."""
    dtype = _VIEWED_DTYPES.get(value.data_type())
    shape = tuple(value.shape())
    count = math.prod(shape)
    if dtype is None or count == 0:
        return _host_array(value)
    memory = (ctypes.c_char * (count * dtype.itemsize)).from_address(value.data_ptr())
    memory.owner = value  # ctypes objects take attributes: the view keeps the OrtValue alive
    return np.frombuffer(memory, dtype).reshape(shape)


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


#: Elements of one value counted at a time: counting works on copies of what it counts (9 bytes per element for
#: the exponent histogram), so a whole 512 MiB value would cost 1 GiB more.
STATS_CHUNK_ELEMENTS = 1 << 20


def _chunked_float_counts(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``float_counts`` of ``arrays``, a large value counted a chunk at a time and the chunks' numbers joined (exact
    in any order: ``joined_counts``)."""
    from ampconfig.value_counts import float_counts, is_float, joined_counts, value_counts  # NumPy only

    # a sequence or a map (ZipMap's output) is no array: float_counts leaves it out
    large = {
        key: array
        for key, array in arrays.items()
        if isinstance(array, np.ndarray) and array.size > STATS_CHUNK_ELEMENTS
    }
    found = float_counts({key: array for key, array in arrays.items() if key not in large})
    for key, array in large.items():
        flat = np.asarray(array).reshape(-1)
        if not is_float(flat):
            continue
        chunks = [
            value_counts(flat[start : start + STATS_CHUNK_ELEMENTS])
            for start in range(0, flat.size, STATS_CHUNK_ELEMENTS)
        ]
        found[key] = functools.reduce(joined_counts, [chunk for chunk in chunks if chunk is not None])
    return {key: found[key] for key in arrays if key in found}


class Worker:
    """The sessions this process holds, by the number the main process knows them by, and how many were built.
    ``listening``: whether the request being answered has a listener for progress."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.sessions: dict[int, tuple[ort.InferenceSession, str]] = {}
        self.built = 0
        self.listening = False
        self._mapped: tuple[tuple[str, int], mmap.mmap] | None = None
        self._outputs: dict[int, list[ort.OrtValue]] = {}

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
        optimized_path: str | None = None,
    ) -> dict[str, Any]:
        options = session_options(config, in_node_order, folder, optimization, optimized_path)
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

    def forget(self, id: int) -> None:
        """Free session ``id`` and the output buffers kept for its next run (the main process dropped it)."""
        self.sessions.pop(id, None)
        self._outputs.pop(id, None)

    def _bound(self, id: int, feeds: Mapping[str, np.ndarray]) -> BoundRun:
        """A run of session ``id`` whose CPU outputs go into the buffers of its previous run (kept for that): one
        output's worth of memory across the proof's requests, where a new output beside each old one held two."""
        session, device = self.sessions[id]
        return BoundRun(session, device, feeds, self._outputs.pop(id, None))

    def _keep(self, id: int, bound: BoundRun) -> None:
        if (kept := bound.ort_outputs) is not None:
            self._outputs[id] = kept

    def run(self, id: int, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        bound = self._bound(id, feeds)
        outputs = bound.outputs()
        self._keep(id, bound)
        return outputs

    def open_optimized(self, **arguments: Any) -> dict[str, Any]:
        """:meth:`open`, and the graph ONNX Runtime runs (after its optimisations, with the casts it inserted) as
        model bytes under ``"optimized"``: written while the session is built, in this process's own folder."""
        with tempfile.TemporaryDirectory(prefix="ampconfig-optimized-") as folder:
            path = os.path.join(folder, "optimized.onnx")
            answer = self.open(**arguments, optimized_path=path)
            with open(path, "rb") as stream:
                answer["optimized"] = stream.read()
        return answer

    def run_discarding(self, id: int, feeds: Mapping[str, Any]) -> None:
        """One run on feeds of any kind ONNX Runtime's Python API takes (arrays, bfloat16 arrays, sequences,
        optionals), its outputs dropped here: the answer says only that it ran. A bfloat16 output never meets
        numpy (the outputs stay OrtValues)."""
        session, _ = self.sessions[id]
        if not all(isinstance(value, np.ndarray) for value in feeds.values()):
            session.run(None, dict(feeds))  # sequences / optionals: only the plain numpy bridge takes them
            return
        arrays = {name: np.ascontiguousarray(array) for name, array in feeds.items()}  # alive while the values are
        values = {name: _ort_value(array) for name, array in arrays.items()}
        session.run_with_ort_values(None, values)

    def run_mapped(
        self,
        id: int,
        path: str,
        size: int,
        inputs: Mapping[str, tuple[int, str, tuple[int, ...]]],
        outputs: Mapping[str, tuple[int, str, tuple[int, ...]]],
    ) -> None:
        """One run whose inputs and outputs lie in a file both processes map (``path``, ``size`` bytes; each value
        by its ``(offset, dtype, shape)`` there): ONNX Runtime reads and writes the file's memory, and only names
        cross the pipe. The last file stays mapped for the next request."""
        session, _ = self.sessions[id]
        if self._mapped is None or self._mapped[0] != (path, size):
            self._mapped = None  # the previous file is unmapped when its last array goes
            with open(path, "r+b") as stream:
                self._mapped = ((path, size), mmap.mmap(stream.fileno(), size))
        memory = self._mapped[1]
        binding = session.io_binding()
        for name, (offset, dtype, shape) in inputs.items():
            binding.bind_cpu_input(name, np.ndarray(shape, dtype, memory, offset))
        results = {name: np.ndarray(shape, dtype, memory, offset) for name, (offset, dtype, shape) in outputs.items()}
        for name, array in results.items():
            binding.bind_output(name, "cpu", 0, array.dtype, list(array.shape), array.ctypes.data)
        session.run_with_iobinding(binding)

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
        bound = self._bound(id, feeds)
        results = bound.outputs()
        self._keep(id, bound)
        arrays: dict[str, np.ndarray] = dict(feeds) if fed else {}
        arrays.update({keys[name]: array for name, array in results.items() if name in keys})
        for output, members, shapes in groups:
            joined, offset = results[output], 0
            if tuple(joined.shape) != (sum(shape[0] for shape in shapes), *shapes[0][1:]):
                return {"misfit": True, "stats": {}}
            for key, shape in zip(members, shapes, strict=True):
                arrays[key] = joined[offset : offset + shape[0]]
                offset += shape[0]
        return {"misfit": False, "stats": _chunked_float_counts(arrays)}

    def time(self, id: int, feeds: Mapping[str, np.ndarray], warmup: int, iterations: int, label: str) -> list[float]:
        """The milliseconds of each timed run (after ``warmup`` untimed ones), progress sent as it goes."""
        bound = self._bound(id, feeds)
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
        if verb == "open_optimized":
            return self.open_optimized(**arguments)
        if verb == "run_discarding":
            return self.run_discarding(**arguments)
        if verb == "run_mapped":
            return self.run_mapped(**arguments)
        if verb == "version":
            return ort.__version__
        if verb == "cuda_probe":
            return cuda_probe()
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
            worker.forget(number)
        if verb == "release":
            continue
        try:
            with heartbeat.running():
                value = worker.answer(verb, arguments)
        except Exception as exc:  # noqa: BLE001 (ONNX Runtime's own types, no common base: its words go back)
            answer: tuple[Any, ...] = ("error", str(exc), type(exc).__name__, peak_memory())
        else:
            answer = ("ok", value, peak_memory())
            del value  # in the answer: outputs are not held while the next request waits and runs
        try:
            channel.send(answer)
        except OSError:  # the main process is gone
            leave(folder)
        del answer  # sent


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
    """A worker started as a fresh interpreter (:func:`ampconfig.worker.client.spawn`): its arguments are the
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
