"""``ampconfig run`` end to end: rewrite, run both models, compare, report.

The settings come from :func:`ampconfig.settings.resolve.resolve` (flags over the session config over defaults);
:func:`execute` carries them out and returns a :class:`~ampconfig.report.run_report.RunReport`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import onnx

from ampconfig.decide.decisions import Rule
from ampconfig.decide.quantized import QuantizationKind, quantized_model
from ampconfig.decide.value_limits import ValueRanges
from ampconfig.errors import AmpconfigError
from ampconfig.files.guard import OutputGuard
from ampconfig.model_io.ir_version import with_ir_version
from ampconfig.model_io.models import OpenedModel, open_model, save_model_atomic
from ampconfig.precision_modes import PrecisionMode
from ampconfig.prove.request import Prepared, explain_reference_failure, prepare
from ampconfig.rewrite.results import RewriteResult
from ampconfig.settings.declared_files import declare_model_output
from ampconfig.settings.resolve import Settings

# What decides, runs, judges and reports is imported where it is used, once the model is open: ``run``'s start-up
# (issue 45) loads none of the engine's, the proof's, the worker client's or the report's modules before that.
if TYPE_CHECKING:
    from ampconfig.inputs.datasets import SampleSet
    from ampconfig.prove.outcome import RunReport
    from ampconfig.prove.verdict import AccuracyVerdict
    from ampconfig.runner.proof import Proof
    from ampconfig.runner.sessions import ModelFile
    from ampconfig.runner.timing import ProgressCallback

_MODES_THAT_KEEP = frozenset({PrecisionMode.FORCE_FP32.value, PrecisionMode.MUST_KEEP_ORIGIN_DTYPE.value})


# ---------------------------------------------------------------------------------------------------- execute

#: Called after a FAIL with what the run prepared and its report: the command line forecasts the fix there
#: (:class:`ampconfig.diagnose.tune.forecast.FailedRunForecast`; diagnose/ sits above prove/, and ``diff --run``
#: wants no forecast).
OnFail: TypeAlias = "Callable[[Prepared, RunReport], None]"


def execute(
    settings: Settings,
    progress: ProgressCallback | None = None,
    guard: OutputGuard | None = None,
    output_role: str = "output model (--output)",
    *,
    range_check: bool = True,
    load_check: bool = True,
    on_fail: OnFail | None = None,
) -> RunReport:
    """Rewrite, write ``--output`` (through ``guard``: atomically, never over an input), run reference and rewrite
    on the same samples, compare. Without a guard, one of its own checks the output against the model's files.

    With ``range_check`` (the default) the fp32 model first runs once per calibration sample with every
    intermediate exposed, and its value ranges decide (rule range_exceeds). A large model (its weights left in its
    file), a model with external data, or one too large for one in-memory proto runs from files
    (:func:`_models_to_run`).

    With ``load_check`` a model written to ``--output`` has been loaded at ONNX Runtime's default level on its
    target's provider: by the proof's own session when the models run there, else by the load check, before the
    proof (:func:`_load_checked_output`), so that the model proven is the one written.
    """
    if guard is None:
        with OutputGuard() as own:
            own.read("input model", settings.model_path)
            return execute(
                settings, progress, own, output_role, range_check=range_check, load_check=load_check, on_fail=on_fail
            )
    # The output is checked now, before any work; it is written only at the end.
    destination = guard.output(output_role, settings.output) if settings.output is not None else None
    prepared = prepare(settings, command="run", guard=guard, map_weights=True, progress=progress)  # weights on disk
    # (the model is open: see the imports above)
    from ampconfig.prove.calibration import decision_values, not_checked
    from ampconfig.prove.verdict import samples_verdict

    opened = prepared.opened
    if settings.output is not None:
        destination = declare_model_output(guard, settings.output, output_role, opened)
    values = decision_values(settings, opened.proto, lambda: prepared, measure=range_check, progress=progress)
    result = prepared.rewrite(values.ranges)
    check_notes: list[str] = []
    if destination is not None and load_check:
        result, check_notes = _load_checked_output(settings, prepared, result, values.ranges)
    result.warnings.extend([*values.warnings, *not_checked(result)])
    proof, result = _prove_with_safety_net(settings, prepared, result, values.ranges, progress)
    proof.notes.extend(check_notes)
    if opened.external_files or not opened.fits_in_memory():
        what = "has external data" if opened.external_files else "is too large for one in-memory protobuf"
        proof.notes.append(
            f"the model {what}: ONNX Runtime ran both models from files (the rewrite from a temporary copy)"
        )
    # The one pass/fail decision (shared with compare and tune); an unusable reference is an exit 2 here,
    # before anything is written.
    judgement = samples_verdict(
        proof.reference.samples, proof.rewritten.samples, proof.output_names, settings.tolerance
    )
    # Written only once both models ran: a run that fails (exit 2) leaves nothing behind; a tolerance miss
    # (exit 1) still writes the model, which is what the user needs to look into it.
    written = save_model_atomic(result.savable, destination, guard=guard) if destination is not None else None
    proof.notes.extend(prepared.notes)
    report = build_report(settings, prepared.data, result, proof, judgement, written)
    report.calibration = values.calibration
    if not report.passed and on_fail is not None:
        on_fail(prepared, report)
    return report


def _load_checked_output(
    settings: Settings, prepared: Prepared, result: RewriteResult, ranges: ValueRanges | None
) -> tuple[RewriteResult, list[str]]:
    """The load check of the model ``--output`` gets (:func:`ampconfig.engine.load_check.load_checked`), where the
    proof's session of it does not do the same: when it runs on another device than its target's, or with the
    CPU's QDQ fusion off. Returns the rewrite to prove and write, and the notes the check made."""
    if prepared.device.device == result.target and not _has_qdq(result):
        return result, []  # the proof loads it there, at the default level; a crash goes to the net
    from ampconfig.engine.load_check import load_checked  # (see the imports above)

    before = len(result.notes)
    checked = load_checked(
        result, lambda kept: prepared.rewrite(ranges, runtime_refused=kept), file=str(settings.model_path)
    )
    return checked, checked.notes[before:]


RunnableModel: TypeAlias = "onnx.ModelProto | ModelFile"

#: How many times ``run`` hands a rewritten model ONNX Runtime fails on to the safety net (one per failing sample).
MAX_REPAIRS = 3


def _prove_with_safety_net(
    settings: Settings,
    prepared: Prepared,
    result: RewriteResult,
    ranges: ValueRanges | None,
    progress: ProgressCallback | None,
) -> tuple[Proof, RewriteResult]:
    """Both models run in the worker (:mod:`ampconfig.worker.client`); a crash of the fp32 model is an error naming
    it; a rewritten model ONNX Runtime crashes on or refuses while the fp32 model runs goes to the safety net
    (:func:`ampconfig.engine.safety_net.repair`: the nodes that cause it keep their dtype) and runs again. Returns
    the proof and the rewrite it ran."""
    # (see the imports above)
    from ampconfig.engine.safety_net import Failure, Outcome, repair
    from ampconfig.runner.proof import RewrittenRefused
    from ampconfig.worker.client import Phase

    samples = prepared.data.samples
    failure: Failure | None = None
    sample = samples[0]
    for attempt in range(MAX_REPAIRS + 1):
        if failure is not None:
            result = repair(
                result,
                failure,
                lambda kept: prepared.rewrite(ranges, runtime_refused=kept),
                sample,
                prepared.device.device,
                tf32=settings.allow_tf32,
            )
        with _models_to_run(settings, prepared.opened, result, prepared.from_files) as models:
            reference, rewritten, accuracy_copy = models
            try:
                proof = _prove(settings, prepared, reference, rewritten, accuracy_copy, progress, _has_qdq(result))
                return proof, result
            except RewrittenRefused as refused:
                if attempt == MAX_REPAIRS:
                    raise
                outcome = Outcome.CRASHED if refused.crashed else Outcome.REFUSED
                failure = Failure(outcome, Phase(refused.phase), refused.reason)
                sample = samples[refused.sample]
    raise AssertionError("unreachable: the last attempt returns or raises")


def _prove(
    settings: Settings,
    prepared: Prepared,
    reference: RunnableModel,
    rewritten: RunnableModel,
    accuracy_copy: Callable[[], tuple[RunnableModel, int]],
    progress: ProgressCallback | None,
    float_qdq: bool = False,
) -> Proof:
    """Both models run in the worker; a refusal of the fp32 model said as the user's input's, a crash of it located
    at the model's file. ``float_qdq``: the model's Q/DQ pairs run as float ops on the CPU, as on CUDA."""
    # (see the imports above)
    from ampconfig.runner.proof import INPUT_REFUSED, REFERENCE_FAILED, RewrittenRefused, prove
    from ampconfig.worker.client import WorkerCrashed

    try:
        return prove(
            reference,
            rewritten,
            prepared.data.samples,
            prepared.device,
            allow_tf32=settings.allow_tf32,
            warmup=settings.warmup,
            iterations=settings.iterations,
            progress=progress,
            cpu_accuracy_model=accuracy_copy,
            float_qdq=float_qdq,
        )
    except RewrittenRefused:
        raise
    except WorkerCrashed as crash:
        crash.file = crash.file or str(settings.model_path)
        raise
    except AmpconfigError as exc:
        if exc.file is None and exc.message.startswith(INPUT_REFUSED):
            raise replace(exc, file=str(settings.model_path)) from None
        if REFERENCE_FAILED in exc.message:
            raise explain_reference_failure(exc, prepared) from None
        raise


@contextmanager
def _models_to_run(
    settings: Settings, opened: OpenedModel, result: RewriteResult, from_files: bool
) -> Iterator[tuple[RunnableModel, RunnableModel, Callable[[], tuple[RunnableModel, int]]]]:
    """The fp32 reference, the rewritten model and a maker of the CPU accuracy copy, as :func:`prove` takes them.

    In memory for small models. From files for a large one (read with its weights left in its file), one with
    external data or one too large for one serialised proto (protobuf refuses 2 GiB): ONNX Runtime reads the
    reference from the input file itself, and the rewritten model (and the accuracy copy, which reads its weights
    from the rewritten model's file) from a private temporary folder removed afterwards whatever happens. No
    weight is then copied into a protobuf or a bytes object on the way to ONNX Runtime."""
    # (see the imports above)
    from ampconfig.engine.typing_chain import TYPING
    from ampconfig.instrument.rounding import save_low_precision_rounding_copy
    from ampconfig.prove.verdict import accuracy_model
    from ampconfig.runner.sessions import ModelFile

    if not from_files:
        # The rewrite's IR version is one the installed ORT loads (lowered when the model allowed it): so is the
        # reference's, which is the same model.
        reference = with_ir_version(opened.proto, min(opened.proto.ir_version, result.model.ir_version))
        yield reference, result.model, lambda: accuracy_model(result.model, "cpu")
        return
    with tempfile.TemporaryDirectory(prefix="ampconfig-run-") as folder:
        rewritten_path = save_model_atomic(result.savable, Path(folder) / "rewritten.onnx")
        rewritten = ModelFile(rewritten_path, open_model(rewritten_path, map_weights=True).proto)

        def accuracy_copy() -> tuple[RunnableModel, int]:
            path = Path(folder) / "accuracy.onnx"
            wrapped = save_low_precision_rounding_copy(rewritten_path, path, TYPING)
            return (ModelFile(path, open_model(path, map_weights=True).proto) if wrapped else rewritten), wrapped

        yield ModelFile(settings.model_path, opened.proto), rewritten, accuracy_copy


def _input_notes(inputs: SampleSet) -> list[str]:
    from ampconfig.inputs.feeds import DEFAULT_BATCH_DIM, DEFAULT_OTHER_DIM  # (see the imports above)

    notes = []
    if inputs.defaulted:
        notes.append(
            f"dynamic dimensions without --shape took the defaults: first dimension {DEFAULT_BATCH_DIM}, "
            f"others {DEFAULT_OTHER_DIM}"
        )
    if len(inputs) > 1:
        notes.append(
            f"{len(inputs)} samples ({inputs.source}), each judged: the run passes when every sample meets the "
            "tolerance; latency is timed on the first"
        )
    return notes


def _lowering_notes(result: RewriteResult) -> list[str]:
    """Say why nothing was lowered when a mode that lowers lowered nothing (typical on the CPU target); a quantized
    model says it in :func:`_quantized_notes`."""
    if result.low_precision_nodes or result.precision_mode in _MODES_THAT_KEEP or quantized_model(result.decisions):
        return []
    no_kernel = sum(1 for decision in result.decisions if decision.rule is Rule.NO_LOW_KERNEL)
    if not no_kernel:
        return [f"no node runs in {result.low_dtype}: the mode's rules kept every node as it was"]
    return [
        f"no node runs in {result.low_dtype}: {no_kernel} node(s) stay float32 because target {result.target} "
        f"has no {result.low_dtype} kernel for their op (rule {Rule.NO_LOW_KERNEL.value})"
        + (
            "; ONNX Runtime's CPU provider has few native float16 kernels, so the accuracy and speed shown here are "
            "the fp32 model's (decide with --target cuda to see the mixed-precision model)"
            if result.target == "cpu"
            else ""
        )
    ]


def _value_notes(result: RewriteResult) -> list[str]:
    """How many nodes stay float32 for their values, by rule (the reasons are in explain)."""
    counts = {
        rule: sum(1 for decision in result.decisions if decision.rule is rule)
        for rule in (
            Rule.VALUE_OUT_OF_RANGE,
            Rule.RANGE_EXCEEDS,
            Rule.RANGE_UNDERFLOWS,
            Rule.LOG_DOMAIN_PRECISION,
            Rule.INTEGER_ACCUMULATOR_BOUND,
        )
    }
    if not any(counts.values()):
        return []
    parts = ", ".join(f"{count} by {rule.value}" for rule, count in counts.items() if count)
    return [
        f"{sum(counts.values())} node(s) kept float32 because {result.low_dtype} cannot hold their values ({parts}; "
        "ampconfig explain names each value)"
    ]


def _has_qdq(result: RewriteResult) -> bool:
    quantized = quantized_model(result.decisions)
    return quantized is not None and QuantizationKind.QDQ in quantized.kinds


def _quantized_notes(result: RewriteResult, judgement: AccuracyVerdict) -> list[str]:
    """That the model is quantized, which kind, and what the mode still lowered; on a failure, why quantized models
    are fragile."""
    quantized = quantized_model(result.decisions)
    if quantized is None:
        return []
    note = quantized.describe(result.low_dtype)
    if judgement.failures:
        note += (
            ": each quantizer rounds what it reads to integer steps, so a low-precision value before one moves "
            "whole steps and the next quantizers re-round values that already moved; ampconfig explain names the "
            f"nodes feeding quantizers (rule {Rule.QUANTIZER_INPUT.value})"
        )
    return [note]


def build_report(
    settings: Settings,
    inputs: SampleSet,
    result: RewriteResult,
    proof: Proof,
    judgement: AccuracyVerdict,
    written: Path | None,
) -> RunReport:
    # (see the imports above)
    from ampconfig.prove.outcome import RunReport
    from ampconfig.runner.timing import speedup

    stats = result.stats
    return RunReport(
        model=str(settings.model_path),
        example=settings.example,
        precision_mode=settings.precision_mode.value,
        mode_source=settings.mode_source,
        low_dtype=result.low_dtype,
        target=settings.target,
        device=proof.device.device,
        device_requested=proof.device.requested,
        providers={"reference": proof.reference.providers, "rewritten": proof.rewritten.providers},
        tf32={"reference": proof.reference.tf32, "rewritten": proof.rewritten.tf32},
        inputs=inputs.inputs,
        outputs=judgement.outputs,
        samples=judgement.samples,
        spreads=judgement.spreads,
        latency_reference=proof.reference.latency,
        latency_rewritten=proof.rewritten.latency,
        speedup=speedup(proof.reference.latency, proof.rewritten.latency),
        nodes=len(result.decisions),
        low_precision_nodes=result.low_precision_nodes,
        dtype_counts=result.count_by_dtype(),
        casts=stats.casts_inserted,
        casts_retargeted=stats.casts_retargeted,
        values_clamped=stats.values_clamped,
        tolerance=settings.tolerance,
        failures=judgement.failures,
        output_path=str(written) if written is not None else None,
        notes=[
            *settings.notes,
            *proof.notes,
            *_input_notes(inputs),
            *_lowering_notes(result),
            *_value_notes(result),
            *_quantized_notes(result, judgement),
        ],
        warnings=[*result.warnings, *inputs.warnings],
        rewrite=result,
    )
