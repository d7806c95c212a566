"""float32 -> float16 conversion of weights: the one encoder the API and every command use.

numpy converts float32 to float16 element by element in portable C (about 5 ns an element on a 2.8 GHz Xeon);
ONNX Runtime's MLAS uses the CPU's F16C / AVX-512 conversion instructions and its thread pool, 10-20x faster
(BERT-base's 85 M weights: 0.45 s with numpy). Both round to nearest even, overflow to inf and keep NaNs (numpy
keeps part of a NaN's payload, ONNX Runtime writes the quiet NaN of the same sign): ``benchmarks/float_cast_check.py``
compares them on every one of the 2**32 float32 bit patterns, and the test suite on a sample. So ONNX Runtime is
used for speed alone; small arrays stay with numpy, where a request costs more than the conversion.

ONNX Runtime runs only in the worker process (:mod:`ampconfig.worker.client`), so its Cast session lives there too.
The weights do not cross the pipe: both processes map one anonymous shared file (Linux's ``memfd_create``; the
worker opens it through ``/proc``), this process copies a chunk of the weight in, the worker's Cast kernel writes
the float16 chunk beside it, and only the request's names cross. The file has no name, so nothing is left behind
whatever ends either process, and its size is bounded by :data:`CHUNK_ELEMENTS`. Where there is no such file
(macOS, Windows) or the worker cannot help (it crashed, or its onnxruntime cannot build the session), numpy
converts over threads, with the same bits.

It lives in rewrite/ because it is the encoder of the rewrite's own tensors (:mod:`ampconfig.rewrite.tensors`,
whose thresholds it reads), asked for by the engine and the API when weights are converted; ONNX Runtime is only
its means, reached through the worker's client like any other request.
"""

from __future__ import annotations

import functools
import logging
import mmap
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ampconfig.errors import AmpconfigError
from ampconfig.rewrite.tensors import LARGE_ARRAY_ELEMENTS, numpy_float16

# The worker's modules are imported where a weight is large enough to go there: a decision-only command (explain,
# lists, rewrite without a large weight) starts no worker and loads none of its modules (tests/cli/test_decision_only).

log = logging.getLogger(__name__)

#: Below this many elements numpy's own cast is as fast as a request to the worker.
MIN_ELEMENTS = LARGE_ARRAY_ELEMENTS
#: Elements converted per request: the shared file holds one chunk of float32 and its float16 (24 MiB).
CHUNK_ELEMENTS = 1 << 22
_OUTPUT_OFFSET = CHUNK_ELEMENTS * 4
_SHARED_BYTES = CHUNK_ELEMENTS * 6
_WHAT = "the float16 weight conversion (a Cast node)"


def _cast_model() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)],
        "float32_to_float16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n"])],
    )
    # IR 8 / opset 17: loadable by every onnxruntime ampconfig supports.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


class _WorkerCast:
    """The worker's Cast session and the shared file it reads and writes, for this process (a forked copy of this
    process makes its own: the file would be shared with its parent)."""

    def __init__(self) -> None:
        from ampconfig.worker import client as worker
        from ampconfig.worker.channel import large_bytes
        from ampconfig.worker.client import Phase

        self.owner = os.getpid()
        descriptor = os.memfd_create("ampconfig-float-cast", os.MFD_CLOEXEC)
        try:
            os.ftruncate(descriptor, _SHARED_BYTES)
            self._shared = mmap.mmap(descriptor, _SHARED_BYTES)
        except OSError:
            os.close(descriptor)
            raise
        self._descriptor = descriptor
        self.path = f"/proc/{self.owner}/fd/{descriptor}"
        self._source = np.ndarray((CHUNK_ELEMENTS,), np.float32, self._shared, 0)
        self._converted = np.ndarray((CHUNK_ELEMENTS,), np.float16, self._shared, _OUTPUT_OFFSET)
        self.process = worker.current()
        arguments = {
            "model": large_bytes(_cast_model()),
            "device": "cpu",
            "tf32": False,
            "conv_algo_search": None,
            "config": {},
            "in_node_order": False,
            "folder": None,
            "optimization": None,
        }
        self.session = self.process.ask("open", arguments, Phase.LOAD, _WHAT)["id"]
        log.info("float16 weight conversion: ONNX Runtime's Cast kernel in the worker (pid %d)", self.process.pid)

    @property
    def usable(self) -> bool:
        return self.owner == os.getpid() and self.process.alive

    def convert(self, array: np.ndarray) -> np.ndarray:
        from ampconfig.worker.client import Phase

        flat = array.reshape(-1)  # a copy only where ``array`` is not contiguous
        converted = np.empty(flat.shape, np.float16)
        for start in range(0, flat.size, CHUNK_ELEMENTS):
            count = min(CHUNK_ELEMENTS, flat.size - start)
            _copy(self._source[:count], flat[start : start + count])
            arguments = {
                "id": self.session,
                "path": self.path,
                "size": _SHARED_BYTES,
                "inputs": {"x": (0, "float32", (count,))},
                "outputs": {"y": (_OUTPUT_OFFSET, "float16", (count,))},
            }
            self.process.ask("run_mapped", arguments, Phase.RUN, _WHAT)
            _copy(converted[start : start + count], self._converted[:count])
        return converted.reshape(array.shape)


#: Elements one thread copies at a time.
_COPY_ELEMENTS = 1 << 20


@functools.cache
def _copiers() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="ampconfig-cast-copy")


def _copy(destination: np.ndarray, source: np.ndarray) -> None:
    """``destination[...] = source`` over threads: the copies into and out of the shared file are most of the
    conversion's cost here, and much of that is first touches of pages (a weight read from its file, a new
    array), which threads take in parallel as ONNX Runtime's own thread pool did when the Cast ran in this process."""

    def copy(start: int) -> None:
        np.copyto(destination[start : start + _COPY_ELEMENTS], source[start : start + _COPY_ELEMENTS])

    list(_copiers().map(copy, range(0, source.size, _COPY_ELEMENTS)))


_lock = threading.Lock()
_cast: _WorkerCast | None = None
#: Set when the worker could not convert: numpy converts from then on (the reason was logged once).
_unavailable = False


def _worker_cast() -> _WorkerCast | None:
    global _cast, _unavailable
    from ampconfig.worker.client import WorkerRefused

    if _unavailable:
        return None
    if _cast is None or not _cast.usable:
        try:
            _cast = _WorkerCast()
        except (AttributeError, OSError, AmpconfigError, WorkerRefused) as exc:  # no memfd, or no session
            log.info("the worker cannot convert weights (%s): numpy converts them", exc)
            _unavailable = True
            return None
    return _cast


def float32_to_float16(array: np.ndarray) -> np.ndarray:
    """``array.astype(np.float16)``, bit for bit; large float32 arrays go through ONNX Runtime's Cast kernel in the
    worker."""
    global _unavailable
    if array.dtype != np.float32 or array.size < MIN_ELEMENTS:
        return numpy_float16(array)
    from ampconfig.worker.client import WorkerRefused

    with _lock:
        cast = _worker_cast()
        if cast is not None:
            try:
                return cast.convert(array)
            # A crash or refusal in the worker ends its part, not the rewrite: numpy gives the same bits.
            except (AmpconfigError, WorkerRefused) as exc:
                log.info("the worker could not convert a weight (%s): numpy converts from now on", exc)
                _unavailable = True
    return numpy_float16(array)
