"""One contract vocabulary (:mod:`ampconfig.contracts`): a decision pass and a rewrite step that break a
precondition raise the same exception type, naming the pass, and so do two that break a postcondition; run in
their pipelines or through onnx-ir's PassManager they still do, and the command line reports one as a bug in
ampconfig (exit code 3)."""

from __future__ import annotations

import json

import onnx
import onnx_ir as ir
import pytest
import typer
from onnx import helper as oh

from ampconfig.cli.typer_app import reporting_errors
from ampconfig.contracts import ContractBroken, PostconditionBroken, PreconditionBroken
from ampconfig.decide.context import DecisionContext
from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.facts import Scope, iter_scopes
from ampconfig.decide.pass_pipelines import Pipeline
from ampconfig.decide.passes.flexible import SettleFlexible
from ampconfig.decide.passes.mode_rules import ModePolicy
from ampconfig.decide.rewrite_options import RewriteOptions
from ampconfig.errors import EXIT_INTERNAL
from ampconfig.model_io.ir_bridge import to_ir
from ampconfig.model_io.models import light_proto
from ampconfig.opinfo.library import load_ops_info
from ampconfig.precision_modes import PrecisionMode
from ampconfig.rewrite.pipeline import admit_input
from ampconfig.rewrite.steps.decide_dtypes import DecideDtypesPass
from ampconfig.rewrite.steps.name_nodes import NameNodesPass
from ampconfig.rewrite.steps.run_context import Admission, InputAdmission, RewriteRun, RewriteSetup
from ampconfig.rewrite.tensors import numpy_float16
from ampconfig.rewrite.types import annotate_dtypes

MODE = PrecisionMode.FORCE_FP16


def two_matmuls(second_name: str = "mm2") -> onnx.ModelProto:
    """x -> MatMul mm1 -> Relu -> MatMul ``second_name``; the second named like the first makes two nodes of one
    name."""
    weight = oh.make_tensor("w", onnx.TensorProto.FLOAT, [4, 4], [0.5] * 16)
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["a"], name="mm1"),
        oh.make_node("Relu", ["a"], ["r"], name="relu"),
        oh.make_node("MatMul", ["r", "w"], ["y"], name=second_name),
    ]
    graph = oh.make_graph(
        nodes,
        "two_matmuls",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])],
        [weight],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10)


def undecided(model: ir.Model) -> tuple[DecisionState, Scope]:
    """The decision state of ``model``'s main graph before any pass ran."""
    library = load_ops_info("cuda")
    context = DecisionContext(MODE, library.lists(), library, set())
    scopes = list(iter_scopes(model, context.low, context.typing))
    return DecisionState.of(scopes, context), scopes[0]


def attempt(model: ir.Model) -> RewriteRun:
    """A fresh attempt's context for ``model`` (the options as the steps read them, no file given)."""
    options = RewriteOptions.of(MODE, target="cuda")
    library = load_ops_info("cuda")
    setup = RewriteSetup(
        options, MODE, library, library.lists(), [], None, None, None, undecided(model)[0].ctx.typing, numpy_float16
    )
    admission = Admission({}, input_passes=True, input_pieces=lambda: None)  # type: ignore[arg-type,return-value]
    return RewriteRun(setup, admission, {})


def typed(proto: onnx.ModelProto) -> ir.Model:
    model = to_ir(proto)
    annotate_dtypes(model)
    return model


def test_a_broken_precondition_is_one_type_in_a_decision_pass_and_a_rewrite_step() -> None:
    # Decision pass: SettleFlexible requires every other node decided; no pass decided any.
    state, scope = undecided(typed(two_matmuls()))
    with pytest.raises(ContractBroken) as in_decision:
        SettleFlexible()(state, scope)
    # Rewrite step: DecideDtypesPass requires every node uniquely named; two nodes are named "mm1".
    model = typed(two_matmuls(second_name="mm1"))
    with pytest.raises(ContractBroken) as in_step:
        DecideDtypesPass(attempt(model))(model)
    assert type(in_decision.value) is type(in_step.value) is PreconditionBroken
    assert (in_decision.value.pass_name, in_decision.value.condition) == ("SettleFlexible", "requires")
    assert (in_step.value.pass_name, in_step.value.condition) == ("DecideDtypesPass", "requires")
    assert str(in_decision.value) == "precondition of SettleFlexible broken: mm1 is undecided"
    assert str(in_step.value) == "precondition of DecideDtypesPass broken: node 'mm1' (MatMul) is not uniquely named"
    assert isinstance(in_step.value, ir.passes.PreconditionError)  # onnx-ir's pass manager lets it through as such


class DecidesNothing(ModePolicy):
    """A mode policy that forgets to decide: its postcondition (every node has a verdict) breaks."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        return False


class PlansNothing(DecideDtypesPass):
    """A decision step that forgets to make its plan: its postcondition (a plan of each node) breaks."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        return ir.passes.PassResult(model, modified=False)


def test_a_broken_postcondition_is_one_type_in_a_decision_pass_and_a_rewrite_step() -> None:
    state, _ = undecided(typed(two_matmuls()))
    with pytest.raises(ContractBroken) as in_decision:
        Pipeline("forgetful", (DecidesNothing(),)).run(state)
    model = typed(two_matmuls())
    run = attempt(model)
    with pytest.raises(ir.passes.PassError) as wrapped:
        ir.passes.PassManager([NameNodesPass(run), PlansNothing(run)])(model)
    in_step = wrapped.value.__cause__.__cause__  # PassManager's step error, then Sequential's pass error
    assert type(in_decision.value) is type(in_step) is PostconditionBroken
    assert isinstance(in_step, ContractBroken) and isinstance(in_step, ir.passes.PostconditionError)
    assert (in_decision.value.pass_name, in_step.pass_name) == ("DecidesNothing", "PlansNothing")
    assert str(in_decision.value) == (
        "postcondition of DecidesNothing broken: mm1 has no verdict (in the main graph, after no other pass)"
    )
    assert str(in_step) == "postcondition of PlansNothing broken: no plan was made"


def test_the_command_line_reports_a_broken_contract_as_a_bug_in_ampconfig(capsys: pytest.CaptureFixture[str]) -> None:
    """The rewrite's pipeline raises a step's broken contract as it was (not onnx-ir's PassError around it), and
    the command line's last resort reports it with exit code 3 and the hint that it is a bug."""

    def admit(json_output: bool = False) -> None:
        light = light_proto(two_matmuls())
        light.graph.node.pop()  # the light proto of another model: one node fewer
        admit_input(to_ir(two_matmuls()), InputAdmission(light), raise_opset=False, accept=lambda *_: None)

    with pytest.raises(typer.Exit) as exited:
        reporting_errors(admit)(json_output=True)
    assert exited.value.exit_code == EXIT_INTERNAL == 3
    payload = json.loads(capsys.readouterr().out)
    assert payload["error"]["message"] == (
        "internal error: PreconditionBroken: precondition of AdmitInputPass broken: the light proto the admission "
        "reads does not match the model: 1 graph(s) with [2] nodes, the model 1 with [3]"
    )
    assert "this is a bug in ampconfig" in payload["error"]["hint"]
