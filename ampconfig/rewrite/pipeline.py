"""The rewrite as one pipeline of onnx-ir passes over an ``ir.Model``, changed in place
(:mod:`ampconfig.rewrite.steps`): admit (and repair) the input and raise its opset for bfloat16, once; then name,
fold, type, read the weights, decide, apply, record (each decision in its node's metadata), check. The API, every
command and :class:`ampconfig.MixedPrecisionPass` run it; what differs between them is only how the model was opened
(a proto read into an ``ir.Model``, or the ``ir.Model`` handed in) and so where the light proto the admission reads
comes from.

When the checker rejects changed nodes on their own (an op info gap), the rewrite's steps run again from a copy of
the admitted input (the IR cloned, every tensor shared), those nodes keeping their dtype, at most
:data:`MAX_CHECKER_REPAIRS` times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import onnx_ir as ir

from ampconfig.contracts import PostconditionBroken
from ampconfig.model_io.ir_bridge import move_into
from ampconfig.model_io.models import refuse_invalid_output
from ampconfig.rewrite.steps.admit_input import AdmitInputPass
from ampconfig.rewrite.steps.annotate_types import AnnotateTypesPass
from ampconfig.rewrite.steps.apply_plan import ApplyPlanPass
from ampconfig.rewrite.steps.check_output import CheckOutputPass
from ampconfig.rewrite.steps.decide_dtypes import DecideDtypesPass
from ampconfig.rewrite.steps.fold_layer_norms import FoldLayerNormsPass
from ampconfig.rewrite.steps.name_nodes import NameNodesPass
from ampconfig.rewrite.steps.raise_opset import RaiseOpsetForBf16Pass
from ampconfig.rewrite.steps.read_weights import ReadWeightsPass
from ampconfig.rewrite.steps.record_decisions import RecordDecisionsPass
from ampconfig.rewrite.steps.run_context import Admission, InputAdmission, RewriteRun, RewriteSetup

#: How many times the model is rewritten again, keeping the nodes the checker rejected, before giving up with an
#: error: each repair keeps every node the check traced (a kept node can change what its neighbours receive).
MAX_CHECKER_REPAIRS = 2

#: What :func:`admit_input`'s ``accept`` makes of an input the checker rejects.
Accepted = TypeVar("Accepted")


def admit_input(
    model: ir.Model,
    admission: InputAdmission,
    *,
    raise_opset: bool,
    accept: Callable[[ir.Model, InputAdmission], Accepted],
) -> tuple[bool, Accepted | None]:
    """The steps before the rewrite, once, in place: admit (repair) the input, then raise its opset for bfloat16
    when ``raise_opset``. ``accept`` judges an input the checker still rejects (ONNX Runtime decides: this layer
    does not import it), between the two, as admitted but not yet converted. Returns whether the model changed, and
    what ``accept`` returned (None when the checker rejected nothing, so ``accept`` was not called)."""
    modified = _run_steps(ir.passes.PassManager([AdmitInputPass(admission)], steps=1), model)
    accepted = accept(model, admission) if admission.checker_errors else None
    if raise_opset:
        modified = _run_steps(ir.passes.PassManager([RaiseOpsetForBf16Pass(admission)], steps=1), model) or modified
    return modified, accepted


def restart_from_copy(model: ir.Model) -> Callable[[], ir.Model]:
    """A restart for :func:`run_pipeline`: ``model`` as it is now (the admitted input), put back into the same
    object. The copy is an IR clone (every tensor shared, nothing serialised), taken now, before the steps change
    the model; each restart clones it again, so it serves every attempt."""
    snapshot, meta = model.clone(), dict(model.meta)

    def restart() -> ir.Model:
        move_into(model, snapshot.clone())
        model.meta.clear()  # what the steps kept there (the graphs walked) was of the graph replaced
        model.meta.update(meta)  # as it was admitted
        return model

    return restart


def steps(run: RewriteRun) -> ir.passes.PassManager:
    """The pipeline's passes for one attempt, in order, sharing ``run``."""
    return ir.passes.PassManager(
        [
            NameNodesPass(run),
            FoldLayerNormsPass(run),
            AnnotateTypesPass(run),
            ReadWeightsPass(run),
            DecideDtypesPass(run),
            ApplyPlanPass(run),
            RecordDecisionsPass(run),
            CheckOutputPass(run),
        ],
        steps=1,
    )


@dataclass
class PipelineOutcome:
    """The rewritten model (the one handed in, or the last restart's), the last attempt's findings, the warnings
    of nodes the checker made keep their dtype, and whether the model changed."""

    model: ir.Model
    run: RewriteRun
    modified: bool
    warnings: list[str] = field(default_factory=list)


def run_pipeline(
    model: ir.Model,
    setup: RewriteSetup,
    admission: Admission,
    restart: Callable[[], ir.Model],
    ir_version: int,
) -> PipelineOutcome:
    """Rewrite ``model`` in place. ``restart`` gives the input again, unchanged, for a repair attempt; the output
    gets IR version ``ir_version``."""
    rejected: dict[str, str] = {}
    warnings: list[str] = []
    for repairs in range(MAX_CHECKER_REPAIRS + 1):
        if repairs:
            model = restart()
        version_changed = model.ir_version != ir_version
        model.ir_version = ir_version
        run = RewriteRun(setup, admission, dict(rejected))
        modified = _run_steps(steps(run), model) or version_changed
        check = run.check
        if check is None:  # CheckOutputPass.ensures made sure of it; this says so to the type checker
            raise PostconditionBroken(CheckOutputPass.__name__, "the check left no verdict")
        if check.complaint is None:
            return PipelineOutcome(model, run, modified, warnings)
        # Safety net for op info gaps: the changed nodes the checker rejects on their own keep their dtype, all at
        # once, and the model is rewritten once more.
        if not check.located or repairs == MAX_CHECKER_REPAIRS or rejected.keys() & check.rejected.keys():
            raise refuse_invalid_output(check.complaint)
        rejected.update(check.rejected)
        warnings.extend(
            f"node {name} kept its dtype: the ONNX checker rejected the change ({why})"
            for name, why in check.rejected.items()
        )
    raise AssertionError("unreachable: the last attempt returns or raises")


def _run_steps(manager: ir.passes.PassManager, model: ir.Model) -> bool:
    """Run the steps; an error a step raises is raised as it was (the PassManager wraps it in a PassError)."""
    try:
        return manager(model).modified
    except ir.passes.PassError as exc:
        cause: BaseException = exc
        while isinstance(cause, ir.passes.PassError) and cause.__cause__ is not None:
            cause = cause.__cause__
        cause.__suppress_context__ = True  # its own cause, if any, is kept
        raise cause from cause.__cause__
