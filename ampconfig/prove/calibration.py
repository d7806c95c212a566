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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ampconfig.decide.ranges_input import NOT_CHECKED, read_ranges, structure_sha256
from ampconfig.decide.value_ranges import ValueRanges
from ampconfig.domains import onnx_opset
from ampconfig.errors import AmpconfigError
from ampconfig.files.paths import real_location, relative_path
from ampconfig.rewrite.results import RewriteResult
from ampconfig.settings.ranges_file import (
    RANGES_FORMAT,
    RANGES_FORMAT_VERSION,
    RangesData,
    RangesFile,
    RangesModel,
    ValueRange,
)
from ampconfig.settings.resolve import Settings
from ampconfig.version import __version__

if TYPE_CHECKING:  # ONNX Runtime is loaded only where something runs: a decision from a ranges file needs none
    from ampconfig.files.guard import Destination, OutputGuard
    from ampconfig.prove.request import Prepared
    from ampconfig.runner.intermediates import ValueStats
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
    device: str
    margin: float | None

    @property
    def ranges(self) -> ValueRanges:
        peaks = {key: stats.peak for key, stats in self.stats.items()}
        return ValueRanges(peaks, self.source, self.margin, data_sha256=self.data_sha256)

    def file(self, model_path: Path, written_to: Path) -> RangesFile:
        """The ranges file of this measurement, to be written at ``written_to``: the model's path is recorded
        relative to that file's folder, with ``/`` separators, as a lock records paths."""
        from ampconfig.settings.schemas import schema_reference

        written_to = real_location(written_to)  # through a symbolic link: relative to the real file
        return RangesFile(
            schema_ref=schema_reference("ranges", written_to),
            format=RANGES_FORMAT,
            format_version=RANGES_FORMAT_VERSION,
            ampconfig=__version__,
            device=self.device,
            model=RangesModel(
                path=relative_path(model_path, written_to.parent), structure_sha256=self.structure_sha256
            ),
            data=RangesData(source=self.source, samples=self.samples, sha256=self.data_sha256),
            values={
                key: ValueRange(min=stats.minimum, max=stats.maximum, max_abs=stats.peak, nonfinite=stats.nonfinite)
                for key, stats in self.stats.items()
            },
        )


def calibrate(prepared: Prepared, progress: ProgressCallback | None = None) -> Calibration | None:
    """The fp32 model once per calibration sample, every float value's stats computed in the session, before
    deciding. A model whose weights are on disk runs as its graph with the weights read from its folder (never
    copied into memory), whatever its size; None for one below opset 9 too large to copy in memory: its activations
    are not checked, and a note in ``prepared.notes`` says so."""
    from ampconfig.prove.request import explain_reference_failure, runnable_graph
    from ampconfig.runner.intermediates import PEAK_MIN_OPSET, run_value_stats
    from ampconfig.runner.proof import input_refusal
    from ampconfig.runner.sessions import ModelInFolder

    model: onnx.ModelProto | ModelInFolder
    folder = prepared.opened.folder if prepared.opened.tensors_on_disk else None
    if folder is not None and (onnx_opset(prepared.graph.opset_import) or 0) >= PEAK_MIN_OPSET:
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
    return Calibration(
        stats=stats,
        source=prepared.calibration_source(),
        samples=len(samples),
        data_sha256=samples_sha256(samples),
        structure_sha256=structure_sha256(prepared.opened.proto),
        device=prepared.device.device,
        margin=prepared.request.data_max,
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
    from ampconfig.settings.ranges_file import ranges_text

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
        ranges = read_ranges(settings.ranges, model, settings.data_max)
        return DecisionValues(ranges, warnings=_unchecked(ranges, model))
    if not (measure if measure is not None else has_value_inputs(settings)):
        return DecisionValues(None)
    prepared = prepare_samples()
    calibration = calibrate(prepared, progress)
    return DecisionValues(calibration.ranges if calibration is not None else None, calibration)


def _unchecked(ranges: ValueRanges, model: onnx.ModelProto) -> list[str]:
    """A warning naming the float values of the model's main graph the ranges file does not hold."""
    from ampconfig.rewrite.expose import float_value_keys

    missing = [key for key in float_value_keys(model) if key not in ranges.peaks]
    if not missing:
        return []
    shown = ", ".join(repr(key) for key in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    return [
        f"{len(missing)} float value(s) are not in the ranges file {ranges.file} and were not checked against the "
        f"low type's range: {shown}; make the ranges again (ampconfig calibrate)"
    ]


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
) -> RangesFile:
    """The Python API of ``ampconfig calibrate``: run the float32 ``model`` on the data (``data``/``calibration_data``:
    a data set; ``inputs``: one ``.npz``; else inputs generated from ``shapes`` and ``seed``), write the ranges
    file to ``output`` (atomically, never over an input) and return it. ``rewrite_model(..., ranges=output)`` and
    every command's ``--ranges output`` then decide from it as ``run`` decides on the same data. Bad input raises
    :class:`~ampconfig.errors.AmpconfigError`."""
    from ampconfig.files.guard import OutputGuard
    from ampconfig.settings.declared_files import declare_inputs
    from ampconfig.settings.resolve import Flags, require_model, resolve

    flags = Flags(
        model=Path(model),
        data=Path(data) if data is not None else None,
        calibration_data=Path(calibration_data) if calibration_data is not None else None,
        inputs_npz=Path(inputs) if inputs is not None else None,
        shapes=tuple(f"{name}={'x'.join(str(int(d)) for d in dims)}" for name, dims in (shapes or {}).items()),
        seed=seed,
        device=device,
    )
    settings = resolve(flags)
    require_model(settings)
    destination = Path(output)
    with OutputGuard() as guard:
        declare_inputs(guard, settings)
        target = guard.output("value ranges (output)", destination)
        calibration = measured(prepared_samples(settings, command="calibrate", guard=guard))
        ranges, _ = write_ranges_file(guard, target, calibration, settings.model_path, destination)
    return ranges
