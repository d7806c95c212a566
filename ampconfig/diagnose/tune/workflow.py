"""``tune`` end to end: the fewest float32 nodes (or the least estimated latency) that meet the tolerance.

1. Reference: one plain fp32 run (what every candidate is judged against, as ``run`` judges) and one with every
   intermediate exposed (range analysis, sensitivity, sizes for the latency estimate).
2. The mode's rewrite ("all-low") run once with every intermediate exposed. When it already meets the tolerance
   (confirmed by one judged run) the answer pins nothing.
3. Overflow seeds: range-analysis findings whose values really turn inf/NaN in that run are pinned in every
   candidate (then the exposed run is repeated with them, so the analysis sees finite values).
4. Sensitivity: one replay run (every low node recomputed in fp32 on its low-precision inputs) ranks each node's
   contribution to the output error (:mod:`ampconfig.diagnose.sensitivity`).
5. Search (:mod:`ampconfig.diagnose.tune.search`): predicted prefix of the ranking, verified in batches,
   bisected, pruned.
6. The answer's form: node pins in the keep_dtype file (the default); op types in the mixlist only where they
   keep at most a few nodes more in float32 (:mod:`ampconfig.diagnose.tune.answer`).
7. The files are written to a private folder, validated, rewritten from and judged exactly as ``run`` judges;
   only a verified answer is written to the requested paths.

Refused: an answer keeping less than ``min_low_fraction`` of the mode's low nodes (exit 1, nothing written); a
tolerance even every lowered node kept float32 misses (exit 2); a budget too small to verify anything (exit 2).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ampconfig.diagnose.latency import estimate_us, node_flops, original_us, value_shapes
from ampconfig.diagnose.reference_runs import Prepared, RangeReport, calibration_source, range_report
from ampconfig.diagnose.sensitivity import NodeSensitivity, damaged_nodes, sensitivities
from ampconfig.diagnose.tune.answer import (
    OP_TYPE_SLACK,
    OpTypeChoice,
    all_op_types,
    keep_dtype_text,
    mixlist_text,
    op_types_within_slack,
    unwritable_names,
)
from ampconfig.diagnose.tune.ranking import amplifying_consumers, latency_costs, node_costs, pin_followers
from ampconfig.diagnose.tune.search import Candidate, PrefixSearch, SearchResult, Step, rank_pins
from ampconfig.diagnose.tune.trials import Budget, BudgetSpent, ProgressHook, TuneRuns
from ampconfig.errors import AmpconfigError
from ampconfig.files.guard import Destination, OutputGuard
from ampconfig.opinfo.op_names import is_ambiguous
from ampconfig.prove.accuracy import OutputMetrics, OutputSpread
from ampconfig.prove.verdict import AccuracyVerdict, samples_verdict
from ampconfig.rewrite.results import RewriteResult
from ampconfig.runner.intermediates import IntermediateRun
from ampconfig.runner.timing import ProgressCallback
from ampconfig.settings.validate import validate_paths

DEFAULT_MAX_RUNS = 20
LOW_DTYPES = ("float16", "bfloat16")
#: How many node names a message lists before it counts the rest.
SHOWN_NODES = 8
DEFAULT_MIN_LOW_FRACTION = 0.5
OBJECTIVES = ("nodes", "latency")
#: The fewest runs a search can give a verified answer in: the fp32 run and the rewrite with their intermediates
#: exposed, the sensitivity replay, and one trial that is also the verification of the written files (on the CPU,
#: where a trial runs as ``run`` does, the files rewrite to the very model it judged).
MIN_RUNS = 4


@dataclass(frozen=True)
class TuneSettings:
    mixlist_out: Path | None = None
    keep_out: Path | None = None
    objective: str = "nodes"
    min_low_fraction: float = DEFAULT_MIN_LOW_FRACTION
    max_runs: int = DEFAULT_MAX_RUNS
    max_seconds: float | None = None
    range_check: bool = True
    data_max: float | None = None
    calibration_batch: int | None = None  # samples the exposed runs see (None: all)


@dataclass
class AnswerCost:
    """What an answer costs against the mode's own rewrite (all-low) and the fp32 model."""

    low_nodes: int
    low_nodes_all_low: int
    fp32_pinned: int  # nodes the answer keeps float32 that the mode lowers
    casts: int
    casts_all_low: int
    latency_us: float | None
    latency_all_low_us: float | None
    latency_fp32_us: float | None

    @property
    def low_fraction(self) -> float:
        return self.low_nodes / self.low_nodes_all_low if self.low_nodes_all_low else 1.0

    def to_dict(self) -> dict[str, Any]:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 2)

        return {
            "low_nodes": self.low_nodes,
            "low_nodes_all_low": self.low_nodes_all_low,
            "low_fraction": round(self.low_fraction, 4),
            "short_of_all_low": self.fp32_pinned,
            "casts": self.casts,
            "casts_all_low": self.casts_all_low,
            "estimated_latency_us": {
                "answer": rounded(self.latency_us),
                "all_low": rounded(self.latency_all_low_us),
                "fp32": rounded(self.latency_fp32_us),
                "model": "H100 kernel costs (ampconfig.opinfo.costs)",
            },
        }


@dataclass
class TuneReport:
    outcome: str  # "found", "no_useful_answer", "not_found"
    runs: int
    max_runs: int
    seconds: float
    objective: str
    tolerance: dict[str, float | None]
    all_low_error: float | None = None
    seeds: dict[str, str] = field(default_factory=dict)
    candidate: Candidate | None = None
    op_types: list[OpTypeChoice] = field(default_factory=list)
    cost: AnswerCost | None = None
    verified: list[OutputMetrics] = field(default_factory=list)
    verified_spreads: list[OutputSpread] = field(default_factory=list)  # over the samples of --data
    mixlist_path: str | None = None
    keep_dtype_path: str | None = None
    steps: list[Step] = field(default_factory=list)
    run_log: list[str] = field(default_factory=list)  # what each counted model run was for
    ranking: list[NodeSensitivity] = field(default_factory=list)
    range: RangeReport | None = None
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.outcome == "found"

    @property
    def verified_error(self) -> float | None:
        values = [item.rel_l2 for item in self.verified if item.rel_l2 is not None]
        return max(values) if values else None

    def to_dict(self) -> dict[str, Any]:
        candidate = self.candidate or Candidate()
        return {
            "outcome": self.outcome,
            "succeeded": self.succeeded,
            "model_runs": self.runs,
            "max_runs": self.max_runs,
            "seconds": round(self.seconds, 3),
            "objective": self.objective,
            "tolerance": self.tolerance,
            "all_low_error": _json_float(self.all_low_error),
            "overflow_seeds": self.seeds,
            "keep_dtype_nodes": sorted(candidate.pins),
            "black_list_to_add": sorted(candidate.black_ops),
            "op_types": [choice.to_dict() for choice in self.op_types],
            "cost": self.cost.to_dict() if self.cost is not None else None,
            "verified": [item.to_dict() for item in self.verified],
            "verified_rel_l2": _json_float(self.verified_error),
            "verified_spread": [item.to_dict() for item in self.verified_spreads],
            "mixlist": self.mixlist_path,
            "keep_dtype": self.keep_dtype_path,
            "steps": [step.to_dict() for step in self.steps],
            "run_log": self.run_log,
            "sensitivity": [item.to_dict() for item in self.ranking],
            "range_analysis": self.range.to_dict() if self.range is not None else None,
            "reason": self.reason,
            "notes": self.notes,
        }


def _json_float(value: float | None) -> float | str | None:
    return value if value is None or math.isfinite(value) else str(value)


# ---------------------------------------------------------------------------------------------------- checks


def check_settings(prepared: Prepared, settings: TuneSettings) -> None:
    """Refuse up front (exit 2, before any run) what could never give a written, verified answer."""
    request = prepared.request
    mode = request.precision_mode
    if settings.mixlist_out is None and settings.keep_out is None:
        raise AmpconfigError(
            "tune needs somewhere to write its answer",
            hint="pass --keep-dtype-out FILE (node pins), and/or -o mixlist.json (op types, mixed modes)",
        )
    if settings.mixlist_out is not None and not mode.accepts_mixlist:
        raise AmpconfigError(
            f"precision mode {mode.value} does not accept a modify_mixlist, so tune cannot write one",
            hint="pass --keep-dtype-out FILE instead (keep_dtype pins work in every mode)",
        )
    if settings.max_runs < MIN_RUNS:
        raise AmpconfigError(
            f"--max-runs {settings.max_runs} leaves no room for an answer: tune needs at least {MIN_RUNS} model runs "
            "(the fp32 model and the rewrite with their intermediates exposed, the sensitivity replay, and one trial "
            "that verifies the written files)",
            hint=f"give --max-runs {MIN_RUNS} or more (default {DEFAULT_MAX_RUNS})",
        )
    if settings.max_seconds is not None and not settings.max_seconds > 0:
        raise AmpconfigError(f"--max-seconds must be a positive number of seconds, not {settings.max_seconds}")
    if not 0.0 <= settings.min_low_fraction <= 1.0:
        raise AmpconfigError(f"--min-low-fraction must be between 0 and 1, not {settings.min_low_fraction}")
    if settings.objective not in OBJECTIVES:
        raise AmpconfigError(f"unknown objective {settings.objective!r}", hint="use " + " or ".join(OBJECTIVES))


#: The roles of tune's outputs, as refusals name them.
MIXLIST_ROLE = "mixlist (-o)"
KEEP_DTYPE_ROLE = "keep_dtype file (--keep-dtype-out)"


@dataclass(frozen=True)
class TuneOutputs:
    mixlist: Destination | None
    keep_dtype: Destination | None


def declare_outputs(settings: TuneSettings, guard: OutputGuard) -> TuneOutputs:
    """tune's files, declared to the invocation's guard before any run (it refuses one that is an input or the
    other output). Neither may be a FIFO or device: tune reads its files back to verify them."""
    outputs = TuneOutputs(
        guard.output(MIXLIST_ROLE, settings.mixlist_out) if settings.mixlist_out is not None else None,
        guard.output(KEEP_DTYPE_ROLE, settings.keep_out) if settings.keep_out is not None else None,
    )
    for destination in (outputs.mixlist, outputs.keep_dtype):
        if destination is not None and destination.is_stream:
            raise AmpconfigError(
                f"the {destination.role} cannot be a stream (a FIFO, a device or standard output): tune reads its "
                "files back to verify them",
                file=destination.shown,
                hint="write it to a regular file",
            )
    return outputs


# ---------------------------------------------------------------------------------------------------- the tune


def verification_runs(device: str, settings: TuneSettings) -> int:
    """Runs the verification needs beyond the trials: none on the CPU for node pins alone (the trial that judged the
    answer ran the very model the files rewrite to, as run runs it); one where a trial searches convolutions
    heuristically (CUDA) or the answer may take an op-type form no trial judged (a mixlist)."""
    return 0 if device == "cpu" and settings.mixlist_out is None else 1


def tune(
    prepared: Prepared,
    settings: TuneSettings,
    progress: ProgressHook | None = None,
    guard: OutputGuard | None = None,
    outputs: TuneOutputs | None = None,
    sample_progress: ProgressCallback | None = None,
) -> TuneReport:
    """Search, verify the answer from files, and write it through ``guard`` to ``outputs`` (declared here when
    None; a guard of its own, with the model as its input, when ``guard`` is None). ``sample_progress`` shows
    the runs of long data sets sample by sample."""
    if guard is None:
        with OutputGuard() as own:
            own.read("input model", prepared.request.model_path)
            return tune(prepared, settings, progress, own, sample_progress=sample_progress)
    check_settings(prepared, settings)
    if outputs is None:
        outputs = declare_outputs(settings, guard)
    budget = Budget(settings.max_runs, settings.max_seconds)
    runs = TuneRuns(prepared, budget, progress, settings.calibration_batch, sample_progress)
    runs.verify_reserve = verification_runs(runs.device, settings)
    report = TuneReport(
        "not_found", 0, settings.max_runs, 0.0, settings.objective, prepared.request.tolerance.to_dict()
    )
    try:
        _search(prepared, settings, runs, report, outputs, guard)
    except BudgetSpent as spent:
        report.outcome = "not_found"
        tried = sum(1 for _ in report.steps)
        report.reason = f"{spent}; {tried} candidate(s) judged in {budget.runs} runs; nothing written"
    finally:
        report.runs = budget.runs
        report.run_log = list(runs.log)
        report.seconds = budget.elapsed
    return report


@dataclass
class Measured:
    """What tune measures before it judges any candidate: the ranking's search ready to run (None when there is
    nothing to search: ``done`` says why), the exposed runs it came from, and what candidates cost."""

    done: str  # "search", or why not: "nothing_lowered", "all_low_passes"
    all_low: RewriteResult
    costing: _Costing
    low_run: IntermediateRun | None = None
    search: PrefixSearch | None = None
    known_failing: int | None = None  # the prefix the search may take as judged failing (all-low: 0)


def measure(prepared: Prepared, settings: TuneSettings, runs: TuneRuns, report: TuneReport) -> Measured:
    """Steps 1-4 of the module docstring: the reference, the all-low rewrite exposed, overflow seeds, the
    sensitivity replay, and the ranked search over them (its runs counted in ``runs``, its findings in
    ``report``). ``run``'s FAIL forecast (:mod:`ampconfig.diagnose.tune.forecast`) measures through it too."""
    runs.run_reference()
    if settings.calibration_batch is not None and runs.sliced:
        report.notes.append(
            f"sensitivity, range analysis and the latency estimate come from the first {runs.calibration_samples} "
            "sample(s) (--calibration-batch); every trial and the verification ran on all of them"
        )
    elif runs.sliced:
        report.notes.append(
            f"sensitivity, range analysis and the latency estimate come from {calibration_source(prepared)}; every "
            f"trial and the verification ran on all {len(prepared.data)} sample(s) of {prepared.data.source}"
        )
    # The values the fp32 model reached on the calibration samples decide every candidate, as they decide run's.
    report.range = range_report(prepared, runs.reference, settings.data_max) if settings.range_check else None
    runs.value_ranges = report.range.ranges if report.range is not None else None
    base = Candidate()
    all_low = runs.decide(base)
    # what a ranges file does not cover (or covers beyond the model), as every deciding command says it
    report.notes.extend(warning for warning in all_low.warnings if "ranges file" in warning)
    shapes = value_shapes(prepared.model, runs.reference.first.values)
    costing = _Costing(prepared, runs, shapes)
    if not runs.lowered(base):
        report.notes.append(f"precision mode {all_low.precision_mode} lowers no node here: there is nothing to tune")
        return Measured("nothing_lowered", all_low, costing)
    # The exposed runs cost most on a GPU (every intermediate copied to the host): stop before them, saying what
    # would fit, rather than spend the budget on a search that cannot end.
    runs.budget.require_time_for(2, 1, "the rewrite and the sensitivity replay exposed, and one trial")
    low_run = runs.exposed(base, "all-low rewrite, intermediates exposed")
    estimate = _estimate(runs, low_run)
    report.all_low_error = estimate.worst_rel_l2
    runs.report("all-low rewrite measured", estimate.worst_rel_l2, all_low.low_precision_nodes)
    if estimate.passed and runs.trial(base, "all-low rewrite, judged").passed:
        report.notes.append("the mode's own rewrite already meets the tolerance: no node needs pinning")
        return Measured("all_low_passes", all_low, costing, low_run)
    lowered = runs.lowered(base)
    _check_reachable(runs, lowered)
    findings = report.range.findings if report.range is not None else []
    report.seeds = damaged_nodes(findings, runs.nodes, lowered, runs.reference.values, low_run.values)
    start = Candidate(frozenset(report.seeds))
    if report.seeds:
        runs.budget.require_time_for(2, 1, "the seeded rewrite and the replay exposed, and one trial")
        low_run = runs.exposed(start, f"{len(report.seeds)} overflow seed(s) pinned, intermediates exposed")
        lowered = runs.lowered(start)
    runs.budget.require_time_for(1, 1, "the sensitivity replay and one trial")
    replay = runs.replay(lowered, low_run, "sensitivity: every low node replayed in fp32")
    graph_outputs = [value.name for value in prepared.model.graph.output]
    sensitivity = sensitivities(
        runs.nodes, lowered, runs.reference.values, low_run.values, replay, graph_outputs, all_low.low_dtype
    )
    report.ranking = sorted(sensitivity.values(), key=lambda item: -_sortable(item.contribution))
    contributions = {name: item.contribution for name, item in sensitivity.items()}
    followers = pin_followers(runs.nodes, runs.decide(start).decisions, lowered)
    costs = node_costs(followers) if settings.objective == "nodes" else costing.pin_costs(followers, all_low.low_dtype)
    along = amplifying_consumers(runs.nodes, lowered, {name: item.transmission for name, item in sensitivity.items()})
    search = PrefixSearch(
        runs,
        rank_pins(contributions, followers, costs, along),
        contributions,
        report.seeds,
        prepared.request.tolerance.rel_l2,
        _estimate(runs, low_run).worst_rel_l2,
        costing.objective(settings.objective),
        settings.min_low_fraction * all_low.low_precision_nodes,
    )
    return Measured("search", all_low, costing, low_run, search, None if report.seeds else 0)


def _search(
    prepared: Prepared,
    settings: TuneSettings,
    runs: TuneRuns,
    report: TuneReport,
    outputs: TuneOutputs,
    guard: OutputGuard,
) -> None:
    measured = measure(prepared, settings, runs, report)
    if measured.search is None:
        _answer(prepared, settings, runs, report, Candidate(), measured.costing, outputs, guard)
        return
    result = measured.search.run(known_failing=measured.known_failing)
    report.steps = result.steps
    if not result.found or result.candidate is None:
        _not_found(runs, report, result)
        return
    _answer(prepared, settings, runs, report, result.candidate, measured.costing, outputs, guard)


def _check_reachable(runs: TuneRuns, lowered: list[str]) -> None:
    """Refuse a tolerance that even every lowered node kept float32 misses, naming the nodes that stop it and the
    error that floor measures.

    Keeping every lowered node gives the fp32 model back exactly (error 0) unless the model already computes
    something in low precision itself, which the judged copy rounds as the hardware would: then one run says.
    """
    everything = Candidate(frozenset(lowered))
    result = runs.decide(everything)
    own_low = [
        d.name
        for d in result.decisions
        if d.original_dtype in LOW_DTYPES and d.dtype in LOW_DTYPES and d.op_type != "Cast"  # a Cast computes nothing
    ]
    if not any(d.changed for d in result.decisions) and not own_low:
        return
    trial = runs.trial(everything, "every lowered node kept float32 (the reachable floor)")
    if not trial.passed:
        shown = ", ".join(own_low[:SHOWN_NODES]) + (
            f", ... ({len(own_low)} in all)" if len(own_low) > SHOWN_NODES else ""
        )
        raise AmpconfigError(
            f"the tolerance cannot be met: with every node the mode lowers kept float32 (the all-float32 floor) the "
            f"outputs still measure worst rel-L2 {trial.error:.3g} ("
            + "; ".join(trial.judgement.failures)
            + f"); what stops it is the model's own low-precision computation, which the judged copy rounds as the "
            f"hardware would: {len(own_low)} node(s) computing in low precision in the model itself"
            + (f" ({shown})" if shown else ""),
            hint=f"raise --tolerance above {trial.error:.3g} (the all-float32 floor), or give those nodes float32 in "
            "the model itself",
        )


def _estimate(runs: TuneRuns, low_run: IntermediateRun) -> AccuracyVerdict:
    """The judgement of an exposed run's outputs: an estimate (exposing intermediates may change ORT's fusions,
    and the calibration samples may be fewer than the trials')."""
    return samples_verdict(
        runs.exposed_reference,
        low_run.sample_outputs,
        runs.accuracy_reference.output_names,
        runs.accuracy_reference.tolerance,
    )


def _sortable(value: float) -> float:
    return math.inf if math.isnan(value) else value


def _not_found(runs: TuneRuns, report: TuneReport, result: SearchResult) -> None:
    tried = len(result.steps)
    report.outcome = "not_found"
    report.reason = (
        f"{result.reason or runs.budget.why_not()} before any candidate met the tolerance "
        f"({tried} candidate(s) judged in {runs.budget.runs} runs; best error "
        f"{min((step.error for step in result.steps), default=math.nan):.3g}); nothing written"
    )
    blockers = _error_left(report, result)
    if blockers:
        report.reason += "; the error left comes most from " + blockers


def _error_left(report: TuneReport, result: SearchResult) -> str:
    """The largest contributions the last judged candidate left in low precision, in words ("" when none)."""
    pinned = result.last_pins
    left = [item for item in report.ranking if item.name not in pinned and item.contribution > 0]
    return ", ".join(f"{item.name} ({item.op_type}, {item.contribution:.3g})" for item in left[:SHOWN_NODES])


# ---------------------------------------------------------------------------------------------------- costing


class _Costing:
    """Estimated latencies of candidates, from the fp32 run's sizes and the kernel cost model."""

    def __init__(self, prepared: Prepared, runs: TuneRuns, shapes: dict[str, tuple[int, ...]]) -> None:
        self.runs = runs
        self.shapes = shapes
        self.flops = node_flops(prepared.model, shapes)
        self.outputs = {node.name: list(node.outputs) for node in runs.nodes}
        self.op_types = {node.name: node.op_type for node in runs.nodes}
        self.model = prepared.model

    def latency(self, result: RewriteResult) -> float:
        return estimate_us(result.model, result.decisions, self.shapes, self.flops, self.outputs)

    def fp32_latency(self, result: RewriteResult) -> float:
        return original_us(self.model, result.decisions, self.shapes, self.flops)

    def objective(self, name: str) -> Any:
        if name == "latency":
            return lambda candidate: self.latency(self.runs.decide(candidate))
        return lambda candidate: -self.runs.decide(candidate).low_precision_nodes

    def pin_costs(self, followers: dict[str, frozenset[str]], low_dtype: str) -> dict[str, float]:
        elements = {
            name: max((math.prod(self.shapes.get(out, (1,))) for out in outputs), default=1)
            for name, outputs in self.outputs.items()
        }
        return latency_costs(followers, self.op_types, low_dtype, elements, self.flops)

    def cost(self, candidate: Candidate) -> AnswerCost:
        result, all_low = self.runs.decide(candidate), self.runs.decide(Candidate())
        return AnswerCost(
            low_nodes=result.low_precision_nodes,
            low_nodes_all_low=all_low.low_precision_nodes,
            fp32_pinned=all_low.low_precision_nodes - result.low_precision_nodes,
            casts=result.stats.casts_inserted,
            casts_all_low=all_low.stats.casts_inserted,
            latency_us=self.latency(result),
            latency_all_low_us=self.latency(all_low),
            latency_fp32_us=self.fp32_latency(all_low),
        )


# ---------------------------------------------------------------------------------------------------- answer


def _answer(
    prepared: Prepared,
    settings: TuneSettings,
    runs: TuneRuns,
    report: TuneReport,
    found: Candidate,
    costing: _Costing,
    outputs: TuneOutputs,
    guard: OutputGuard,
) -> None:
    """Choose the answer's form, refuse it when it keeps too little low, verify it from files, write it through
    ``guard`` to the declared ``outputs``."""
    op_type_of = {node.name: node.op_type for node in runs.nodes}
    if settings.keep_out is not None and settings.mixlist_out is not None:
        candidate, report.op_types = op_types_within_slack(runs.decide, found, op_type_of, OP_TYPE_SLACK)
    elif settings.keep_out is None:
        candidate, report.op_types = all_op_types(runs.decide, found, op_type_of)
    else:
        candidate = found
    report.candidate = candidate
    report.cost = costing.cost(candidate)
    if report.cost.low_fraction < settings.min_low_fraction:
        _no_useful_answer(settings, runs, report, found)
        return
    bad = unwritable_names(candidate.pins)
    if bad:
        raise AmpconfigError(
            "node name(s) the keep_dtype format cannot carry: " + ", ".join(repr(name) for name in bad),
            hint="rename the nodes (a leading '#' reads as a comment, surrounding spaces are stripped)",
        )
    texts = _texts(outputs, runs, candidate, report)
    verified = _verify_files(prepared, runs, report, texts)
    if verified is None and candidate != found and settings.keep_out is not None and runs.can_run():
        report.notes.append("the op-type form missed the tolerance; node pins only were verified instead")
        candidate = found
        report.candidate, report.op_types, report.cost = candidate, [], costing.cost(candidate)
        texts = _texts(outputs, runs, candidate, report)
        verified = _verify_files(prepared, runs, report, texts)
    if verified is None:
        report.outcome = "not_found"
        report.reason = report.reason or "the written files did not verify; nothing written"
        return
    if runs.verified_by is not None:
        report.notes.append(
            f"the written files rewrite to the very model judged by the run '{runs.verified_by}' (the same bytes, "
            "judged as run judges): that run is the verification"
        )
    report.verified = verified.outputs
    report.verified_spreads = verified.spreads
    for destination, text, what in texts:
        written = guard.write_text(destination, text)
        if what == "mixlist":
            report.mixlist_path = str(written)
        else:
            report.keep_dtype_path = str(written)
    _describe_op_types(report, settings)
    report.outcome = "found"


def _texts(
    outputs: TuneOutputs, runs: TuneRuns, candidate: Candidate, report: TuneReport
) -> list[tuple[Destination, str, str]]:
    """The files' texts, their op types in the request's vocabulary (``--op-names ascend``: ATC's names)."""
    texts: list[tuple[Destination, str, str]] = []
    warnings: list[str] = []
    if outputs.mixlist is not None:
        texts.append((outputs.mixlist, mixlist_text(runs.mixlist_data(candidate, warnings)), "mixlist"))
    if outputs.keep_dtype is not None:
        lines = runs.keep_lines(candidate, warnings)
        texts.append((outputs.keep_dtype, keep_dtype_text(lines), "keep_dtype file"))
    report.notes.extend(dict.fromkeys(warnings))
    onnx_ops = {*candidate.black_ops, *(line.partition("OpType::")[2] for line in runs.keep)}
    if runs.op_names is None and any(is_ambiguous(op) for op in onnx_ops):
        report.notes.append(
            "the written files name an op ONNX and TensorFlow/Ascend spell alike (Max, Min, Mean, Sum, Where): they "
            "are ONNX's names, so use them with op_names: onnx (or --op-names onnx)"
        )
    return texts


def _verify_files(
    prepared: Prepared, runs: TuneRuns, report: TuneReport, texts: list[tuple[Destination, str, str]]
) -> AccuracyVerdict | None:
    """Write the files to a private folder, validate them, rewrite from them and judge as ``run`` does."""
    candidate = report.candidate or Candidate()
    mixed = prepared.request.precision_mode.accepts_mixlist
    with tempfile.TemporaryDirectory(prefix="ampconfig-tune-") as folder:
        # What is not written is the request's, in the vocabulary the written files use.
        mixlist: Any = runs.mixlist_data(candidate) if mixed and runs.mixlist is not None else None
        keep: Any = runs.keep_lines(candidate) or None
        for destination, text, what in texts:
            copy = Path(folder) / destination.path.name
            copy.write_text(text, encoding="utf-8")
            kind = "mixlist" if what == "mixlist" else "keep-dtype"
            findings = validate_paths(
                [copy], kind=kind, target=runs.decide(Candidate()).target, op_names=runs.write_names
            )
            errors = [problem.format() for problem in findings.problems if problem.severity.value == "error"]
            if errors:
                report.reason = "the written " + what + " does not validate: " + "; ".join(errors)
                return None
            if what == "mixlist":
                mixlist = copy
            else:
                keep = copy if runs.keep_lines(candidate) else None
        result = prepared.rewrite(
            runs.value_ranges,
            modify_mixlist=mixlist,
            keep_dtype=keep,
            use_request_lists=False,
            op_names=runs.write_names,
        )
        if not runs.verified_by_a_trial(result) and not runs.budget.allows(1):
            report.reason = f"{runs.budget.why_not()} before the written files could be verified; nothing written"
            return None
        judgement = runs.verify(result, "verify the written files, judged as run judges")
    if not judgement.passed:
        report.reason = "the written files miss the tolerance when run judges them: " + "; ".join(judgement.failures)
        return None
    return judgement


def _no_useful_answer(settings: TuneSettings, runs: TuneRuns, report: TuneReport, found: Candidate) -> None:
    assert report.cost is not None
    cost = report.cost
    pins_only = runs.decide(found).low_precision_nodes
    form = ""
    if settings.keep_out is None and report.candidate != found:
        form = (
            f"; as node pins it would keep {pins_only} low (pass --keep-dtype-out FILE for node pins: the mixlist "
            "can only name op types)"
        )
    report.outcome = "no_useful_answer"
    report.reason = (
        # The outcome (no_useful_answer) names the verdict; the reason says why, without repeating it.
        f"the best candidate meeting the tolerance keeps {cost.low_nodes} of the mode's "
        f"{cost.low_nodes_all_low} low-precision nodes ({cost.low_fraction:.0%}), below --min-low-fraction "
        f"{settings.min_low_fraction:g}{form}. Tried {len(report.steps)} candidate(s) in {runs.budget.runs} runs "
        f"(all-low error {_fmt(report.all_low_error)}); raise --tolerance or lower --min-low-fraction. Nothing written"
    )


def _describe_op_types(report: TuneReport, settings: TuneSettings) -> None:
    if not report.op_types:
        return
    for choice in report.op_types:
        if choice.in_mixlist:
            report.notes.append(
                f"{choice.op_type}: in the mixlist's black-list.to-add instead of {len(choice.pins)} node pin(s); "
                f"it keeps {choice.extra_fp32} more node(s) float32"
            )
        else:
            report.notes.append(
                f"{choice.op_type}: kept as {len(choice.pins)} node pin(s); black-listing it would keep "
                f"{choice.extra_fp32} more node(s) float32 (more than {OP_TYPE_SLACK})"
            )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"
