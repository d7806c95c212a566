"""Single-file models opened with their weights left in the file, read through a memory map when used.

A model under 2 GB keeps its weights inline, as the ``raw_data`` of its initializers: ``onnx.load`` reads the
file into memory and parses it into a second copy (twice the model at once), and every weight stays in memory
while the model is rewritten. Here the file is memory-mapped and its protobuf walked field by field, down to the
initializers of the main graph (nodes and other fields are skipped over, not parsed). The model is parsed from a
copy without the large weights, each of which becomes an ONNX external-data reference to its own bytes in the
model file (``location`` the file's name, ``offset`` and ``length`` its raw data). onnx-ir maps each weight when
it is converted or written and unmaps it after (``ampconfig/rewrite/tensors.py``, ``model_io/skeleton.py``): the
file's pages stay in the page cache, not in the process.
"""

from __future__ import annotations

import logging
import mmap
import os
from functools import cache
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from ampconfig.model_io import wire

log = logging.getLogger(__name__)

#: Files smaller than this are parsed whole (read at call time, so tests can lower it): the walk is Python and
#: pays off where weights, not nodes, make up the file.
MAP_MIN_BYTES = 32 << 20
#: Initializers of at least this many bytes stay in the file; smaller ones are parsed with the graph.
MAP_TENSOR_BYTES = 64 << 10

_GRAPH = onnx.ModelProto.GRAPH_FIELD_NUMBER
_INITIALIZER = onnx.GraphProto.INITIALIZER_FIELD_NUMBER
_DIMS = onnx.TensorProto.DIMS_FIELD_NUMBER
_DATA_TYPE = onnx.TensorProto.DATA_TYPE_FIELD_NUMBER
_RAW_DATA = onnx.TensorProto.RAW_DATA_FIELD_NUMBER
_EXTERNAL_DATA = onnx.TensorProto.EXTERNAL_DATA_FIELD_NUMBER
_DATA_LOCATION = onnx.TensorProto.DATA_LOCATION_FIELD_NUMBER
#: Fields holding a tensor's values other than raw_data (float_data, int32_data, ..., uint64_data).
_OTHER_DATA = frozenset({4, 5, 6, 7, 10, 11})


def mappable(path: Path) -> bool:
    """A plain file large enough to map: not a symlink or hard link (onnx-ir refuses external data reached through
    one), and at least :data:`MAP_MIN_BYTES`."""
    try:
        status = os.lstat(path)
    except OSError:
        return False
    return os.path.isfile(path) and not path.is_symlink() and status.st_nlink == 1 and status.st_size >= MAP_MIN_BYTES


def read_mapped(path: Path) -> onnx.ModelProto | None:
    """The model at ``path`` parsed without its large main-graph weights, each an external-data reference into
    the file itself; None when the file is not laid out so (it is then read whole): malformed, no graph, more
    than one graph field, or no initializer worth leaving in the file."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        try:
            stripped = _without_large_weights(data, path.name)
        except (ValueError, IndexError) as exc:  # parsed whole, which reports what is wrong
            log.debug("%s read whole: %s", path, exc)
            return None
    if stripped is None:
        return None
    try:
        return onnx.ModelProto.FromString(stripped)
    except DecodeError as exc:
        log.debug("%s read whole: %s", path, exc)
        return None


def _without_large_weights(data: mmap.mmap, location: str) -> bytes | None:
    graphs = [field for field in wire.fields(data) if field[0] == _GRAPH]
    if len(graphs) != 1:
        return None
    _, graph_start, graph_payload, graph_end = graphs[0]
    pieces: list[bytes] = []
    copied_to = graph_payload
    for number, field_start, payload, field_end in wire.fields(data, graph_payload, graph_end):
        if number != _INITIALIZER or field_end - payload < MAP_TENSOR_BYTES:
            continue
        reference = _as_reference(data, payload, field_end, location)
        if reference is None:
            continue
        pieces += [data[copied_to:field_start], wire.length_delimited_header(_INITIALIZER, len(reference)), reference]
        copied_to = field_end
    if not pieces:
        return None
    pieces.append(data[copied_to:graph_end])
    graph_length = sum(len(piece) for piece in pieces)
    head = data[:graph_start] + wire.length_delimited_header(_GRAPH, graph_length)
    return b"".join([head, *pieces, data[graph_end:]])


def _as_reference(data: mmap.mmap, start: int, end: int, location: str) -> bytes | None:
    """The TensorProto in ``data[start:end]`` with its raw data replaced by an external-data reference to it, or
    None when it stays as it is (small, not raw data, already external, or a length its shape does not match)."""
    raw: tuple[int, int, int, int] | None = None
    dims: list[int] = []
    data_type = 0
    for number, field_start, payload, field_end in wire.fields(data, start, end):
        if number == _RAW_DATA:
            raw = (field_start, payload, field_end, field_end - payload)
        elif number in (_EXTERNAL_DATA, _DATA_LOCATION) or number in _OTHER_DATA:
            return None
        elif number == _DATA_TYPE:
            data_type = wire.read_varint(data, payload)[0]
        elif number == _DIMS:
            dims += _dims(data, payload, field_end, field_start)
    if raw is None or raw[3] < MAP_TENSOR_BYTES:
        return None
    field_start, payload, field_end, length = raw
    itemsize = _itemsize(data_type)
    count = 1
    for dim in dims:
        count *= dim
    if itemsize is None or count * itemsize != length:
        return None
    entries = b"".join(
        wire.length_delimited_header(_EXTERNAL_DATA, len(entry)) + entry
        for entry in (_entry("location", location), _entry("offset", str(payload)), _entry("length", str(length)))
    )
    location_field = wire.varint(_DATA_LOCATION << 3 | wire.VARINT) + wire.varint(onnx.TensorProto.EXTERNAL)
    return data[start:field_start] + data[field_end:end] + entries + location_field


def _dims(data: mmap.mmap, payload: int, end: int, field_start: int) -> list[int]:
    """The dimension(s) of one ``dims`` field: a varint, or a packed run of them."""
    key, _ = wire.read_varint(data, field_start)
    if key & 7 == wire.VARINT:
        return [wire.read_varint(data, payload)[0]]
    values, position = [], payload
    while position < end:
        value, position = wire.read_varint(data, position)
        values.append(value)
    return values


def _entry(key: str, value: str) -> bytes:
    """A StringStringEntryProto: key (field 1) and value (field 2)."""
    key_bytes, value_bytes = key.encode(), value.encode()
    return (
        wire.length_delimited_header(1, len(key_bytes)) + key_bytes + wire.length_delimited_header(2, len(value_bytes))
    ) + value_bytes


@cache
def _itemsize(data_type: int) -> int | None:
    """Bytes per element of an ONNX element type stored one element per whole number of bytes; None for strings,
    sub-byte types and unknown numbers."""
    if data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(data_type)
    except (KeyError, ValueError, TypeError):
        return None
    sub_byte = ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2", "FLOAT6E2M3", "FLOAT6E3M2")
    packed = {getattr(onnx.TensorProto, name, None) for name in sub_byte}
    return None if data_type in packed else dtype.itemsize
