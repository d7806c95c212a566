"""The runs behind ``explain --range-check``, ``compare`` and ``tune``: calibration runs of the fp32 model and runs
of the rewritten model, with every intermediate float tensor exposed, on the same samples.

Requests are prepared by :func:`ampconfig.prove.request.prepare` (the same preparation ``run`` uses). The analysis
itself is pure (:mod:`ampconfig.diagnose.locate`, :mod:`ampconfig.diagnose.ranges`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ampconfig.decide.ranges_input import read_ranges
from ampconfig.decide.value_limits import ValueRanges, check_margin
from ampconfig.decide.value_ranges import ValueStats
from ampconfig.diagnose.graph_values import float_constants, graph_nodes
from ampconfig.diagnose.locate import Localization, locate
from ampconfig.diagnose.ranges import RangeFinding, check_data_max, overflow_nodes, range_findings
from ampconfig.documents.numeric_limits import DEFAULT_THRESHOLD
from ampconfig.errors import AmpconfigError
from ampconfig.prove.accuracy import OutputMetrics, OutputSpread
from ampconfig.prove.calibration import Calibration, calibration_of
from ampconfig.prove.request import Prepared, explain_reference_failure, prepare
from ampconfig.prove.verdict import AccuracyReference, accuracy_model
from ampconfig.rewrite.results import RewriteResult
from ampconfig.runner.intermediates import (
    REWRITTEN_EXPOSED,
    IntermediateRun,
    float_stats,
    run_samples_with_intermediates,
)
from ampconfig.runner.proof import input_refusal
from ampconfig.runner.timing import ProgressCallback

__all__ = ["Prepared", "prepare"]


@dataclass
class RangeReport:
    findings: list[RangeFinding]
    data_max: float
    low_dtype: str
    calibration: str  # where the calibration inputs came from, in words
    ranges: ValueRanges  # what the decision reads (rule range_exceeds)

    @property
    def overflow_nodes(self) -> dict[str, str]:
        return overflow_nodes(self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "data_max": self.data_max,
            "low_dtype": self.low_dtype,
            "calibration": self.calibration,
            "overflow_nodes": self.overflow_nodes,
            "findings": [finding.to_dict() for finding in self.findings],
        }


def accuracy_reference(prepared: Prepared, progress: ProgressCallback | None = None) -> AccuracyReference:
    """One plain run of the fp32 model per sample: the reference every rewrite of this request is judged against,
    as by ``run``."""
    request = prepared.request
    try:
        return AccuracyReference.from_reference_run(
            prepared.model,
            prepared.data.samples,
            prepared.device.device,
            request.tolerance,
            allow_tf32=request.allow_tf32,
            progress=progress,
        )
    except AmpconfigError as exc:
        raise explain_reference_failure(exc, prepared) from None


def rounding_note(wrapped: int) -> list[str]:
    """What ``run`` says when accuracy comes from the CPU rounding copy."""
    if not wrapped:
        return []
    return [
        f"accuracy measured on a copy of the rewritten model in which {wrapped} node(s) without a native CPU "
        "float16 kernel compute between explicit float16 casts, as run measures it"
    ]


def reference_run(prepared: Prepared, progress: ProgressCallback | None = None) -> IntermediateRun:
    """The fp32 model on the calibration samples, every intermediate exposed (the calibration run and the compare
    reference)."""
    try:
        return run_samples_with_intermediates(
            prepared.model, prepared.calibration.samples, prepared.device.device, progress=progress, label="fp32"
        )
    except AmpconfigError as exc:
        refusal = input_refusal(exc, prepared.model, str(prepared.request.model_path))
        raise explain_reference_failure(refusal, prepared) from None


def range_report(
    prepared: Prepared, measured: IntermediateRun | Calibration | None, data_max: float | None = None
) -> RangeReport:
    """What the fp32 values say: the value ranges the decision reads, and the findings the reports list
    (``data_max``: the margin, else the request's, else half the low type's largest value). With a ranges file
    (``--ranges``) both come from the file, as every deciding command reads it, and ``measured`` may be None; else
    from the calibration ``run`` makes on the same samples: ``measured`` is that calibration, or a reference run
    that carried every value out (compare's, tune's), whose numbers are the calibration's
    (:func:`~ampconfig.prove.calibration.calibration_of`, the same :func:`~ampconfig.runner.intermediates.float_stats`
    of the same arrays)."""
    explicit = data_max if data_max is not None else prepared.request.data_max
    limit = check_data_max(explicit, prepared.low_dtype)
    margin = check_margin(explicit, prepared.low_dtype)
    ranges_path = prepared.request.ranges
    if ranges_path is not None:
        ranges = read_ranges(ranges_path, prepared.opened.proto, margin, model_path=prepared.opened.path)
        source = ranges.source
    elif measured is not None:
        calibration = measured if isinstance(measured, Calibration) else calibration_of(prepared, joined(measured))
        ranges = replace(calibration.ranges, margin=margin)
        source = prepared.calibration_source()
    else:
        raise ValueError("range_report needs a ranges file or a measurement")  # a bug in the caller
    findings = range_findings(
        graph_nodes(prepared.model), ranges.peaks, float_constants(prepared.model), limit, prepared.low_dtype
    )
    return RangeReport(findings, limit, prepared.low_dtype, source, ranges)


def joined(run: IntermediateRun) -> dict[str, ValueStats]:
    """The numbers of every float value of a run over its samples, as the calibration counts them."""
    stats: dict[str, ValueStats] = {}
    for each in run.each:
        for key, found in float_stats(each.values).items():
            stats[key] = stats[key].joined(found) if key in stats else found
    return stats


def calibration_source(prepared: Prepared) -> str:
    """Where the calibration values came from, in words."""
    return prepared.calibration_source()


@dataclass
class CompareResult:
    rewrite: RewriteResult
    reference: IntermediateRun
    rewritten: IntermediateRun
    localization: Localization
    outputs: list[OutputMetrics]
    failures: list[str]
    range: RangeReport | None = None
    notes: list[str] = field(default_factory=list)
    spreads: list[OutputSpread] = field(default_factory=list)
    samples: int = 1

    @property
    def passed(self) -> bool:
        return not self.failures


def compare_rewrite(
    prepared: Prepared,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    range_check: bool = True,
    data_max: float | None = None,
    reference: IntermediateRun | None = None,
    progress: ProgressCallback | None = None,
) -> CompareResult:
    """Rewrite (with range-analysis pins when asked), judge it as ``run`` does, and run both models exposing
    intermediates to locate the error.

    The verdict comes from plain runs (:class:`~ampconfig.prove.verdict.AccuracyReference`); the per-node error
    from runs of the same models with every intermediate exposed: on the CPU the rewritten side is the same rounding
    copy that is judged, so the node that overflows is the node that breaks the outputs.
    """
    accuracy = accuracy_reference(prepared, progress)
    reference = reference if reference is not None else reference_run(prepared, progress)
    ranges = range_report(prepared, reference, data_max) if range_check else None
    result = prepared.rewrite(ranges.ranges if ranges is not None else None)
    judged_model, wrapped = accuracy_model(result.model, prepared.device.device)
    judgement = accuracy.verdict_of(accuracy.run_accuracy_model(judged_model))
    rewritten = run_samples_with_intermediates(
        judged_model,
        prepared.calibration.samples,
        prepared.device.device,
        names=list(reference.first.values),
        progress=progress,
        label="rewritten",
        what=REWRITTEN_EXPOSED,
    )
    localization = locate(
        graph_nodes(prepared.model),
        reference.values,
        rewritten.values,
        result.decisions,
        low_dtype=result.low_dtype,
        threshold=threshold,
    )
    notes = [*prepared.device.notes, *prepared.inputs.warnings, *rounding_note(wrapped)]
    if len(prepared.data) > 1 or len(prepared.calibration) > 1:
        notes.append(
            f"judged on {len(prepared.data)} sample(s) ({prepared.data.source}); the per-node errors come from "
            f"{calibration_source(prepared)}"
        )
    return CompareResult(
        rewrite=result,
        reference=reference,
        rewritten=rewritten,
        localization=localization,
        outputs=judgement.outputs,
        failures=judgement.failures,
        range=ranges,
        notes=notes,
        spreads=judgement.spreads,
        samples=judgement.samples,
    )
