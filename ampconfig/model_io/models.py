"""Reading input models and writing output models safely.

Inputs: a path or an in-memory ``onnx.ModelProto``; unreadable or truncated models become one clear
:class:`AmpconfigError` (what the checker says about a readable model is judged by
:func:`ampconfig.model_io.repair.admit_input_model`). Outputs are written through an
:class:`~ampconfig.files.guard.OutputGuard` (atomically, never over an input of the same invocation), and only
after the checker found no complaint the input did not have.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import onnx
import onnx_ir as ir
from google.protobuf import json_format, text_format
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from ampconfig.domains import ONNX_DOMAIN
from ampconfig.errors import AmpconfigError
from ampconfig.files.paths import require_file, resolve_path
from ampconfig.files.sniff import text_kind
from ampconfig.model_io.ir_bridge import (
    attach_external_data,
    external_data_folder,
    ir_shape,
    model_graphs,
    save_ir,
    to_ir,
    to_proto,
)
from ampconfig.model_io.mapped import mappable, read_mapped
from ampconfig.model_io.skeleton import IN_MODEL_FILE, STREAM_BYTES, ModelSkeleton, skeleton_of

if TYPE_CHECKING:  # the output guard (and its signal handling): imported when a model is written
    from ampconfig.files.guard import Destination, OutputGuard

log = logging.getLogger(__name__)

R = TypeVar("R")


@contextmanager
def _initializers_lifted(model: ir.Model) -> Iterator[None]:
    """Inside the block, the main graph's large initializers are graph inputs of the same type and shape, with no
    value: a proto serialised then carries the graph, types and shapes without the weights. Restored after."""
    graph = model.graph
    lifted: list[tuple[ir.Value, ir.TensorProtocol | None, bool]] = []
    for value in list(graph.initializers.values()):
        tensor = value.const_value
        if tensor is not None and tensor.nbytes <= _LIFT_BYTES:
            continue
        if tensor is not None:
            value.shape = value.shape or ir_shape(tensor.shape)
            value.dtype = value.dtype or tensor.dtype
        appended = not value.is_graph_input()
        graph.initializers.pop(value.name or "")
        value.const_value = None
        if appended:
            graph.inputs.append(value)
        lifted.append((value, tensor, appended))
    try:
        yield
    finally:
        for value, tensor, appended in reversed(lifted):
            if appended:
                graph.inputs.remove(value)
            value.const_value = tensor
            graph.initializers[value.name or ""] = value


def call_onnx_api(func: Callable[[onnx.ModelProto], R], model: ir.Model) -> R:
    """``func`` on a proto of ``model`` without its large weights (see :func:`_initializers_lifted`): ONNX's
    checker and inference see the same graph, types and shapes, and no weight is copied into a protobuf."""
    with _initializers_lifted(model):
        proto = to_proto(model)
    _sparse_initializers_as_inputs(proto.graph, proto.graph)
    return func(proto)


def light_proto_of_ir(model: ir.Model) -> onnx.ModelProto:
    """A proto of ``model`` for ONNX's checker and inference (what :func:`call_onnx_api` hands them), leaving
    ``model`` as it was, its initializers in their order: the light proto the admission of an ``ir.Model`` reads
    (:func:`ampconfig.engine.in_place.rewrite_ir_model`)."""
    initializers = model.graph.initializers
    order = list(initializers.values())
    proto = call_onnx_api(lambda light: light, model)
    if list(initializers.values()) != order:  # the lifted ones were put back at the end
        initializers.clear()
        for value in order:
            initializers[value.name or ""] = value
    return proto


#: Where a tensor :func:`weightless_proto` left out says its bytes are: nowhere (nothing reads them).
_LEFT_OUT = "ampconfig-weight-left-out"


def weightless_proto(model: ir.Model) -> tuple[onnx.ModelProto, dict[str, ir.TensorProtocol]]:
    """A proto of ``model`` with the same structure, its large main-graph initializers (and those whose bytes are
    in external data) still initializers of their type and shape but without their bytes (external data at a
    location that does not exist), and those tensors by name. ``model`` is left as it was. For what reads a model's
    structure but no weight: ONNX's version converter (which keeps such initializers as they are) and the structure
    hash value ranges are keyed by."""
    left_out: dict[str, ir.TensorProtocol] = {}
    for value in model.graph.initializers.values():
        tensor = value.const_value
        # An external tensor of any size too: the proto would name its file relative to a folder a reader of
        # the proto does not know (an IR made of it would look for the file in the working directory).
        if tensor is not None and value.name and (tensor.nbytes > _LIFT_BYTES or isinstance(tensor, ir.ExternalTensor)):
            left_out[value.name] = tensor
            stub = ir.ExternalTensor(_LEFT_OUT, None, None, tensor.dtype, shape=ir_shape(tensor.shape), name=value.name)
            value.const_value = stub
    try:
        proto = to_proto(model)
    finally:
        for name, tensor in left_out.items():
            model.graph.initializers[name].const_value = tensor
    return proto, left_out


def with_weights_back(model: ir.Model, left_out: dict[str, ir.TensorProtocol]) -> None:
    """Give the main-graph initializers of ``model`` (an IR of a :func:`weightless_proto`, or of what a tool made
    of one) the tensors that were left out, by name: the very tensor objects, nothing copied or read."""
    initializers = model.graph.initializers
    for name, tensor in left_out.items():
        value = initializers.get(name)
        if value is not None:
            value.const_value = tensor


def _sparse_initializers_as_inputs(source: onnx.GraphProto, graph: onnx.GraphProto) -> None:
    """Declare ``source``'s sparse initializers in ``graph`` as graph inputs of the dense tensors they describe,
    and drop them from ``graph``: ONNX Runtime reads them so, while ONNX's checker types them sparse, which no
    standard op takes. The checker and type inference then see the graph ONNX Runtime runs."""
    declared = {value.name for value in graph.input}
    for sparse in source.sparse_initializer:
        if sparse.values.name not in declared:
            dense = onnx.helper.make_tensor_value_info(sparse.values.name, sparse.values.data_type, sparse.dims)
            graph.input.append(dense)
    del graph.sparse_initializer[:]


#: Models larger than this (proto plus external data) are never built as one in-memory proto to serialise:
#: protobuf cannot serialise 2 GiB or more, and a rewrite may grow a model (casts, float32 copies). Read at call
#: time, so tests can lower it.
IN_MEMORY_LIMIT = int(1.8 * (1 << 30))


@dataclass(frozen=True)
class OpenedModel:
    """An input model: its proto (without external tensor data, which stays on disk) and where it came from."""

    proto: onnx.ModelProto
    path: str | None
    external_files: frozenset[Path]  # resolved external data files; empty when every tensor is inline
    #: The large weights were left in the model file (model_io/mapped.py): ``proto`` references them there as
    #: external data, and they are read through a memory map when used.
    mapped: bool = False

    @property
    def tensors_on_disk(self) -> bool:
        """Whether some weights are read from disk when used (external data files, or the mapped model file)."""
        return bool(self.external_files) or self.mapped

    @property
    def folder(self) -> Path | None:
        """The folder its tensors on disk are read from: the model file's, as the path names it (ONNX Runtime
        resolves external data next to the path it is given)."""
        return Path(os.path.abspath(self.path)).parent if self.path is not None else None

    def stored_bytes(self) -> int:
        """The model's size on disk: its proto plus its external data files (an upper bound on the tensors). The
        size of the file when there is one: upb's ``ByteSize`` serialises the whole proto to count it."""
        proto_bytes = os.stat(self.path).st_size if self.path is not None else self.proto.ByteSize()
        return proto_bytes + sum(path.stat().st_size for path in self.external_files)

    def fits_in_memory(self) -> bool:
        """Whether the whole model, tensors included, may be handled as one in-memory proto
        (see :data:`IN_MEMORY_LIMIT`)."""
        return self.stored_bytes() <= IN_MEMORY_LIMIT

    def to_ir(self) -> ir.Model:
        """A fresh IR of the model; external tensors are memory-mapped lazily, never read here."""
        model = to_ir(self.proto, source=self.path)
        if self.tensors_on_disk and self.folder is not None:
            attach_external_data(model, str(self.folder))
        if self.mapped and self.path is not None:
            name = os.path.basename(self.path)
            for value in model.graph.initializers.values():
                tensor = value.const_value
                if isinstance(tensor, ir.ExternalTensor) and os.fspath(tensor.location) == name:
                    tensor.meta[IN_MODEL_FILE] = True  # written inline, as it was read
        return model


def _read_proto(path: Path, what: str, map_weights: bool = False) -> tuple[onnx.ModelProto, bool]:
    """The model proto with its external tensors left on disk, and whether its large weights were left in the
    file too (``map_weights``, for a large plain file: :mod:`ampconfig.model_io.mapped`)."""
    require_file(path, what, hint="check the path")  # a device or pipe would be read without end
    proto = read_mapped(path) if map_weights and mappable(path) else None
    if proto is not None:
        return _with_a_graph(proto, path, what), True
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*onnxtxt format is experimental")  # ONNX's own note
            proto = onnx.load(str(path), load_external_data=False)
    except (
        DecodeError,
        ValueError,
        RuntimeError,
        OSError,
        onnx.checker.ValidationError,
        json_format.ParseError,
        text_format.ParseError,
        onnx.parser.ParseError,
    ) as exc:
        raise _not_a_model(path, what) or AmpconfigError(
            f"cannot read {what}: {_first_line(exc)}",
            file=str(path),
            hint="is it a complete .onnx file (not truncated, not another format)?",
        ) from None
    return _with_a_graph(proto, path, what), False


def _with_a_graph(proto: onnx.ModelProto, path: Path, what: str) -> onnx.ModelProto:
    if not proto.graph.node and not proto.graph.output:
        raise _not_a_model(path, what) or AmpconfigError(
            f"{what} has an empty graph", file=str(path), hint="is it really an ONNX model?"
        )
    return proto


def _not_a_model(path: Path, what: str) -> AmpconfigError | None:
    """The refusal of a text file given as a model (the arguments swapped, a config or mixlist in its place), or
    None for a file that is not text: protobuf's own complaint about that is the clearer one."""
    try:
        with path.open("rb") as stream:
            head = stream.read(4096).decode("utf-8").lstrip("\ufeff \t\r\n")
    except (OSError, UnicodeDecodeError):
        return None
    if "\x00" in head:
        return None
    if not head:
        looks = "it is empty"
    elif path.suffix.lower() in (".textproto", ".pbtxt", ".prototxt"):
        looks = "it looks like the protobuf text of something else"
    else:
        looks = "it looks like " + (text_kind(head) or "text")
    return AmpconfigError(
        f"not an ONNX model ({looks})",
        file=str(path),
        hint=f"give the {what} first (ampconfig COMMAND MODEL.onnx); a session config goes to --config, "
        "a mixlist to --modify-mixlist",
    )


def _all_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor a graph holds: initializers (sparse ones too), tensor attributes, and those of subgraphs."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _all_tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _all_tensors(subgraph)


def external_data_files(proto: onnx.ModelProto, model_path: Path) -> frozenset[Path]:
    """The external data files the model's tensors name, each checked to stay inside the model's folder:
    an absolute location, a `..` that climbs out, or a symlink pointing elsewhere is refused, since a model
    file must not be able to make ampconfig read (or overwrite) arbitrary files. A data file with a second hard
    link is read, as ONNX Runtime reads it: inside the folder, it holds nothing the folder does not."""
    return frozenset(path for _, path in _external_tensors(proto, model_path))


def _external_tensors(proto: onnx.ModelProto, model_path: Path) -> Iterator[tuple[onnx.TensorProto, Path]]:
    """Each tensor kept in an external data file, with that file, checked as :func:`external_data_files` says."""
    folder = model_path.resolve().parent
    for tensor in _all_tensors(proto.graph):
        if not external_data_helper.uses_external_data(tensor):
            continue
        location = next((entry.value for entry in tensor.external_data if entry.key == "location"), "")
        where = f"external data of tensor {tensor.name!r} ({location!r})"
        if not location or os.path.isabs(location) or Path(location).is_absolute():
            raise AmpconfigError(f"{where} is not a path relative to the model", file=str(model_path))
        resolved = resolve_path(folder / location)
        if not resolved.is_relative_to(folder):
            raise AmpconfigError(
                f"{where} points outside the model's folder ({resolved}); refused",
                file=str(model_path),
                hint="external data must live next to the model (ONNX requires relative locations)",
            )
        if not resolved.is_file():
            raise AmpconfigError(f"{where} is missing", file=str(model_path), hint="copy the data file next to it")
        check_external_extent(tensor, resolved, where, str(model_path))
        yield tensor, resolved


#: Element types stored several to a byte: their byte size is not elements x itemsize.
_SUB_BYTE_TYPES = frozenset(
    getattr(onnx.TensorProto, name)
    for name in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
    if hasattr(onnx.TensorProto, name)
)


def _stored_nbytes(tensor: onnx.TensorProto) -> int | None:
    """The bytes a tensor's data takes in an external file, or None where that is not elements x itemsize."""
    if tensor.data_type in _SUB_BYTE_TYPES or tensor.data_type == onnx.TensorProto.STRING:
        return None
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * itemsize


def _extent_number(text: str | None, key: str, where: str, source: str) -> int | None:
    if text is None:
        return None
    if not re.fullmatch(r"[0-9]+", text.strip()):
        raise AmpconfigError(
            f"{where} has {key} {text!r}: expected a whole number of bytes, 0 or more",
            file=source,
            hint="the model file is damaged or was edited; re-export or re-save it",
        )
    return int(text)


def check_external_extent(tensor: onnx.TensorProto, data_file: Path, where: str, source: str) -> None:
    """The tensor's ``offset``/``length`` must be numbers that fit in its data file, and the length must be what
    the tensor's shape and type need; checked before anything reads the file or allocates for it."""
    entries = {entry.key: entry.value for entry in tensor.external_data}
    offset = _extent_number(entries.get("offset", "0"), "offset", where, source) or 0
    length = _extent_number(entries.get("length"), "length", where, source)
    size = data_file.stat().st_size
    expected = _stored_nbytes(tensor)
    needed = length if length is not None else expected
    hint = "the model and its data file do not belong together, or the data file is truncated; re-export the model"
    if offset > size or (needed is not None and offset + needed > size):
        span = f"{needed} bytes from offset {offset}" if needed is not None else f"offset {offset}"
        raise AmpconfigError(
            f"{where}: {span} runs past the end of {data_file.name} ({size} bytes)", file=source, hint=hint
        )
    if length is not None and expected is not None and length != expected:
        shape = "x".join(str(dim) for dim in tensor.dims) or "scalar"
        type_name = onnx.TensorProto.DataType.Name(tensor.data_type).lower()
        raise AmpconfigError(
            f"{where} has length {length} bytes, but a {shape} {type_name} tensor takes {expected}",
            file=source,
            hint=hint,
        )


def open_model(
    model: str | Path | onnx.ModelProto | OpenedModel, *, what: str = "model", map_weights: bool = False
) -> OpenedModel:
    """Open an input model for rewriting without reading its external tensor data (an already opened model is
    returned as it is). With ``map_weights``, the large weights of a large single-file model are left in the
    file too, read through a memory map when used (:mod:`ampconfig.model_io.mapped`): for callers that only decide
    and rewrite, never hand ``proto`` to ONNX Runtime or read its tensors."""
    if isinstance(model, OpenedModel):
        return model
    if isinstance(model, onnx.ModelProto):
        return OpenedModel(model, None, frozenset())
    path = Path(model)
    proto, mapped = _read_proto(path, what, map_weights)
    external = external_data_files(proto, path)
    if mapped:
        external -= {path.resolve()}
    opened = OpenedModel(proto, str(path), external, mapped)
    _log_opened(opened)
    return opened


def _log_opened(opened: OpenedModel) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    opsets = ", ".join(f"{o.domain or ONNX_DOMAIN} {o.version}" for o in opened.proto.opset_import) or "none"
    external = (
        f"{len(opened.external_files)} external data file(s), {sum(p.stat().st_size for p in opened.external_files)} "
        "bytes"
        if opened.external_files
        else "no external data"
    )
    log.info(
        "opened model %s: %d nodes in the main graph, opset %s, IR version %d, %s",
        opened.path,
        len(opened.proto.graph.node),
        opsets,
        opened.proto.ir_version,
        external,
    )


def load_model(model: str | Path | onnx.ModelProto, *, what: str = "model") -> tuple[onnx.ModelProto, str | None]:
    """The complete model proto (external data read in) and its path (None for an in-memory model)."""
    if isinstance(model, onnx.ModelProto):
        return model, None
    path = Path(model)
    proto, _ = _read_proto(path, what)
    for tensor, data_file in list(_external_tensors(proto, path)):  # every location checked before any read
        _read_external_tensor(tensor, data_file)
    return proto, str(path)


def _read_external_tensor(tensor: onnx.TensorProto, data_file: Path) -> None:
    """Move a tensor's bytes from its (checked) data file into the proto. ONNX's own loader is not used: it
    refuses a data file with a second hard link, which ONNX Runtime reads (see :func:`external_data_files`)."""
    entries = {entry.key: entry.value for entry in tensor.external_data}
    with data_file.open("rb") as stream:
        stream.seek(int(entries.get("offset", "0")))
        tensor.raw_data = stream.read(int(entries["length"]) if "length" in entries else -1)
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.DEFAULT


#: Initializers larger than this are lifted to graph inputs in :func:`light_proto`: those a skeleton streams.
_LIFT_BYTES = STREAM_BYTES


def light_proto(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` for ONNX's checker and type inference: large main-graph initializers become graph
    inputs of the same type and shape, sparse ones inputs of the dense tensor they describe. Graph, types and
    shapes check exactly as in the full model, without serialising hundreds of MB of weights for a C API call.
    Copies happen in protobuf's C++, so this is cheap for models with many nodes too."""
    light = onnx.ModelProto()
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(light, field, getattr(proto, field))
    light.opset_import.extend(proto.opset_import)
    light.functions.extend(proto.functions)
    source, graph = proto.graph, light.graph
    graph.name = source.name
    graph.node.extend(source.node)
    graph.input.extend(source.input)
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    _sparse_initializers_as_inputs(source, graph)
    declared = {value.name for value in source.input}
    kept = []  # copied in one call: graphs of thousands of small weights pay per call from Python
    for tensor in source.initializer:
        # external_data_helper.uses_external_data, inlined: a field left unset reads as DEFAULT
        if _tensor_nbytes(tensor) <= _LIFT_BYTES and tensor.data_location != onnx.TensorProto.EXTERNAL:
            kept.append(tensor)
        elif tensor.name not in declared:
            graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    graph.initializer.extend(kept)
    return light


def _tensor_nbytes(tensor: onnx.TensorProto) -> int:
    """Bytes of a tensor from its dims and type: reading ``raw_data`` from Python would copy the whole payload."""
    return math.prod(tensor.dims) * _itemsize(tensor.data_type)


@functools.cache
def _itemsize(data_type: int) -> int:
    try:
        return int(onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize)
    except (KeyError, ValueError):
        return 8


def checker_errors(proto: onnx.ModelProto) -> list[str]:
    """What ``check_model(full_check=True)`` says about a (light) proto, a line per entry, for people to read
    (nothing parses them): the structural check's complaint, or else strict type and shape inference's, one line
    per node it rejects (as the checker does, inference is not run on a structurally broken model). Empty when
    the model passes."""
    try:
        onnx.checker.check_model(proto)
    except (onnx.checker.ValidationError, ValueError) as exc:
        return [_first_line(exc)]
    try:
        onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=False)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError) as exc:
        return [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
    return []


def strictly_inferred_types(light: onnx.ModelProto) -> dict[str, onnx.TypeProto] | None:
    """What ``check_model(full_check=True)`` does, in two steps so the strict inference's result is kept: the
    value types it found by name (as :func:`inferred_types` would), or None when the model does not pass."""
    try:
        onnx.checker.check_model(light)
        inferred = onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True, data_prop=False)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError):
        return None
    return value_types(inferred)


#: What ONNX's shape inference raises on a model it cannot infer even leniently: its own errors from the C++ side
#: (inference; validation, such as a recursive model-local function; schemas), ValueError for a proto it cannot
#: serialise or parse (over 2 GiB, malformed), and RuntimeError for any other C++ exception (pybind11's mapping).
INFERENCE_FAILURES: tuple[type[Exception], ...] = (
    onnx.shape_inference.InferenceError,
    onnx.checker.ValidationError,
    onnx.defs.SchemaError,
    ValueError,
    RuntimeError,
)


def inferred_types(proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every value type ONNX type inference finds, by value name, subgraphs included (best effort: {} when
    inference itself fails, logged with the reason; the planner leaves untyped nodes alone)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=False)
    except INFERENCE_FAILURES as exc:
        log.info("ONNX type inference failed, so it types no value (nodes left untyped keep their dtype): %s", exc)
        return {}
    return value_types(inferred)


def value_types(inferred: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """The declared type of every value of an (inferred) model by name, subgraphs included; the first one wins."""
    types: dict[str, onnx.TypeProto] = {}
    pending = [inferred.graph]
    while pending:
        graph = pending.pop()
        for value in (*graph.input, *graph.output, *graph.value_info):
            if value.type.WhichOneof("value") is not None:
                types.setdefault(value.name, value.type)
        for node in graph.node:
            for attribute in node.attribute:
                pending.extend([attribute.g] if attribute.HasField("g") else [])
                pending.extend(attribute.graphs)
    return types


def refuse_invalid_output(problem: str) -> AmpconfigError:
    return AmpconfigError(
        f"the rewritten model would be invalid, so nothing was written: {problem}",
        hint="this is a bug in ampconfig; please report it with the model and the command",
    )


#: Above this many bytes of tensors, outputs keep their weights in an external data file next to the model.
EXTERNAL_DATA_THRESHOLD = 1 << 30


def _tensor_bytes(model: ir.Model) -> int:
    return sum(
        value.const_value.nbytes
        for graph in model_graphs(model)
        for value in graph.initializers.values()
        if value.const_value is not None
    )


def _has_external_tensors(model: ir.Model) -> bool:
    return any(
        isinstance(value.const_value, (ir.ExternalTensor, ir.LazyTensor))
        for graph in model_graphs(model)
        for value in graph.initializers.values()
    )


def save_model_atomic(
    model: onnx.ModelProto | ir.Model | ModelSkeleton,
    destination: str | Path | Destination,
    *,
    guard: OutputGuard | None = None,
    role: str = "output model",
    input_path: str | Path | None = None,
    input_files: frozenset[Path] = frozenset(),
) -> Path:
    """Write ``model`` to ``destination`` through ``guard`` (a guard of its own when None, with ``input_path`` and
    ``input_files`` as its inputs): atomically, never over an input; returns the path as given. ``destination`` may
    be an output already declared to ``guard``.

    A model is written in one pass from its skeleton (:mod:`ampconfig.model_io.skeleton`): its weights go to the file
    one at a time, straight from their arrays. An IR model whose weights live in external data files, or a model
    whose weights exceed 1 GiB, is written with its tensors in ``<name>.data`` next to it, one tensor at a time, so
    the weights are never all in memory. That file is an output too: it may not be an input either.
    """
    from ampconfig.files.guard import Destination, OutputGuard

    if guard is None:
        with OutputGuard() as own:
            own.read("input model", input_path)
            own.read_all("input model's external data", input_files)
            return save_model_atomic(model, destination, guard=own, role=role)
    target = destination if isinstance(destination, Destination) else guard.output(role, destination)
    role = target.role
    if isinstance(model, onnx.ModelProto):
        model = to_ir(model)  # tensors wrap the proto's bytes: nothing is copied here
    if isinstance(model, ir.Model) and not _has_external_tensors(model):
        model = skeleton_of(model)
    if isinstance(model, ModelSkeleton):
        if _tensor_bytes(model.model) <= EXTERNAL_DATA_THRESHOLD:
            stale = _stale_external_data(target)
            with guard.staging(target) as staged, open(staged, "wb") as file:
                model.write(file)
            if stale is not None:
                guard.remove_stale(f"external data of the {role} it replaced", stale)
            return target.path
        model = model.model
    if target.is_stream:
        raise stream_refused(target)
    data_name = external_data_name(target.target)
    guard.output(f"external data of the {role}", target.target.parent / data_name)  # refused if it is an input
    with guard.staging(target) as staged:
        # One tensor in flight at a time: peak memory stays near the largest tensor, not the model.
        save_ir(model, staged, external_data=data_name, max_workers=1, max_in_flight_bytes=1 << 26)
    return target.path


def _stale_external_data(target: Destination) -> Path | None:
    """``OUT.onnx.data`` when the ``OUT.onnx`` an inline model replaces kept its weights there: nothing would read
    it any more. A file the old model does not name, or an old model that cannot be read, is left alone."""
    from ampconfig.files.guard import DestinationKind, same_file

    if target.kind is not DestinationKind.REPLACE:
        return None
    data = target.target.parent / external_data_name(target.target)
    if not data.is_file():
        return None
    try:
        named = external_data_files(_read_proto(target.target, "the model being replaced")[0], target.target)
    except (AmpconfigError, OSError):
        return None
    return data if any(same_file(path, data) for path in named) else None


def stream_refused(destination: Destination) -> AmpconfigError:
    return AmpconfigError(
        f"the {destination.role} keeps its weights in a .data file next to it, so it cannot go to a stream",
        file=destination.shown,
        hint="write it to a regular file",
    )


def writes_external_data(opened: OpenedModel) -> bool:
    """Whether a rewrite of ``opened`` is written with an external data file (see :func:`save_model_atomic`)."""
    return bool(opened.external_files) or opened.stored_bytes() > EXTERNAL_DATA_THRESHOLD


def external_data_name(model_path: Path) -> str:
    """The file name of the external data ampconfig writes next to a model."""
    return f"{model_path.name}.data"


def save_model_sharing_data(model: ir.Model, destination: str | Path) -> Path:
    """Write ``model`` (read with its tensors left on disk: :meth:`OpenedModel.to_ir` or :func:`onnx_ir.load`) into
    the folder of the model it was loaded from, its external tensors still pointing at that model's data file(s):
    nothing is copied. For a private variant of a saved model (e.g. the CPU accuracy copy of ``run``); new tensors
    are stored inline."""
    from ampconfig.files.guard import OutputGuard

    with OutputGuard() as guard:
        target = guard.output("model", destination)
        folder = target.target.parent
        for graph in model.graphs():
            for value in graph.initializers.values():
                tensor = value.const_value
                if isinstance(tensor, ir.LazyTensor) or (
                    isinstance(tensor, ir.ExternalTensor) and Path(external_data_folder(tensor)).resolve() != folder
                ):
                    raise AmpconfigError(
                        f"tensor {value.name!r} does not live next to {destination}: cannot share its data"
                    )
        with guard.staging(target) as staged:
            save_ir(model, staged)  # external tensors keep their relative locations: valid once moved up
        return target.path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
