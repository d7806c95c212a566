"""Converting initializers and Constant values to another float dtype: once per tensor, out-of-range values clamped
to the low type's largest finite value and recorded (which tensor, how many, the largest; every one a warning),
large tensors converted only when the output is written. The decisions convert such a tensor only when the user
asked for clamping, or when its out-of-range values are sentinels (``ampconfig.decide.value_ranges``).

float32 -> float16 goes through a :data:`Float16Encoder`. The API hands ONNX Runtime's Cast kernel
(``ampconfig.rewrite.float_cast.float32_to_float16``, 10-20x faster on large weights); numpy's own cast, split across
threads, is this module's default and the fallback. Nothing here imports ONNX Runtime.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache

import ml_dtypes
import numpy as np
import onnx_ir as ir

from ampconfig.decide.rewrite_options import Float16Encoder as Float16Encoder
from ampconfig.decide.value_ranges import SENTINEL, Bounds, bounds, joined_bounds
from ampconfig.dtypes import LOW_DTYPES, Dtype
from ampconfig.model_io.ir_bridge import ir_shape, release_mapped
from ampconfig.rewrite.results import ClampedTensor, RewriteStats

#: Arrays this large are worth a faster encoder (an ONNX Runtime session run costs more than numpy's cast below).
LARGE_ARRAY_ELEMENTS = 1 << 16

#: Elements per chunk when numpy's cast is spread over threads (numpy releases the GIL inside a cast).
_CHUNK = 1 << 20


@cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="ampconfig-cast")


def numpy_float16(array: np.ndarray) -> np.ndarray:
    """``array.astype(np.float16)``: numpy's portable cast (about 3.5 ns an element), chunks of large arrays in
    parallel threads."""
    if array.size < 2 * _CHUNK:
        return array.astype(np.float16)
    source = np.ascontiguousarray(array).reshape(-1)
    converted = np.empty(source.shape, np.float16)

    def convert(start: int) -> None:
        np.copyto(converted[start : start + _CHUNK], source[start : start + _CHUNK], casting="unsafe")

    list(_pool().map(convert, range(0, source.size, _CHUNK)))
    return converted.reshape(array.shape)


class HeldBytesTensor(ir.Tensor):  # type: ignore[type-arg]  # over any array, as ir.Tensor
    """A converted tensor whose array may lie over a ``bytes`` object (the worker's float16 conversion returns
    such arrays): ``tobytes`` hands that object on as it is, so the API's output proto takes the bytes without the
    copy numpy's ``tobytes`` makes (BERT-base: 218 MB). Any other array is serialised as onnx-ir does."""

    def tobytes(self) -> bytes:
        held = _held_bytes(self.raw)
        return held if held is not None else super().tobytes()


def _held_bytes(raw: object) -> bytes | None:
    """The ``bytes`` object ``raw``'s values are, byte for byte in little-endian order, or None."""
    if not isinstance(raw, np.ndarray) or not raw.flags.c_contiguous:
        return None
    if raw.dtype.byteorder == ">" or (raw.dtype.byteorder == "=" and sys.byteorder != "little"):
        return None
    base: object = raw.base
    while isinstance(base, np.ndarray):
        base = base.base
    return base if isinstance(base, bytes) and len(base) == raw.nbytes else None


#: In-memory tensors of at least this many bytes are converted while the output is serialised, one at a time,
#: not during the rewrite: the rewritten model then never holds every converted weight next to the serialised
#: output (peak memory stays near the output's own size).
LAZY_CONVERSION_BYTES = 1 << 20


def _low_limit(dtype: Dtype) -> np.float32:
    return np.float32(np.finfo(dtype.numpy).max if dtype is Dtype.FLOAT16 else ml_dtypes.finfo(dtype.numpy).max)


def _out_of_range(array: np.ndarray, dtype: Dtype) -> np.ndarray | None:
    """Mask of the finite elements beyond the low dtype's range, or None when there are none. Two reductions
    first, so the common case (everything in range) allocates nothing."""
    if dtype not in LOW_DTYPES or array.size == 0:
        return None
    limit = _low_limit(dtype)
    if array.max() <= limit and array.min() >= -limit:  # false when a NaN is present: checked element-wise below
        return None
    with np.errstate(invalid="ignore"):
        over = np.isfinite(array) & (np.abs(array) > limit)
    return over if over.any() else None


#: Up to this many elements, an array is checked for inf and NaN with ``isfinite``; beyond, through its bits.
_SMALL_ELEMENTS = 4096

#: Bits of a low-precision value's exponent field: all set means inf or NaN.
_EXPONENT_BITS = {"float16": 0x7C00, "bfloat16": 0x7F80}


def _has_inf_or_nan(low: np.ndarray, dtype: str) -> bool:
    """Any inf or NaN in a float16/bfloat16 array, from its bits: two integer reductions over half the bytes the
    float32 source has. Positive ones are the int16 values >= the exponent bits, negative ones the uint16 values
    >= sign | exponent bits."""
    if low.size == 0:
        return False
    if low.size <= _SMALL_ELEMENTS:  # the two reductions below cost more than one isfinite where arrays are small
        return not np.isfinite(low).all()
    bits, exponent = low.view(np.uint16), _EXPONENT_BITS[dtype]
    return bool(bits.view(np.int16).max() >= exponent or bits.max() >= 0x8000 | exponent)


#: Elements per encoder call when the deferred small tensors are converted together: under
#: :data:`LARGE_ARRAY_ELEMENTS`, like each of them.
_BATCH_ELEMENTS = LARGE_ARRAY_ELEMENTS // 2


@dataclass
class _Deferred:
    """A small float32 tensor whose float16 bits are written into ``out`` (the array its converted tensor already
    holds) when the converter finishes, in one cast with every other such tensor."""

    source: np.ndarray
    out: np.ndarray
    name: str


@dataclass
class TensorConverter:
    """Converts tensors for one rewrite and counts what it clamped into ``stats``.

    Small in-memory float32 -> float16 conversions are batched: :meth:`convert` returns their tensor at once, over
    an array filled by :meth:`finish`, which casts all of them in one call (a graph's thousands of tiny weights
    cost one cast and one inf/NaN check, not thousands). The bits are those of the tensor-by-tensor conversion:
    a batch holding an inf or NaN after the cast is converted tensor by tensor instead. Until :meth:`finish` the
    statistics are incomplete and those tensors' values unset; what was clamped is recorded in conversion order.
    Tensors of :data:`LARGE_ARRAY_ELEMENTS` or more are converted at once, each by the encoder, as before."""

    stats: RewriteStats
    encode_float16: Float16Encoder = field(default=numpy_float16)
    #: the bounds the values check found of large constants, by tensor (:class:`ampconfig.decide.value_ranges.Bounds`):
    #: such a tensor within the low type's range is converted with one read of its values, not three (the range
    #: count here and the look for inf and NaN after the cast are answered by its bounds)
    bounds: Mapping[ir.TensorProtocol, Bounds] = field(default_factory=dict)
    #: the float16 array of large weights read before the decision (:class:`WeightReads`), by tensor: taken (and
    #: removed) by the conversion of each instead of reading and casting it again
    float16: dict[ir.TensorProtocol, np.ndarray] = field(default_factory=dict)
    #: conversions awaiting :meth:`finish`, with the clamping records of the others in between (their order)
    _pending: list[_Deferred | tuple[str, Dtype, Clamped]] = field(default_factory=list)

    def cast(self, array: np.ndarray, dtype: Dtype) -> np.ndarray:
        with np.errstate(over="ignore"):  # overflow is expected here: the caller finds the infs and clamps
            if dtype is Dtype.FLOAT16 and array.dtype == np.float32:
                return self.encode_float16(array)
            return array.astype(dtype.numpy)

    def convert_array(self, array: np.ndarray, dtype: Dtype) -> tuple[np.ndarray, Clamped]:
        """``array`` in ``dtype`` and what of it was clamped to the low type's max (it would have become inf).
        Converted first and checked on the result: values out of range show as inf, so the common case costs one
        cheap check, and only an array with an inf or NaN is examined element by element."""
        converted = self.cast(array, dtype)
        if dtype not in LOW_DTYPES or not _has_inf_or_nan(converted, dtype):
            return converted, NOTHING_CLAMPED
        over = _out_of_range(array, dtype)
        if over is None:
            return converted, NOTHING_CLAMPED  # the infs and NaNs were there before
        clamped = np.where(over, np.sign(array) * _low_limit(dtype), array).astype(array.dtype)
        return self.cast(clamped, dtype), _clamped(array, over)

    def _record(self, name: str, dtype: Dtype, clamped: Clamped) -> None:
        if self._pending:  # after the deferred conversions before it, as if each had been converted at once
            self._pending.append((name, dtype, clamped))
            return
        if clamped.count:
            self.stats.values_clamped += clamped.count
            self.stats.clamped.append(
                ClampedTensor(name, dtype.value, clamped.count, clamped.largest, clamped.sentinel)
            )

    def convert(self, tensor: ir.TensorProtocol, dtype: Dtype, name: str) -> ir.TensorProtocol:
        name = name or tensor.name or ""
        if isinstance(tensor, ir.ExternalTensor) or (
            tensor in self.bounds and tensor.nbytes >= LAZY_CONVERSION_BYTES
        ):  # converted when written: its values are not read now
            return self._converted_when_written(tensor, dtype, name)
        # Graphs with thousands of small weights pay this per tensor: the array is read once (its size decides
        # the path; ``tensor.nbytes`` would build the shape again) and the shape is built once.
        source = tensor.numpy()
        if source.nbytes >= LAZY_CONVERSION_BYTES:
            return self._converted_when_written(tensor, dtype, name, source)
        if dtype is Dtype.FLOAT16 and source.dtype == np.float32 and source.size < LARGE_ARRAY_ELEMENTS:
            array = np.empty(source.shape, np.float16)
            self._pending.append(_Deferred(source, array, name))
        else:
            array, clamped = self.convert_array(source, dtype)
            self._record(name, dtype, clamped)
        # ir.Tensor, not the ir.tensor() convenience: that one runs Protocol isinstance checks costing ~0.1 ms a
        # tensor, which dominates on graphs with thousands of small weights. The source's (frozen) shape is
        # reused rather than rebuilt from the array, for the same reason.
        return ir.Tensor(array, dtype=dtype.data_type, shape=ir_shape(tensor.shape), name=name)

    def finish(self) -> None:
        """Convert the deferred tensors, in one cast where none of them holds an inf or NaN once converted, and
        record what was clamped, in conversion order."""
        pending, self._pending = self._pending, []
        deferred = [entry for entry in pending if isinstance(entry, _Deferred)]
        batched = None
        if deferred:
            joined = np.concatenate([entry.source.reshape(-1) for entry in deferred])
            converted = np.empty(joined.shape, np.float16)
            # The encoder sees small arrays, as it did tensor by tensor (a larger one would be worth starting
            # ONNX Runtime for, where an encoder uses it); its contract makes the bits the same.
            for begin in range(0, joined.size, _BATCH_ELEMENTS):
                converted[begin : begin + _BATCH_ELEMENTS] = self.cast(
                    joined[begin : begin + _BATCH_ELEMENTS], Dtype.FLOAT16
                )
            batched = None if _has_inf_or_nan(converted, Dtype.FLOAT16) else converted
        start = 0
        for entry in pending:
            if not isinstance(entry, _Deferred):
                self._record(*entry)
                continue
            if batched is not None:
                size = entry.source.size
                entry.out[...] = batched[start : start + size].reshape(entry.out.shape)
                start += size
                continue
            converted, clamped = self.convert_array(entry.source, Dtype.FLOAT16)
            entry.out[...] = converted
            self._record(entry.name, Dtype.FLOAT16, clamped)

    def _converted_when_written(
        self, tensor: ir.TensorProtocol, dtype: Dtype, name: str, source: np.ndarray | None = None
    ) -> ir.LazyTensor:
        """A large tensor is converted when the output is written (or the API's proto built), one tensor at a
        time, so the converted copy lives only until it is written, and a model larger than memory can be
        rewritten. Its out-of-range values are recorded now, so the statistics and warnings are complete when the
        rewrite returns: from the bounds the values check found, where they lie within the low type's range (then
        the values are read once, when written), else in one pass over the source (memory-mapped for a tensor on
        disk; ``source`` where it was read already)."""
        known = self.bounds.get(tensor)
        # Within the low type's range, nothing is clamped and the cast makes no inf or NaN: the bounds say so.
        fits = dtype not in LOW_DTYPES or (known is not None and known.within(float(_low_limit(dtype))))
        if fits:
            self._record(name, dtype, NOTHING_CLAMPED)
        else:
            self._record(name, dtype, count_out_of_range(tensor.numpy() if source is None else source, dtype))
        del source  # not kept for the conversion: the converted copy is made when written
        release_mapped(tensor)
        # Cast already where the weights were read before the decision: taken by the first write only, so the
        # model does not keep it once the output holds its bytes (a second write converts again).
        cast_before = [self.float16.pop(tensor)] if fits and dtype is Dtype.FLOAT16 and tensor in self.float16 else []

        def convert() -> ir.TensorProtocol:
            if cast_before:
                return HeldBytesTensor(cast_before.pop(), dtype=dtype.data_type)
            source = tensor.numpy()
            converted = self.cast(source, dtype) if fits else self.convert_array(source, dtype)[0]
            del source  # a view of the mapped file: gone before the file is unmapped
            release_mapped(tensor)
            return HeldBytesTensor(converted, dtype=dtype.data_type)

        return ir.LazyTensor(convert, dtype.data_type, ir_shape(tensor.shape), name=name)


@dataclass
class WeightReads:
    """Large float32 weights held in a protobuf message, read once before the decision. Each read of such a weight
    copies its bytes out of the message (onnx-ir's ``TensorProtoTensor.numpy``: 440 MB of BERT-base cost about
    0.13 s a read here), and the decision's values check and the float16 conversion each read it: ``bounds``
    answers the first (:attr:`~ampconfig.decide.decision_state.DecisionState.constant_bounds`), and ``float16``,
    the float16 array of each weight within float16's range, cast by the rewrite's encoder, answers the second
    (:attr:`TensorConverter.float16`)."""

    bounds: dict[ir.TensorProtocol, Bounds] = field(default_factory=dict)
    float16: dict[ir.TensorProtocol, np.ndarray] = field(default_factory=dict)


#: Reads arrays (each when its turn comes) and gives, for each, its bounds and, where they lie within the limit
#: given, its float16 array, from one read; None for an array it leaves to the caller
#: (``ampconfig.rewrite.float_cast.float16_within_all``).
BoundedFloat16Reader = Callable[
    [Sequence[Callable[[], np.ndarray]], float], "list[tuple[Bounds | None, np.ndarray | None] | None]"
]


def read_weights(
    tensors: Iterable[ir.TensorProtocol],
    encode_float16: Float16Encoder,
    read_within: BoundedFloat16Reader | None = None,
) -> WeightReads:
    """:class:`WeightReads` of ``tensors``: those of :data:`LAZY_CONVERSION_BYTES` or more (the ones converted when
    written) whose read is a copy out of a protobuf message; other tensors are left to be read where used (an
    array in memory costs nothing to read, a weight on disk is mapped). The float16 arrays are the bits the
    conversion would write: the same encoder, on the same values (within float16's range: nothing clamped).
    ``read_within``, where given, is the encoder's own reader of bounds and float16 arrays in one pass."""
    wanted: dict[ir.TensorProtocol, None] = {}  # in order, each once
    for tensor in tensors:
        is_float = isinstance(tensor, ir.TensorProtoTensor) and tensor.dtype == ir.DataType.FLOAT
        if is_float and tensor.nbytes >= LAZY_CONVERSION_BYTES:
            wanted.setdefault(tensor)
    limit = float(_low_limit(Dtype.FLOAT16))
    found = read_within([tensor.numpy for tensor in wanted], limit) if read_within is not None else [None] * len(wanted)
    reads = WeightReads()
    for tensor, read in zip(wanted, found, strict=True):
        if read is None:
            array = tensor.numpy()
            known = _bounds_over_threads(array)
            float16 = encode_float16(array) if known is not None and known.within(limit) else None
            del array
        else:
            known, float16 = read
        if known is None:
            continue
        reads.bounds[tensor] = known
        if float16 is not None:
            reads.float16[tensor] = float16
    return reads


def _bounds_over_threads(array: np.ndarray) -> Bounds | None:
    """:func:`~ampconfig.decide.value_ranges.bounds` of a large array, a chunk per thread: numpy's reductions
    release the GIL, and the chunks' bounds give the array's (a NaN in one chunk is the NaN of both)."""
    flat = array.reshape(-1)
    if flat.size <= _CHUNK:
        return bounds(flat)
    return joined_bounds(_pool().map(bounds, (flat[start : start + _CHUNK] for start in range(0, flat.size, _CHUNK))))


@dataclass(frozen=True)
class Clamped:
    """What of a tensor lies beyond a low type's range: how many values, the largest |value|, and whether every
    one of them sits at float32's own extremes (a sentinel: ampconfig.decide.value_ranges)."""

    count: int
    largest: float
    sentinel: bool


NOTHING_CLAMPED = Clamped(0, 0.0, False)


def _clamped(array: np.ndarray, over: np.ndarray) -> Clamped:
    beyond = np.abs(array[over])
    return Clamped(int(beyond.size), float(beyond.max()), bool((beyond >= SENTINEL).all()))


def _merged(parts: Iterable[Clamped]) -> Clamped:
    found = [part for part in parts if part.count]
    if not found:
        return NOTHING_CLAMPED
    return Clamped(sum(p.count for p in found), max(p.largest for p in found), all(p.sentinel for p in found))


#: Elements per chunk when values are counted against the low type's range: small enough to stay in cache, so
#: the two reductions of a chunk cost one pass over memory.
_COUNT_CHUNK = 1 << 18


def count_out_of_range(array: np.ndarray, dtype: Dtype) -> Clamped:
    """What finite values of ``array`` lie beyond the largest finite value of ``dtype`` (they are clamped to it
    when converted): per cache-sized chunk two reductions, over threads, and an element-wise look only in a chunk
    that has such a value (or a NaN)."""
    if dtype not in LOW_DTYPES or array.size == 0:
        return NOTHING_CLAMPED
    flat = np.ascontiguousarray(array).reshape(-1)

    def count(start: int) -> Clamped:
        chunk = flat[start : start + _COUNT_CHUNK]
        over = _out_of_range(chunk, dtype)
        return NOTHING_CLAMPED if over is None else _clamped(chunk, over)

    if flat.size <= _COUNT_CHUNK:
        return count(0)
    return _merged(_pool().map(count, range(0, flat.size, _COUNT_CHUNK)))


def set_dtype(value: ir.Value, dtype: Dtype) -> None:
    """Give ``value`` a tensor type of ``dtype``; its shape is kept."""
    value.type = ir.TensorType(dtype.data_type)
