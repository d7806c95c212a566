"""One preparation of a request for every command that runs models (run, explain, compare, tune): the model
opened (its external data declared to the guard at once), its nodes named as the rewrite names them, the samples
to judge and to calibrate on, and the device.

The model's tensors stay on disk until something needs them in memory (:attr:`Prepared.model`): ``run`` hands ONNX
Runtime files for a model with external data, or one too large for one protobuf; the debugging runs (exposed
intermediates, tune's trials) need the whole model in memory and refuse, naming the command, a model over
:data:`~ampconfig.model_io.models.IN_MEMORY_LIMIT`.

Samples (:mod:`ampconfig.inputs.datasets`): ``--data`` (several samples) or one batch (``--inputs``/``--input``,
else generated). Calibration samples (value ranges, tune's ranking): ``--calibration-data``, else the first
:data:`CALIBRATION_SAMPLES` samples of ``--data``, else the one batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

import onnx

from ampconfig.decide.measured_facts import MeasuredFacts
from ampconfig.decide.rewrite_options import KeepDtypeInput, MixlistInput
from ampconfig.decide.value_limits import ValueRanges
from ampconfig.errors import AmpconfigError
from ampconfig.files.guard import OutputGuard
from ampconfig.model_io import models as model_io
from ampconfig.model_io.ir_version import output_ir_version, with_ir_version
from ampconfig.model_io.models import OpenedModel, load_model, open_model
from ampconfig.rewrite.names import with_node_names
from ampconfig.rewrite.results import RewriteResult
from ampconfig.settings.declared_files import declare_model
from ampconfig.settings.resolve import InputRequest, Settings

if TYPE_CHECKING:
    from ampconfig.inputs.datasets import SampleSet, Shard
    from ampconfig.inputs.feeds import InputSet
    from ampconfig.runner.sessions import DeviceChoice
    from ampconfig.runner.timing import ProgressCallback

#: Samples of ``--data`` that calibrate (value ranges, tune's ranking) when no ``--calibration-data`` is given:
#: every calibration sample costs a run with every intermediate exposed (three in tune).
CALIBRATION_SAMPLES = 8


@dataclass
class Prepared:
    """A request ready to run: resolved settings, the opened model, the samples and the device.

    ``graph`` is the model with its nodes named as the rewrite names them, without the tensor data of a model
    with external data; :attr:`model` is the same with every tensor (loaded on first use)."""

    request: Settings
    opened: OpenedModel
    graph: onnx.ModelProto
    data: SampleSet
    calibration: SampleSet
    device: DeviceChoice
    command: str = "this command"
    notes: list[str] = field(default_factory=list)

    @property
    def low_dtype(self) -> str:
        return self.request.precision_mode.low_dtype

    @property
    def inputs(self) -> SampleSet:
        """The samples that are judged (the one batch, or ``--data``)."""
        return self.data

    @property
    def fits_in_memory(self) -> bool:
        return self.opened.fits_in_memory()

    @property
    def from_files(self) -> bool:
        """Whether ONNX Runtime gets this model as files (weights left in its file or in external data, or too
        large for one protobuf)."""
        return self.opened.tensors_on_disk or not self.fits_in_memory

    @cached_property
    def model(self) -> onnx.ModelProto:
        """The named model with every tensor in memory; a model too large for that is refused, naming the
        command (the runs that expose intermediates or judge many rewrites hand ONNX Runtime in-memory protos)."""
        if not self.fits_in_memory:
            raise AmpconfigError(
                f"models over {model_io.IN_MEMORY_LIMIT / (1 << 30):.1f} GiB (external data included) are not "
                f"supported by {self.command} yet: it runs in-memory copies of the model, and this one holds "
                f"{self.opened.stored_bytes() / (1 << 30):.2f} GiB",
                file=str(self.request.model_path),
                hint="ampconfig run, ampconfig rewrite and explain without --range-check/--compare work from files",
            )
        model = (
            self.graph if not self.opened.tensors_on_disk else with_node_names(load_model(self.request.model_path)[0])
        )
        return _runnable(model, self)

    def rewrite(
        self,
        value_ranges: ValueRanges | None = None,
        modify_mixlist: MixlistInput = None,
        keep_dtype: KeepDtypeInput = None,
        *,
        use_request_lists: bool = True,
        op_names: str | None = None,
        runtime_refused: Mapping[str, str] | None = None,
    ) -> RewriteResult:
        """The rewrite for this request, decided with ``value_ranges`` (the float32 model's values on data) where
        given; ``use_request_lists=False`` takes ``modify_mixlist``/``keep_dtype`` as given instead of the
        request's (tune's trial lists, normalised as the API's are). A model with external data is rewritten from
        its path (its tensors are converted while they are written), any other from the named proto.
        ``runtime_refused``: nodes that keep their dtype because ONNX Runtime refused or crashed on them lowered
        (:mod:`ampconfig.engine.safety_net`). Both are measured facts, handed to the engine apart from the choices."""
        settings = self.request
        options = settings.rewrite_options
        if not use_request_lists:  # the customize_dtypes file stays the request's, read with its op names
            options = options.with_lists(modify_mixlist, keep_dtype, op_names)
        # the engine: imported once the model is open (``run``'s start-up, issue 45)
        from ampconfig.engine.in_place import rewrite_with_options

        source = settings.model_path if self.from_files else self.graph
        facts = MeasuredFacts(value_ranges, runtime_refused=runtime_refused or {})
        return rewrite_with_options(source, options, facts)

    def calibration_source(self) -> str:
        """Where the calibration values come from, in words."""
        calibration = self.calibration
        return f"{calibration.source}, {len(calibration)} samples" if len(calibration) > 1 else calibration.source


def _runnable(model: onnx.ModelProto, prepared: Prepared) -> onnx.ModelProto:
    """``model`` with the IR version the installed ONNX Runtime reads, as the rewrite is written."""
    try:
        version = output_ir_version(model, str(prepared.request.model_path)).version
    except AmpconfigError:
        return model  # a version nothing loads: the rewrite says so, located
    return with_ir_version(model, min(version, model.ir_version))


def runnable_graph(prepared: Prepared) -> onnx.ModelProto:
    """The named graph (tensors on disk stay there) with the IR version the installed ONNX Runtime reads."""
    return _runnable(prepared.graph, prepared)


def prepare(
    request: Settings,
    *,
    need_inputs: bool = True,
    command: str = "this command",
    guard: OutputGuard | None = None,
    map_weights: bool = False,
    progress: ProgressCallback | None = None,
    shard: Shard | None = None,
) -> Prepared:
    """The request's model, named, with its samples when ``need_inputs`` (something will run). The model's
    external data files are declared to ``guard`` as inputs as soon as they are known, before anything runs.
    ``map_weights``: a large single-file model keeps its weights in its file (for a caller that runs it from
    files, as ``run`` does; :attr:`Prepared.model` then reads them in). ``progress`` hears about a data set
    folder that is slow to read."""
    opened = open_model(request.model_path, map_weights=map_weights)  # external tensor data stays on disk
    if guard is not None:
        declare_model(guard, opened)
    graph = with_node_names(opened.proto)
    # The samples' and the device's modules: imported once the model is open (``run``'s start-up, issue 45)
    from ampconfig.inputs.datasets import SampleSet, load_data
    from ampconfig.runner.sessions import choose_device

    device = choose_device(request.device)
    if not need_inputs:
        empty = SampleSet([{}], [], "none")
        return Prepared(request, opened, graph, empty, empty, device, command)
    if shard is not None:  # a part of the data set, every sample of it to calibrate on; nothing else is read
        part = _shard_samples(request, graph, shard, progress)
        return Prepared(request, opened, graph, part, part, device, command)
    data = _samples(request, graph, progress)
    calibration = data
    if request.inputs.calibration_data is not None:
        calibration = load_data(request.inputs.calibration_data, graph, "--calibration-data", progress)
    elif request.inputs.data is not None:
        calibration = data.first(CALIBRATION_SAMPLES)
    return Prepared(request, opened, graph, data, calibration, device, command)


def _shard_samples(
    request: Settings, graph: onnx.ModelProto, shard: Shard, progress: ProgressCallback | None
) -> SampleSet:
    """Shard ``shard`` of the calibration data set (``--calibration-data``, else ``--data``: all of it, split)."""
    from ampconfig.inputs.datasets import load_data  # (after the model is open, as in prepare)

    wanted = request.inputs
    path, label = (
        (wanted.calibration_data, "--calibration-data")
        if wanted.calibration_data is not None
        else (wanted.data, "--data")
    )
    if path is None or wanted.npz is not None or wanted.arrays or wanted.shapes:
        raise AmpconfigError(
            "--shard splits a data set: give --calibration-data or --data (generated inputs or one batch of "
            "--inputs/--input/--shape cannot be split; shards need data)",
            hint="ampconfig calibrate MODEL --calibration-data DIR --shard 1/4 -o ranges-1.json",
        )
    return load_data(path, graph, label, progress, shard=shard)


def _samples(request: Settings, graph: onnx.ModelProto, progress: ProgressCallback | None = None) -> SampleSet:
    from ampconfig.inputs.datasets import load_data, single_sample  # (after the model is open, as in prepare)

    wanted = request.inputs
    if wanted.data is None:
        return single_sample(one_batch(graph, wanted))
    given = [
        flag
        for flag, value in (("--inputs", wanted.npz), ("--input", wanted.arrays), ("--shape", wanted.shapes))
        if value
    ]
    if given:
        raise AmpconfigError(
            f"--data gives every input of every sample; {' and '.join(given)} cannot be given with it",
            hint="leave out " + " and ".join(given) + " (or put one batch in the data set)",
        )
    return load_data(wanted.data, graph, progress=progress)


def one_batch(graph: onnx.ModelProto, wanted: InputRequest) -> InputSet:
    """The one batch of inputs for ``graph`` that the request's input settings describe (``--inputs``/``--input``/
    ``--shape``/``--seed`` or the config's ``run`` section), each field handed to the runner by itself."""
    from ampconfig.inputs.feeds import prepare_inputs  # (after the model is open, as in prepare)

    return prepare_inputs(
        graph,
        npz=wanted.npz,
        arrays=wanted.arrays,
        shapes={name: list(dims) for name, dims in wanted.shapes.items()},
        seed=wanted.seed,
        int_low=wanted.int_low,
        int_high=wanted.int_high,
    )


def generated_dims_hint(inputs: InputSet | None, graph: onnx.ModelProto) -> str | None:
    """When generated inputs took default sizes for dynamic dimensions: which input and dimension to set, and how
    (the fp32 model failing on generated data is most often a size it cannot take)."""
    if inputs is None or not inputs.defaulted:
        return None
    from ampconfig.inputs.feeds import model_input_specs  # (a failed run's hint: the inputs were generated)

    dims = {spec.name: spec.dims or () for spec in model_input_specs(graph)}
    parts = []
    for item in inputs.inputs:
        for axis, dim in enumerate(dims.get(item.name, ())):
            label = dim if isinstance(dim, str) else f"{item.name}[{axis}]"
            if label in item.defaulted_dims:
                named = f" ({dim!r})" if isinstance(dim, str) else ""
                parts.append(f"input {item.name!r} dimension {axis}{named} took {item.defaulted_dims[label]}")
    example = next(item for item in inputs.inputs if item.defaulted_dims)
    shape = "x".join(str(dim) for dim in example.shape)
    return (
        "the generated inputs guessed the sizes of dynamic dimensions: " + "; ".join(parts) + ". Set the sizes the "
        f"model takes with --shape (e.g. --shape {example.name}={shape}, with the right numbers) or run.shapes in "
        "the config, or give real inputs with --data or --inputs"
    )


def explain_reference_failure(error: AmpconfigError, prepared: Prepared) -> AmpconfigError:
    """``error`` (the fp32 model failed to run) with :func:`generated_dims_hint` as its hint where it applies; a crash
    of ONNX Runtime located at the model's file."""
    # the runner's: loaded by the failed run already
    from ampconfig.runner.proof import REFERENCE_FAILED
    from ampconfig.worker.client import WorkerCrashed

    if isinstance(error, WorkerCrashed):
        error.file = error.file or str(prepared.request.model_path)
        return error
    if REFERENCE_FAILED not in error.message:
        return error
    hint = generated_dims_hint(prepared.data.generated, prepared.graph)
    return replace(error, hint=hint) if hint is not None else error
