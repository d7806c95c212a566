"""``tune`` end to end: reference run, range seeds, search (:mod:`ampconfig.diagnose.tune.search`), files written
atomically, checked by ``validate``, and a final verification run that rewrites from the written files.

The files are written only when the search found a candidate; the verification then reads them back from disk,
so what is reported is what a user gets with ``--modify-mixlist``/``--keep-dtype``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ampconfig.diagnose.calibrate import Prepared, RangeReport, range_report
from ampconfig.diagnose.tune.search import (
    DEFAULT_MAX_RUNS,
    STRATEGIES,
    Candidate,
    SearchResult,
    bisect_search,
    check_writable_names,
    express,
    keep_dtype_lines,
    keep_dtype_text,
    mixlist_data,
    mixlist_text,
    ranked_search,
)
from ampconfig.diagnose.tune.trials import TrialRunner
from ampconfig.errors import AmpconfigError
from ampconfig.files.guard import Destination, OutputGuard
from ampconfig.settings.validate import validate_paths


@dataclass
class TuneReport:
    strategy: str
    found: bool
    candidate: Candidate
    runs: int  # every model run: reference, search trials, final verification
    search: SearchResult
    range: RangeReport | None
    low_nodes_before: int
    low_nodes_after: int | None = None
    mixlist_path: str | None = None
    keep_dtype_path: str | None = None
    verified: bool | None = None
    verified_rel_l2: float | None = None
    validation_errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.found and bool(self.verified) and not self.validation_errors

    def to_dict(self) -> dict[str, Any]:
        worst = self.verified_rel_l2
        return {
            "strategy": self.strategy,
            "found": self.found,
            "succeeded": self.succeeded,
            "model_runs": self.runs,
            "black_list_to_add": sorted(self.candidate.black_ops),
            "keep_dtype_nodes": sorted(self.candidate.pins),
            "keep_dtype_op_types": sorted(self.candidate.keep_ops),
            "low_precision_nodes": {"before": self.low_nodes_before, "after": self.low_nodes_after},
            "mixlist": self.mixlist_path,
            "keep_dtype": self.keep_dtype_path,
            "verified": self.verified,
            "verified_rel_l2": worst if worst is None or math.isfinite(worst) else str(worst),
            "validation_errors": self.validation_errors,
            "range_analysis": self.range.to_dict() if self.range is not None else None,
            "steps": [step.to_dict() for step in self.search.steps],
            "reason": self.search.reason,
            "notes": self.notes,
        }


#: The roles of tune's outputs, as refusals name them.
MIXLIST_ROLE = "mixlist (-o)"
KEEP_DTYPE_ROLE = "keep_dtype file (--keep-dtype-out)"


@dataclass(frozen=True)
class TuneOutputs:
    mixlist: Destination | None
    keep_dtype: Destination | None


def check_outputs(
    prepared: Prepared, mixlist_out: Path | None, keep_out: Path | None, guard: OutputGuard
) -> TuneOutputs:
    """Refuse up front what could never be written: no output, a mixlist for a mode that takes none, an output
    that is an input or the other output (``guard`` knows the inputs)."""
    mode = prepared.request.precision_mode
    if mixlist_out is None and keep_out is None:
        raise AmpconfigError("tune needs somewhere to write", hint="pass -o mixlist.json and/or --keep-dtype-out FILE")
    if mixlist_out is not None and not mode.accepts_mixlist:
        raise AmpconfigError(
            f"precision mode {mode.value} does not accept a modify_mixlist, so tune cannot write one",
            hint="pass --keep-dtype-out FILE instead (keep_dtype pins work in every mode)",
        )
    outputs = TuneOutputs(
        guard.output(MIXLIST_ROLE, mixlist_out) if mixlist_out is not None else None,
        guard.output(KEEP_DTYPE_ROLE, keep_out) if keep_out is not None else None,
    )
    for destination in (outputs.mixlist, outputs.keep_dtype):
        if destination is not None and destination.is_stream:
            raise AmpconfigError(
                f"the {destination.role} cannot be a FIFO or device: tune reads its files back to verify them",
                file=str(destination.path),
                hint="write it to a regular file",
            )
    return outputs


def tune(
    prepared: Prepared,
    *,
    mixlist_out: Path | None,
    keep_out: Path | None,
    strategy: str = "ranked",
    range_check: bool = True,
    data_max: float | None = None,
    threshold: float = 1e-2,
    max_runs: int = DEFAULT_MAX_RUNS,
    guard: OutputGuard | None = None,
) -> TuneReport:
    """Search, write the files through ``guard`` (one of its own, with the model as its input, when None) and
    verify them."""
    if guard is None:
        with OutputGuard() as own:
            own.read("input model", prepared.request.model_path)
            return tune(
                prepared,
                mixlist_out=mixlist_out,
                keep_out=keep_out,
                strategy=strategy,
                range_check=range_check,
                data_max=data_max,
                threshold=threshold,
                max_runs=max_runs,
                guard=own,
            )
    if strategy not in STRATEGIES:
        raise AmpconfigError(f"unknown strategy {strategy!r}", hint="use " + " or ".join(STRATEGIES))
    if max_runs < 2:
        raise AmpconfigError("--max-runs must be at least 2 (the reference and one trial)")
    outputs = check_outputs(prepared, mixlist_out, keep_out, guard)
    runner = TrialRunner(prepared, threshold=threshold)
    # The bisection baseline uses no ranking and no range seeds: that is what it is measured against.
    ranges = range_report(prepared, runner.reference, data_max) if range_check and strategy == "ranked" else None
    seeds = sorted(ranges.overflow_nodes) if ranges is not None else []
    search = ranked_search(runner, seeds, max_runs) if strategy == "ranked" else bisect_search(runner, max_runs)
    report = TuneReport(
        strategy,
        search.found,
        search.candidate,
        runner.runs,
        search,
        ranges,
        runner.decide(Candidate()).low_precision_nodes,
    )
    if not search.found:
        report.runs = runner.runs
        return report
    mixed = prepared.request.precision_mode.accepts_mixlist
    candidate, notes = express(
        runner, search.candidate, mixed=mixed and mixlist_out is not None, allow_node_pins=keep_out is not None
    )
    report.notes += notes
    if candidate != search.candidate and not runner.evaluate(candidate).passed:
        report.found = False
        report.search.reason = "the op-type form of the pins misses the tolerance; pass --keep-dtype-out for node pins"
        report.runs = runner.runs
        return report
    report.candidate = candidate
    _write_files(report, runner, candidate, outputs, guard)
    _verify(report, runner, prepared)
    return report


def _write_files(
    report: TuneReport, runner: TrialRunner, candidate: Candidate, outputs: TuneOutputs, guard: OutputGuard
) -> None:
    bad = check_writable_names(candidate.pins)
    if bad:
        raise AmpconfigError(
            "node name(s) the keep_dtype format cannot carry: " + ", ".join(repr(n) for n in bad),
            hint="rename the nodes (leading '#' reads as a comment, surrounding spaces are stripped)",
        )
    if outputs.mixlist is not None:
        text = mixlist_text(mixlist_data(runner.mixlist, candidate.black_ops))
        report.mixlist_path = str(guard.write_text(outputs.mixlist, text))
    if outputs.keep_dtype is not None:
        lines = keep_dtype_lines(runner.keep, candidate)
        report.keep_dtype_path = str(guard.write_text(outputs.keep_dtype, keep_dtype_text(lines)))
        if not lines:
            report.notes.append("the keep_dtype file lists no entries: no node needs pinning")


def _verify(report: TuneReport, runner: TrialRunner, prepared: Prepared) -> None:
    """Validate the written files and rewrite from them (read back from disk): one more counted run."""
    for path, kind in ((report.mixlist_path, "mixlist"), (report.keep_dtype_path, "keep-dtype")):
        if path is None:
            continue
        findings = validate_paths([path], kind=kind, target=runner.decide(Candidate()).target)
        for problem in findings.problems:
            if problem.severity.value == "error":
                report.validation_errors.append(problem.format())
    request = prepared.request
    keep: Any = Path(report.keep_dtype_path) if report.keep_dtype_path else request.keep_dtype
    mixlist: Any = Path(report.mixlist_path) if report.mixlist_path else request.modify_mixlist
    if report.keep_dtype_path and not keep_dtype_lines(runner.keep, report.candidate):
        keep = None  # an empty keep_dtype file pins nothing (and the loader warns about it)
    result = prepared.rewrite(modify_mixlist=mixlist, keep_dtype=keep, use_request_lists=False)
    outcome = runner.run_result(result)
    report.verified = outcome.passed
    report.verified_rel_l2 = outcome.worst_rel_l2
    report.low_nodes_after = result.low_precision_nodes
    report.runs = runner.runs
    if report.mixlist_path and not report.keep_dtype_path and request.keep_dtype is not None:
        report.notes.append(f"the mixlist was verified together with the keep_dtype given ({request.keep_dtype})")
