"""The output's IR version: lowered to what the installed ONNX Runtime loads, when the model uses nothing newer.

onnx 1.23 stamps IR version 14 on the models it makes; ONNX Runtime 1.31 refuses them ("Unsupported model IR
version: 14, max supported IR version: 13"). ORT's limit is the ``IR_VERSION`` of the ONNX release it was built
with (``onnxruntime/core/graph/model.cc`` compares the model's ``ir_version`` with it), so it is known from the
installed ORT's version, read from its package metadata: onnxruntime itself is never imported here (``rewrite``
does not need it).

An IR version only adds things (see the ``Version`` enum of ``onnx/onnx.proto``), so a model that uses none of
what the versions above the limit added is the same model at the lower version.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Iterator
from dataclasses import dataclass

import onnx
from onnx import TensorProto

from ampconfig.errors import AmpconfigError

#: The Python distributions that install the ``onnxruntime`` package, in the order they are looked up.
ORT_DISTRIBUTIONS = (
    "onnxruntime-gpu",
    "onnxruntime",
    "onnxruntime-directml",
    "onnxruntime-openvino",
    "onnxruntime-qnn",
    "onnxruntime-training",
)

#: (first ORT release of the row, the highest IR version it loads), oldest first. Each row is evidence, not a
#: guess: a release between two rows is given the lower row's limit, which loads in every later release too.
ORT_MAX_IR_VERSION: tuple[tuple[tuple[int, int], int], ...] = (
    # microsoft/onnxruntime#15874: 1.14.1 says "Unsupported model IR version: 9, max supported IR version: 8".
    ((1, 14), 8),
    # microsoft/onnxruntime#16638 (1.15.1's Python package loads IR 9); #20559: 1.16 and 1.17.1 say "max 9".
    ((1, 15), 9),
    # 1.18 integrated ONNX 1.16 (IR 10; microsoft/onnxruntime#19783); #23602: 1.20.1 says "max supported IR
    # version: 10"; onnxruntime.ai/docs/reference/compatibility.html listed IR 10 for the releases up to 1.22.
    ((1, 18), 10),
    # Measured on onnxruntime-gpu 1.31.1: IR 13 loads, IR 14 "max supported IR version: 13"
    # (tests/models/test_real_exports.py checks this row against the installed ORT).
    ((1, 31), 13),
)

#: Element types by the IR version that added them (onnx.proto's ``Version`` enum comments).
_TYPES_ADDED: dict[int, tuple[int, ...]] = {
    9: (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ),
    10: (TensorProto.UINT4, TensorProto.INT4),
    11: (getattr(TensorProto, "FLOAT4E2M1", 23),),
    12: (getattr(TensorProto, "FLOAT8E8M0", 24),),
    13: (getattr(TensorProto, "UINT2", 25), getattr(TensorProto, "INT2", 26)),
    14: (getattr(TensorProto, "FLOAT6E2M3", 27), getattr(TensorProto, "FLOAT6E3M2", 28)),
}
#: IR 14 also made TypeProto.Opaque part of non-ONNX-ML builds; ONNX Runtime is an ONNX-ML build, where it has
#: always existed, so an opaque type does not need IR 14 there.

#: Integer attributes that hold an element type (Cast's ``to``, RandomNormal's ``dtype``, ...).
_TYPE_ATTRIBUTES = frozenset({"to", "dtype", "output_dtype"})


@dataclass(frozen=True)
class IrVersionChoice:
    """The IR version the output gets, and why it differs from the input's (None when it does not)."""

    version: int
    note: str | None = None


@functools.lru_cache(maxsize=1)
def installed_onnxruntime() -> tuple[str, str] | None:
    """(distribution, version) of the installed ONNX Runtime, read from package metadata (once: a lookup scans
    the installed distributions); None if none is."""
    for distribution in ORT_DISTRIBUTIONS:
        try:
            return distribution, importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def max_ir_version_loadable(ort_version: str) -> int | None:
    """The highest IR version ONNX Runtime ``ort_version`` loads (per :data:`ORT_MAX_IR_VERSION`); None for a
    release older than the table or a version string that cannot be read."""
    try:
        major, minor = (int(part) for part in ort_version.split(".")[:2])
    except ValueError:
        return None
    limit = None
    for (first_major, first_minor), max_ir in ORT_MAX_IR_VERSION:
        if (major, minor) >= (first_major, first_minor):
            limit = max_ir
    return limit


def features_newer_than(model: onnx.ModelProto, version: int) -> list[str]:
    """What ``model`` uses that IR versions above ``version`` added, in words (empty: it is valid at ``version``)."""
    newer = {elem: ir for ir, elems in _TYPES_ADDED.items() if ir > version for elem in elems}
    found: dict[str, None] = {}
    for elem in _element_types(model):
        if elem in newer:
            found[f"element type {TensorProto.DataType.Name(elem)} (IR {newer[elem]})"] = None
    for feature, added in _structural_features(model):
        if added > version:
            found[f"{feature} (IR {added})"] = None
    return list(found)


def output_ir_version(model: onnx.ModelProto, source: str | None) -> IrVersionChoice:
    """The IR version to write ``model``'s rewrite with: the input's, or the highest the installed ONNX Runtime
    loads when the input's is higher and the model uses nothing newer. Raises :class:`AmpconfigError` when the
    model needs a version that ORT cannot load (nothing would load the output)."""
    installed = installed_onnxruntime()
    limit = max_ir_version_loadable(installed[1]) if installed else None
    if installed is None or limit is None or model.ir_version <= limit:
        return IrVersionChoice(model.ir_version)
    distribution, ort_version = installed
    newer = features_newer_than(model, limit)
    if newer:
        raise AmpconfigError(
            f"the model has IR version {model.ir_version} and uses {', '.join(newer)}; the installed "
            f"{distribution} {ort_version} loads IR versions up to {limit}, so no output it could load can be "
            "written",
            file=source,
            hint="upgrade onnxruntime, or re-export the model without those types",
        )
    return IrVersionChoice(
        limit,
        f"IR version lowered from {model.ir_version} to {limit}: the installed {distribution} {ort_version} loads "
        f"IR versions up to {limit}, and the model uses nothing the newer versions added",
    )


def with_ir_version(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """``model`` itself when it has IR version ``version``, else a copy that has it."""
    if model.ir_version == version:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.ir_version = version
    return copy


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _graphs(attribute.g)
            for subgraph in attribute.graphs:
                yield from _graphs(subgraph)


def _all_graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    yield from _graphs(model.graph)
    for function in model.functions:
        for node in function.node:
            for attribute in node.attribute:
                if attribute.HasField("g"):
                    yield from _graphs(attribute.g)
                for subgraph in attribute.graphs:
                    yield from _graphs(subgraph)


def _type_elements(type_proto: onnx.TypeProto) -> Iterator[int]:
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        yield getattr(type_proto, kind).elem_type
    elif kind in ("sequence_type", "optional_type"):
        yield from _type_elements(getattr(type_proto, kind).elem_type)
    elif kind == "map_type":
        yield type_proto.map_type.key_type
        yield from _type_elements(type_proto.map_type.value_type)


def _nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    for graph in _all_graphs(model):
        yield from graph.node
    for function in model.functions:
        yield from function.node


def _element_types(model: onnx.ModelProto) -> Iterator[int]:
    """Every element type the model names: value types, tensors (never their data) and type attributes."""
    for graph in _all_graphs(model):
        for value in (*graph.input, *graph.output, *graph.value_info):
            yield from _type_elements(value.type)
        for tensor in graph.initializer:
            yield tensor.data_type
        for sparse in graph.sparse_initializer:
            yield sparse.values.data_type
    for function in model.functions:
        for value in function.value_info:
            yield from _type_elements(value.type)
    for node in _nodes(model):
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t.data_type
            yield from (tensor.data_type for tensor in attribute.tensors)
            if attribute.HasField("tp"):
                yield from _type_elements(attribute.tp)
            if attribute.name in _TYPE_ATTRIBUTES and attribute.type == onnx.AttributeProto.INT:
                yield attribute.i


def _structural_features(model: onnx.ModelProto) -> Iterator[tuple[str, int]]:
    """(feature, the IR version that added it) for the fields newer than IR 8 that the model sets."""
    if any(function.attribute_proto for function in model.functions):
        yield "function attribute defaults", 9
    if any(function.overload or function.value_info or function.metadata_props for function in model.functions):
        yield "function overloads, value_info or metadata", 10
    if any(node.overload or node.metadata_props for node in _nodes(model)):
        yield "node overloads or metadata", 10
    if any(_graph_has_metadata(graph) for graph in _all_graphs(model)):
        yield "graph, value or tensor metadata", 10
    if model.configuration or any(node.device_configurations for node in _nodes(model)):
        yield "multi-device configurations", 11


def _graph_has_metadata(graph: onnx.GraphProto) -> bool:
    values = (*graph.input, *graph.output, *graph.value_info)
    return bool(
        graph.metadata_props
        or any(value.metadata_props for value in values)
        or any(tensor.metadata_props for tensor in graph.initializer)
    )
