"""The :class:`~ampconfig.diagnose.tune.search.Evaluator` of ``tune``: rewrites for a candidate and runs it in
ONNX Runtime.

Every model run is counted in ``runs`` (the fp32 reference run included). Deciding dtypes needs no run, so a
candidate whose decisions equal an earlier candidate's is answered from the earlier run (``Outcome.ran`` False):
the same dtypes give the same model and the same numbers.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from typing import Any

from ampconfig.decide.decisions import RewriteResult
from ampconfig.diagnose.calibrate import Prepared, reference_judge, reference_run
from ampconfig.diagnose.graph_values import graph_nodes
from ampconfig.diagnose.locate import locate
from ampconfig.diagnose.tune.search import Candidate, Outcome, keep_dtype_lines, mixlist_data
from ampconfig.prove.judge import accuracy_model
from ampconfig.runner.intermediates import IntermediateRun, run_with_intermediates
from ampconfig.settings.keep_dtype import keep_dtype_from_config
from ampconfig.settings.mixlist import Mixlist, load_mixlist, parse_mixlist


def base_mixlist(value: Any) -> Mixlist | None:
    """The request's mixlist (a path or inline data) as a model, or None."""
    if value is None:
        return None
    if isinstance(value, Mixlist):
        return value
    if isinstance(value, dict):
        return parse_mixlist(json.dumps(value), "<config mixlist>")
    return load_mixlist(value)


def base_keep_entries(value: Any) -> list[str]:
    return [str(entry) for entry in keep_dtype_from_config(value)]


class TrialRunner:
    def __init__(self, prepared: Prepared, *, threshold: float, reference: IntermediateRun | None = None) -> None:
        self.prepared = prepared
        self.threshold = threshold
        self.judge = reference_judge(prepared)  # judged exactly as `run` judges: a plain fp32 run
        self.runs = 1
        if reference is None:
            reference = reference_run(prepared)
            self.runs += 1
        self.reference = reference
        self.mixlist = base_mixlist(prepared.request.modify_mixlist)
        self.keep = base_keep_entries(prepared.request.keep_dtype)
        self._nodes = graph_nodes(prepared.model)
        self._op_types = {node.name: node.op_type for node in self._nodes}
        self._results: dict[Hashable, Outcome] = {}
        self._decided: dict[Candidate, RewriteResult] = {}
        self._base = self.decide(Candidate())

    # -- deciding (no run) ---------------------------------------------------------------------------------------
    def decide(self, candidate: Candidate) -> RewriteResult:
        if candidate not in self._decided:
            mixed = self.prepared.request.precision_mode.accepts_mixlist
            mixlist = (
                mixlist_data(self.mixlist, candidate.black_ops)
                if mixed and (self.mixlist is not None or candidate.black_ops)
                else None
            )
            keep = keep_dtype_lines(self.keep, candidate)
            self._decided[candidate] = self.prepared.rewrite(
                modify_mixlist=mixlist, keep_dtype=keep or None, use_request_lists=False
            )
        return self._decided[candidate]

    def signature(self, candidate: Candidate) -> Hashable:
        return tuple((d.scope, d.name, d.dtype) for d in self.decide(candidate).decisions)

    def lowered_nodes(self) -> list[str]:
        """Main-graph nodes the rewrite (with no pins) computes in another dtype, in topological order."""
        changed = {d.name for d in self._base.decisions if d.changed and not d.scope}
        return [node.name for node in self._nodes if node.name in changed]

    def op_type_of(self, node: str) -> str:
        return self._op_types[node]

    # -- running ---------------------------------------------------------------------------------------------------
    def evaluate(self, candidate: Candidate) -> Outcome:
        key = self.signature(candidate)
        if key in self._results:
            cached = self._results[key]
            return Outcome(cached.passed, cached.worst_rel_l2, cached.localization, cached.low_nodes, ran=False)
        result = self.decide(candidate)
        outcome = self.run_result(result)
        self._results[key] = outcome
        return outcome

    def run_result(self, result: RewriteResult, names: Sequence[str] | None = None) -> Outcome:
        """Judge one rewritten model as ``run`` does (one counted run); when it fails, locate the error with one
        more counted run of the same model with every intermediate exposed."""
        prepared = self.prepared
        judged_model, _ = accuracy_model(result.model, prepared.device.device)
        judgement = self.judge.judge_outputs(self.judge.run_accuracy_model(judged_model))
        self.runs += 1
        localization = None
        if not judgement.passed:
            run = run_with_intermediates(
                judged_model,
                prepared.inputs.feeds,
                prepared.device.device,
                names=list(self.reference.values) if names is None else names,
            )
            self.runs += 1
            localization = locate(
                self._nodes,
                self.reference.values,
                run.values,
                result.decisions,
                low_dtype=result.low_dtype,
                threshold=self.threshold,
            )
        return Outcome(judgement.passed, judgement.worst_rel_l2, localization, result.low_precision_nodes, ran=True)
