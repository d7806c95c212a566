"""A model serialised once without its large weights, then written to a file, or completed, from that.

Serialising an onnx-ir model copies every weight into the protobuf message, ``SerializeToString`` copies it again
and ``ByteSize`` (which upb computes by serialising) once more: on a 440 MB BERT those copies were most of a
rewrite's time and memory. The skeleton is the model exactly as onnx-ir serialises it, except that each large
main-graph initializer has empty ``raw_data``; the tensors themselves are kept aside. From it:

- ONNX's checker sees :func:`~ampconfig.model_io.models.light_proto` of the skeleton (the large initializers as
  graph inputs of their type and shape), which is what it saw of the full model before;
- :meth:`ModelSkeleton.write` writes the model file in one pass: the skeleton's bytes, with each weight written
  in its place straight from its array (or, for a weight still in the input file, copied by the kernel), one
  weight at a time. The bytes are the ones ``full_proto().SerializeToString()`` gives;
- :meth:`ModelSkeleton.full_proto` is the complete ``onnx.ModelProto``, for the Python API and in-memory sessions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import onnx
import onnx_ir as ir

from ampconfig.model_io import wire
from ampconfig.model_io.ir_bridge import ir_shape, release_mapped, to_proto

#: Initializers of more bytes than this are kept out of the skeleton (the size light_proto lifts from).
STREAM_BYTES = 1024

#: Marks a tensor read lazily from the input model file itself (not from an external data file): it is written
#: into the output like an in-memory one.
IN_MODEL_FILE = "ampconfig.in_model_file"

_GRAPH = onnx.ModelProto.GRAPH_FIELD_NUMBER
_INITIALIZER = onnx.GraphProto.INITIALIZER_FIELD_NUMBER
_RAW_DATA = onnx.TensorProto.RAW_DATA_FIELD_NUMBER


def _no_data() -> ir.TensorProtocol:
    return ir.Tensor(np.empty(0, np.uint8))


def _streamed(tensor: ir.TensorProtocol) -> bool:
    """Whether a main-graph initializer is kept out of the skeleton: large, stored as raw bytes, and not in an
    external data file (those stay references, as onnx-ir serialises them)."""
    if tensor.dtype == ir.DataType.STRING or tensor.nbytes <= STREAM_BYTES:
        return False
    return not isinstance(tensor, ir.ExternalTensor) or bool(tensor.meta.get(IN_MODEL_FILE))


@dataclass(frozen=True)
class ModelSkeleton:
    """``proto`` is ``model`` with the ``raw_data`` of each streamed initializer empty; ``streamed`` maps the
    position of such an initializer in ``proto.graph.initializer`` to its tensor, read only when written."""

    model: ir.Model
    proto: onnx.ModelProto
    streamed: Mapping[int, ir.TensorProtocol]

    def full_proto(self) -> onnx.ModelProto:
        """The complete model proto, each streamed weight copied into it (the skeleton is left as it is)."""
        full = onnx.ModelProto()
        full.CopyFrom(self.proto)
        initializers = full.graph.initializer
        for index, tensor in self.streamed.items():
            initializers[index].raw_data = tensor.tobytes()
            release_mapped(tensor)
        return full

    def write(self, file: BinaryIO) -> int:
        """Write the model to ``file`` (opened for binary writing) in one pass; returns the bytes written."""
        data = self.proto.SerializeToString()
        graph_field = next((f for f in wire.fields(data) if f[0] == _GRAPH), None)
        if graph_field is None:  # no graph: nothing streamed either
            file.write(data)
            return len(data)
        _, graph_start, graph_payload, graph_end = graph_field
        pieces = _graph_pieces(data, graph_payload, graph_end, self.streamed)
        graph_length = sum(piece.tensor.nbytes if isinstance(piece, _Weight) else len(piece) for piece in pieces)
        start = file.tell()
        file.write(data[:graph_start])
        file.write(wire.length_delimited_header(_GRAPH, graph_length))
        for piece in pieces:
            if isinstance(piece, _Weight):
                piece.write(file)
            else:
                file.write(piece)
        file.write(data[graph_end:])
        return file.tell() - start


@dataclass(frozen=True)
class _Weight:
    """A streamed initializer's raw bytes, written from its tensor."""

    tensor: ir.TensorProtocol

    def write(self, file: BinaryIO) -> None:
        before = file.tell()
        # An array's buffer as it is; a tensor on disk by copy_file_range where it can. Every onnx-ir tensor class
        # has tofile (onnx-ir 0.1.11); TensorProtocol does not declare it.
        self.tensor.tofile(file)  # type: ignore[attr-defined]
        written = file.tell() - before
        release_mapped(self.tensor)
        if written != self.tensor.nbytes:
            name = self.tensor.name
            raise AssertionError(f"initializer {name!r}: {written} bytes written, {self.tensor.nbytes} expected")


def _graph_pieces(
    data: bytes, start: int, end: int, streamed: Mapping[int, ir.TensorProtocol]
) -> list[memoryview | bytes | _Weight]:
    """The graph's bytes in order: slices of ``data`` and, for each streamed initializer, its key and length,
    the tensor's bytes before its raw data, the raw data's key and length, the weight, and the bytes after."""
    view = memoryview(data)
    pieces: list[memoryview | bytes | _Weight] = []
    copied_to = start
    index = 0
    remaining = len(streamed)
    for number, field_start, payload, field_end in wire.fields(data, start, end):
        if remaining == 0:
            break
        if number != _INITIALIZER:
            continue
        tensor = streamed.get(index)
        index += 1
        if tensor is None:
            continue
        remaining -= 1
        pieces.append(view[copied_to:field_start])
        copied_to = field_end
        head, tail = _split_at_raw_data(view[payload:field_end])
        nbytes = tensor.nbytes
        raw_key = wire.length_delimited_header(_RAW_DATA, nbytes)
        length = len(head) + len(raw_key) + nbytes + len(tail)
        pieces += [wire.length_delimited_header(_INITIALIZER, length), head, raw_key, _Weight(tensor), tail]
    if remaining:
        raise AssertionError(f"{remaining} streamed initializer(s) not found in the serialised graph")
    pieces.append(view[copied_to:end])
    return pieces


def _split_at_raw_data(tensor_bytes: memoryview) -> tuple[memoryview, memoryview]:
    """A serialised TensorProto with empty ``raw_data``: the bytes before that field and after it."""
    for number, field_start, payload, field_end in wire.fields(tensor_bytes):
        if number == _RAW_DATA:
            if payload != field_end:
                raise AssertionError("a streamed initializer's skeleton holds data")
            return tensor_bytes[:field_start], tensor_bytes[field_end:]
    raise AssertionError("a streamed initializer's skeleton has no raw_data field")


def skeleton_of(model: ir.Model) -> ModelSkeleton:
    """Serialise ``model`` once, its large main-graph initializers without their data (see the module doc)."""
    graph = model.graph
    streamed: dict[int, ir.TensorProtocol] = {}
    swapped: list[tuple[ir.Value, ir.TensorProtocol]] = []
    index = 0
    for value in graph.initializers.values():
        tensor = value.const_value
        if tensor is None:
            continue  # onnx-ir does not serialise an initializer without a value
        if _streamed(tensor):
            streamed[index] = tensor
            value.const_value = ir.LazyTensor(
                _no_data,
                tensor.dtype,
                ir_shape(tensor.shape),
                name=value.name,
                doc_string=tensor.doc_string,
                metadata_props=dict(tensor.metadata_props),
            )
            swapped.append((value, tensor))
        index += 1
    try:
        proto = to_proto(model)  # stand-ins put back: they never hold a streamed initializer
    finally:
        for value, tensor in swapped:
            value.const_value = tensor
    return ModelSkeleton(model, proto, streamed)
