"""Every model run ``tune`` makes: counted against one budget (runs and seconds), reported to one progress hook.

- the reference: one fp32 run with every intermediate exposed (range analysis, sensitivity, and what every trial
  is judged against); a plain fp32 run of the data first when the exposed runs see other samples, or the model
  computes in a low type itself;
- exposed runs of a rewrite (the copy ``run`` judges, every intermediate exposed) and one replay run
  (:func:`ampconfig.instrument.inject.injection_model`): the sensitivity analysis;
- trials: a candidate (node pins, black-listed op types) is rewritten (no run) and judged by one plain run of its
  accuracy copy; a candidate whose decisions equal an earlier one's is answered from that one without a run;
  on CUDA trial sessions ask cuDNN for heuristic convolution algorithms;
- the verification of the written files: judged exactly as ``run`` judges (no trial settings); a trial that ran
  the very model the files rewrite to, with ``run``'s settings (the CPU's), is that verification.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from ampconfig.decide.value_limits import ValueRanges
from ampconfig.diagnose.graph_values import graph_nodes
from ampconfig.diagnose.reference_runs import Prepared, accuracy_reference, reference_run
from ampconfig.diagnose.tune.answer import keep_dtype_lines, mixlist_data
from ampconfig.diagnose.tune.search import Candidate
from ampconfig.documents.keep_dtype_file import keep_dtype_from_config, read_keep_dtype_names
from ampconfig.documents.mixlist_file import Mixlist, load_mixlist, parse_mixlist
from ampconfig.documents.parsing import SourceMap
from ampconfig.inputs.datasets import SampleSet
from ampconfig.inputs.feeds import InputSet, first_samples
from ampconfig.instrument.inject import InjectionModel, injection_model
from ampconfig.instrument.scopes import proto_scopes
from ampconfig.opinfo.op_names import Vocabulary
from ampconfig.prove.verdict import AccuracyReference, AccuracyVerdict, accuracy_model, check_reference
from ampconfig.rewrite.results import RewriteResult
from ampconfig.runner.intermediates import REWRITTEN_EXPOSED, IntermediateRun, run_samples_with_intermediates
from ampconfig.runner.sessions import create_session, run_once
from ampconfig.runner.timing import ProgressCallback
from ampconfig.settings.write_op_names import keep_dtype_lines_in


@dataclass(frozen=True)
class ProgressEvent:
    """One line of the progress display: the step, runs used, current error, low nodes kept."""

    step: str
    runs: int
    max_runs: int
    elapsed: float
    error: float | None = None
    low_kept: int | None = None
    low_total: int | None = None


ProgressHook = Callable[[ProgressEvent], None]


#: The two kinds of run, whose times differ by orders of magnitude on a GPU: a plain run returns the outputs; an
#: exposed run returns every intermediate (the reference and rewrite with intermediates exposed, the sensitivity
#: replay), which copies them all to the host.
PLAIN, EXPOSED = "plain", "exposed"


@dataclass
class Budget:
    """At most ``max_runs`` model runs and (when given) about ``max_seconds`` of wall time.

    Time is foreseen per kind of run (``PLAIN``, ``EXPOSED``), from the slowest run of that kind so far: a run
    is not started when it, and the runs reserved after it, would end past ``max_seconds``."""

    max_runs: int
    max_seconds: float | None = None
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    runs: int = 0
    seconds_by_kind: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.started = self.clock()

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    def typical(self, kind: str) -> float:
        """The slowest run of ``kind`` so far (of any kind when none of it ran yet; 0 before the first run)."""
        measured = self.seconds_by_kind.get(kind) or [t for times in self.seconds_by_kind.values() for t in times]
        return max(measured, default=0.0)

    def record(self, kind: str, seconds: float) -> None:
        self.runs += 1
        self.seconds_by_kind.setdefault(kind, []).append(seconds)

    def foreseen(self, exposed: int = 0, plain: int = 0) -> float:
        """Seconds from now until ``exposed`` exposed and ``plain`` plain runs more are done, as measured so far."""
        return self.elapsed + exposed * self.typical(EXPOSED) + plain * self.typical(PLAIN)

    def allows(self, count: int = 1, reserve: int = 0, kind: str = PLAIN) -> bool:
        """Whether ``count`` more runs of ``kind`` fit, keeping ``reserve`` plain runs for later (the verification)."""
        if self.runs + count + reserve > self.max_runs:
            return False
        if self.max_seconds is None:
            return True
        exposed, plain = (count, reserve) if kind == EXPOSED else (0, count + reserve)
        return self.foreseen(exposed, plain) <= self.max_seconds

    def why_not(self) -> str:
        if self.runs >= self.max_runs or self.max_seconds is None:
            return f"the run budget (--max-runs {self.max_runs}) is spent"
        return f"the time budget (--max-seconds {self.max_seconds:g}) is spent"

    def require_time_for(self, exposed: int, plain: int, what: str) -> None:
        """Stop now, saying what it would take, when ``exposed`` + ``plain`` more runs cannot end in time.

        Raises :class:`BudgetSpent` naming the measured run times and the ``--max-seconds`` that would fit."""
        if self.max_seconds is None:
            return
        needed = self.foreseen(exposed, plain)
        if needed <= self.max_seconds:
            return
        raise BudgetSpent(
            f"the time budget (--max-seconds {self.max_seconds:g}) cannot hold {what}: a run with every intermediate "
            f"exposed takes {self.typical(EXPOSED):.1f} s here and a plain run {self.typical(PLAIN):.1f} s, so "
            f"{exposed} exposed and {plain} plain runs more end at about {needed:.0f} s; give --max-seconds "
            f"{math.ceil(needed * 1.2)} or more, or rank from fewer samples (--calibration-batch, or --shape "
            "and a smaller .npz): the exposed runs grow with the batch"
        )


class BudgetSpent(Exception):
    """No run is left for the next step (runs or seconds)."""


@dataclass(frozen=True)
class Trial:
    candidate: Candidate
    judgement: AccuracyVerdict
    low_nodes: int
    ran: bool  # False: an earlier trial with the same decisions answered

    @property
    def passed(self) -> bool:
        return self.judgement.passed

    @property
    def error(self) -> float:
        return self.judgement.worst_rel_l2


def base_mixlist(value: Any) -> Mixlist | None:
    """The request's mixlist (a path or inline data) as a model, or None."""
    if value is None:
        return None
    if isinstance(value, Mixlist):
        return value
    if isinstance(value, dict):
        return parse_mixlist(json.dumps(value), "<config mixlist>")
    return load_mixlist(value)


def base_keep_entries(value: Any, op_names: str | None = None) -> list[str]:
    """The request's keep_dtype entries as lines naming ONNX op types (``op_names``: how the file names them)."""
    if value is None:
        return []
    entries, _ = read_keep_dtype_names(list(keep_dtype_from_config(value)), op_names, SourceMap())
    return [entry.onnx_text() for entry in entries]


class TuneRuns:
    """The runs of one tune, against one fp32 reference (see the module docstring)."""

    def __init__(
        self,
        prepared: Prepared,
        budget: Budget,
        progress: ProgressHook | None = None,
        calibration_batch: int | None = None,
        sample_progress: ProgressCallback | None = None,
    ) -> None:
        self.prepared = prepared
        #: What the exposed runs and the replay see: the request's calibration samples, each cut to its first
        #: ``calibration_batch`` batch entries (the exposed runs copy every intermediate to the host, so they grow
        #: with the batch; trials and the verification always run on every sample whole).
        self.calibration = (
            prepared
            if calibration_batch is None
            else replace(prepared, calibration=_first_batch_entries(prepared, calibration_batch))
        )
        self.budget = budget
        self.progress = progress
        self.mixlist = base_mixlist(prepared.request.modify_mixlist)
        #: How the request's files name ops, and how the files tune writes (and decides from) name them: the same
        #: vocabulary, ONNX's when the request names none (docs/op-names.md).
        self.op_names = prepared.request.op_names
        self.write_names = self.op_names or Vocabulary.ONNX.value
        self.keep = base_keep_entries(prepared.request.keep_dtype, self.op_names)
        self.nodes = graph_nodes(prepared.model)
        self._decided: dict[Candidate, RewriteResult] = {}
        self._trials: dict[Hashable, Trial] = {}
        self.trials: list[tuple[str, Trial]] = []
        self._digests: dict[int, str] = {}  # each trial that ran: its rewritten model's digest
        #: the trial whose run verified the written files (None: the verification ran, or did not happen yet)
        self.verified_by: str | None = None
        #: runs the verification of the written files needs beyond the trials: none on the CPU when the answer is
        #: node pins (the trial that judged the answer ran the very model the files rewrite to)
        self.verify_reserve = 1
        self.log: list[str] = []  # every counted run, by what it was for
        self.accuracy_reference: AccuracyReference
        self.reference: IntermediateRun
        #: the fp32 model's value ranges on the calibration samples: they decide every candidate (set once the
        #: reference ran; None: --no-range-check)
        self.value_ranges: ValueRanges | None = None
        #: how long data sets show their progress, sample by sample (the CLI's stderr display)
        self.sample_progress: ProgressCallback | None = sample_progress

    @property
    def device(self) -> str:
        return self.prepared.device.device

    def report(self, step: str, error: float | None = None, low_kept: int | None = None) -> None:
        if self.progress is not None:
            total = self.decide(Candidate()).low_precision_nodes if self._decided else None
            self.progress(
                ProgressEvent(step, self.budget.runs, self.budget.max_runs, self.budget.elapsed, error, low_kept, total)
            )

    def _counted(self, step: str, work: Callable[[], Any], kind: str = PLAIN) -> Any:
        if not self.budget.allows(1, kind=kind):
            raise BudgetSpent(f"{self.budget.why_not()} before: {step}")
        self.report(step)
        started = self.budget.clock()
        result = work()
        self.budget.record(kind, self.budget.clock() - started)
        self.log.append(step)
        return result

    # -- the reference -------------------------------------------------------------------------------------------
    def run_reference(self) -> None:
        """The fp32 reference: one run with every intermediate exposed, whose outputs are also what every trial is
        judged against when the exposed runs see the trials' samples; else (``--calibration-batch``, or
        calibration samples other than the data), and for a model that computes in a low type itself (exposing a
        value stops ONNX Runtime from removing a float32 -> float16 -> float32 cast pair, which changes the
        outputs), a plain run of the data first, as ``run`` makes it."""
        plain = self.sliced or computes_low(self.prepared.model)
        if plain:
            self.accuracy_reference = self._counted(
                "fp32 reference run", lambda: accuracy_reference(self.prepared, self.sample_progress)
            )
        self.reference = self._counted(
            "fp32 run, intermediates exposed"
            + ("" if plain else " (also the reference every trial is judged against)"),
            lambda: reference_run(self.calibration, self.sample_progress),
            EXPOSED,
        )
        if not plain:
            self.accuracy_reference = exposed_accuracy_reference(self.prepared, self.reference, self.sample_progress)

    @property
    def sliced(self) -> bool:
        """Whether the exposed runs see other samples than the trials (fewer, or cut to a smaller batch)."""
        return self.calibration.calibration is not self.prepared.data

    @property
    def calibration_samples(self) -> int:
        """How many batch entries the exposed runs see: the first dimension of the calibration feeds, over every
        calibration sample."""
        return sum(
            min((len(array) for array in sample.values() if np.ndim(array)), default=0)
            for sample in self.calibration.calibration.samples
        )

    @property
    def exposed_reference(self) -> list[dict[str, np.ndarray]]:
        """The fp32 outputs an exposed run's outputs are estimated against (same samples)."""
        return self.reference.sample_outputs if self.sliced else self.accuracy_reference.references

    # -- deciding (no run) ---------------------------------------------------------------------------------------
    def decide(self, candidate: Candidate) -> RewriteResult:
        if candidate not in self._decided:
            mixed = self.prepared.request.precision_mode.accepts_mixlist
            mixlist = (
                self.mixlist_data(candidate) if mixed and (self.mixlist is not None or candidate.black_ops) else None
            )
            keep = self.keep_lines(candidate)
            self._decided[candidate] = self.prepared.rewrite(
                self.value_ranges,
                modify_mixlist=mixlist,
                keep_dtype=keep or None,
                use_request_lists=False,
                op_names=self.write_names,
            )
        return self._decided[candidate]

    def mixlist_data(self, candidate: Candidate, warnings: list[str] | None = None) -> dict[str, Any]:
        """The candidate's mixlist as tune writes it: the request's, plus its black op types, in ``write_names``."""
        return mixlist_data(self.mixlist, candidate.black_ops, self.op_names, self.write_names, warnings)

    def keep_lines(self, candidate: Candidate, warnings: list[str] | None = None) -> list[str]:
        """The candidate's keep_dtype lines as tune writes them (op types in ``write_names``)."""
        lines, found = keep_dtype_lines_in(keep_dtype_lines(self.keep, candidate.pins), self.write_names)
        if warnings is not None:
            warnings.extend(found)
        return lines

    def signature(self, candidate: Candidate) -> Hashable:
        return tuple((d.scope, d.name, d.dtype) for d in self.decide(candidate).decisions)

    def lowered(self, candidate: Candidate) -> list[str]:
        """Nodes the candidate's rewrite computes in a low dtype they did not have, those inside If, Loop and Scan
        bodies included, in :attr:`nodes` order (node names are unique across scopes)."""
        result = self.decide(candidate)
        changed = {d.name for d in result.decisions if d.changed and d.dtype == result.low_dtype}
        return [node.name for node in self.nodes if node.name in changed]

    # -- runs ----------------------------------------------------------------------------------------------------
    def can_run(self, reserve: int = 0) -> bool:
        """Whether one more run fits, keeping ``reserve`` runs for the verification (at most
        :attr:`verify_reserve`: none where a trial of the answer is its verification)."""
        return self.budget.allows(1, min(reserve, self.verify_reserve))

    def trial(self, candidate: Candidate, step: str) -> Trial:
        """Judge the candidate as ``run`` judges (one counted run, or none when its decisions were judged)."""
        key = self.signature(candidate)
        result = self.decide(candidate)
        if key in self._trials:
            earlier = self._trials[key]
            trial = Trial(candidate, earlier.judgement, earlier.low_nodes, ran=False)
        else:
            outputs = self._counted(step, lambda: self.accuracy_reference.outputs_of(result.model, trial=True))
            trial = Trial(candidate, self.accuracy_reference.verdict_of(outputs), result.low_precision_nodes, ran=True)
            self._trials[key] = trial
            self._digests[id(trial)] = _model_digest(result.model)
        self.trials.append((step, trial))
        self.report(step, trial.error, trial.low_nodes)
        return trial

    def exposed(self, candidate: Candidate, step: str) -> IntermediateRun:
        """The candidate's accuracy copy run once with every intermediate exposed (one counted run)."""
        model, _ = accuracy_model(self.decide(candidate).model, self.device)
        samples = self.calibration.calibration.samples
        names = list(self.reference.first.values)
        run: IntermediateRun = self._counted(
            step,
            lambda: run_samples_with_intermediates(
                model,
                samples,
                self.device,
                names=names,
                progress=self.sample_progress,
                label="rewritten",
                what=REWRITTEN_EXPOSED,
            ),
            EXPOSED,
        )
        return run

    def replay(self, lowered: Iterable[str], low: IntermediateRun, step: str) -> dict[str, np.ndarray]:
        """Every node of ``lowered`` computed in fp32 on the inputs it had in the ``low`` run (one counted run, one
        session run per calibration sample); their outputs by key, pooled over the samples as ``low`` is."""
        originals = {node.name: list(node.outputs) for node in self.nodes if not node.scope}
        per_iteration = low.per_iteration & self.reference.per_iteration
        wanted = list(lowered)

        def run() -> dict[str, np.ndarray]:
            replayed = []
            copies: dict[Hashable, InjectionModel] = {}
            for feeds, low_run in zip(self.calibration.calibration.samples, low.each, strict=True):
                # An empty value is not fed: it is what a branch that did not run gives back (instrument/expose.py).
                available = {
                    key: np.shape(array)
                    for key, array in low_run.values.items()
                    if key in self.reference.first.values and np.size(array)
                }
                shapes = tuple(sorted(available.items()))
                if shapes not in copies:
                    copies[shapes] = injection_model(self.prepared.model, wanted, originals, available, per_iteration)
                copy = copies[shapes]
                fed = dict(feeds)
                for name, (source, dtype) in copy.feeds.items():
                    fed[name] = np.asarray(low_run.values[source]).astype(dtype)
                outputs = run_once(create_session(copy.model, self.device, what="a copy with values injected"), fed)
                keys = {key for keys in copy.outputs.values() for key in keys}
                replayed.append({copy.keys[n]: a for n, a in outputs.items() if copy.keys.get(n) in keys})
            if len(replayed) == 1:
                return replayed[0]
            common = [key for key in replayed[0] if all(key in each for each in replayed[1:])]
            return {key: np.concatenate([np.ravel(each[key]) for each in replayed]) for key in common}

        return self._counted(step, run, EXPOSED)

    def verify(self, result: RewriteResult, step: str) -> AccuracyVerdict:
        """Judge a rewrite read back from the written files exactly as ``run`` does (one counted run), unless a
        trial already ran this very model (the same bytes) with ``run``'s session settings: then that run is the
        verification (:attr:`verified_by` names it) and no run is spent."""
        earlier = self._trial_of(result)
        if earlier is not None:
            self.verified_by = earlier[0]
            self.report(step, earlier[1].error, result.low_precision_nodes)
            return earlier[1].judgement
        judgement: AccuracyVerdict = self._counted(step, lambda: self.accuracy_reference.verdict(result.model))
        self.report(step, judgement.worst_rel_l2, result.low_precision_nodes)
        return judgement

    def verified_by_a_trial(self, result: RewriteResult) -> bool:
        """Whether a trial already ran ``result``'s very model as ``run`` runs it (its verification needs no run)."""
        return self._trial_of(result) is not None

    def _trial_of(self, result: RewriteResult) -> tuple[str, Trial] | None:
        if self.device != "cpu":  # CUDA trials search convolutions heuristically: not as run runs them
            return None
        return self._same_model(result)

    def _same_model(self, result: RewriteResult) -> tuple[str, Trial] | None:
        digest = _model_digest(result.model)
        return next(
            ((step, trial) for step, trial in self.trials if trial.ran and self._digests.get(id(trial)) == digest),
            None,
        )


#: ONNX's low float element types: a model that holds one computes in a low type itself.
_LOW_ELEMENT_TYPES = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16})


def computes_low(model: onnx.ModelProto) -> bool:
    """Whether the model (its subgraphs included) casts to, stores or declares a low float type itself."""
    for scope in proto_scopes(model):
        graph = scope.graph
        if any(init.data_type in _LOW_ELEMENT_TYPES for init in graph.initializer):
            return True
        declared = [*graph.input, *graph.output, *graph.value_info]
        if any(value.type.tensor_type.elem_type in _LOW_ELEMENT_TYPES for value in declared):
            return True
        for node in graph.node:
            for attr in node.attribute:
                if attr.name == "to" and attr.i in _LOW_ELEMENT_TYPES:
                    return True
                if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in _LOW_ELEMENT_TYPES:
                    return True
    return False


def _model_digest(model: Any) -> str:
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def exposed_accuracy_reference(
    prepared: Prepared, reference: IntermediateRun, progress: ProgressCallback | None = None
) -> AccuracyReference:
    """The accuracy reference of every trial from the fp32 run with every intermediate exposed, on the same samples: its
    outputs are the reference (exposing values can change which kernels ORT fuses: fp32 rounding, far below any
    tolerance)."""
    request = prepared.request
    for outputs in reference.sample_outputs:
        check_reference(outputs, reference.output_names)
    return AccuracyReference(
        reference.sample_outputs,
        list(reference.output_names),
        prepared.data.samples,
        prepared.device.device,
        request.tolerance,
        request.allow_tf32,
        list(reference.providers),
        progress,
    )


def _first_batch_entries(prepared: Prepared, count: int) -> SampleSet:
    """The calibration samples, each cut to its first ``count`` entries along the batch dimension."""
    calibration = prepared.calibration
    cut = [first_samples(prepared.graph, InputSet(sample, calibration.inputs), count) for sample in calibration.samples]
    return replace(calibration, samples=[item.feeds for item in cut], inputs=cut[0].inputs)
