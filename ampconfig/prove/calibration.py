"""The value ranges a decision reads, one way for every deciding command (docs/design.md §5).

Observed value ranges are an input of the decision, like the mixlist. They come from exactly one of:

1. a **ranges file** (``--ranges``, config ``ranges:``; made once by ``ampconfig calibrate`` or ``run
   --ranges-out``): read, checked against the model's structure (another structure is exit 2, both hashes
   named), never re-measured;
2. **data** (``--data``/``--calibration-data``/``--inputs``/``--input``/``--shape``, or the config's ``run``
   section): the float32 model runs once per calibration sample (:func:`calibrate`), as ``run`` always did;
3. **nothing**: activations are not checked (constants still are), which the rewrite says as a warning naming
   ``--data`` and ``--ranges`` (:data:`~ampconfig.decide.ranges_input.NOT_CHECKED`).

:func:`calibrate` is the one measurement: ``run``, ``calibrate``, ``rewrite``, ``lock``, ``diff``, ``explain``,
``compare`` and ``tune`` all decide with what it returns (or with a file it wrote), so the same model, settings and
values give the same decisions everywhere.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ampconfig.decide.ranges_input import NOT_CHECKED, ranges_identity, read_ranges
from ampconfig.decide.value_limits import ValueRanges
from ampconfig.decide.value_ranges import ValueStats
from ampconfig.documents.format_tags import RANGES_FORMAT
from ampconfig.documents.numeric_limits import MAX_SEED, check_count
from ampconfig.errors import AmpconfigError
from ampconfig.files.paths import path_argument, real_location, relative_path
from ampconfig.rewrite.results import RewriteResult
from ampconfig.settings.resolve import Settings
from ampconfig.version import __version__

if TYPE_CHECKING:  # ONNX Runtime is loaded only where something runs: a decision from a ranges file needs none
    from ampconfig.documents.ranges_file import RangesFile, RangesShard, ValueRange  # (only where measuring)
    from ampconfig.files.guard import Destination, OutputGuard
    from ampconfig.inputs.datasets import Shard
    from ampconfig.prove.request import Prepared
    from ampconfig.runner.timing import ProgressCallback


def not_checked(result: RewriteResult) -> list[str]:
    """The warning of a decision that lowered nodes without value ranges (none where nothing was lowered)."""
    return [NOT_CHECKED] if result.value_ranges is None and result.low_precision_nodes else []


def has_value_inputs(settings: Settings) -> bool:
    """Whether the settings name data to calibrate on (any input option, from the command line or the config)."""
    request = settings.inputs
    return bool(
        request.npz is not None
        or request.data is not None
        or request.calibration_data is not None
        or request.arrays
        or request.shapes
    )


def samples_sha256(samples: Sequence[Mapping[str, np.ndarray]]) -> str:
    """A digest of the samples as fed: per sample, each input's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for index, sample in enumerate(samples):
        digest.update(f"sample {index}\n".encode())
        for name in sorted(sample):
            array = np.ascontiguousarray(sample[name])
            digest.update(f"{name!r} {array.dtype.str} {list(array.shape)}\n".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Calibration:
    """One measurement: every float value's stats over the calibration samples, the samples' digest and the model
    structure it ran on; :attr:`ranges` is what a decision reads."""

    stats: Mapping[str, ValueStats]
    source: str
    samples: int
    data_sha256: str
    structure_sha256: str
    weights_sha256: str
    device: str
    margin: float | None
    #: a shard of a data set (``calibrate --shard``): which one
    shard: RangesShard | None = None

    @property
    def ranges(self) -> ValueRanges:
        peaks = {key: stats.peak for key, stats in self.stats.items()}
        spreads = {key: stats.spread for key, stats in self.stats.items()}
        return ValueRanges(peaks, self.source, self.margin, data_sha256=self.data_sha256, spreads=spreads)

    def file(self, model_path: Path, written_to: Path) -> RangesFile:
        """The ranges file of this measurement, to be written at ``written_to``: the model's path is recorded
        relative to that file's folder, with ``/`` separators, as a lock records paths."""
        from ampconfig.documents.ranges_file import RANGES_FORMAT_VERSION, RangesData, RangesFile, RangesModel
        from ampconfig.settings.json_schemas import schema_reference

        written_to = real_location(written_to)  # through a symbolic link: relative to the real file
        return RangesFile(
            schema_ref=schema_reference("ranges", written_to),
            format=RANGES_FORMAT,
            format_version=RANGES_FORMAT_VERSION,
            ampconfig=__version__,
            device=self.device,
            model=RangesModel(
                path=relative_path(model_path, written_to.parent),
                structure_sha256=self.structure_sha256,
                weights_sha256=self.weights_sha256,
            ),
            data=RangesData(source=self.source, samples=self.samples, sha256=self.data_sha256, shard=self.shard),
            values={key: value_range(stats) for key, stats in self.stats.items()},
        )


def value_range(stats: ValueStats) -> ValueRange:
    """One value's line of a ranges file."""
    from ampconfig.documents.ranges_file import ValueRange

    return ValueRange(
        min=stats.minimum,
        max=stats.maximum,
        max_abs=stats.peak,
        nonfinite=stats.nonfinite,
        zeros=stats.zeros,
        exponents={str(exponent): count for exponent, count in sorted(stats.exponents.items())},
        elements=stats.zeros + stats.nonfinite + sum(stats.exponents.values()),
        sentinels=stats.sentinels,
    )


def calibrate(prepared: Prepared, progress: ProgressCallback | None = None) -> Calibration | None:
    """The fp32 model once per calibration sample, every float value's stats computed in the session, before
    deciding. A model whose weights are on disk runs as its graph with the weights read from its folder (never
    copied into memory), whatever its size; None for one below opset 9 too large to copy in memory: its activations
    are not checked, and a note in ``prepared.notes`` says so."""
    from ampconfig.prove.request import explain_reference_failure, runnable_graph
    from ampconfig.runner.intermediates import run_value_stats
    from ampconfig.runner.proof import input_refusal
    from ampconfig.runner.sessions import ModelInFolder

    model: onnx.ModelProto | ModelInFolder
    folder = prepared.opened.folder if prepared.opened.tensors_on_disk else None
    if folder is not None:
        model = ModelInFolder(runnable_graph(prepared), folder)
    elif prepared.fits_in_memory:
        model = prepared.model
    else:
        prepared.notes.append(
            "activations were not checked against the low type's range: the model is too large for the run that "
            "exposes every intermediate (constants were)"
        )
        return None
    samples = prepared.calibration.samples
    try:
        stats = run_value_stats(model, samples, prepared.device.device, progress)
    except AmpconfigError as exc:  # the fp32 model refused, or failing on its inputs: say where, or what to set
        refusal = input_refusal(exc, prepared.graph, str(prepared.request.model_path))
        raise explain_reference_failure(refusal, prepared) from None
    return calibration_of(prepared, stats)


def calibration_of(prepared: Prepared, stats: Mapping[str, ValueStats]) -> Calibration:
    """The :class:`Calibration` of ``stats``, measured on ``prepared``'s calibration samples (by :func:`calibrate`,
    or from a run that carried every value out for more than its numbers: compare's and tune's reference)."""
    from ampconfig.documents.ranges_file import RangesShard

    samples = prepared.calibration.samples
    identity = ranges_identity(prepared.opened.proto, prepared.opened.path)
    part = prepared.calibration
    shard = (
        RangesShard(index=part.shard.index, count=part.shard.count, files=part.whole)
        if part.shard is not None and part.whole is not None
        else None
    )
    return Calibration(
        stats=stats,
        source=prepared.calibration_source(),
        samples=len(samples),
        data_sha256=samples_sha256(samples),
        structure_sha256=identity.structure_sha256,
        weights_sha256=identity.weights_sha256,
        device=prepared.device.device,
        margin=prepared.request.data_max,
        shard=shard,
    )


def measured(prepared: Prepared, progress: ProgressCallback | None = None) -> Calibration:
    """:func:`calibrate` for the commands whose point is the measurement (``calibrate``, its API): a model it
    cannot measure is an error saying why."""
    calibration = calibrate(prepared, progress)
    if calibration is None:
        raise AmpconfigError(
            "the model's activations cannot be measured: " + "; ".join(prepared.notes),
            file=str(prepared.request.model_path),
        )
    return calibration


def write_ranges_file(
    guard: OutputGuard, destination: Destination, calibration: Calibration, model_path: Path, written_to: Path
) -> tuple[RangesFile, Path]:
    """Write ``calibration``'s ranges file through ``guard`` (atomically, never over an input) to ``destination``,
    declared for the path ``written_to``; the file and where it went."""
    from ampconfig.documents.ranges_file import ranges_text

    ranges = calibration.file(model_path, written_to)
    return ranges, guard.write_text(destination, ranges_text(ranges))


def with_margin(ranges: ValueRanges | None, settings: Settings) -> ValueRanges | None:
    """``ranges`` with the settings' margin (``data_max``)."""
    return replace(ranges, margin=settings.data_max) if ranges is not None else None


@dataclass
class DecisionValues:
    """What a deciding command decides with: the ranges (None: activations not checked), the measurement when it
    was made now (what ``run --ranges-out`` writes), and what reading a ranges file found."""

    ranges: ValueRanges | None
    calibration: Calibration | None = None
    warnings: list[str] = field(default_factory=list)


def decision_values(
    settings: Settings,
    model: onnx.ModelProto,
    prepare_samples: Callable[[], Prepared],
    *,
    measure: bool | None = None,
    progress: ProgressCallback | None = None,
) -> DecisionValues:
    """The value ranges of one decision, the same way in every command: the ranges file when one is given (nothing
    runs), else a calibration run (``prepare_samples`` prepares the samples) when ``measure`` is True (the command
    runs the model anyway) or None and the settings name data, else none (``measure`` False: ``--no-range-check``).
    ``model`` is the input model as opened."""
    if settings.ranges is not None:
        # what the file does not cover the rewrite says (api: coverage_warnings), as the API and the pass do
        return DecisionValues(read_ranges(settings.ranges, model, settings.data_max, model_path=settings.model_path))
    if not (measure if measure is not None else has_value_inputs(settings)):
        return DecisionValues(None)
    prepared = prepare_samples()
    calibration = calibrate(prepared, progress)
    return DecisionValues(calibration.ranges if calibration is not None else None, calibration)


def _shape_flags(shapes: object) -> tuple[str, ...]:
    """The API's ``shapes`` as ``--shape`` flags: a mapping of input names to sequences of sizes."""
    if shapes is None:
        return ()
    usable = isinstance(shapes, Mapping) and all(
        isinstance(name, str)
        and isinstance(dims, Sequence)
        and not isinstance(dims, str)
        and all(type(dim) is int and dim >= 0 for dim in dims)
        for name, dims in shapes.items()
    )
    if not usable:
        raise AmpconfigError(
            f"shapes must map input names to sequences of sizes (whole numbers from 0), got {shapes!r:.80}",
            hint='for example shapes={"x": [1, 3, 224, 224]}',
        )
    assert isinstance(shapes, Mapping)
    return tuple(f"{name}={'x'.join(str(dim) for dim in dims)}" for name, dims in shapes.items())


def _not_a_seed(seed: object) -> int:
    raise AmpconfigError(f"seed must be a whole number from 0 to {MAX_SEED}, got {seed!r:.60}")


def prepared_samples(settings: Settings, **options: Any) -> Prepared:
    """:func:`ampconfig.prove.request.prepare`, imported only when samples are needed (it loads ONNX Runtime)."""
    from ampconfig.prove.request import prepare

    return prepare(settings, **options)


def calibrate_model(
    model: str | Path,
    output: str | Path,
    *,
    data: str | Path | None = None,
    calibration_data: str | Path | None = None,
    inputs: str | Path | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    device: str = "auto",
    shard: tuple[int, int] | None = None,
) -> RangesFile:
    """The Python API of ``ampconfig calibrate``: run the float32 ``model`` on the data, write the ranges file to
    ``output`` and return it. ``rewrite_model(..., ranges=output)`` and every command's ``--ranges output`` then
    decide from it as ``run`` decides on the same data.

    Args:
        model: the float32 ONNX model's path.
        output: where the ranges file is written (atomically, never over an input).
        data: a data set (a folder of .npz files, one .npz with a leading sample axis, or a Polygraphy JSON list
            of feeds) whose first 8 samples calibrate, as ``--data``.
        calibration_data: a data set (as ``data``) whose every sample calibrates, as ``--calibration-data``.
        inputs: one ``.npz`` of inputs; without a data set or inputs, inputs are generated from ``shapes`` and
            ``seed``.
        shapes: each input's shape by name, for generated inputs (``{"x": [1, 3, 224, 224]}``).
        seed: the seed of generated inputs, a whole number.
        device: where the model runs: ``auto`` (CUDA when a session really gets it, else the CPU), ``cpu`` or
            ``cuda``.
        shard: ``(index, count)``: only that part of the data set, every sample of it (``calibrate --shard``;
            :func:`merge_ranges` joins the parts).

    Returns:
        The ranges file written.

    Raises:
        AmpconfigError: bad input (:class:`~ampconfig.errors.AmpconfigError`).
    """
    from ampconfig.files.guard import OutputGuard
    from ampconfig.settings.declared_files import declare_inputs
    from ampconfig.settings.resolve import Flags, require_model, resolve

    flags = Flags(
        model=path_argument(model, "model", "an ONNX model"),
        data=path_argument(data, "data", "a data set") if data is not None else None,
        calibration_data=path_argument(calibration_data, "calibration_data", "a data set")
        if calibration_data is not None
        else None,
        inputs_npz=path_argument(inputs, "inputs", "an .npz of inputs") if inputs is not None else None,
        shapes=_shape_flags(shapes),
        seed=check_count(seed, "seed", 0, MAX_SEED) if type(seed) is int else _not_a_seed(seed),
        device=device,
    )
    settings = resolve(flags)
    require_model(settings)
    destination = path_argument(output, "output", "the ranges file to write")
    with OutputGuard() as guard:
        declare_inputs(guard, settings)
        target = guard.output("value ranges (output)", destination)
        part = _shard_argument(shard)
        calibration = measured(prepared_samples(settings, command="calibrate", guard=guard, shard=part))
        ranges, _ = write_ranges_file(guard, target, calibration, settings.model_path, destination)
    return ranges


def parse_shard(text: str, name: str = "--shard") -> Shard:
    """``INDEX/COUNT`` (1-based: ``2/4`` is the second of four shards) as a :class:`~ampconfig.inputs.datasets.Shard`;
    anything else is exit 2 naming ``name``."""
    from ampconfig.inputs.datasets import Shard

    index, slash, count = text.partition("/")
    # ASCII digits only: str.isdigit and int take fullwidth and other scripts' digits, which no shell script means
    if slash and _DIGITS.fullmatch(index) and _DIGITS.fullmatch(count) and 1 <= int(index) <= int(count) <= MAX_SHARDS:
        return Shard(int(index), int(count))
    raise AmpconfigError(
        f"{name} must be INDEX/COUNT in ASCII digits with 1 <= INDEX <= COUNT <= {MAX_SHARDS}, got {text!a:.60}",
        hint=f"{name} 2/4 measures the second of four shards of the data set",
    )


def _shard_argument(shard: object) -> Shard | None:
    """The API's ``shard=(index, count)``, checked as ``--shard`` is."""
    if shard is None:
        return None
    if isinstance(shard, tuple) and len(shard) == 2 and all(type(part) is int for part in shard):
        return parse_shard(f"{shard[0]}/{shard[1]}", "shard")
    raise AmpconfigError(f"shard must be (index, count), whole numbers, got {shard!r:.60}", hint="shard=(2, 4)")


_DIGITS = re.compile("[0-9]{1,9}")
#: More shards than this is no split a data set needs.
MAX_SHARDS = 100_000


def merge_ranges(shards: Sequence[str | Path], output: str | Path) -> RangesFile:
    """The Python API of ``ampconfig ranges merge``: join the shard files of one split exactly into one ranges file;
    the merged values equal one calibration over all the data.

    Args:
        shards: the shard files' paths (``calibrate --shard``, :func:`calibrate_model` with ``shard=``).
        output: where the merged ranges file is written (atomically, never over an input).

    Returns:
        The merged ranges file written.

    Raises:
        AmpconfigError: bad input (:class:`~ampconfig.errors.AmpconfigError`).
    """
    from ampconfig.files.guard import OutputGuard

    if isinstance(shards, (str, Path)) or not isinstance(shards, Sequence):
        raise AmpconfigError(f"shards must be a list of shard files' paths, got {shards!r:.60}")
    paths = [path_argument(path, "shards", "a shard's ranges file") for path in shards]
    destination = path_argument(output, "output", "the ranges file to write")
    with OutputGuard() as guard:
        for path in paths:
            guard.read("value ranges shard", path)
        target = guard.output("value ranges (output)", destination)
        merged, _ = write_merged(guard, target, paths, destination)
    return merged


def write_merged(
    guard: OutputGuard, destination: Destination, paths: Sequence[Path], written_to: Path
) -> tuple[RangesFile, Path]:
    """Read the shard files, merge them (:func:`ampconfig.documents.ranges_file.merge_ranges`) and write the result
    through ``guard`` to ``destination``, declared for the path ``written_to``: its model path relative to that
    file's folder (where the first shard's recorded path leads to a file), its schema reference for there."""
    from ampconfig.documents.ranges_file import load_ranges, ranges_text
    from ampconfig.documents.ranges_file import merge_ranges as join
    from ampconfig.settings.json_schemas import schema_reference

    merged = join([(load_ranges(path)[0], str(path)) for path in paths])
    recorded = merged.model.path
    model = Path(os.path.normpath(paths[0].parent / recorded)) if recorded is not None else None
    if model is not None and model.is_file():
        merged.model.path = relative_path(model, written_to.parent)
    merged.schema_ref = schema_reference("ranges", written_to)
    return merged, guard.write_text(destination, ranges_text(merged))
