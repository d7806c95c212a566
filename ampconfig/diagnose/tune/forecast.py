"""What ``run`` says after a FAIL: which nodes carry the error, and the ``tune`` that would fix it, with the runs it
predicts.

It measures as tune measures (:func:`ampconfig.diagnose.tune.workflow.measure`: the fp32 model and the rewrite with
every intermediate exposed, the sensitivity replay) and then runs tune's own search *dry*: every candidate is
answered by the search's error model instead of a run (:class:`_Predicted`). The runs predicted are the runs the
measuring took, the trials the dry search judged, and the verification when it needs a run of its own (a CUDA
trial searches convolutions heuristically; on the CPU the trial that passed is the verification). Where the model
is right the real tune judges the same candidates, so it needs no more runs than predicted.

The first bad node comes from the same two exposed runs (:func:`ampconfig.diagnose.locate.locate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ampconfig.diagnose.locate import locate
from ampconfig.diagnose.reference_runs import Prepared
from ampconfig.diagnose.sensitivity import NodeSensitivity
from ampconfig.diagnose.tune.search import Candidate, ErrorModel
from ampconfig.diagnose.tune.trials import Budget, TuneRuns
from ampconfig.diagnose.tune.workflow import (
    DEFAULT_MAX_RUNS,
    TuneReport,
    TuneSettings,
    measure,
    verification_runs,
)
from ampconfig.errors import AmpconfigError
from ampconfig.prove.outcome import RunReport
from ampconfig.settings.resolve import DEFAULT_SOURCE, Settings

#: How many contributors the FAIL lines name.
TOP_CONTRIBUTORS = 5
#: The keep_dtype file the suggested tune writes (node pins: the form whose trial is its verification on the CPU).
KEEP_OUT = "keep_dtype.cfg"


@dataclass
class FixForecast:
    """The nodes carrying a FAIL's error and the tune predicted to fix it (see the module docstring)."""

    measured_runs: int  # the runs this forecast made
    first_bad: str | None = None
    first_bad_error: float | None = None  # rel-L2 at its output
    first_bad_input_error: float | None = None  # at its worst input
    contributors: list[NodeSensitivity] = field(default_factory=list)
    pins: list[str] = field(default_factory=list)  # the answer the dry search ends at
    predicted_error: float | None = None
    low_nodes: int | None = None  # low nodes the predicted answer keeps
    low_nodes_all_low: int | None = None
    runs: int | None = None  # model runs tune is predicted to need (None: no answer within its budget)
    max_runs: int = DEFAULT_MAX_RUNS
    reason: str = ""  # why there is no prediction
    command: list[str] = field(default_factory=list)  # the tune command line (set by the CLI)

    def to_dict(self) -> dict[str, Any]:
        return {
            "first_bad_node": self.first_bad,
            "first_bad_rel_l2": _json(self.first_bad_error),
            "first_bad_input_rel_l2": _json(self.first_bad_input_error),
            "top_contributors": [item.to_dict() for item in self.contributors],
            "predicted_keep_dtype_nodes": sorted(self.pins),
            "predicted_rel_l2": _json(self.predicted_error),
            "predicted_low_nodes": self.low_nodes,
            "low_nodes_all_low": self.low_nodes_all_low,
            "predicted_tune_runs": self.runs,
            "max_runs": self.max_runs,
            "reason": self.reason,
            "tune_command": self.command,
            "model_runs": self.measured_runs,
        }


def _json(value: float | None) -> float | str | None:
    return value if value is None or math.isfinite(value) else str(value)


@dataclass(frozen=True)
class _Answer:
    passed: bool
    error: float
    low_nodes: int


class _Predicted:
    """An evaluator answering each candidate from the error model (no run), within tune's budget."""

    def __init__(self, model: ErrorModel, tolerance: float, lowered: int, runs_left: int, verification: int) -> None:
        self.model = model
        self.tolerance = tolerance
        self.lowered = lowered
        self.runs_left = runs_left
        self.verification = verification
        self.trials = 0

    def trial(self, candidate: Candidate, step: str) -> _Answer:
        self.trials += 1
        taken = set(candidate.pins)
        for pin in self.model.ranking:
            if pin.pins <= candidate.pins:
                taken |= pin.followers
        energy = sum(v * v for name, v in self.model.contributions.items() if name not in taken and math.isfinite(v))
        scale, _ = self.model.scale(0)
        error = scale * math.sqrt(energy)
        return _Answer(error <= self.tolerance, error, self.lowered - len(taken))

    def can_run(self, reserve: int = 0) -> bool:
        return self.trials + 1 + min(reserve, self.verification) <= self.runs_left


def forecast_fix(prepared: Prepared, settings: TuneSettings | None = None) -> FixForecast:
    """Measure as tune does and predict its search (see the module docstring). ``settings``: tune's (its budget,
    range check and margin); the defaults when None."""
    settings = settings or TuneSettings(keep_out=None)
    runs = TuneRuns(prepared, Budget(settings.max_runs))
    report = TuneReport("not_found", 0, settings.max_runs, 0.0, settings.objective, {})
    measured = measure(prepared, settings, runs, report)
    forecast = FixForecast(runs.budget.runs, max_runs=settings.max_runs)
    forecast.low_nodes_all_low = measured.all_low.low_precision_nodes
    forecast.contributors = [item for item in report.ranking if item.contribution > 0][:TOP_CONTRIBUTORS]
    if measured.low_run is not None:
        located = locate(
            runs.nodes,
            runs.reference.values,
            measured.low_run.values,
            measured.all_low.decisions,
            low_dtype=measured.all_low.low_dtype,
        )
        if located.first_bad is not None:
            forecast.first_bad = located.first_bad.name
            forecast.first_bad_error = located.first_bad.error
            forecast.first_bad_input_error = located.first_bad.input_error
    search = measured.search
    if search is None:
        forecast.reason = {
            "nothing_lowered": "the mode lowers no node here",
            "all_low_passes": "the mode's own rewrite met the tolerance when judged again",
        }.get(measured.done, measured.done)
        return forecast
    # The dry search: the same search over the same ranking, each trial answered by the model fitted so far.
    tolerance = prepared.request.tolerance.rel_l2
    lowered = len(runs.lowered(Candidate()))
    verification = verification_runs(runs.device, TuneSettings(keep_out=Path(KEEP_OUT)))
    dry = _Predicted(search.model, tolerance, lowered, settings.max_runs - runs.budget.runs, verification)
    search.evaluator = dry
    result = search.run(measured.known_failing)
    if not result.found or result.candidate is None:
        forecast.reason = f"the predicted errors stay above the tolerance within --max-runs {settings.max_runs}"
        return forecast
    forecast.pins = sorted(result.candidate.pins)
    forecast.predicted_error = result.error
    forecast.low_nodes = runs.decide(result.candidate).low_precision_nodes
    forecast.runs = runs.budget.runs + dry.trials + verification
    return forecast


def tune_command(settings: Settings, range_check: bool = True, keep_out: str = KEEP_OUT) -> list[str]:
    """The ``ampconfig tune`` command line for what ``settings`` ran: the same model, config, mode, target,
    tolerance, lists given as files and inputs, writing its node pins to ``keep_out``."""
    parts = ["ampconfig", "tune"]
    if settings.example is None:
        parts.append(str(settings.model_path))
    if settings.config is not None:
        parts += ["-c", str(settings.config)]
    parts += ["-m", settings.precision_mode.value, "--target", settings.target]
    parts += ["--tolerance", f"{settings.tolerance.rel_l2:g}"]
    for flag, value in (
        ("--modify-mixlist", settings.modify_mixlist),
        ("--keep-dtype", settings.keep_dtype),
        ("--customize-dtypes", settings.customize_dtypes),
    ):
        if isinstance(value, Path) and settings.config is None:
            parts += [flag, str(value)]
    if settings.op_names is not None and settings.config is None:
        parts += ["--op-names", settings.op_names]
    inputs = settings.inputs
    for flag, path in (
        ("--inputs", inputs.npz),
        ("--data", inputs.data),
        ("--calibration-data", inputs.calibration_data),
    ):
        if path is not None:
            parts += [flag, str(path)]
    for name, path in inputs.arrays.items():
        parts += ["--input", f"{name}={path}"]
    for name, dims in inputs.shapes.items():
        parts += ["--shape", f"{name}={'x'.join(str(dim) for dim in dims)}"]
    if settings.sources.get("seed", DEFAULT_SOURCE) != DEFAULT_SOURCE:
        parts += ["--seed", str(inputs.seed)]
    if settings.data_max is not None and settings.config is None:
        parts += ["--data-max", f"{settings.data_max:g}"]
    if settings.ranges is not None:
        parts += ["--ranges", str(settings.ranges)]
    if not range_check:
        parts.append("--no-range-check")
    return [*parts, "--keep-dtype-out", keep_out]


@dataclass
class FailedRunForecast:
    """``run``'s hook after a FAIL (:data:`ampconfig.prove.run.OnFail`): the nodes carrying the error and the tune
    predicted to fix it, in :attr:`fix` (three runs more, with every intermediate exposed). Not for a model run
    from files (every intermediate of a large model is more than its memory): a note says what to run instead."""

    settings: Settings
    range_check: bool
    fix: FixForecast | None = None

    def __call__(self, prepared: Prepared, report: RunReport) -> None:
        if prepared.from_files:
            report.notes.append(
                "the nodes carrying the error were not measured (a model this large runs from files): ampconfig "
                "compare ranks them, ampconfig tune fixes them"
            )
            return
        try:
            tune_settings = TuneSettings(range_check=self.range_check, data_max=self.settings.data_max)
            self.fix = forecast_fix(prepared, tune_settings)
        except AmpconfigError as exc:  # a tolerance below the all-float32 floor: tune would refuse it the same way
            report.notes.append(f"no tune can fix it: {exc.message}")
            return
        self.fix.command = tune_command(self.settings, self.range_check)
