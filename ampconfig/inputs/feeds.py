"""Model inputs for a run: read from ``.npz``/``.npy`` (or text) files, or generated from the model's input types.

Generation is seeded and independent per input (each draws from ``default_rng([seed, crc32(name)])``), so
giving one input from a file does not change the values generated for the others.

- float inputs: standard normal (bfloat16 ones through ml_dtypes).
- integer inputs used as indices of a ``Gather`` (directly or through Cast/Reshape/Unsqueeze/Squeeze/Flatten/
  Identity): integers in [0, rows of the gathered table) when the table's size is known. Other integer inputs:
  [int_low, int_high) from the config, else [0, 100); integer inputs named like a mask (``*mask*``) are all
  ones (a random mask can hide every position and turn a softmax into NaN).
- bool inputs: random.
- STRING inputs: strings drawn from the keys of the ``ai.onnx.ml`` LabelEncoder or CategoryMapper that reads
  them; without one, a located error that says how to give them (:mod:`ampconfig.inputs.strings`).
- a float value from a file converted to the input's type (float64 to float32, float32 to bfloat16 or float16)
  is a warning, once per input, with the largest change when the conversion changed any value; numpy saves
  a bfloat16 array as raw 2-byte values (``|V2``), which are read back as bfloat16 for a bfloat16 input. An
  integer is converted to another width (int32 to int64, uint8 to int32) only when the input's type holds every
  value: one it cannot hold is a located error, never wrapped round. Kinds are never mixed (floats for an
  integer input, integers for a bool one). Strings, from ``<U`` or UTF-8 ``S`` arrays or (``--input``) a text
  file of one string a line, are fed as one ``<U`` array.
- dimensions of size 0 are kept: an empty input is a valid input.
- dynamic dimensions: from ``--shape NAME=1x128`` (or the config's ``run.shapes``), else from another input
  that shares the dimension's symbol, else the defaults: the first dimension (batch-like) 1, every other 16.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto

from ampconfig.domains import is_default_domain
from ampconfig.errors import AmpconfigError
from ampconfig.files.paths import open_regular
from ampconfig.inputs.array_files import NPY_MAGIC, load_npy, load_npz
from ampconfig.inputs.strings import (
    generate_strings,
    is_string,
    no_vocabulary_error,
    read_text_lines,
    text_array,
    vocabulary,
)
from ampconfig.memory import check_input_memory, format_bytes

DEFAULT_BATCH_DIM = 1
DEFAULT_OTHER_DIM = 16
DEFAULT_INT_RANGE = (0, 100)

#: Ops that carry an integer tensor's values through unchanged (only its shape or type changes).
_VALUE_PRESERVING_OPS = frozenset({"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity"})


Dim = int | str | None


@dataclass(frozen=True)
class InputSpec:
    """A graph input as the model declares it: ``dims`` is None when the rank is unknown."""

    name: str
    elem_type: int
    dims: tuple[Dim, ...] | None

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(self.elem_type))

    @property
    def type_name(self) -> str:
        return TensorProto.DataType.Name(self.elem_type).lower()


@dataclass
class PreparedInput:
    """One input as it was fed, and where its values came from (for the report)."""

    name: str
    dtype: str
    shape: list[int]
    source: str  # "generated", or "npz:<file>" / "npy:<file>"
    values: str  # how the values were chosen, in words
    defaulted_dims: dict[str, int] = field(default_factory=dict)  # dimension label -> default used

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": self.shape,
            "source": self.source,
            "values": self.values,
            "defaulted_dims": dict(self.defaulted_dims),
        }


@dataclass
class InputSet:
    feeds: dict[str, np.ndarray]
    inputs: list[PreparedInput]
    warnings: list[str] = field(default_factory=list)  # values changed on their way to the input's type

    @property
    def defaulted(self) -> bool:
        return any(item.defaulted_dims for item in self.inputs)


@dataclass(frozen=True)
class IntRange:
    low: int | None = None
    high: int | None = None


# ----------------------------------------------------------------------------------------------- model facts


def _dims_of(value: onnx.ValueInfoProto) -> tuple[Dim, ...] | None:
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    dims: list[Dim] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value >= 0:  # 0: an empty dimension; negative: a placeholder
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param") and dim.dim_param:
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return tuple(dims)


def model_input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    """The inputs a caller must feed: graph inputs that are not initializers."""
    initializers = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if not value.type.HasField("tensor_type"):
            raise AmpconfigError(f"input {value.name!r} is not a tensor; ampconfig run feeds tensors only")
        specs.append(InputSpec(value.name, value.type.tensor_type.elem_type, _dims_of(value)))
    return specs


def _known_first_dims(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Shapes of initializers and Constant outputs (the tables a Gather may read)."""
    shapes = {init.name: list(init.dims) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    shapes[node.output[0]] = list(attr.t.dims)
    for value in list(model.graph.input) + list(model.graph.value_info):
        dims = _dims_of(value)
        fixed = [d for d in dims if isinstance(d, int)] if dims is not None else []
        if dims is not None and value.name not in shapes and len(fixed) == len(dims):
            shapes[value.name] = fixed
    return shapes


def gather_table_rows(model: onnx.ModelProto, name: str) -> int | None:
    """Rows of the table a Gather indexes with ``name`` (followed through value-preserving ops), if known."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for index, tensor in enumerate(node.input):
            if node.op_type in _VALUE_PRESERVING_OPS and index > 0:
                continue  # Reshape's shape, Unsqueeze's axes: not the value path
            consumers.setdefault(tensor, []).append(node)
    shapes = _known_first_dims(model)
    seen: set[str] = set()
    frontier = [name]
    while frontier:
        tensor = frontier.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        for node in consumers.get(tensor, []):
            rows = _indexed_rows(node, tensor, shapes)
            if rows is not None:
                return rows
            if node.op_type in _VALUE_PRESERVING_OPS:
                frontier.extend(node.output)
    return None


#: Contrib ops that index embedding tables with their inputs: input position -> table position (rows on axis 0).
_EMBEDDING_LOOKUPS: Mapping[tuple[str, str], Mapping[int, int]] = {
    # input_ids -> word_embedding, segment_ids -> segment_embedding, position_ids -> position_embedding
    ("com.microsoft", "EmbedLayerNormalization"): {0: 2, 1: 4, 8: 3},
}


def _indexed_rows(node: onnx.NodeProto, tensor: str, shapes: Mapping[str, list[int]]) -> int | None:
    """Rows of the table ``node`` indexes with ``tensor``, when it is a Gather index or an embedding lookup."""
    if node.op_type == "Gather" and is_default_domain(node.domain) and node.input[1] == tensor:
        return _gather_rows(node, shapes)
    lookups = _EMBEDDING_LOOKUPS.get((node.domain, node.op_type), {})
    for position, table in lookups.items():
        if position < len(node.input) and node.input[position] == tensor and table < len(node.input):
            table_shape = shapes.get(node.input[table])
            return int(table_shape[0]) if table_shape else None
    return None


def _gather_rows(node: onnx.NodeProto, shapes: Mapping[str, list[int]]) -> int | None:
    data_shape = shapes.get(node.input[0])
    if not data_shape:
        return None
    axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 0)
    if axis < 0:
        axis += len(data_shape)
    return int(data_shape[axis]) if 0 <= axis < len(data_shape) else None


def feeds_gather(model: onnx.ModelProto, name: str) -> bool:
    """Whether ``name`` indexes a table: a Gather's indices or an embedding lookup's ids."""
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name:
            return True
        lookups = _EMBEDDING_LOOKUPS.get((node.domain, node.op_type), {})
        if any(position < len(node.input) and node.input[position] == name for position in lookups):
            return True
    return False


# -------------------------------------------------------------------------------------------------- loading


def coerce_input(spec: InputSpec, array: np.ndarray, origin: str) -> tuple[np.ndarray, str | None]:
    """Check rank and fixed dims; convert the dtype when the kind matches (float64 -> float32, float32 ->
    bfloat16 etc.), with a warning when that changed a value."""
    array = np.asarray(array)
    if spec.dims is not None:
        if array.ndim != len(spec.dims):
            raise AmpconfigError(
                f"{origin}: input {spec.name!r} has shape {list(array.shape)} but the model expects rank "
                f"{len(spec.dims)} ({_format_dims(spec.dims)})"
            )
        for axis, (want, got) in enumerate(zip(spec.dims, array.shape, strict=True)):
            if isinstance(want, int) and want != got:
                raise AmpconfigError(
                    f"{origin}: input {spec.name!r} has {got} at axis {axis}; the model fixes it to {want}"
                )
    if is_string(spec.elem_type):
        return text_array(spec.name, array, origin), None
    target = spec.dtype
    if array.dtype == _RAW_BFLOAT16:
        if target != _BFLOAT16:
            raise AmpconfigError(
                f"{origin}: input {spec.name!r} holds raw 2-byte values (|V2, as numpy saves a bfloat16 array) but "
                f"the model expects {target}",
                hint=f"save the input as {target} (numpy: array.astype(np.{target}))",
            )
        return array.view(_BFLOAT16), None
    if array.dtype == target:
        return array, None
    if not _same_kind(array.dtype, target):
        raise AmpconfigError(f"{origin}: input {spec.name!r} is {array.dtype} but the model expects {target}")
    if array.dtype.kind in "iu":
        _check_int_range(spec, array, target, origin)  # then the conversion keeps every value: no warning
        return array.astype(target), None
    with np.errstate(over="ignore"):  # a value beyond the target's range becomes inf: the warning says so
        converted = array.astype(target)
    return converted, _conversion_warning(spec, array, converted, origin)


def _check_int_range(spec: InputSpec, array: np.ndarray, target: np.dtype, origin: str) -> None:
    """Refuse integers that ``target`` cannot hold: numpy's conversion would wrap them round to other values."""
    if array.size == 0:
        return
    info = np.iinfo(target)
    for value in (array.min(), array.max()):
        if not int(info.min) <= int(value) <= int(info.max):
            index = tuple(int(i) for i in np.argwhere(array == value)[0])
            raise AmpconfigError(
                f"{origin}: input {spec.name!r} holds {int(value)} at index {list(index)}, which {target} (the "
                f"model's type) cannot hold: its range is {int(info.min)} to {int(info.max)}",
                hint=f"give values in that range, saved as {target} (numpy: array.astype(np.{target}))",
            )


#: numpy has no bfloat16 of its own: ml_dtypes' type, and what np.save writes for it (raw 2-byte values).
_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_RAW_BFLOAT16 = np.dtype("V2")


def _conversion_warning(spec: InputSpec, array: np.ndarray, converted: np.ndarray, origin: str) -> str | None:
    """What a conversion to the input's type did to the values, when it changed any (None when all are kept)."""
    before = array.astype(np.float64)
    after = converted.astype(np.float64)
    changed = ~((before == after) | (np.isnan(before) & np.isnan(after)))
    if not changed.any():
        return None
    change = np.abs(after - before)[changed]
    largest = "inf" if not np.isfinite(change).all() else f"{float(change.max()):.3g}"
    return (
        f"{origin}: {array.dtype} values converted to {converted.dtype}, the type of input {spec.name!r}: "
        f"{int(changed.sum())} of {array.size} value(s) changed, by up to {largest}"
    )


def _same_kind(a: np.dtype, b: np.dtype) -> bool:
    def kind(dtype: np.dtype) -> str:
        if dtype == _BFLOAT16:
            return "f"  # ml_dtypes' bfloat16 says "V"
        return "i" if dtype.kind in "iu" else dtype.kind

    return kind(a) == kind(b)


def _format_dims(dims: tuple[Dim, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


# ----------------------------------------------------------------------------------------------- generation


def _resolve_shape(
    spec: InputSpec, explicit: list[int] | None, symbols: dict[str, int]
) -> tuple[list[int], dict[str, int]]:
    """Concrete shape for a generated input plus the dims that took a default (label -> value)."""
    if spec.dims is None:
        if explicit is None:
            raise AmpconfigError(
                f"input {spec.name!r} has no shape in the model",
                hint=f"give it one with --shape {spec.name}=DIMxDIM...",
            )
        return list(explicit), {}
    if explicit is not None:
        _check_explicit(spec, explicit)
        return list(explicit), {}
    shape: list[int] = []
    defaulted: dict[str, int] = {}
    for axis, dim in enumerate(spec.dims):
        if isinstance(dim, int):
            shape.append(dim)
        elif isinstance(dim, str) and dim in symbols:
            shape.append(symbols[dim])
        else:
            value = DEFAULT_BATCH_DIM if axis == 0 else DEFAULT_OTHER_DIM
            label = dim if isinstance(dim, str) else f"{spec.name}[{axis}]"
            defaulted[label] = value
            if isinstance(dim, str):
                symbols[dim] = value
            shape.append(value)
    return shape, defaulted


def _check_explicit(spec: InputSpec, explicit: list[int]) -> None:
    assert spec.dims is not None
    if len(explicit) != len(spec.dims):
        raise AmpconfigError(
            f"--shape {spec.name}: {len(explicit)} dimension(s) given but the input has rank "
            f"{len(spec.dims)} ({_format_dims(spec.dims)})"
        )
    for axis, (want, got) in enumerate(zip(spec.dims, explicit, strict=True)):
        if isinstance(want, int) and want != got:
            raise AmpconfigError(f"--shape {spec.name}: axis {axis} is fixed to {want} by the model, not {got}")


def _bind_symbols(spec: InputSpec, shape: tuple[int, ...] | list[int], symbols: dict[str, int]) -> None:
    if spec.dims is None or len(spec.dims) != len(shape):
        return
    for dim, value in zip(spec.dims, shape, strict=True):
        if isinstance(dim, str):
            symbols.setdefault(dim, int(value))


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(name.encode("utf-8"))])


def _generate(
    model: onnx.ModelProto, spec: InputSpec, shape: list[int], seed: int, ints: IntRange, earlier_bytes: int = 0
) -> tuple[np.ndarray, str]:
    rng = _rng(seed, spec.name)
    dtype = spec.dtype
    if spec.elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16):
        return rng.standard_normal(shape).astype(dtype), "standard normal"
    if spec.elem_type == TensorProto.BOOL:
        return rng.integers(0, 2, size=shape).astype(np.bool_), "random booleans"
    if dtype.kind in "iu":
        return _generate_ints(model, spec, shape, rng, ints)
    if is_string(spec.elem_type):
        vocab = vocabulary(model, spec.name)
        if vocab is None:
            raise no_vocabulary_error(spec.name, spec.dims)
        return generate_strings(vocab, spec.name, shape, rng, earlier_bytes), vocab.describe()
    raise AmpconfigError(
        f"cannot generate values for input {spec.name!r} of type {spec.type_name}",
        hint=f"give it in a file: --input {spec.name}=FILE.npy or --inputs FILE.npz",
    )


def _generate_ints(
    model: onnx.ModelProto, spec: InputSpec, shape: list[int], rng: np.random.Generator, ints: IntRange
) -> tuple[np.ndarray, str]:
    dtype = spec.dtype
    rows = gather_table_rows(model, spec.name)
    if rows is not None:
        rows = min(rows, int(np.iinfo(dtype).max) + 1)  # a narrow input cannot hold every row's index
        values = rng.integers(0, rows, size=shape).astype(dtype)
        return values, f"token ids in [0, {rows}) (rows of the Gather)"
    lowered = spec.name.lower()
    if "mask" in lowered and ints.low is None and ints.high is None:
        return np.ones(shape, dtype=dtype), "all ones (mask)"
    low = DEFAULT_INT_RANGE[0] if ints.low is None else ints.low
    high = DEFAULT_INT_RANGE[1] if ints.high is None else ints.high
    info = np.iinfo(dtype)
    low, high = max(low, int(info.min)), min(high, int(info.max) + 1)
    if low >= high:
        raise AmpconfigError(f"integer range [{low}, {high}) for input {spec.name!r} is empty")
    kind = "token ids" if _looks_like_ids(model, spec.name) else "integers"
    return rng.integers(low, high, size=shape).astype(dtype), f"{kind} in [{low}, {high})"


def _looks_like_ids(model: onnx.ModelProto, name: str) -> bool:
    lowered = name.lower()
    return "ids" in lowered or "token" in lowered or feeds_gather(model, name)


# ------------------------------------------------------------------------------------------------ entry point


def prepare_inputs(
    model: onnx.ModelProto,
    *,
    npz: Path | None = None,
    arrays: Mapping[str, Path] | None = None,
    shapes: Mapping[str, list[int]] | None = None,
    seed: int = 0,
    int_low: int | None = None,
    int_high: int | None = None,
) -> InputSet:
    """Feeds for every model input: files first (``arrays`` override ``npz``), the rest generated.

    With ``npz`` every input must be in the archive (or given by ``arrays``); names that are not model inputs
    in ``arrays`` or ``shapes`` are errors that list the real inputs.
    """
    specs = model_input_specs(model)
    by_name = {spec.name: spec for spec in specs}
    arrays = dict(arrays or {})
    shapes = dict(shapes or {})
    _check_names(arrays, by_name, "--input")
    _check_names(shapes, by_name, "--shape")

    loaded, warnings = _load_files(specs, npz, arrays)
    symbols: dict[str, int] = {}
    for name, (array, _source, _stored) in loaded.items():
        _bind_symbols(by_name[name], array.shape, symbols)
    for name, dims in shapes.items():
        if name not in loaded:
            _bind_symbols(by_name[name], dims, symbols)

    feeds: dict[str, np.ndarray] = {}
    prepared: list[PreparedInput] = []
    generated_bytes = 0
    for spec in specs:
        if spec.name in loaded:
            array, source, stored = loaded[spec.name]
            _check_shape_agrees(spec.name, shapes.get(spec.name), array, source)
            values = f"from {source.split(':', 1)[1]}"
            if is_string(spec.elem_type):
                values += " (UTF-8 bytes decoded)" if stored.kind == "S" else ""
            elif stored != array.dtype and stored != _RAW_BFLOAT16:
                values += f" ({stored} converted to {array.dtype})"
            prepared.append(PreparedInput(spec.name, dtype_name(spec, array), list(array.shape), source, values))
        else:
            shape, defaulted = _resolve_shape(spec, shapes.get(spec.name), symbols)
            if not is_string(spec.elem_type):  # strings are checked once their width is known
                _check_generation_memory(spec, shape, generated_bytes)
            array, values = _generate(model, spec, shape, seed, IntRange(int_low, int_high), generated_bytes)
            generated_bytes += array.nbytes
            prepared.append(PreparedInput(spec.name, dtype_name(spec, array), shape, "generated", values, defaulted))
        feeds[spec.name] = array
    return InputSet(feeds, prepared, warnings)


def dtype_name(spec: InputSpec, array: np.ndarray) -> str:
    """The type of an input as fed, for the reports: ``string`` for strings (whatever width numpy gives the
    array), else numpy's name."""
    return "string" if is_string(spec.elem_type) else str(array.dtype)


def _check_generation_memory(spec: InputSpec, shape: list[int], earlier_bytes: int) -> None:
    """Refuse an input whose generation would pass the input memory budget, before allocating it. Values are
    drawn as float64/int64 and then converted, so generating takes 8 bytes per element more than the input."""
    needed = math.prod(shape) * (8 + spec.dtype.itemsize)
    dims = "x".join(str(dim) for dim in shape) or "scalar"
    what = f"generating input {spec.name!r} of shape {dims} ({spec.dtype})"
    if earlier_bytes:
        what += f" next to the {format_bytes(earlier_bytes)} of the inputs before it"
    check_input_memory(
        earlier_bytes + needed,
        what,
        hint=f"give smaller dimensions with --shape {spec.name}=DIMxDIM... (or run.shapes in the config), "
        f"or feed the input from a file with --input {spec.name}=FILE.npy",
    )


def _check_names(given: Mapping[str, object], by_name: Mapping[str, InputSpec], flag: str) -> None:
    for name in given:
        if name not in by_name:
            raise AmpconfigError(
                f"{flag} {name}: the model has no input named {name!r}",
                hint="model inputs: " + (", ".join(by_name) or "(none)"),
            )


def _load_files(
    specs: list[InputSpec], npz: Path | None, arrays: Mapping[str, Path]
) -> tuple[dict[str, tuple[np.ndarray, str, np.dtype]], list[str]]:
    """The arrays read for the inputs, each with where it came from and its dtype there, and a warning per input
    whose values changed on their way to its type."""
    loaded: dict[str, tuple[np.ndarray, str, np.dtype]] = {}
    warnings: list[str] = []
    archive = load_npz(npz) if npz is not None else {}
    for spec in specs:
        if spec.name in arrays:
            path = arrays[spec.name]
            raw, source = _read_input_file(spec, path, warnings)
            array, warning = coerce_input(spec, raw, f"--input {spec.name}={path}")
            loaded[spec.name] = (array, source, raw.dtype)
        elif npz is not None:
            if spec.name not in archive:
                raise AmpconfigError(
                    f"the inputs file has no array for model input {spec.name!r}",
                    file=str(npz),
                    hint=f"arrays in it: {', '.join(archive) or '(none)'}; "
                    f"model inputs: {', '.join(s.name for s in specs)}",
                )
            raw = archive[spec.name]
            array, warning = coerce_input(spec, raw, str(npz))
            loaded[spec.name] = (array, f"npz:{npz}", raw.dtype)
        else:
            continue
        if warning is not None:
            warnings.append(warning)
    return loaded, warnings


def _read_input_file(spec: InputSpec, path: Path, notes: list[str]) -> tuple[np.ndarray, str]:
    """The array ``--input NAME=path`` gives, and its source for the report: a ``.npy`` array, or for a STRING
    input a UTF-8 text file of one string a line (any file that does not start as a ``.npy`` does; what it was
    read as, in ``notes``)."""
    label = f"--input {spec.name}"
    if not is_string(spec.elem_type):
        if path.suffix.lower() == ".txt":
            raise AmpconfigError(
                f"{label}: a text file gives strings, one a line, but input {spec.name!r} is {spec.type_name}",
                file=str(path),
                hint=f"save the values with numpy.save(path, array.astype(np.{spec.dtype}))",
            )
        return load_npy(path, label), f"npy:{path}"
    if path.suffix.lower() == ".npy" or _starts_as_npy(path, label):
        return load_npy(path, label), f"npy:{path}"
    if spec.dims is not None and len(spec.dims) != 1:
        raise AmpconfigError(
            f"{label}: a text file gives a rank-1 input (one string a line), but input {spec.name!r} has rank "
            f"{len(spec.dims)} ({_format_dims(spec.dims)})",
            file=str(path),
            hint="save the strings in the input's shape as a .npy: numpy.save(path, array.astype(str))",
        )
    return read_text_lines(path, spec.name, label, notes), f"txt:{path}"


def _starts_as_npy(path: Path, label: str) -> bool:
    with open_regular(path, f"{label}: file", hint="check the path") as stream:  # a FIFO is refused, not waited on
        return stream.read(len(NPY_MAGIC)) == NPY_MAGIC


def _check_shape_agrees(name: str, explicit: list[int] | None, array: np.ndarray, source: str) -> None:
    if explicit is not None and list(explicit) != list(array.shape):
        raise AmpconfigError(
            f"--shape {name}={'x'.join(map(str, explicit))} disagrees with {source.split(':', 1)[1]}, "
            f"which holds shape {list(array.shape)}"
        )


def adapt_feeds(feeds: Mapping[str, np.ndarray], model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The same feeds converted to another model's input dtypes (a rewrite without keep_io_types)."""
    adapted = {}
    specs = {spec.name: spec for spec in model_input_specs(model)}
    for name, array in feeds.items():
        spec = specs.get(name)
        if spec is None or array.dtype == spec.dtype or (is_string(spec.elem_type) and array.dtype.kind == "U"):
            adapted[name] = array  # strings stay a <U array (ONNX Runtime takes it; object arrays need pickle)
        else:
            adapted[name] = array.astype(spec.dtype)
    return adapted


# ------------------------------------------------------------------------------------------ calibration slices


def first_samples(model: onnx.ModelProto, inputs: InputSet, count: int) -> InputSet:
    """The first ``count`` samples of every input along a shared batch dimension: a smaller calibration batch.

    The batch is the first dimension of every input, declared with one symbol (``batch``) or left unnamed, and of
    the same size in every feed. Returns ``inputs`` itself when it holds no more than ``count`` samples; raises
    :class:`AmpconfigError` when the inputs share no such dimension (then a smaller ``.npz`` is the way)."""
    if count < 1:
        raise AmpconfigError(f"--calibration-batch must be at least 1, not {count}")
    specs = model_input_specs(model)
    firsts = {spec.name: spec.dims[0] if spec.dims else None for spec in specs}
    fixed = sorted(name for name, dim in firsts.items() if isinstance(dim, int))
    symbols = {dim for dim in firsts.values() if isinstance(dim, str)}
    sizes = {name: np.shape(array)[0] if np.ndim(array) else None for name, array in inputs.feeds.items()}
    why = None
    if not specs:
        why = "the model has no inputs"
    elif fixed:
        why = f"the first dimension of {', '.join(fixed)} is fixed in the model"
    elif len(symbols) > 1:
        why = f"the inputs' first dimensions have different names ({', '.join(sorted(symbols))})"
    elif None in sizes.values() or len(set(sizes.values())) != 1:
        why = "the inputs fed do not share their first dimension's size: " + ", ".join(
            f"{name} {size if size is not None else 'scalar'}" for name, size in sorted(sizes.items())
        )
    if why is not None:
        raise AmpconfigError(
            f"--calibration-batch needs a batch dimension every input shares, and {why}",
            hint="leave --calibration-batch out, or give smaller inputs (--shape, an .npz with fewer samples)",
        )
    (batch,) = set(sizes.values())
    if batch is None or batch <= count:
        return inputs
    feeds = {name: np.ascontiguousarray(array[:count]) for name, array in inputs.feeds.items()}
    described = [
        replace(item, shape=[count, *item.shape[1:]], values=f"{item.values}; the first {count} of {batch} samples")
        for item in inputs.inputs
    ]
    return InputSet(feeds, described)
