"""Every rewrite step states what it requires and what it ensures, as onnx-ir's ``PreconditionError`` and
``PostconditionError`` naming what failed; each step runs alone, given the model and a context holding what it
requires (:class:`~ampconfig.rewrite.steps.run_context.RewriteRun`). Each contract is broken here and seen to say so."""

from __future__ import annotations

from dataclasses import replace

import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh

from ampconfig.decide.rewrite_options import RewriteOptions
from ampconfig.engine.read_settings import read_options
from ampconfig.files.ir_bridge import to_ir
from ampconfig.files.models import light_proto
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
from ampconfig.rewrite.steps.run_context import Admission, InputAdmission, RewriteRun
from tests.graphs import transformer_block

Precondition = ir.passes.PreconditionError
Postcondition = ir.passes.PostconditionError


def _admitted(proto: onnx.ModelProto) -> tuple[ir.Model, InputAdmission]:
    model = to_ir(proto)
    admission = InputAdmission(light_proto(proto))
    AdmitInputPass(admission)(model)
    return model, admission


def _context(proto: onnx.ModelProto, mode: str = "force_fp16", **options: object) -> tuple[ir.Model, RewriteRun]:
    """The model admitted, and a fresh attempt's context: what the first step of an attempt requires."""
    model, admission = _admitted(proto)
    setup = read_options(RewriteOptions.of(mode, target="cuda", **options)).setup(None)  # type: ignore[arg-type]
    checked = Admission(admission.types, input_passes=True, input_pieces=lambda: None)  # type: ignore[arg-type]
    return model, RewriteRun(setup, checked, {})


def _through(step: type[ir.passes.InPlacePass], model: ir.Model, run: RewriteRun) -> RewriteRun:
    """Each step before ``step``, alone, in the pipeline's order: what ``step`` requires is then in ``run``."""
    order = [
        NameNodesPass,
        FoldLayerNormsPass,
        AnnotateTypesPass,
        ReadWeightsPass,
        DecideDtypesPass,
        ApplyPlanPass,
        RecordDecisionsPass,
        CheckOutputPass,
    ]
    for before in order[: order.index(step)]:
        before(run)(model)  # type: ignore[call-arg]
    return run


# ------------------------------------------------------------------------------------------------ each step alone


def test_each_step_runs_alone_on_the_model_and_its_context() -> None:
    model, run = _context(transformer_block())
    for step in (NameNodesPass, FoldLayerNormsPass, AnnotateTypesPass, ReadWeightsPass, DecideDtypesPass):
        step(run)(model)  # type: ignore[call-arg]
    assert run.plan is not None and run.decisions
    ApplyPlanPass(run)(model)
    RecordDecisionsPass(run)(model)
    CheckOutputPass(run)(model)
    assert run.check is not None and run.check.complaint is None
    assert {node.name for node in model.graph if node.op_type == "Cast"}  # the rewrite inserted its casts


# ------------------------------------------------------------------------------------------------ admission


def test_admission_requires_a_light_proto_of_this_model_and_runs_once() -> None:
    other = oh.make_model(
        oh.make_graph([], "empty", [], [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])]),
        ir_version=10,
    )
    model = to_ir(transformer_block())
    with pytest.raises(Precondition, match="does not match the model"):
        AdmitInputPass(InputAdmission(light_proto(other)))(model)
    model, admission = _admitted(transformer_block())
    with pytest.raises(Precondition, match="admitted once"):
        AdmitInputPass(admission)(model)


def test_admission_ensures_it_recorded_what_it_found() -> None:
    proto = transformer_block()
    with pytest.raises(Postcondition, match="did not record"):
        AdmitInputPass(InputAdmission(light_proto(proto))).ensures(to_ir(proto))


def test_the_opset_raise_requires_the_admission_and_ensures_the_opset() -> None:
    proto = transformer_block()
    with pytest.raises(Precondition, match="needs the input admitted"):
        RaiseOpsetForBf16Pass(InputAdmission(light_proto(proto)))(to_ir(proto))
    model, admission = _admitted(proto)
    admission.opset_raised = 99  # what a raise that did not happen would claim
    with pytest.raises(Postcondition, match="raised to 99"):
        RaiseOpsetForBf16Pass(admission).ensures(model)


# ------------------------------------------------------------------------------------------------ the attempt


def test_naming_requires_a_fresh_attempt_and_ensures_unique_names() -> None:
    model, run = _context(transformer_block())
    NameNodesPass(run)(model)
    with pytest.raises(Precondition, match="named already"):
        NameNodesPass(run)(model)
    first, second = list(model.graph)[:2]
    second.name = first.name
    with pytest.raises(Postcondition, match="not uniquely named"):
        NameNodesPass(run).ensures(model)


@pytest.mark.parametrize(
    ("step", "needs"),
    [
        (FoldLayerNormsPass, "the nodes named"),
        (AnnotateTypesPass, "the nodes named"),
        (DecideDtypesPass, "the nodes named"),
        (ApplyPlanPass, "a plan"),
        (RecordDecisionsPass, "the plan applied"),
        (CheckOutputPass, "the rewrite's statistics"),
    ],
)
def test_each_step_requires_what_the_one_before_leaves(step: type[ir.passes.InPlacePass], needs: str) -> None:
    model, run = _context(transformer_block())
    with pytest.raises(Precondition, match=needs):
        step(run)(model)  # type: ignore[call-arg]


def test_the_fold_ensures_it_made_the_layer_norms_it_names() -> None:
    model, run = _context(transformer_block())
    run = _through(AnnotateTypesPass, model, run)
    run.folded = ["no such node"]
    with pytest.raises(Postcondition, match="not LayerNormalization"):
        FoldLayerNormsPass(run).ensures(model)


def test_typing_ensures_every_value_inference_typed_has_a_type() -> None:
    model, run = _context(transformer_block())
    run = _through(DecideDtypesPass, model, run)
    value = next(output for node in model.graph for output in node.outputs if output.name in run.admission.types)
    value.type = None
    with pytest.raises(Postcondition, match="have no type"):
        AnnotateTypesPass(run).ensures(model)


def test_the_decision_ensures_a_plan_with_one_decision_a_node() -> None:
    model, run = _context(transformer_block())
    run = _through(ApplyPlanPass, model, run)
    run.decisions = [*run.decisions, run.decisions[0]]
    with pytest.raises(Postcondition, match="twice"):
        DecideDtypesPass(run).ensures(model)
    run.plan = None
    with pytest.raises(Postcondition, match="no plan"):
        DecideDtypesPass(run).ensures(model)


def test_the_rewrite_ensures_its_statistics_and_every_graph_in_order() -> None:
    model, run = _context(transformer_block())
    run = _through(RecordDecisionsPass, model, run)
    nodes = list(model.graph)
    model.graph.remove(nodes[0], safe=False)  # out of the list only: its readers still read its outputs
    model.graph.append(nodes[0])
    with pytest.raises(Postcondition, match="before"):
        ApplyPlanPass(run).ensures(model)
    run.stats = None
    with pytest.raises(Postcondition, match="no statistics"):
        ApplyPlanPass(run).ensures(model)


def test_recording_ensures_every_decided_node_carries_its_decision_or_none_does() -> None:
    model, run = _context(transformer_block())
    run = _through(CheckOutputPass, model, run)
    decided = next(node for node in model.graph if node.name == run.decisions[0].name)
    decided.metadata_props.clear()
    with pytest.raises(Postcondition, match="carry no decision"):
        RecordDecisionsPass(run).ensures(model)
    off = replace(run, setup=replace(run.setup, options=replace(run.setup.options, decision_metadata=False)))
    decided.metadata_props["ampconfig.rule"] = "white_list"
    with pytest.raises(Postcondition, match="asked away"):
        RecordDecisionsPass(off).ensures(model)


def test_the_check_ensures_a_verdict() -> None:
    model, run = _context(transformer_block())
    run = _through(CheckOutputPass, model, run)
    with pytest.raises(Postcondition, match="no verdict"):
        CheckOutputPass(run).ensures(model)
