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
the float16 chunk beside it, and only the request's names cross. The file has two such slots: the next chunk is
copied into one while the worker converts the other. The file has no name, so nothing is left behind whatever ends
either process, and its size is bounded by :data:`CHUNK_ELEMENTS`. Where there is no such file
(macOS, Windows) or the worker cannot help (it crashed, or its onnxruntime cannot build the session), numpy
converts over threads, with the same bits.

Two things are done on the way, as the weights read before the decision need them
(:func:`float16_within_all`): each piece's bounds are found as it is copied in, while it is in the cache (the
decision's values check wants them, and a weight beyond float16's range is not converted), and the converted
chunk comes out of the shared file as a ``bytes`` object, which the API's output proto takes as it is
(:class:`~ampconfig.rewrite.tensors.HeldBytesTensor`), not as an array that ``tobytes`` would copy again.

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
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ampconfig.decide.value_ranges import Bounds, bounds, joined_bounds
from ampconfig.errors import AmpconfigError
from ampconfig.rewrite.tensors import LARGE_ARRAY_ELEMENTS, numpy_float16

# The worker's modules are imported where a weight is large enough to go there: a decision-only command (explain,
# lists, rewrite without a large weight) starts no worker and loads none of its modules (tests/cli/test_decision_only).

log = logging.getLogger(__name__)

#: Below this many elements numpy's own cast is as fast as a request to the worker.
MIN_ELEMENTS = LARGE_ARRAY_ELEMENTS
#: Elements converted per request: each of the shared file's two slots holds one chunk of float32 and its float16
#: (24 MiB a slot). While the worker converts one slot, the next chunk is copied into the other.
CHUNK_ELEMENTS = 1 << 22
_SLOT_BYTES = CHUNK_ELEMENTS * 6
_OUTPUT_OFFSET = CHUNK_ELEMENTS * 4  # within a slot
_SHARED_BYTES = 2 * _SLOT_BYTES
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
        self._sources = [np.ndarray((CHUNK_ELEMENTS,), np.float32, self._shared, slot * _SLOT_BYTES) for slot in (0, 1)]
        self.process = worker.current()
        arguments = {
            "model": large_bytes(_cast_model()),
            "device": "cpu",
            "tf32": False,
            "conv_algo_search": None,
            # Its threads sleep between requests rather than spin: they would take the cores this process's
            # copies into the other slot run on (measured on BERT-base: 0.397 s against 0.411 s, 2 cores).
            "config": {"session.intra_op.allow_spinning": "0"},
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
        """``array`` in float16."""
        done = self.convert_all([lambda: array], None, as_bytes=False)
        converted = done[0][1]
        assert converted is not None  # without a limit every chunk is converted
        return converted

    def convert_all(
        self, reads: Sequence[Callable[[], np.ndarray]], limit: float | None, *, as_bytes: bool
    ) -> dict[int, tuple[Bounds | None, np.ndarray | None]]:
        """By position in ``reads`` (each gives a float32 array, read when its turn comes), the array in float16
        and, given a ``limit``, its bounds (None without one), found on each piece as it is copied into the
        shared file: both from one read. Once an array's bounds exceed ``limit`` nothing more of it is converted,
        and it has no float16 array. An array of another dtype, or too small to be worth a request, is left out.

        Pipelined over the two slots: the next chunk is copied into one while the worker converts the other and
        the converted values are taken out of it. ``as_bytes``: each float16 array lies over one ``bytes`` object
        (the API's output proto takes it as it is: HeldBytesTensor); else an array of several chunks is filled
        chunk by chunk (a weight written to a file is never held twice)."""
        done: dict[int, tuple[Bounds | None, np.ndarray | None]] = {}
        progress: dict[int, _Progress] = {}
        chunks = _chunks(reads)
        current = next(chunks, None)
        slot = 0
        copying = self._start_copy(current, slot, limit is not None) if current is not None else []
        while current is not None:
            found = [future.result() for future in copying]
            following = next(chunks, None)
            copying = self._start_copy(following, 1 - slot, limit is not None) if following is not None else []
            state = progress.setdefault(current.index, _Progress())
            state.found += found
            if not state.beyond and limit is not None and not _within(state.found, limit):
                state.beyond, state.pieces, state.converted = True, [], None  # only the bounds are wanted now
            if not state.beyond:
                self._cast(slot, current, state, as_bytes)
            if current.last:
                del progress[current.index]
                known = joined_bounds(state.found) if limit is not None else None
                done[current.index] = (known, state.result(current.shape))
            current, slot = following, 1 - slot
        return done

    def _start_copy(self, chunk: _Chunk, slot: int, bounded: bool) -> list[Future[Bounds | None]]:
        return _copy(self._sources[slot][: chunk.values.size], chunk.values, bounded=bounded)

    def _cast(self, slot: int, chunk: _Chunk, state: _Progress, as_bytes: bool) -> None:
        """The worker's Cast of ``chunk``, copied into ``slot``; its float16 values into ``state``. An array of one
        chunk (most weights) comes out of the shared file as ``bytes``, one copy, which an output proto takes as
        it is (HeldBytesTensor), where an array would be copied once more by tobytes. A larger one is joined from
        its chunks' bytes ``as_bytes`` (the proto's copy would hold it twice anyway), else copied into its array
        chunk by chunk."""
        from ampconfig.worker.client import Phase

        count = chunk.values.size
        base = slot * _SLOT_BYTES
        arguments = {
            "id": self.session,
            "path": self.path,
            "size": _SHARED_BYTES,
            "inputs": {"x": (base, "float32", (count,))},
            "outputs": {"y": (base + _OUTPUT_OFFSET, "float16", (count,))},
        }
        self.process.ask("run_mapped", arguments, Phase.RUN, _WHAT)
        if (chunk.start == 0 and chunk.last) or as_bytes:
            state.pieces.append(self._shared[base + _OUTPUT_OFFSET : base + _OUTPUT_OFFSET + 2 * count])
            return
        if state.converted is None:
            state.converted = np.empty(chunk.size, np.float16)
        converted = np.ndarray((count,), np.float16, self._shared, base + _OUTPUT_OFFSET)
        for future in _copy(state.converted[chunk.start : chunk.start + count], converted, bounded=False):
            future.result()


@dataclass(frozen=True)
class _Chunk:
    """At most :data:`CHUNK_ELEMENTS` values of the array ``index`` (of ``shape``, ``size`` values), from its
    flat position ``start``; ``last``: its last chunk."""

    index: int
    values: np.ndarray
    start: int
    last: bool
    shape: tuple[int, ...]
    size: int


@dataclass
class _Progress:
    """One array's chunks so far: their bounds, and its float16 values (each chunk's ``bytes``, or an array filled
    chunk by chunk), unless ``beyond`` the limit."""

    found: list[Bounds | None] = field(default_factory=list)
    pieces: list[bytes] = field(default_factory=list)
    converted: np.ndarray | None = None
    beyond: bool = False

    def result(self, shape: tuple[int, ...]) -> np.ndarray | None:
        if self.beyond:
            return None
        if self.converted is not None:
            return self.converted.reshape(shape)
        held = self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)
        return np.frombuffer(held, np.float16).reshape(shape)


def _chunks(reads: Sequence[Callable[[], np.ndarray]]) -> Iterator[_Chunk]:
    """The chunks of each float32 array of :data:`MIN_ELEMENTS` or more, in order; each array read when its
    first chunk is wanted (at most two are held: the one converted, the next one copied)."""
    for index, read in enumerate(reads):
        array = read()
        if array.dtype != np.float32 or array.size < MIN_ELEMENTS:
            continue
        flat = array.reshape(-1)  # a copy only where ``array`` is not contiguous
        starts = range(0, flat.size, CHUNK_ELEMENTS)
        for start in starts:
            values = flat[start : start + CHUNK_ELEMENTS]
            yield _Chunk(index, values, start, start == starts[-1], array.shape, flat.size)


def _within(found: list[Bounds | None], limit: float) -> bool:
    known = joined_bounds(found)
    return known is not None and known.within(limit)


#: Elements one thread copies at a time.
_COPY_ELEMENTS = 1 << 20


@functools.cache
def _copiers() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="ampconfig-cast-copy")


def _copy(destination: np.ndarray, source: np.ndarray, *, bounded: bool) -> list[Future[Bounds | None]]:
    """``destination[...] = source`` over threads, begun (wait on the futures): the copies into the shared file
    are much of the conversion's cost here, and much of that is first touches of pages (a weight read from its
    file), which threads take in parallel as ONNX Runtime's own thread pool did when the Cast ran in this process.
    ``bounded``: each future gives the bounds of its piece, found while it is in the cache (else None)."""

    def copy(start: int) -> Bounds | None:
        piece = destination[start : start + _COPY_ELEMENTS]
        np.copyto(piece, source[start : start + _COPY_ELEMENTS])
        return bounds(piece) if bounded else None

    return [_copiers().submit(copy, start) for start in range(0, source.size, _COPY_ELEMENTS)]


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


def float16_within_all(
    reads: Sequence[Callable[[], np.ndarray]], limit: float
) -> list[tuple[Bounds | None, np.ndarray | None] | None]:
    """For each array ``reads`` give (each read when its turn comes), its
    :class:`~ampconfig.decide.value_ranges.Bounds` and, where they lie within ``limit`` (float16's largest value:
    nothing would be clamped), its float16 array, the bits of :func:`float32_to_float16`: one read of each array
    for both, the bounds found on each piece as it is copied to the worker, the next array copied while the
    worker converts this one. None for an array the worker does not convert (small or not float32, or the worker
    ended): the caller bounds and converts it itself."""
    global _unavailable
    found: list[tuple[Bounds | None, np.ndarray | None] | None] = [None] * len(reads)
    if not reads:
        return found  # no worker, nor its modules, for nothing (tests/cli/test_decision_only.py)
    from ampconfig.worker.client import WorkerRefused

    with _lock:
        cast = _worker_cast()
        if cast is None:
            return found
        try:
            for index, read in cast.convert_all(reads, limit, as_bytes=True).items():
                found[index] = read
        except (AmpconfigError, WorkerRefused) as exc:  # as in float32_to_float16: numpy from now on
            log.info("the worker could not convert a weight (%s): numpy converts from now on", exc)
            _unavailable = True
    return found
