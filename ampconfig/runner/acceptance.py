"""ONNX Runtime as the judge of models the ONNX checker rejects (the rare path of the acceptance rule).

ampconfig accepts every model ONNX Runtime loads. A model that passes ``check_model(full_check=True)`` never gets
here: for it the checker-clean output is the proof, and ``rewrite`` needs no ORT. For one the checker still
rejects after its declarations were repaired, the input must load in ORT, and the rewritten model must load
and run there on generated inputs before it is written. Everything runs on the CPU provider: what is asked is
whether ORT accepts the graph, not how fast it runs.

A model decided for another target may hold nodes the CPU provider has no kernel for (a bfloat16 MatMul for cuda).
ONNX Runtime resolves a graph (checks every node's types and shapes against its schemas) before it assigns kernels,
and says ``NOT_IMPLEMENTED`` only after that (:class:`~ampconfig.runner.sessions.KernelMissing`): for such a target
that refusal proves the graph valid, and the model is said to be resolved, not run, on this machine. Deciding and
rewriting for cuda need no GPU.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from ampconfig.errors import AmpconfigError
from ampconfig.inputs.feeds import adapt_feeds, prepare_inputs
from ampconfig.model_io.models import open_model, save_model_atomic
from ampconfig.runner.sessions import (
    LOAD_FAILED,
    KernelMissing,
    ModelFile,
    Session,
    create_session,
    model_proto,
    run_once,
)
from ampconfig.worker.client import WorkerCrashed

Runnable = onnx.ModelProto | ModelFile


@dataclass(frozen=True)
class RunCheck:
    """What ORT made of a rewritten model: ``failure`` says why it is worse than its input (None: it is not);
    ``ran`` is False when the output was only loaded (no inputs could be generated, or neither model ran on
    them) and ``loaded`` False when its graph was only resolved (no CPU kernel for a node of another target), which
    ``note`` then says."""

    failure: str | None
    ran: bool
    note: str | None = None
    loaded: bool = True

    def proof(self) -> str:
        """What ONNX Runtime showed of the rewrite, for the note the rewrite warns with."""
        if self.ran:
            return "loads and runs in ONNX Runtime"
        if self.loaded:
            return f"loads in ONNX Runtime ({self.note})"
        return f"is resolved by ONNX Runtime ({self.note})"


def _no_cpu_kernel(target: str) -> str:
    """Why a model for ``target`` was resolved, not loaded: said of the input and of the rewrite alike."""
    return f"its CPU provider has no kernel for a node the {target} target runs"


def _resolved_only(exc: KernelMissing, target: str) -> str:
    return f"{_no_cpu_kernel(target)}, so it was not loaded or run here: {exc.message.removeprefix(LOAD_FAILED)}"


@dataclass(frozen=True)
class LoadCheck:
    """What ONNX Runtime (CPU provider) made of a model: ``refusal`` says why it does not accept it (None: it does),
    ``loaded`` whether it loaded it (False: for another target, its graph resolved but a CPU kernel is missing)."""

    refusal: str | None
    loaded: bool

    def accepted(self, target: str) -> str:
        """How ONNX Runtime accepted the model, for the note the rewrite warns with."""
        if self.loaded:
            return "ONNX Runtime loads it"
        return f"ONNX Runtime resolves its graph ({_no_cpu_kernel(target)})"


def load_check(model: Runnable, target: str = "cpu") -> LoadCheck:
    """Load ``model`` in ONNX Runtime's CPU provider: its refusal in its own words with the nodes it means named
    (:func:`locate_refusal`), or none when it loads or, for a ``target`` other than the CPU, when only a CPU kernel
    is missing (the graph resolved)."""
    try:
        create_session(model, "cpu", what="the input model")
    except WorkerCrashed as crash:
        return LoadCheck(crash.message, loaded=False)
    except KernelMissing as exc:
        if target != "cpu":
            return LoadCheck(None, loaded=False)
        return LoadCheck(locate_refusal(exc.message.removeprefix(LOAD_FAILED), model_proto(model)), loaded=False)
    except AmpconfigError as exc:
        return LoadCheck(locate_refusal(exc.message.removeprefix(LOAD_FAILED), model_proto(model)), loaded=False)
    return LoadCheck(None, loaded=True)


#: ORT names the op it does not know, not the node: "com.microsoft:FooBar(-1) is not a registered function/op".
#: (Other refusals name the node themselves: "Node (softmax) Op (Softmax)", "In Node, ("relu", Relu, ...".)
_UNKNOWN_OP = re.compile(r"([\w.]*):(\w+)\(-?\d+\) is not a registered function/op")


def locate_refusal(message: str, model: onnx.ModelProto) -> str:
    """ORT's refusal, with the main-graph nodes of the op it does not know named (ORT names only the op)."""
    unknown = _UNKNOWN_OP.search(message)
    if unknown is None:
        return message
    domain, op_type = unknown.groups()
    names = [
        repr(node.name) if node.name else f"#{index} (unnamed)"
        for index, node in enumerate(model.graph.node)
        if node.op_type == op_type and node.domain == domain
    ]
    return f"{message} (node {', '.join(names[:5])}: {domain}::{op_type})" if names else message


def check_output_runs(original: Runnable, rewritten: Runnable, target: str = "cpu") -> RunCheck:
    """Load ``rewritten`` in ORT and run it on inputs generated for ``original``; when it does not run, run
    ``original`` on the same inputs: only a model that does worse than its input is a failure. A rewrite for a
    ``target`` other than the CPU whose only refusal is a missing CPU kernel is resolved, not a failure."""
    try:
        session = create_session(rewritten, "cpu", what="the rewritten model")
    except KernelMissing as exc:
        if target != "cpu":
            return RunCheck(None, ran=False, note=_resolved_only(exc, target), loaded=False)
        return RunCheck(f"ONNX Runtime cannot load it: {exc.message.removeprefix(LOAD_FAILED)}", ran=False)
    except AmpconfigError as exc:
        return RunCheck(f"ONNX Runtime cannot load it: {exc.message.removeprefix(LOAD_FAILED)}", ran=False)
    try:
        feeds = prepare_inputs(model_proto(original)).feeds
    except AmpconfigError as exc:
        return RunCheck(None, ran=False, note=f"it was loaded but not run: no inputs could be generated ({exc})")
    failure = _run_failure(session, feeds, model_proto(rewritten))
    if failure is None:
        return RunCheck(None, ran=True)
    reference = _run_failure(create_session(original, "cpu", what="the input model"), feeds, model_proto(original))
    if reference is None:
        return RunCheck(f"ONNX Runtime loads it but fails to run it, while the input runs: {failure}", ran=False)
    return RunCheck(None, ran=False, note=f"neither the input nor the output runs on generated inputs ({reference})")


def _run_failure(session: Session, feeds: Mapping[str, np.ndarray], proto: onnx.ModelProto) -> str | None:
    try:
        run_once(session, adapt_feeds(feeds, proto))
    # ORT's own exception types share no base below Exception; the message is the verdict.
    except Exception as exc:  # noqa: BLE001
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__
    return None


# ------------------------------------------------------------------------ the rewrite's use of them


def require_onnx_runtime_loads(
    runnable: Runnable, checker_errors: Sequence[str], path: str | None, target: str = "cpu"
) -> LoadCheck:
    """The rare path of the acceptance rule: the checker still rejects the (repaired) input ``runnable`` (as the
    engine's input source gives it to ONNX Runtime), so ONNX Runtime decides. A model it cannot load either is
    refused with both complaints (they name the node); ``path`` is the input's file, if any. For a ``target`` other
    than the CPU, a CPU kernel missing is no refusal (:func:`load_check`). Returns how it was accepted."""
    check = load_check(runnable, target)
    refusal = check.refusal
    if refusal is not None:
        raise AmpconfigError(
            f"the input model is not a valid ONNX model and ONNX Runtime cannot load it either: {refusal}; "
            f"the ONNX checker says: {checker_errors[0]}",
            file=path,
            hint="fix or re-export the model; the messages name the node",
        )
    return check


@contextmanager
def _runnable_output(ir_model: ir.Model, written: onnx.ModelProto | None) -> Iterator[onnx.ModelProto | ModelFile]:
    """The rewritten model as ONNX Runtime takes it: the proto, or a temporary file when its tensors stay on disk."""
    if written is not None:
        yield written
        return
    with tempfile.TemporaryDirectory(prefix="ampconfig-accept-") as folder:
        path = save_model_atomic(ir_model, Path(folder) / "rewritten.onnx")
        yield ModelFile(path, open_model(path).proto)


def confirm_output_runs(
    original: Runnable,
    checker_errors: Sequence[str],
    path: str | None,
    ir_model: ir.Model,
    written: onnx.ModelProto | None,
    target: str = "cpu",
    input_check: LoadCheck = LoadCheck(None, loaded=True),
) -> str:
    """Load and run the rewrite of an input the checker rejects (``original``, as the engine's input source gave it
    to ONNX Runtime) before anything is written; refuse it when ORT does worse with it than with the input
    (:func:`check_output_runs` for ``target``). Returns the note for the warnings, saying how ONNX Runtime accepted
    the input (``input_check``) and the output."""
    with _runnable_output(ir_model, written) as output:
        check = check_output_runs(original, output, target)
    if check.failure is not None:
        raise AmpconfigError(
            f"the rewritten model would be worse than the input, so nothing was written: {check.failure}",
            file=path,
            hint="the input does not pass the ONNX checker; report the model and the command, or fix the input",
        )
    complaints = checker_errors
    return (
        f"the input model does not pass the ONNX checker ({len(complaints)} complaint(s), first: {complaints[0]}); "
        f"{input_check.accepted(target)}, so it was rewritten: the output has no complaint the input did not have and "
        f"{check.proof()}"
    )
