"""Data sets: several samples of model inputs, each fed to the models as one run (``--data``,
``--calibration-data``).

Three layouts, told apart by the path:

- a **folder** of ``.npz`` files: one sample per file, in file-name order, each holding an array per model input;
- a single **.npz** whose arrays carry a leading sample axis: sample ``i`` is ``array[i]``. An array with exactly
  the model input's rank instead is read along its first (batch) axis, one batch of one per sample:
  ``array[i:i+1]``;
- a **.json** list of feeds as Polygraphy writes them (``polygraphy run --save-inputs``, ``polygraphy.json.save_json``
  of a ``List[Dict[str, np.ndarray]]``): each array is an object whose ``array`` holds ``numpy.save``'s bytes in
  base64; a plain (nested) list of numbers is accepted too, in the model input's dtype.

Every sample must give every model input (and nothing else), with the rank and fixed dimensions the model
declares; dtypes of the same kind are converted (float64 -> float32). The whole set must fit in the input memory
budget (:mod:`ampconfig.memory`), checked from the files' sizes before anything is read.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from onnx import TensorProto

from ampconfig.documents.parsing import scan_json
from ampconfig.errors import AmpconfigError
from ampconfig.files.paths import open_regular, path_kind, require_file
from ampconfig.inputs.array_files import load_array_bytes, load_npz
from ampconfig.inputs.feeds import (
    InputSet,
    InputSpec,
    PreparedInput,
    coerce_input,
    dtype_name,
    model_input_specs,
)
from ampconfig.inputs.strings import is_string, strings_from_lists
from ampconfig.memory import check_input_memory
from ampconfig.worker.timed import ProgressCallback

log = logging.getLogger(__name__)

Sample = dict[str, np.ndarray]

#: How a data set's path says what it is, for messages.
_LAYOUTS = "a folder of .npz files (one sample each), one .npz with a leading sample axis, or a Polygraphy .json"
_JSON_HINT = (
    "write it with polygraphy.json.save_json([{input_name: array}, ...], path) or polygraphy run --save-inputs; "
    "or give a folder of .npz files"
)


@dataclass
class SampleSet:
    """The samples a command runs, and where they came from.

    ``inputs`` describes the first sample (what the reports list per input); ``source`` is ``"generated"``, or
    ``--inputs`` / ``--data`` and the path; ``generated`` keeps the :class:`InputSet` the first sample came from
    when the inputs were generated or read from ``--inputs``/``--input`` (its defaulted dimensions, for hints)."""

    samples: list[Sample]
    inputs: list[PreparedInput]
    source: str
    generated: InputSet | None = None
    conversions: list[str] = field(default_factory=list)  # a data set's values changed by type conversion
    #: for a shard of a data set: which, and how many samples the whole set holds
    shard: Shard | None = None
    whole: int | None = None

    @property
    def warnings(self) -> list[str]:
        """Values that changed on their way to the input's type: of ``--inputs``/``--input``, or of a data set
        (one warning per input, naming the first sample and how many others)."""
        return (self.generated.warnings if self.generated is not None else []) + self.conversions

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def feeds(self) -> Sample:
        """The first sample (what the single-sample paths feed)."""
        return self.samples[0]

    @property
    def defaulted(self) -> bool:
        return self.generated is not None and self.generated.defaulted

    def first(self, count: int) -> SampleSet:
        """The first ``count`` samples (``self`` when it holds no more)."""
        if count >= len(self.samples):
            return self
        return SampleSet(
            self.samples[:count],
            self.inputs,
            f"{self.source} (its first {count} samples)",
            self.generated,
            self.conversions,
        )


def single_sample(inputs: InputSet) -> SampleSet:
    """The one batch of ``--inputs``/``--input`` or generated values, as a set of one sample."""
    files = sorted({Path(item.source.split(":", 1)[1]).name for item in inputs.inputs if ":" in item.source})
    generated = any(item.source == "generated" for item in inputs.inputs)
    parts = ([f"the inputs in {', '.join(files)}"] if files else []) + (["generated inputs"] if generated else [])
    return SampleSet([inputs.feeds], inputs.inputs, " and ".join(parts) or "no inputs", inputs)


def load_data(
    path: Path,
    model: Any,
    label: str = "--data",
    progress: ProgressCallback | None = None,
    shard: Shard | None = None,
) -> SampleSet:
    """The samples at ``path`` for ``model`` (an ``onnx.ModelProto``), every sample checked against its inputs.
    A folder that takes more than :data:`PROGRESS_AFTER_S` to read reports its files to ``progress``. ``shard``:
    only that part (a folder's files in sorted order, file i from 0 in shard i mod count + 1, read alone; the
    samples of one file likewise)."""
    specs = model_input_specs(model)
    changed: Changed = {}
    whole = 0
    if path_kind(path) == "folder":
        files = _sample_files(path, label)
        whole = len(files)
        files = shard.part(files, f"{label} {path}") if shard is not None else files
        check_input_memory(sum(item.stat().st_size for item in files), f"{label}: the samples in {path}", _SMALLER)
        report = _late_progress(progress, f"{label} {path}: reading samples", len(files))
        samples = []
        for done, item in enumerate(files, 1):
            samples.append(_checked(specs, load_npz(item, label), f"{label} {path}: {item.name}", changed))
            report(done)
    elif path.suffix == ".npz":
        samples = _split_npz(specs, load_npz(path, label), f"{label} {path}", changed)
    elif path.suffix == ".json":
        samples = _read_json(specs, path, label, changed)
    else:
        require_file(path, f"{label} data set", hint=f"give {_LAYOUTS}")
        raise AmpconfigError(f"{label}: not a data set: {path.name}", file=str(path), hint=f"give {_LAYOUTS}")
    if not samples:
        raise AmpconfigError(f"{label}: the data set holds no sample", file=str(path), hint=f"give {_LAYOUTS}")
    if shard is not None and not whole:  # one file of samples: the samples are split as a folder's files are
        whole = len(samples)
        samples = shard.part(samples, f"{label} {path}")
    first = samples[0]
    described = [
        PreparedInput(
            spec.name, dtype_name(spec, first[spec.name]), list(first[spec.name].shape), f"data:{path}", _what(samples)
        )
        for spec in specs
    ]
    source = f"{label} {path}" + (f" (shard {shard.index} of {shard.count})" if shard is not None else "")
    return SampleSet(
        samples,
        described,
        source,
        conversions=_conversion_warnings(changed),
        shard=shard,
        whole=whole if shard is not None else None,
    )


@dataclass(frozen=True)
class Shard:
    """One part of a data set (``calibrate --shard INDEX/COUNT``): of its samples in order (a folder's files in
    sorted order), sample i (from 0) is in shard i mod ``count`` + 1."""

    index: int
    count: int

    def part(self, items: Sequence[Any], where: str) -> list[Any]:
        chosen = list(items[self.index - 1 :: self.count])
        if not chosen:
            raise AmpconfigError(
                f"{where}: shard {self.index} of {self.count} holds no sample (the data set holds {len(items)})",
                hint=f"split it into at most {len(items)} shards",
            )
        return chosen


#: Reading a data set folder shows its progress once it has taken this long: a quick one shows no bar.
PROGRESS_AFTER_S = 1.0


def _sample_files(folder: Path, label: str) -> list[Path]:
    """The folder's ``.npz`` files in name order. One that is not a regular file (a FIFO, a socket, a device, a
    folder) is skipped with a warning: opening a FIFO would wait for a writer for ever."""
    files: list[Path] = []
    skipped: list[Path] = []
    for item in folder.iterdir():
        if item.suffix != ".npz":
            continue
        (files if item.is_file() else skipped).append(item)
    for item in sorted(skipped):
        log.warning("%s: skipped %s: not a regular file", label, item)
    if not files:
        raise AmpconfigError(f"{label}: the folder holds no .npz file", file=str(folder), hint=f"give {_LAYOUTS}")
    return sorted(files)


def _late_progress(progress: ProgressCallback | None, what: str, total: int) -> Callable[[int], None]:
    """``report(done)``: passed on to ``progress`` once :data:`PROGRESS_AFTER_S` has gone by since this call (and
    for the last item, when anything was shown)."""
    start = time.monotonic()
    shown = False

    def report(done: int) -> None:
        nonlocal shown
        if progress is None:
            return
        if shown or time.monotonic() - start >= PROGRESS_AFTER_S:
            shown = True
            progress(what, done, total)

    return report


#: Per input name, the conversion warning of each sample whose values changed.
Changed = dict[str, list[str]]


def _conversion_warnings(changed: Changed) -> list[str]:
    """One warning per input: its first changed sample's, with how many other samples changed too."""
    return [
        warnings[0] + (f" (and in {len(warnings) - 1} more sample(s))" if len(warnings) > 1 else "")
        for warnings in changed.values()
    ]


_SMALLER = "give fewer samples, or smaller ones"


def _what(samples: Sequence[Sample]) -> str:
    return f"from a data set of {len(samples)} sample(s)" + (" (first shown)" if len(samples) > 1 else "")


def _check_names(specs: Sequence[InputSpec], given: Sequence[str], where: str) -> None:
    names = [spec.name for spec in specs]
    missing = [name for name in names if name not in given]
    extra = [name for name in given if name not in names]
    if missing or extra:
        parts = [f"missing {', '.join(missing)}"] if missing else []
        parts += [f"not model inputs: {', '.join(extra)}"] if extra else []
        raise AmpconfigError(
            f"{where}: the sample does not match the model's inputs ({'; '.join(parts)})",
            hint="model inputs: " + (", ".join(names) or "(none)"),
        )


def _checked(specs: Sequence[InputSpec], arrays: Mapping[str, Any], where: str, changed: Changed) -> Sample:
    """One sample: exactly the model's inputs, each coerced to its declared rank, fixed dims and dtype; a
    conversion that changed values is added to ``changed``."""
    _check_names(specs, list(arrays), where)
    sample: Sample = {}
    for spec in specs:
        sample[spec.name], warning = coerce_input(spec, _as_array(arrays[spec.name], spec, where), where)
        if warning is not None:
            changed.setdefault(spec.name, []).append(warning)
    return sample


def _as_array(value: Any, spec: InputSpec, where: str) -> np.ndarray:
    """An array as decoded, or a JSON data set's plain (nested) list in the type its values are written in:
    booleans, integers (int64), other numbers (float64) or strings. :func:`coerce_input` then converts it as it
    converts a file's array, so an integer the input's type cannot hold is refused, not wrapped round."""
    if isinstance(value, np.ndarray):
        return value
    if is_string(spec.elem_type):
        return strings_from_lists(spec.name, value, where)
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise AmpconfigError(f"{where}: input {spec.name!r} is not an array of numbers ({exc})") from None
    if array.dtype.kind not in "biuf":  # strings, integers beyond int64 (object), lists of unequal length
        raise AmpconfigError(
            f"{where}: input {spec.name!r} is not a rectangular array of numbers",
            hint="give a list (of lists) of numbers, each list as long as the others",
        )
    if array.dtype.kind in "iu" and (spec.dtype.kind == "f" or spec.elem_type == TensorProto.BFLOAT16):
        return array.astype(np.float64)  # whole numbers written for a float input; a change is warned about
    return array


def _split_npz(
    specs: Sequence[InputSpec], arrays: Mapping[str, np.ndarray], where: str, changed: Changed
) -> list[Sample]:
    """Samples along the leading axis every array shares (see the module docstring)."""
    _check_names(specs, list(arrays), where)
    counts: dict[str, int] = {}
    sliced: dict[str, bool] = {}
    for spec in specs:
        array = arrays[spec.name]
        rank = len(spec.dims) if spec.dims is not None else array.ndim - 1
        if array.ndim not in (rank, rank + 1) or array.ndim == 0:
            raise AmpconfigError(
                f"{where}: input {spec.name!r} has shape {list(array.shape)}: a data set needs a leading sample axis "
                f"(rank {rank + 1} for an input of rank {rank})",
                hint="stack the samples with numpy.stack, or give a folder of .npz files, one per sample",
            )
        sliced[spec.name] = array.ndim == rank  # read along the batch axis, one batch of one per sample
        counts[spec.name] = array.shape[0]
    if len(set(counts.values())) > 1:
        raise AmpconfigError(
            f"{where}: the arrays hold different numbers of samples: "
            + ", ".join(f"{name} {count}" for name, count in counts.items()),
            hint="every input needs one entry per sample along the first axis",
        )
    count = next(iter(counts.values()), 0)
    return [
        _checked(
            specs,
            {spec.name: arrays[spec.name][i : i + 1] if sliced[spec.name] else arrays[spec.name][i] for spec in specs},
            f"{where}, sample {i}",
            changed,
        )
        for i in range(count)
    ]


def _read_json(specs: Sequence[InputSpec], path: Path, label: str, changed: Changed) -> list[Sample]:
    with open_regular(path, f"{label} data set (.json)", hint=_JSON_HINT) as file:  # a FIFO is never waited on
        # base64 holds 3 bytes in 4 characters: the arrays need about three quarters of the file.
        check_input_memory(os.fstat(file.fileno()).st_size * 3 // 4, f"{label}: the samples in {path.name}", _SMALLER)
        try:
            text = file.read().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise AmpconfigError(f"{label}: not a JSON document: {exc}", file=str(path), hint=_JSON_HINT) from None

    # Nesting is bounded before json.loads recurses; values are not (a plain list of numbers may hold millions:
    # the memory check above bounds them).
    scan_json(text, str(path), max_values=len(text) + 1)
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise AmpconfigError(f"{label}: not a JSON document: {exc}", file=str(path), hint=_JSON_HINT) from None
    if isinstance(document, dict):
        document = [document]  # one feed written alone
    if not isinstance(document, list) or not all(isinstance(item, dict) for item in document):
        raise AmpconfigError(
            f"{label}: expected a list of feeds ({{input name: array}} objects)", file=str(path), hint=_JSON_HINT
        )
    samples = []
    for index, feed in enumerate(document):
        where = f"{label} {path}, sample {index}"
        arrays = {name: _decode(value, f"{where}, input {name!r}") for name, value in feed.items()}
        samples.append(_checked(specs, arrays, where, changed))
    return samples


def _decode(value: Any, where: str) -> Any:
    """A Polygraphy-encoded array (``{"array": base64 of numpy.save}``), or a plain list of numbers as it is."""
    if not isinstance(value, dict):
        return value
    encoded = value.get("array")
    if not isinstance(encoded, str):
        raise AmpconfigError(f"{where}: an object without the 'array' string Polygraphy writes", hint=_JSON_HINT)
    try:
        data = base64.b64decode(encoded.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        try:
            data = encoded.encode("latin-1")  # Polygraphy's older files stored the bytes as latin-1
        except UnicodeEncodeError:
            raise AmpconfigError(f"{where}: 'array' is neither base64 nor latin-1 bytes", hint=_JSON_HINT) from None
    return load_array_bytes(data, where)
