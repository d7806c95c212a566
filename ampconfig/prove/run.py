"""``ampconfig run`` end to end: settings from flags and config, rewrite, run both models, compare, report.

:func:`resolve_request` merges the command line over the session config (flags win) into one
:class:`RunRequest`; :func:`execute` carries it out and returns a :class:`~ampconfig.report.run.RunReport`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from ampconfig.api import rewrite_model_detailed, save_low_precision_rounding_copy
from ampconfig.decide.decisions import RewriteResult, Rule
from ampconfig.errors import AmpconfigError
from ampconfig.examples import DEFAULT_EXAMPLE, example_path
from ampconfig.files.guard import OutputGuard
from ampconfig.files.ir_version import with_ir_version
from ampconfig.files.models import OpenedModel, open_model, save_model_atomic
from ampconfig.files.paths import require_file
from ampconfig.prove.accuracy import Tolerance
from ampconfig.prove.judge import Judgement, accuracy_model, judge_outputs
from ampconfig.prove.outcome import RunReport
from ampconfig.prove.request_files import declare_model, declare_model_output
from ampconfig.runner.float_cast import float32_to_float16
from ampconfig.runner.inputs import (
    DEFAULT_BATCH_DIM,
    DEFAULT_OTHER_DIM,
    InputSet,
    parse_input_option,
    parse_shape_option,
    prepare_inputs,
)
from ampconfig.runner.proof import INPUT_REFUSED, Proof, prove
from ampconfig.runner.sessions import ModelFile, choose_device, normalize_target
from ampconfig.runner.timing import ProgressCallback, check_counts, speedup
from ampconfig.settings.config import SessionConfig, check_mode_accepts_mixlist, load_session_config
from ampconfig.settings.modes import PrecisionMode, parse_mode
from ampconfig.settings.values import check_positive_finite

#: The mode ``run`` uses when neither ``--precision-mode`` nor the config names one.
DEFAULT_MODE = PrecisionMode.ALLOW_MIX_PRECISION
DEFAULT_WARMUP = 3
_MODES_THAT_KEEP = frozenset({PrecisionMode.FORCE_FP32.value, PrecisionMode.MUST_KEEP_ORIGIN_DTYPE.value})
DEFAULT_ITERATIONS = 20


@dataclass
class RunFlags:
    """What the command line said; ``None`` (or empty) means "not given": the config or a default decides."""

    model: Path | None = None
    config: Path | None = None
    precision_mode: str | None = None
    modify_mixlist: Path | None = None
    keep_dtype: Path | None = None
    target: str | None = None
    inputs_npz: Path | None = None
    input_files: list[str] = field(default_factory=list)  # NAME=FILE.npy
    shapes: list[str] = field(default_factory=list)  # NAME=1x128
    output: Path | None = None
    warmup: int | None = None
    iterations: int | None = None
    seed: int | None = None
    tolerance: float | None = None


@dataclass
class RunRequest:
    """Everything a run needs, resolved: flags over config over defaults."""

    model_path: Path
    example: str | None
    precision_mode: PrecisionMode
    mode_source: str
    modify_mixlist: Path | dict[str, Any] | None = None
    keep_dtype: Path | list[str] | None = None
    target: str = "auto"
    keep_io_types: bool = True
    allow_tf32: bool = False
    output: Path | None = None
    npz: Path | None = None
    arrays: dict[str, Path] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    seed: int = 0
    int_low: int | None = None
    int_high: int | None = None
    warmup: int = DEFAULT_WARMUP
    iterations: int = DEFAULT_ITERATIONS
    tolerance: Tolerance = field(default_factory=Tolerance)
    notes: list[str] = field(default_factory=list)

    def inputs_for(self, model: onnx.ModelProto) -> InputSet:
        """The inputs for ``model`` that the request's --inputs/--input/--shape/--seed (or config) describe."""
        return prepare_inputs(
            model,
            npz=self.npz,
            arrays=self.arrays,
            shapes=self.shapes,
            seed=self.seed,
            int_low=self.int_low,
            int_high=self.int_high,
        )


# ---------------------------------------------------------------------------------------------------- resolve


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def _resolve_mode(flags: RunFlags, config: SessionConfig | None) -> tuple[PrecisionMode, str]:
    if flags.precision_mode is not None:
        return parse_mode(flags.precision_mode), "--precision-mode"
    if config is not None and (config.precision_mode is not None or config.precision_mode_v2 is not None):
        return config.resolved_mode(None), f"config {flags.config}"
    return DEFAULT_MODE, "default: no --precision-mode and no mode in a config"


def _resolve_model(flags: RunFlags, config: SessionConfig | None) -> tuple[Path, str | None, list[str]]:
    given = _first(flags.model, config.model if config is not None else None)
    if given is not None:
        path = Path(given)
        require_file(path, "model" if flags.model is not None else "model (from the config)", hint="check the path")
        return path, None, []
    path = example_path(DEFAULT_EXAMPLE)
    return path, DEFAULT_EXAMPLE, [f"no model given: ran the bundled example {DEFAULT_EXAMPLE!r} ({path})"]


def _parse_shapes(flags: RunFlags, config: SessionConfig | None) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}
    if config is not None:
        shapes.update({name: [int(d) for d in dims] for name, dims in config.run.shapes.items()})
    for text in flags.shapes:
        name, dims = parse_shape_option(text)
        shapes[name] = dims
    return shapes


def _parse_arrays(flags: RunFlags) -> dict[str, Path]:
    arrays: dict[str, Path] = {}
    for text in flags.input_files:
        name, path = parse_input_option(text)
        if name in arrays:
            raise AmpconfigError(f"--input {name} is given twice")
        arrays[name] = path
    return arrays


def _tolerance(flags: RunFlags, config: SessionConfig | None) -> Tolerance:
    base = config.tolerance if config is not None else Tolerance()
    if flags.tolerance is None:
        return base
    check_positive_finite(flags.tolerance, "--tolerance")
    return Tolerance(rel_l2=flags.tolerance, max_abs=base.max_abs, min_cosine=base.min_cosine)


def resolve_request(flags: RunFlags) -> RunRequest:
    """Merge flags over the session config (if any) over the defaults; bad values are AmpconfigErrors."""
    config = load_session_config(flags.config) if flags.config is not None else None
    run = config.run if config is not None else None
    mode, mode_source = _resolve_mode(flags, config)
    model_path, example, notes = _resolve_model(flags, config)
    mixlist = _first(flags.modify_mixlist, config.modify_mixlist if config is not None else None)
    mixlist_source = "--modify-mixlist" if flags.modify_mixlist is not None else f"config {flags.config}"
    check_mode_accepts_mixlist(mode, mixlist is not None, mixlist_source)
    warmup = _first(flags.warmup, run.warmup if run else None, DEFAULT_WARMUP)
    iterations = _first(flags.iterations, run.iterations if run else None, DEFAULT_ITERATIONS)
    check_counts(warmup, iterations)
    if mode_source.startswith("default"):
        notes.append(f"precision mode {mode.value} is the default (set it with --precision-mode or the config)")
    return RunRequest(
        model_path=model_path,
        example=example,
        precision_mode=mode,
        mode_source=mode_source,
        modify_mixlist=mixlist,
        keep_dtype=_first(flags.keep_dtype, config.keep_dtype if config is not None else None),
        target=normalize_target(_first(flags.target, config.target if config is not None else None)),
        keep_io_types=config.keep_io_types if config is not None else True,
        allow_tf32=config.allow_tf32 if config is not None else False,
        output=_first(flags.output, config.output if config is not None else None),
        npz=_first(flags.inputs_npz, run.inputs if run else None),
        arrays=_parse_arrays(flags),
        shapes=_parse_shapes(flags, config),
        seed=_first(flags.seed, run.seed if run else None, 0),
        int_low=run.int_low if run else None,
        int_high=run.int_high if run else None,
        warmup=warmup,
        iterations=iterations,
        tolerance=_tolerance(flags, config),
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------------- execute


def execute(
    request: RunRequest,
    progress: ProgressCallback | None = None,
    guard: OutputGuard | None = None,
    output_role: str = "output model (--output)",
) -> RunReport:
    """Rewrite, write ``--output`` (through ``guard``: atomically, never over an input), run reference and rewrite
    on the same inputs, compare. Without a guard, one of its own checks the output against the model's files.

    A model with external data, or too large for one in-memory proto, runs from files (:func:`_models_to_run`).
    """
    if guard is None:
        with OutputGuard() as own:
            own.read("input model", request.model_path)
            return execute(request, progress, own, output_role)
    # The output is checked now, before any work; it is written only at the end.
    destination = guard.output(output_role, request.output) if request.output is not None else None
    opened = open_model(request.model_path)  # external tensor data stays on disk
    declare_model(guard, opened)
    if request.output is not None:
        destination = declare_model_output(guard, request.output, output_role, opened)
    inputs = request.inputs_for(opened.proto)
    choice = choose_device(request.target)
    from_files = bool(opened.external_files) or not opened.fits_in_memory()
    result = rewrite_model_detailed(
        request.model_path if from_files else opened.proto,  # never modified: no copy needed
        request.precision_mode,
        modify_mixlist=request.modify_mixlist,
        keep_dtype=request.keep_dtype,
        target=choice.device,
        keep_io_types=request.keep_io_types,
        float16_encoder=float32_to_float16,
    )
    with _models_to_run(request, opened, result, from_files) as (reference, rewritten, accuracy_copy):
        try:
            proof = prove(
                reference,
                rewritten,
                inputs.feeds,
                choice,
                allow_tf32=request.allow_tf32,
                warmup=request.warmup,
                iterations=request.iterations,
                progress=progress,
                cpu_accuracy_model=accuracy_copy,
            )
        except AmpconfigError as exc:
            if exc.file is None and exc.message.startswith(INPUT_REFUSED):
                raise replace(exc, file=str(request.model_path)) from None
            raise
    if from_files:
        what = "has external data" if opened.external_files else "is too large for one in-memory protobuf"
        proof.notes.append(
            f"the model {what}: ONNX Runtime ran both models from files (the rewrite from a temporary copy)"
        )
    # The one pass/fail decision (shared with compare and tune); an unusable reference is an exit 2 here,
    # before anything is written.
    judgement = judge_outputs(proof.reference.outputs, proof.rewritten.outputs, proof.output_names, request.tolerance)
    # Written only once both models ran: a run that fails (exit 2) leaves nothing behind; a tolerance miss
    # (exit 1) still writes the model, which is what the user needs to look into it.
    written = save_model_atomic(result.savable, destination, guard=guard) if destination is not None else None
    return build_report(request, inputs, result, proof, judgement, written)


RunnableModel = onnx.ModelProto | ModelFile


@contextmanager
def _models_to_run(
    request: RunRequest, opened: OpenedModel, result: RewriteResult, from_files: bool
) -> Iterator[tuple[RunnableModel, RunnableModel, Callable[[], tuple[RunnableModel, int]]]]:
    """The fp32 reference, the rewritten model and a maker of the CPU accuracy copy, as :func:`prove` takes them.

    In memory for ordinary models. From files for a model with external data or too large for one serialised
    proto (protobuf refuses 2 GiB): the reference is the input model itself; the rewritten model (and the accuracy
    copy, which shares its data file) live in a private temporary folder with external data, removed afterwards
    whatever happens."""
    if not from_files:
        # The rewrite's IR version is one the installed ORT loads (lowered when the model allowed it): so is the
        # reference's, which is the same model.
        reference = with_ir_version(opened.proto, min(opened.proto.ir_version, result.model.ir_version))
        yield reference, result.model, lambda: accuracy_model(result.model, "cpu")
        return
    with tempfile.TemporaryDirectory(prefix="ampconfig-run-") as folder:
        rewritten_path = save_model_atomic(result.ir_model, Path(folder) / "rewritten.onnx")
        rewritten = ModelFile(rewritten_path, open_model(rewritten_path).proto)

        def accuracy_copy() -> tuple[RunnableModel, int]:
            path = Path(folder) / "accuracy.onnx"
            wrapped = save_low_precision_rounding_copy(rewritten_path, path)
            return (ModelFile(path, open_model(path).proto) if wrapped else rewritten), wrapped

        yield ModelFile(request.model_path, opened.proto), rewritten, accuracy_copy


def _input_notes(inputs: InputSet) -> list[str]:
    if not inputs.defaulted:
        return []
    return [
        f"dynamic dimensions without --shape took the defaults: first dimension {DEFAULT_BATCH_DIM}, "
        f"others {DEFAULT_OTHER_DIM}"
    ]


def _lowering_notes(result: RewriteResult, device: str) -> list[str]:
    """Say why nothing was lowered when a mode that lowers lowered nothing (typical on the CPU target)."""
    if result.low_precision_nodes or result.precision_mode in _MODES_THAT_KEEP:
        return []
    no_kernel = sum(1 for decision in result.decisions if decision.rule is Rule.NO_LOW_KERNEL)
    if not no_kernel:
        return [f"no node runs in {result.low_dtype}: the mode's rules kept every node as it was"]
    return [
        f"no node runs in {result.low_dtype}: {no_kernel} node(s) stay float32 because target {result.target} "
        f"has no {result.low_dtype} kernel for their op (rule {Rule.NO_LOW_KERNEL.value}); ONNX Runtime's CPU "
        "provider has few native float16 kernels, so the accuracy and speed shown here are the fp32 model's"
        + (" (run on a CUDA machine to see the mixed-precision model)" if device == "cpu" else "")
    ]


def build_report(
    request: RunRequest,
    inputs: InputSet,
    result: RewriteResult,
    proof: Proof,
    judgement: Judgement,
    written: Path | None,
) -> RunReport:
    stats = result.stats
    return RunReport(
        model=str(request.model_path),
        example=request.example,
        precision_mode=request.precision_mode.value,
        mode_source=request.mode_source,
        low_dtype=result.low_dtype,
        target=request.target,
        device=proof.device.device,
        providers={"reference": proof.reference.providers, "rewritten": proof.rewritten.providers},
        tf32={"reference": proof.reference.tf32, "rewritten": proof.rewritten.tf32},
        inputs=inputs.inputs,
        outputs=judgement.outputs,
        latency_reference=proof.reference.latency,
        latency_rewritten=proof.rewritten.latency,
        speedup=speedup(proof.reference.latency, proof.rewritten.latency),
        nodes=len(result.decisions),
        low_precision_nodes=result.low_precision_nodes,
        dtype_counts=result.count_by_dtype(),
        casts=stats.casts_inserted,
        casts_retargeted=stats.casts_retargeted,
        values_clamped=stats.values_clamped,
        tolerance=request.tolerance,
        failures=judgement.failures,
        output_path=str(written) if written is not None else None,
        notes=[
            *request.notes,
            *proof.notes,
            *_input_notes(inputs),
            *_lowering_notes(result, proof.device.device),
        ],
        warnings=list(result.warnings),
    )
