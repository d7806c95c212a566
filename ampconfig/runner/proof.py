"""Run the fp32 reference and the rewritten model on the same inputs: outputs for accuracy, latency for speed.

One session at a time: the reference is built, runs once per sample for its outputs and is timed (warm-up +
timed iterations) on the first sample, and is freed before the rewritten model is built and does the same. ONNX
Runtime holds a model's weights (on the CPU the float16 ones widened to float32 besides), so two sessions at once
would hold both models: BERT-base's two took 1.18 GB together, 0.62 GB at most one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np
import onnx

from ampconfig.errors import AmpconfigError
from ampconfig.inputs.feeds import adapt_feeds
from ampconfig.opinfo.targets import AUTO_DEVICE
from ampconfig.runner.acceptance import locate_refusal
from ampconfig.runner.sessions import (
    DISABLE_QDQ_FUSION,
    LOAD_FAILED,
    RUN_FAILED,
    DeviceChoice,
    ModelFile,
    ModelSource,
    Session,
    create_session,
    first_line,
    model_proto,
)
from ampconfig.runner.timing import Latency, ProgressCallback
from ampconfig.worker.client import WorkerCrashed, WorkerRefused

REFERENCE_LABEL = "fp32 reference"
#: How a crash message names each model the proof runs.
REFERENCE_WHAT = "the fp32 model"
REWRITTEN_WHAT = "the rewritten model"
ACCURACY_COPY_WHAT = "the accuracy copy of the rewritten model"
#: The graph optimisation level of the accuracy copy's second try, after ONNX Runtime crashed on the first.
ACCURACY_COPY_FALLBACK = "disabled"
#: How a failure of the fp32 model to run on the inputs starts (callers add what they know about the inputs).
REFERENCE_FAILED = "ONNX Runtime failed to run the fp32 model"


@dataclass
class ModelRun:
    """One model's run: the providers its session got, its outputs per sample, its latency (first sample)."""

    label: str
    providers: list[str]
    tf32: bool | None
    samples: list[dict[str, np.ndarray]]
    latency: Latency

    @property
    def outputs(self) -> dict[str, np.ndarray]:
        """The first sample's outputs."""
        return self.samples[0]

    @property
    def provider(self) -> str:
        return self.providers[0]


@dataclass
class Proof:
    device: DeviceChoice
    reference: ModelRun
    rewritten: ModelRun
    output_names: list[str]
    notes: list[str] = field(default_factory=list)


class RewrittenRefused(AmpconfigError):
    """ONNX Runtime refused the rewritten model, or crashed on it (``crashed``; ``message`` then says how it died), in
    ``phase`` "load" or "run", on sample ``sample``, while the fp32 model ran: not the user's input and not a bug,
    but an op ONNX Runtime does not take in the dtype the rewrite gave it. ``ampconfig run`` hands it to its safety
    net (:mod:`ampconfig.engine.safety_net`)."""

    def __init__(self, message: str, phase: str, sample: int = 0, crashed: bool = False) -> None:
        said = (
            f"crashed ({message}) while {phase}ing the rewritten model (the fp32 model ran)"
            if crashed
            else f"refused to {phase} the rewritten model (the fp32 model ran): {message}"
        )
        super().__init__(
            f"ONNX Runtime {said}",
            hint="keep the node ONNX Runtime names in its original dtype (keep_dtype), or use another precision mode",
        )
        self.reason = message
        self.phase = phase
        self.sample = sample
        self.crashed = crashed

    @staticmethod
    def of_crash(crash: WorkerCrashed, sample: int = 0) -> RewrittenRefused:
        return RewrittenRefused(crash.death, crash.phase.value, sample, crashed=True)


#: How a refusal of the fp32 reference (the user's model) starts; callers that know its file add it.
INPUT_REFUSED = "ONNX Runtime cannot load the input model: "


def input_refusal(error: AmpconfigError, model: onnx.ModelProto, path: str | None) -> AmpconfigError:
    """``error`` from a session of the user's fp32 model, said as the reference run says it: a model ONNX Runtime
    refused to load is located at the node it names (:data:`INPUT_REFUSED`); one it could not run on the inputs
    is the inputs' fault (:data:`REFERENCE_FAILED`); a crash is located at the model's file; any other error as
    it is."""
    if isinstance(error, WorkerCrashed):
        error.file = error.file or path
        return error
    if error.message.startswith(RUN_FAILED):
        return _reference_run_failure(RuntimeError(error.message.removeprefix(RUN_FAILED)))
    if not error.message.startswith(LOAD_FAILED):
        return error
    reason = locate_refusal(error.message.removeprefix(LOAD_FAILED), model)
    return AmpconfigError(INPUT_REFUSED + reason, file=path, hint="fix or re-export the model")


def _reference_session(reference: ModelSource, device: str, config: Mapping[str, str] | None = None) -> Session:
    try:
        return create_session(reference, device, tf32=False, config=config, what=REFERENCE_WHAT)
    except WorkerCrashed:
        raise
    except AmpconfigError as exc:
        if not isinstance(reference, (onnx.ModelProto, ModelFile)):
            raise
        where = str(reference.path) if isinstance(reference, ModelFile) else None
        raise input_refusal(exc, model_proto(reference), where) from None


class _CudaRefused(Exception):
    """A CUDA session could not be built while the device was auto: both models run on the CPU instead."""

    def __init__(self, error: AmpconfigError) -> None:
        super().__init__(error.message)
        self.error = error


def _session(create: Callable[[], Session], choice: DeviceChoice) -> Session:
    """``create()``; a CUDA session that cannot be built is an error unless the device was auto."""
    try:
        return create()
    except WorkerCrashed:
        raise
    except AmpconfigError as exc:
        if choice.device == "cuda" and choice.requested == AUTO_DEVICE:
            raise _CudaRefused(exc) from None
        raise


def _run_model(
    label: str,
    session: Session,
    model: onnx.ModelProto | ModelFile,
    samples: Sequence[Mapping[str, np.ndarray]],
    warmup: int,
    iterations: int,
    progress: ProgressCallback | None,
) -> ModelRun:
    outputs = sample_outputs(
        session, samples, model_proto(model), reference=label == REFERENCE_LABEL, progress=progress, label=label
    )
    first = adapt_feeds(samples[0], model_proto(model))
    latency = session.time(first, warmup=warmup, iterations=iterations, label=label, progress=progress)
    return ModelRun(label, session.providers, session.tf32, outputs, latency)


#: A data set this long shows its progress (``progress(label, done, total)``), sample by sample.
PROGRESS_SAMPLES = 8


def sample_outputs(
    session: Session,
    samples: Sequence[Mapping[str, np.ndarray]],
    model: onnx.ModelProto | ModelFile,
    *,
    reference: bool = False,
    progress: ProgressCallback | None = None,
    label: str = "rewritten",
) -> list[dict[str, np.ndarray]]:
    """One run of ``session`` per sample for the outputs that are judged (feeds converted to ``model``'s input
    dtypes). A failure on the fp32 reference is the inputs' fault; on a rewritten model it is
    :class:`RewrittenRefused` (which carries the sample); with several samples the message names the sample."""
    proto = model_proto(model)
    outputs = []
    shown = progress if len(samples) >= PROGRESS_SAMPLES else None
    what = f"{label}: samples"
    for index, feeds in enumerate(samples):
        if shown is not None:
            shown(what, index, len(samples))
        try:
            outputs.append(session.run(adapt_feeds(feeds, proto)))
        except WorkerCrashed as crash:
            crash.sample = index  # the safety net probes the sample the rewritten model crashed on
            raise
        except WorkerRefused as exc:  # ORT's own words
            if not reference:
                raise RewrittenRefused(first_line(exc), "run", index) from None
            failure = _reference_run_failure(exc)
            if len(samples) > 1:
                failure = replace(failure, message=f"sample {index}: {failure.message}")
            raise failure from None
    if shown is not None:
        shown(what, len(samples), len(samples))
    return outputs


def _reference_run_failure(exc: Exception) -> AmpconfigError:
    """The fp32 model loads but fails to run: the inputs' fault (shapes that disagree with the model, e.g. one
    dim_param bound to two sizes). On the rewritten model, with the reference fine, the same is ONNX Runtime
    refusing an op in the dtype it was given (:class:`RewrittenRefused`)."""
    return AmpconfigError(
        f"{REFERENCE_FAILED} on these inputs: {first_line(exc)}",
        hint="check the inputs' shapes and dtypes against the model's inputs (--shape, --inputs)",
    )


def prove(
    reference: onnx.ModelProto | ModelFile,
    rewritten: onnx.ModelProto | ModelFile,
    samples: Sequence[Mapping[str, np.ndarray]] | Mapping[str, np.ndarray],
    choice: DeviceChoice,
    *,
    allow_tf32: bool = False,
    warmup: int = 3,
    iterations: int = 20,
    progress: ProgressCallback | None = None,
    cpu_accuracy_model: Callable[[], tuple[onnx.ModelProto | ModelFile, int]] | None = None,
    float_qdq: bool = False,
) -> Proof:
    """Run both models on every sample (converted to each model's input dtypes) and time them on the first;
    ``samples`` is the feeds of each sample, or the feeds of one.

    A model is an in-memory proto or a :class:`ModelFile` (ONNX Runtime loads it from disk: how models with
    external data, or too large for one protobuf, are run). On the CPU, ``cpu_accuracy_model`` (if given)
    supplies a copy of the rewritten model that rounds low-precision values the way low-precision hardware does;
    its outputs are the ones compared, the rewritten model is still the one timed, unless the CPU provider cannot
    load the rewritten model as it is (decided for another target: a bfloat16 MatMul decided for cuda), when the
    copy is timed too and a note says so.

    ``float_qdq`` (a model with QuantizeLinear/DequantizeLinear pairs): on the CPU every session runs them as the
    CUDA provider does, as float ops, with ONNX Runtime's CPU-only QDQ fusion into int8 kernels off
    (:data:`DISABLE_QDQ_FUSION`). With it on, the reference runs int8 kernels where the rewritten model, whose
    casts break the fused patterns, runs float Q/DQ: that difference alone is charged to the rewrite (rel-L2
    0.026 on the QDQ transformer block of the tests, with no node lowered), and no GPU shows it.
    """
    if isinstance(samples, Mapping):
        samples = [samples]
    run = (reference, rewritten, samples, allow_tf32, warmup, iterations, progress, cpu_accuracy_model, float_qdq)
    try:
        return _prove_on(choice, *run)
    except _CudaRefused as refused:
        note = f"CUDA session could not be used ({refused.error.message}); running on the CPU"
        return _prove_on(DeviceChoice(choice.requested, "cpu", (*choice.notes, note)), *run)


def _prove_on(
    choice: DeviceChoice,
    reference: onnx.ModelProto | ModelFile,
    rewritten: onnx.ModelProto | ModelFile,
    samples: Sequence[Mapping[str, np.ndarray]],
    allow_tf32: bool,
    warmup: int,
    iterations: int,
    progress: ProgressCallback | None,
    cpu_accuracy_model: Callable[[], tuple[onnx.ModelProto | ModelFile, int]] | None,
    float_qdq: bool,
) -> Proof:
    config = DISABLE_QDQ_FUSION if float_qdq and choice.device == "cpu" else None
    ref_session = _session(lambda: _reference_session(reference, choice.device, config), choice)
    ref_run = _run_model(REFERENCE_LABEL, ref_session, reference, samples, warmup, iterations, progress)
    output_names = list(ref_session.output_names)
    del ref_session  # its weights are freed before the rewritten model loads its own
    timed_copy: tuple[onnx.ModelProto | ModelFile, int] | None = None
    notes = list(choice.notes)
    try:
        try:
            rew_session = _session(
                lambda: create_session(rewritten, choice.device, tf32=allow_tf32, config=config, what=REWRITTEN_WHAT),
                choice,
            )
        except WorkerCrashed:
            raise
        except AmpconfigError as exc:
            timed_copy = _copy_the_cpu_can_run(exc, choice, cpu_accuracy_model)
        if timed_copy is None:
            rew_run = _run_model("rewritten", rew_session, rewritten, samples, warmup, iterations, progress)
            del rew_session  # and before the accuracy copy loads its own
    except WorkerCrashed as crash:
        raise RewrittenRefused.of_crash(crash, crash.sample) from None
    if timed_copy is not None:
        copy = timed_copy[0]

        def timed(optimization: str | None) -> ModelRun:
            session = create_session(
                copy, choice.device, tf32=allow_tf32, config=config, optimization=optimization, what=ACCURACY_COPY_WHAT
            )
            return _run_model("rewritten", session, copy, samples, warmup, iterations, progress)

        rew_run, fallback = _accuracy_copy_run(timed)
        notes.append(
            "ONNX Runtime's CPU provider cannot load the rewritten model as it is (it was decided for another "
            f"target, see --target); accuracy and latency are those of a copy in which {timed_copy[1]} node(s) "
            "without a native CPU kernel compute in float32 between explicit low-precision casts, which rounds "
            "every low-precision value as the target's hardware stores it. CPU latency says nothing about the "
            "target's"
        )
        notes.extend([fallback] if fallback else [])
    elif choice.device == "cpu" and cpu_accuracy_model is not None:
        faithful, wrapped = cpu_accuracy_model()
        if wrapped:

            def measured(optimization: str | None) -> list[dict[str, np.ndarray]]:
                session = create_session(
                    faithful, "cpu", config=config, optimization=optimization, what=ACCURACY_COPY_WHAT
                )
                return sample_outputs(session, samples, faithful, progress=progress, label="accuracy copy")

            rew_run.samples, fallback = _accuracy_copy_run(measured)
            notes.append(
                f"accuracy measured on a copy of the rewritten model in which {wrapped} node(s) without a native "
                "CPU float16 kernel compute between explicit float16 casts: ONNX Runtime's CPU provider would "
                "otherwise skip their float16 rounding. Latency is the rewritten model's own."
            )
            notes.extend([fallback] if fallback else [])
    if config is not None:
        notes.append(
            "the model holds QuantizeLinear/DequantizeLinear pairs: on the CPU both models ran them as float ops, "
            "as the CUDA provider does (ONNX Runtime's CPU-only fusion of them into int8 kernels off), so the "
            "accuracy is the rewrite's alone"
        )
    return Proof(choice, ref_run, rew_run, output_names, notes)


_Measured = TypeVar("_Measured")


def _accuracy_copy_run(measure: Callable[[str | None], _Measured]) -> tuple[_Measured, str | None]:
    """``measure(None)``: the accuracy copy measured at ONNX Runtime's default graph optimisations. When ONNX Runtime
    crashes on the copy (its optimiser builds a graph the rewritten model itself never had), the copy is measured
    again, in a new worker, with the optimisations off, and the note says so, naming the signal; a second crash is
    :class:`~ampconfig.worker.client.WorkerCrashed` naming both."""
    try:
        return measure(None), None
    except WorkerCrashed as crash:
        first = crash
    try:
        measured = measure(ACCURACY_COPY_FALLBACK)
    except WorkerCrashed as again:
        raise WorkerCrashed(
            again.death, again.phase, f"{ACCURACY_COPY_WHAT} with graph optimisations off ({first.death} with them on)"
        ) from None
    return measured, (
        f"ONNX Runtime crashed ({first.death}) while {first.phase_words} {ACCURACY_COPY_WHAT} with its graph "
        "optimisations on; the copy was measured again with them off (the rewritten model itself ran as it is)"
    )


def _copy_the_cpu_can_run(
    refusal: AmpconfigError,
    choice: DeviceChoice,
    cpu_accuracy_model: Callable[[], tuple[onnx.ModelProto | ModelFile, int]] | None,
) -> tuple[onnx.ModelProto | ModelFile, int]:
    """The CPU accuracy copy, when the CPU provider refused the rewritten model itself (the fp32 reference loaded:
    its refusal reads differently) and the copy wraps what it could not run; else the refusal stands."""
    if not refusal.message.startswith(LOAD_FAILED):
        raise refusal
    if choice.device != "cpu" or cpu_accuracy_model is None:
        raise RewrittenRefused(refusal.message.removeprefix(LOAD_FAILED), "load") from None
    copy, wrapped = cpu_accuracy_model()
    if not wrapped:
        raise RewrittenRefused(refusal.message.removeprefix(LOAD_FAILED), "load") from None
    return copy, wrapped
