"""A model's identity for a lock: a structural fingerprint and a weights hash, kept apart.

Retraining changes the weights and nothing else; a re-export (or an exporter upgrade) changes the graph. The lock
records both so that ``lock --check`` can say which one moved:

- **structure**: opset imports; per graph (subgraphs and model-local functions included) its inputs, outputs and
  declared value types, its initializers by name, type and shape, and each node in order: domain, op type, name,
  inputs, outputs and attributes (tensor attributes by type and shape only);
- **weights**: the values of every tensor, initializers (sparse ones too) and tensor attributes (Constant nodes),
  each under its name, as little-endian raw bytes whatever way the file stores them (raw_data, typed fields or
  external data, which is read one tensor at a time).

Pure: a proto in, two hex digests out. Nothing depends on dict or set order, so the digests are the same for every
Python hash seed and on every machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from ampconfig.domains import canonical_domain

#: Bytes read at a time from an external data file.
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelFingerprint:
    structure_sha256: str
    weights_sha256: str
    nodes: int
    opsets: dict[str, int]


def _type_text(proto: onnx.TypeProto) -> str:
    kind = proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tensor = getattr(proto, kind)
        if not tensor.HasField("shape"):
            return f"{kind}({tensor.elem_type},?)"
        dims = ",".join(
            str(d.dim_value) if d.HasField("dim_value") else (f"'{d.dim_param}'" if d.dim_param else "?")
            for d in tensor.shape.dim
        )
        return f"{kind}({tensor.elem_type},[{dims}])"
    if kind == "sequence_type":
        return f"seq({_type_text(proto.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"opt({_type_text(proto.optional_type.elem_type)})"
    if kind == "map_type":
        return f"map({proto.map_type.key_type},{_type_text(proto.map_type.value_type)})"
    return "?"


def _tensor_shape_text(tensor: onnx.TensorProto) -> str:
    return f"tensor({tensor.data_type},{list(tensor.dims)})"


class TensorBytes(Protocol):
    """A tensor that gives its values as little-endian raw bytes (an ``onnx_ir`` tensor)."""

    def tobytes(self) -> bytes: ...


class _Walker:
    """Feeds the structure and weights digests in one walk of the model."""

    def __init__(
        self,
        base_dir: Path | None,
        weights: bool = True,
        declared_types: bool = True,
        left_out: Mapping[str, TensorBytes] | None = None,
    ) -> None:
        self.structure = hashlib.sha256()
        self.weights = hashlib.sha256()
        self.base_dir = base_dir
        self.nodes = 0
        self.with_weights = weights
        self.with_declared_types = declared_types
        self.left_out = left_out or {}
        self._in_main = False

    def say(self, *parts: object) -> None:
        text = " ".join(str(part) for part in parts) + "\n"
        self.structure.update(text.encode("utf-8"))

    def tensor(self, where: str, tensor: onnx.TensorProto) -> None:
        self.say(where, repr(tensor.name), _tensor_shape_text(tensor))
        if not self.with_weights:
            return
        header = f"{where} {tensor.name!r} {_tensor_shape_text(tensor)}\n".encode()
        self.weights.update(header)
        for chunk in self._tensor_bytes(tensor):
            self.weights.update(chunk)

    def _tensor_bytes(self, tensor: onnx.TensorProto) -> Iterator[bytes]:
        if self._in_main and tensor.name in self.left_out:
            yield self.left_out[tensor.name].tobytes()  # a main-graph weight the proto holds without its bytes
        elif external_data_helper.uses_external_data(tensor):
            yield from self._external_bytes(tensor)
        elif tensor.HasField("raw_data"):
            yield tensor.raw_data
        elif tensor.data_type == onnx.TensorProto.STRING:
            for item in tensor.string_data:
                yield len(item).to_bytes(8, "little") + item
        else:
            array = numpy_helper.to_array(tensor)
            yield np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()

    def _external_bytes(self, tensor: onnx.TensorProto) -> Iterator[bytes]:
        # The model was opened by model_io.models.open_model, which checked every location and extent.
        info = {entry.key: entry.value for entry in tensor.external_data}
        base = self.base_dir or Path(".")
        offset = int(info.get("offset", "0") or 0)
        length = int(info["length"]) if info.get("length") else None
        with (base / info["location"]).open("rb") as handle:
            handle.seek(offset)
            remaining = length
            while remaining is None or remaining > 0:
                chunk = handle.read(_CHUNK if remaining is None else min(_CHUNK, remaining))
                if not chunk:
                    return
                if remaining is not None:
                    remaining -= len(chunk)
                yield chunk

    def graph(self, graph: onnx.GraphProto, scope: str) -> None:
        self.say("graph", repr(scope))
        for value in graph.input:
            self.say("input", repr(value.name), _type_text(value.type))
        for value in graph.output:
            self.say("output", repr(value.name), _type_text(value.type))
        for value in sorted(graph.value_info, key=lambda info: info.name) if self.with_declared_types else ():
            self.say("value", repr(value.name), _type_text(value.type))
        self._in_main = scope == ""
        for tensor in sorted(graph.initializer, key=lambda t: t.name):
            self.tensor("initializer", tensor)
        self._in_main = False
        for sparse in sorted(graph.sparse_initializer, key=lambda s: s.values.name):
            self.say("sparse", list(sparse.dims))
            self.tensor("sparse_values", sparse.values)
            self.tensor("sparse_indices", sparse.indices)
        for index, node in enumerate(graph.node):
            self.node(node, f"{scope}/{node.name or index}")

    def node(self, node: onnx.NodeProto, scope: str) -> None:
        self.nodes += 1
        self.say("node", repr(node.domain), repr(node.op_type), repr(node.name), list(node.input), list(node.output))
        for attribute in sorted(node.attribute, key=lambda a: a.name):
            self.attribute(attribute, scope)

    def attribute(self, attribute: onnx.AttributeProto, scope: str) -> None:
        name = repr(attribute.name)
        kind = attribute.type
        if attribute.ref_attr_name:
            self.say("attr", name, "ref", repr(attribute.ref_attr_name))
        elif kind == onnx.AttributeProto.TENSOR:
            self.tensor(f"attr {name}", attribute.t)
        elif kind == onnx.AttributeProto.TENSORS:
            for tensor in attribute.tensors:
                self.tensor(f"attr {name}", tensor)
        elif kind == onnx.AttributeProto.SPARSE_TENSOR:
            self.say("attr", name, "sparse", list(attribute.sparse_tensor.dims))
            self.tensor(f"attr {name} values", attribute.sparse_tensor.values)
            self.tensor(f"attr {name} indices", attribute.sparse_tensor.indices)
        elif kind == onnx.AttributeProto.GRAPH:
            self.say("attr", name, "graph")
            self.graph(attribute.g, f"{scope}.{attribute.name}")
        elif kind == onnx.AttributeProto.GRAPHS:
            for index, subgraph in enumerate(attribute.graphs):
                self.say("attr", name, "graph", index)
                self.graph(subgraph, f"{scope}.{attribute.name}[{index}]")
        else:
            value = onnx.helper.get_attribute_value(attribute)
            self.say("attr", name, kind, repr(value))


def model_fingerprint(
    proto: onnx.ModelProto,
    model_path: str | Path | None = None,
    *,
    weights: bool = True,
    declared_types: bool = True,
    left_out: Mapping[str, TensorBytes] | None = None,
) -> ModelFingerprint:
    """The structural fingerprint and the weights hash of ``proto`` (external tensors are read from the folder of
    ``model_path``, one chunk at a time). ``weights=False`` reads no tensor (``weights_sha256`` is then that of
    nothing). ``declared_types=False`` leaves out the declared types of intermediate values (``value_info``), which
    tools add and drop without moving any value: what a value ranges file is checked against. ``left_out``: the
    bytes of main-graph initializers ``proto`` holds without them (:func:`~ampconfig.model_io.models.weightless_proto`),
    by name: every weight is still read once."""
    base = Path(model_path).resolve().parent if model_path is not None else None
    walker = _Walker(base, weights, declared_types, left_out)
    opsets = {canonical_domain(entry.domain): int(entry.version) for entry in proto.opset_import}
    for domain in sorted(opsets):
        walker.say("opset", repr(domain), opsets[domain])
    walker.graph(proto.graph, "")
    for function in sorted(proto.functions, key=lambda f: (f.domain, f.name, f.overload)):
        walker.say("function", repr(function.domain), repr(function.name), repr(function.overload))
        walker.say("function io", list(function.input), list(function.output), list(function.attribute))
        for index, node in enumerate(function.node):
            walker.node(node, f"{function.domain}::{function.name}/{node.name or index}")
    return ModelFingerprint(
        structure_sha256=walker.structure.hexdigest(),
        weights_sha256=walker.weights.hexdigest(),
        nodes=walker.nodes,
        opsets=dict(sorted(opsets.items())),
    )
