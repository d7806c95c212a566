"""One measurement: how ``run``, ``compare`` and ``tune`` decide whether a rewritten model meets the tolerance.

All three judge the same way:

- the reference is one plain run of the fp32 model (no exposed intermediates, TF32 off on CUDA);
- the rewritten model is run on the same device with the same providers; on the CPU its low-precision
  rounding copy (:func:`accuracy_model`) is what runs, because ONNX Runtime's CPU provider would otherwise skip
  the float16 rounding of chains of nodes it has no native float16 kernel for;
- the metrics are :func:`ampconfig.prove.accuracy.compare_outputs` and the verdict
  :func:`ampconfig.prove.accuracy.tolerance_failures` against the one
  :class:`~ampconfig.documents.tolerance.Tolerance`;
  an inf/NaN in the rewritten output where the reference is finite always fails;
- an fp32 output without a single finite value is an input error (exit 2): there is nothing to compare against;
- over a data set of several samples (``--data``) every sample is judged on its own, and **the rewrite passes when
  every sample passes**: one bad image is a bad model. Each output reports the metrics of its worst sample and
  the spread of its relative L2 error over the samples (worst, p95, median, the worst sample's index).

:func:`samples_verdict` is the decision (:func:`outputs_verdict` for one sample); :class:`AccuracyReference` adds
the runs for callers that judge many rewrites of one model against one reference (``compare``, ``tune``). ``run``
gets its outputs from :func:`ampconfig.runner.proof.prove`, which runs the same copy the same way, and decides with
:func:`samples_verdict`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from ampconfig.errors import AmpconfigError
from ampconfig.prove.accuracy import (
    OutputMetrics,
    OutputMismatchError,
    OutputSpread,
    Tolerance,
    as_array,
    compare_outputs,
    finite_counts,
    output_failures,
    tolerance_failures,
)
from ampconfig.runner.proof import REFERENCE_LABEL, REFERENCE_WHAT, sample_outputs
from ampconfig.runner.sessions import TRIAL_CONV_ALGO_SEARCH, create_session
from ampconfig.runner.timing import ProgressCallback


@dataclass(frozen=True)
class AccuracyVerdict:
    """The verdict on one rewritten model: per-output metrics (of the worst sample) and one line per broken bound;
    over several samples also each output's spread."""

    outputs: list[OutputMetrics]
    failures: list[str]
    spreads: list[OutputSpread] = field(default_factory=list)
    samples: int = 1

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def worst_rel_l2(self) -> float:
        """The largest relative L2 error over the float outputs (inf when any is non-finite)."""
        values = [item.rel_l2 for item in self.outputs if item.rel_l2 is not None]
        worst = max(values, default=0.0)
        return math.inf if math.isnan(worst) or any(item.new_nonfinite for item in self.outputs) else worst


def _is_float(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" or array.dtype.name == "bfloat16"


def check_reference(reference: Mapping[str, np.ndarray], names: Sequence[str] | None = None) -> None:
    """Refuse (exit 2) an fp32 reference whose float output holds no finite value: nothing can be judged."""
    for name in names if names is not None else list(reference):
        array = as_array(reference[name]) if name in reference else None
        if array is None or not _is_float(array) or array.size == 0:
            continue
        finite, nan = finite_counts(array)  # chunked: no float64 copy of a whole output
        if not finite:
            kinds = "NaN" if nan == array.size else "inf/NaN"
            raise AmpconfigError(
                f"output {name!r}: the fp32 model itself produces no finite value for these inputs (all {kinds}), "
                "so no rewrite can be measured against it",
                hint="check the inputs (--inputs, --input, --shape, --seed, the config's run section): "
                "a mask that hides every position, a division by zero or values out of the model's range",
            )


def outputs_verdict(
    reference: Mapping[str, np.ndarray],
    candidate: Mapping[str, np.ndarray],
    names: Sequence[str] | None,
    tolerance: Tolerance,
) -> AccuracyVerdict:
    """The pass/fail decision for the outputs of one rewritten model on one sample."""
    check_reference(reference, names)
    try:
        metrics = compare_outputs(reference, candidate, names)
    except OutputMismatchError as exc:
        raise AmpconfigError(f"the rewritten model's outputs cannot be compared: {exc}") from None
    return AccuracyVerdict(metrics, tolerance_failures(metrics, tolerance))


def samples_verdict(
    references: Sequence[Mapping[str, np.ndarray]],
    candidates: Sequence[Mapping[str, np.ndarray]],
    names: Sequence[str] | None,
    tolerance: Tolerance,
) -> AccuracyVerdict:
    """THE pass/fail decision of ``run``, ``compare`` and ``tune``: every sample judged, passing only when every
    sample passes (see the module docstring)."""
    if len(references) != len(candidates):
        raise ValueError(f"{len(references)} reference samples against {len(candidates)} candidate samples")
    judged = [outputs_verdict(ref, cand, names, tolerance) for ref, cand in zip(references, candidates, strict=True)]
    if len(judged) == 1:
        return judged[0]
    outputs: list[OutputMetrics] = []
    failures: list[str] = []
    spreads: list[OutputSpread] = []
    for slot, first in enumerate(judged[0].outputs):
        per_sample = [judgement.outputs[slot] for judgement in judged]
        failing = [index for index, item in enumerate(per_sample) if output_failures(item, tolerance)]
        worst = max(range(len(per_sample)), key=lambda index: _severity(per_sample[index], index in failing))
        outputs.append(per_sample[worst])
        spreads.append(_spread(first.name, per_sample, worst, len(failing)))
        failures.extend(
            f"sample {worst} (worst of the {len(failing)} failing of {len(per_sample)}): {line}"
            for line in output_failures(per_sample[worst], tolerance)
        )
    return AccuracyVerdict(outputs, failures, spreads, len(judged))


def _severity(item: OutputMetrics, fails: bool) -> tuple[bool, float]:
    error = item.rel_l2 if item.rel_l2 is not None else float(item.mismatches or 0)
    return fails, math.inf if math.isnan(error) else error


def _spread(name: str, per_sample: Sequence[OutputMetrics], worst: int, failing: int) -> OutputSpread:
    errors = [item.rel_l2 for item in per_sample if item.rel_l2 is not None]
    if not errors:
        return OutputSpread(name, len(per_sample), None, None, None, worst, failing)
    values = np.array([math.inf if math.isnan(e) else e for e in errors], dtype=np.float64)
    # "nearest": an infinite sample never makes a NaN of an interpolation.
    p95, median = (float(np.percentile(values, q, method="nearest")) for q in (95, 50))
    return OutputSpread(name, len(per_sample), float(values.max()), p95, median, worst, failing)


@dataclass
class AccuracyReference:
    """One fp32 reference run per sample, and the verdict on any rewrite of the same model on the same samples.

    ``trial=True`` runs are for searches that build many sessions (tune): on CUDA they ask cuDNN for heuristic
    convolution algorithms instead of ORT's exhaustive default. A verdict a user relies on is a non-trial run,
    exactly as ``run`` makes it.
    """

    references: list[dict[str, np.ndarray]]
    output_names: list[str]
    samples: Sequence[Mapping[str, np.ndarray]]
    device: str
    tolerance: Tolerance
    allow_tf32: bool = False
    providers: list[str] = field(default_factory=list)
    progress: ProgressCallback | None = None

    @property
    def reference(self) -> dict[str, np.ndarray]:
        """The first sample's fp32 outputs."""
        return self.references[0]

    @classmethod
    def from_reference_run(
        cls,
        model: onnx.ModelProto,
        samples: Sequence[Mapping[str, np.ndarray]] | Mapping[str, np.ndarray],
        device: str,
        tolerance: Tolerance,
        *,
        allow_tf32: bool = False,
        progress: ProgressCallback | None = None,
    ) -> AccuracyReference:
        """Run the fp32 ``model`` once per sample (TF32 off, as ``run``'s reference) and keep its outputs; checks
        them. ``samples``: the feeds of each sample, or the feeds of one."""
        if isinstance(samples, Mapping):
            samples = [samples]
        session = create_session(model, device, tf32=False, what=REFERENCE_WHAT)
        outputs = sample_outputs(session, samples, model, reference=True, progress=progress, label=REFERENCE_LABEL)
        for each in outputs:
            check_reference(each, session.output_names)
        return cls(
            outputs, list(session.output_names), samples, device, tolerance, allow_tf32, session.providers, progress
        )

    def outputs_of(self, rewritten: onnx.ModelProto, *, trial: bool = False) -> list[dict[str, np.ndarray]]:
        """The outputs ``run`` would compare for ``rewritten``, per sample: its rounding copy's on the CPU, its own
        elsewhere."""
        return self.run_accuracy_model(accuracy_model(rewritten, self.device)[0], trial=trial)

    def run_accuracy_model(self, model: onnx.ModelProto, *, trial: bool = False) -> list[dict[str, np.ndarray]]:
        """Run a model that already is :func:`accuracy_model`'s result once per sample; its outputs by name."""
        session = create_session(
            model,
            self.device,
            tf32=self.allow_tf32,
            conv_algo_search=TRIAL_CONV_ALGO_SEARCH if trial and self.device == "cuda" else None,
            what="a rewrite of the model",
        )
        return sample_outputs(session, self.samples, model, progress=self.progress, label="rewritten")

    def verdict(self, rewritten: onnx.ModelProto, *, trial: bool = False) -> AccuracyVerdict:
        return self.verdict_of(self.outputs_of(rewritten, trial=trial))

    def verdict_of(self, outputs: Sequence[Mapping[str, np.ndarray]]) -> AccuracyVerdict:
        return samples_verdict(self.references, outputs, self.output_names, self.tolerance)


def accuracy_model(rewritten: onnx.ModelProto, device: str) -> tuple[onnx.ModelProto, int]:
    """The model whose outputs are judged, and how many nodes its rounding wraps.

    On the CPU: :func:`ampconfig.instrument.rounding.low_precision_rounding_model` (the rewrite itself when nothing
    needs wrapping). On CUDA: the rewritten model itself, whose float16 kernels round as float16 hardware does.
    """
    if device != "cpu":
        return rewritten, 0
    from ampconfig.engine.typing_chain import TYPING
    from ampconfig.instrument.rounding import low_precision_rounding_model

    copy, wrapped = low_precision_rounding_model(rewritten, TYPING)
    return (copy, wrapped) if wrapped else (rewritten, 0)
