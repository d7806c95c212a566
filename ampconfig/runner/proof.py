"""Run the fp32 reference and the rewritten model on the same inputs: outputs for accuracy, latency for speed.

Both sessions are built first (so a model that will not load fails before anything is timed), then each model
runs once for its outputs, then each is timed (warm-up + timed iterations).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from ampconfig.errors import AmpconfigError
from ampconfig.runner.inputs import adapt_feeds
from ampconfig.runner.sessions import AUTO, DeviceChoice, ModelSource, Session, create_session
from ampconfig.runner.timing import Latency, ProgressCallback, measure


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


def _open_sessions(
    reference: ModelSource, rewritten: ModelSource, device: str, allow_tf32: bool
) -> tuple[Session, Session]:
    return (
        create_session(reference, device, tf32=False),
        create_session(rewritten, device, tf32=allow_tf32),
    )


def open_sessions(
    reference: ModelSource, rewritten: ModelSource, choice: DeviceChoice, allow_tf32: bool
) -> tuple[Session, Session, DeviceChoice]:
    """Sessions for both models; a CUDA session that falls back is an error unless the target was auto."""
    try:
        ref, rew = _open_sessions(reference, rewritten, choice.device, allow_tf32)
        return ref, rew, choice
    except AmpconfigError as exc:
        if choice.device != "cuda" or choice.requested != AUTO:
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
    outputs = bound.outputs()
    latency = measure(bound, warmup=warmup, iterations=iterations, label=label, progress=progress)
    return ModelRun(label, session.providers, session.tf32, outputs, latency)


def prove(
    reference: onnx.ModelProto,
    rewritten: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    choice: DeviceChoice,
    *,
    allow_tf32: bool = False,
    warmup: int = 3,
    iterations: int = 20,
    progress: ProgressCallback | None = None,
) -> Proof:
    """Run both models on ``feeds`` (converted to each model's input dtypes) and time them."""
    ref_session, rew_session, choice = open_sessions(reference, rewritten, choice, allow_tf32)
    ref_run = _run_model("fp32 reference", ref_session, adapt_feeds(feeds, reference), warmup, iterations, progress)
    rew_run = _run_model("rewritten", rew_session, adapt_feeds(feeds, rewritten), warmup, iterations, progress)
    return Proof(choice, ref_run, rew_run, list(ref_session.output_names), list(choice.notes))
