"""Run the fp32 reference and the rewritten model on the same inputs: outputs for accuracy, latency for speed.

Both sessions are built first (so a model that will not load fails before anything is timed), then each model
runs once for its outputs, then each is timed (warm-up + timed iterations).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from ampconfig.errors import AmpconfigError
from ampconfig.runner.acceptance import locate_refusal
from ampconfig.runner.inputs import adapt_feeds
from ampconfig.runner.sessions import (
    LOAD_FAILED,
    DeviceChoice,
    ModelFile,
    ModelSource,
    Session,
    create_session,
    model_proto,
)
from ampconfig.runner.timing import Latency, ProgressCallback, measure
from ampconfig.settings.resolve import AUTO_DEVICE

REFERENCE_LABEL = "fp32 reference"


@dataclass
class ModelRun:
    """One model's run: the providers its session got, its outputs, its latency."""

    label: str
    providers: list[str]
    tf32: bool | None
    outputs: dict[str, np.ndarray]
    latency: Latency

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


#: How a refusal of the fp32 reference (the user's model) starts; callers that know its file add it.
INPUT_REFUSED = "ONNX Runtime cannot load the input model: "


def _open_sessions(
    reference: ModelSource, rewritten: ModelSource, device: str, allow_tf32: bool
) -> tuple[Session, Session]:
    try:
        reference_session = create_session(reference, device, tf32=False)
    except AmpconfigError as exc:
        if not exc.message.startswith(LOAD_FAILED) or not isinstance(reference, (onnx.ModelProto, ModelFile)):
            raise
        reason = locate_refusal(exc.message.removeprefix(LOAD_FAILED), model_proto(reference))
        where = str(reference.path) if isinstance(reference, ModelFile) else None
        raise AmpconfigError(INPUT_REFUSED + reason, file=where, hint="fix or re-export the model") from None
    return reference_session, create_session(rewritten, device, tf32=allow_tf32)


def open_sessions(
    reference: ModelSource, rewritten: ModelSource, choice: DeviceChoice, allow_tf32: bool
) -> tuple[Session, Session, DeviceChoice]:
    """Sessions for both models; a CUDA session that falls back is an error unless the device was auto."""
    try:
        ref, rew = _open_sessions(reference, rewritten, choice.device, allow_tf32)
        return ref, rew, choice
    except AmpconfigError as exc:
        if choice.device != "cuda" or choice.requested != AUTO_DEVICE:
            raise
        note = f"CUDA session could not be used ({exc.message}); running on the CPU"
        ref, rew = _open_sessions(reference, rewritten, "cpu", allow_tf32)
        return ref, rew, DeviceChoice(choice.requested, "cpu", (*choice.notes, note))


def _run_model(
    label: str,
    session: Session,
    feeds: Mapping[str, np.ndarray],
    warmup: int,
    iterations: int,
    progress: ProgressCallback | None,
) -> ModelRun:
    bound = session.bind(feeds)
    try:
        outputs = bound.outputs()
    except Exception as exc:  # ORT's own exception types; the first run is the one that fails on bad inputs
        raise _run_failure(label, exc) from None
    latency = measure(bound, warmup=warmup, iterations=iterations, label=label, progress=progress)
    return ModelRun(label, session.providers, session.tf32, outputs, latency)


def _run_failure(label: str, exc: Exception) -> AmpconfigError:
    """A model that loads but fails to run: on the fp32 reference it is the inputs (shapes that disagree with
    the model, e.g. one dim_param bound to two sizes); on the rewritten model, with the reference fine, a bug."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if label == REFERENCE_LABEL:
        return AmpconfigError(
            f"ONNX Runtime failed to run the fp32 model on these inputs: {message}",
            hint="check the inputs' shapes and dtypes against the model's inputs (--shape, --inputs)",
        )
    return AmpconfigError(
        f"ONNX Runtime failed to run the rewritten model (the fp32 model ran): {message}",
        hint="this is a bug in ampconfig; please report it with the model and the command",
    )


def accuracy_outputs(
    session: Session, feeds: Mapping[str, np.ndarray], model: onnx.ModelProto | ModelFile, *, reference: bool = False
) -> dict[str, np.ndarray]:
    """One run of ``session`` for the outputs that are judged (feeds converted to ``model``'s input dtypes).

    A failure on the fp32 reference is the inputs' fault; on a rewritten model it is a bug (see ``_run_failure``).
    """
    try:
        return session.bind(adapt_feeds(feeds, model_proto(model))).outputs()
    except Exception as exc:  # ORT's own exception types
        raise _run_failure(REFERENCE_LABEL if reference else "rewritten", exc) from None


def prove(
    reference: onnx.ModelProto | ModelFile,
    rewritten: onnx.ModelProto | ModelFile,
    feeds: Mapping[str, np.ndarray],
    choice: DeviceChoice,
    *,
    allow_tf32: bool = False,
    warmup: int = 3,
    iterations: int = 20,
    progress: ProgressCallback | None = None,
    cpu_accuracy_model: Callable[[], tuple[onnx.ModelProto | ModelFile, int]] | None = None,
) -> Proof:
    """Run both models on ``feeds`` (converted to each model's input dtypes) and time them.

    A model is an in-memory proto or a :class:`ModelFile` (ONNX Runtime loads it from disk: how models with
    external data, or too large for one protobuf, are run). On the CPU, ``cpu_accuracy_model`` (if given)
    supplies a copy of the rewritten model that rounds low-precision values the way low-precision hardware does;
    its outputs are the ones compared, the rewritten model is still the one timed, unless the CPU provider cannot
    load the rewritten model as it is (decided for another target: a bfloat16 MatMul decided for cuda), when the
    copy is timed too and a note says so.
    """
    timed_copy: tuple[onnx.ModelProto | ModelFile, int] | None = None
    try:
        ref_session, rew_session, choice = open_sessions(reference, rewritten, choice, allow_tf32)
    except AmpconfigError as exc:
        timed_copy = _copy_the_cpu_can_run(exc, choice, cpu_accuracy_model)
        ref_session, rew_session, choice = open_sessions(reference, timed_copy[0], choice, allow_tf32)
        rewritten = timed_copy[0]
    ref_feeds, rew_feeds = adapt_feeds(feeds, model_proto(reference)), adapt_feeds(feeds, model_proto(rewritten))
    ref_run = _run_model(REFERENCE_LABEL, ref_session, ref_feeds, warmup, iterations, progress)
    rew_run = _run_model("rewritten", rew_session, rew_feeds, warmup, iterations, progress)
    output_names = list(ref_session.output_names)
    del ref_session, rew_session  # their weights are freed before the accuracy copy loads its own
    notes = list(choice.notes)
    if timed_copy is not None:
        notes.append(
            "ONNX Runtime's CPU provider cannot load the rewritten model as it is (it was decided for another "
            f"target, see --target); accuracy and latency are those of a copy in which {timed_copy[1]} node(s) "
            "without a native CPU kernel compute in float32 between explicit low-precision casts, which rounds "
            "every low-precision value as the target's hardware stores it. CPU latency says nothing about the "
            "target's"
        )
    elif choice.device == "cpu" and cpu_accuracy_model is not None:
        faithful, wrapped = cpu_accuracy_model()
        if wrapped:
            session = create_session(faithful, "cpu", tf32=False)
            rew_run.outputs = accuracy_outputs(session, feeds, faithful)
            notes.append(
                f"accuracy measured on a copy of the rewritten model in which {wrapped} node(s) without a native "
                "CPU float16 kernel compute between explicit float16 casts: ONNX Runtime's CPU provider would "
                "otherwise skip their float16 rounding. Latency is the rewritten model's own."
            )
    return Proof(choice, ref_run, rew_run, output_names, notes)


def _copy_the_cpu_can_run(
    refusal: AmpconfigError,
    choice: DeviceChoice,
    cpu_accuracy_model: Callable[[], tuple[onnx.ModelProto | ModelFile, int]] | None,
) -> tuple[onnx.ModelProto | ModelFile, int]:
    """The CPU accuracy copy, when the CPU provider refused the rewritten model itself (the fp32 reference loaded:
    its refusal reads differently) and the copy wraps what it could not run; else the refusal stands."""
    if choice.device != "cpu" or cpu_accuracy_model is None or not refusal.message.startswith(LOAD_FAILED):
        raise refusal
    copy, wrapped = cpu_accuracy_model()
    if not wrapped:
        raise refusal
    return copy, wrapped
