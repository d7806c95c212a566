"""Every rewrite step states what it requires and what it ensures about the model or the plan it reads, and a
broken condition raises :class:`~ampconfig.contracts.ContractBroken` naming the step (a ``PreconditionBroken`` or
``PostconditionBroken``, which are onnx-ir's ``PreconditionError`` and ``PostconditionError``); each step runs
alone, given the model and a context holding what it requires
(:class:`~ampconfig.rewrite.steps.run_context.RewriteRun`, its options set up here, at the rewrite's own layer).
Each contract is broken here and seen to say so."""

from __future__ import annotations

from dataclasses import replace

import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh

from ampconfig.contracts import PostconditionBroken, PreconditionBroken
from ampconfig.decide.facts import ONNX_TYPING
from ampconfig.decide.measured_facts import MeasuredFacts
from ampconfig.decide.rewrite_options import RewriteOptions
from ampconfig.dtypes import Dtype
from ampconfig.model_io.ir_bridge import to_ir
from ampconfig.model_io.models import light_proto
from ampconfig.opinfo.library import load_ops_info
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
from ampconfig.rewrite.tensors import numpy_float16, set_dtype
from tests.graphs import transformer_block

Precondition = PreconditionBroken
Postcondition = PostconditionBroken


def _admitted(proto: onnx.ModelProto) -> tuple[ir.Model, InputAdmission]:
    model = to_ir(proto)
    admission = InputAdmission(light_proto(proto))
    AdmitInputPass(admission)(model)
    return model, admission


def _context(proto: onnx.ModelProto, mode: str = "force_fp16", **options: object) -> tuple[ir.Model, RewriteRun]:
    """The model admitted, and a fresh attempt's context: what the first step of an attempt requires."""
    model, admission = _admitted(proto)
    setup = _setup(RewriteOptions.of(mode, target="cuda", **options))  # type: ignore[arg-type]
    checked = Admission(admission.types, input_passes=True, input_pieces=lambda: None)  # type: ignore[arg-type]
    return model, RewriteRun(setup, checked, {})


def _setup(options: RewriteOptions) -> RewriteSetup:
    """The options as the steps read them, with no file to read: the target's op lists as they are, ONNX's own
    typing, NumPy's float16 conversion."""
    library = load_ops_info(options.target)
    return RewriteSetup(
        options.precision_mode,
        library,
        library.lists(),
        [],
        None,
        None,
        MeasuredFacts(),
        ONNX_TYPING,
        numpy_float16,
        judges=options.judges,
        clamp_values=options.clamp_values,
        keep_io_types=options.keep_io_types,
        with_cost=options.with_cost,
        decision_metadata=options.decision_metadata,
    )


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


def test_admission_requires_a_light_proto_of_this_model() -> None:
    other = oh.make_model(
        oh.make_graph([], "empty", [], [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])]),
        ir_version=10,
    )
    model = to_ir(transformer_block())
    with pytest.raises(Precondition, match="does not match the model") as failure:
        AdmitInputPass(InputAdmission(light_proto(other)))(model)
    assert failure.value.pass_name == "AdmitInputPass" and failure.value.condition == "requires"


def test_admission_ensures_its_light_proto_matches_and_an_accepted_input_is_in_order() -> None:
    model, admission = _admitted(transformer_block())
    first = model.graph[0]
    model.graph.remove(first, safe=False)  # out of the list only: its readers still read its outputs
    model.graph.append(first)
    with pytest.raises(Postcondition, match="before 'ln1' makes it"):
        AdmitInputPass(admission).ensures(model)
    model.graph.remove(first, safe=False)
    with pytest.raises(Postcondition, match="repaired light proto does not match"):
        AdmitInputPass(admission).ensures(model)


def test_the_opset_raise_requires_the_input_as_admitted() -> None:
    model, admission = _admitted(transformer_block())
    model.opset_imports[""] = 12  # the light proto still says 17
    with pytest.raises(Precondition, match="at 17, the model at 12"):
        RaiseOpsetForBf16Pass(admission)(model)
    model, admission = _admitted(transformer_block())
    first = model.graph[0]
    model.graph.remove(first, safe=False)
    model.graph.append(first)  # as many nodes as the light proto, out of order
    with pytest.raises(Precondition, match="before 'ln1' makes it"):
        RaiseOpsetForBf16Pass(admission)(model)


def test_the_opset_raise_ensures_the_opset_or_a_warning() -> None:
    model, admission = _admitted(transformer_block())
    admission.opset_raised = 99  # what a raise that did not happen would claim
    with pytest.raises(Postcondition, match="raised to 99, the model imports 17"):
        RaiseOpsetForBf16Pass(admission).ensures(model)
    admission.opset_raised = None
    model.opset_imports[""] = 12
    del admission.light.opset_import[:]
    admission.light.opset_import.append(oh.make_opsetid("", 12))
    with pytest.raises(Postcondition, match="stays at opset 12 and no warning says why"):
        RaiseOpsetForBf16Pass(admission).ensures(model)
    admission.warnings.append("converting from opset 12 failed")
    RaiseOpsetForBf16Pass(admission).ensures(model)


# ------------------------------------------------------------------------------------------------ the attempt


def test_naming_ensures_unique_names_and_collects_them() -> None:
    model, run = _context(transformer_block())
    NameNodesPass(run)(model)
    NameNodesPass(run)(model)  # requires nothing: naming a named model again changes nothing
    first, second = list(model.graph)[:2]
    second.name = first.name
    with pytest.raises(Postcondition, match="not uniquely named"):
        NameNodesPass(run).ensures(model)
    second.name = "renamed after the names were collected"
    with pytest.raises(Postcondition, match="not among the names taken"):
        NameNodesPass(run).ensures(model)


@pytest.mark.parametrize("step", [FoldLayerNormsPass, DecideDtypesPass, CheckOutputPass])
def test_the_steps_that_name_nodes_require_unique_names(step: type[ir.passes.InPlacePass]) -> None:
    model, run = _context(transformer_block())
    run = _through(DecideDtypesPass, model, run)
    first, second = list(model.graph)[:2]
    second.name = first.name
    with pytest.raises(Precondition, match=f"node {first.name!r} .* is not uniquely named") as failure:
        step(run)(model)  # type: ignore[call-arg]
    assert failure.value.pass_name == step.__name__


def test_the_fold_requires_the_names_taken_from_this_model() -> None:
    model, run = _context(transformer_block())
    with pytest.raises(Precondition, match="no names were collected"):
        FoldLayerNormsPass(run)(model)


def test_the_rewrite_requires_a_plan_of_this_model() -> None:
    model, run = _context(transformer_block())
    with pytest.raises(Precondition, match="no plan was made"):
        ApplyPlanPass(run)(model)
    run = _through(ApplyPlanPass, model, run)
    assert run.plan is not None
    other, other_run = _context(transformer_block())
    other_run = _through(DecideDtypesPass, other, other_run)
    other_run.plan = run.plan  # a plan of another model (as of an attempt before a restart)
    with pytest.raises(Precondition, match="has no decision in the plan"):
        ApplyPlanPass(other_run)(other)
    lost = next(iter(run.plan.verdicts))
    del run.plan.verdicts[lost]
    with pytest.raises(Precondition, match=f"node {lost.name!r} .* has no decision in the plan"):
        ApplyPlanPass(run)(model)


def test_recording_requires_the_plan_applied() -> None:
    model, run = _context(transformer_block())
    run = _through(ApplyPlanPass, model, run)  # decided, not applied: force_fp16 retypes the MatMuls
    with pytest.raises(Precondition, match="computes in float16 by the plan"):
        RecordDecisionsPass(run)(model)
    ApplyPlanPass(run)(model)
    RecordDecisionsPass(run)(model)


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
    with pytest.raises(Postcondition, match="no plan was made"):
        DecideDtypesPass(run).ensures(model)


def test_the_rewrite_ensures_its_statistics_the_plan_applied_and_every_graph_in_order() -> None:
    model, run = _context(transformer_block())
    run = _through(RecordDecisionsPass, model, run)
    assert run.plan is not None
    retyped = next(iter(run.plan.new_dtypes()))
    bound = retyped.outputs[run.plan.facts_of[retyped].output_slots[0]]
    set_dtype(bound, Dtype.FLOAT32)
    with pytest.raises(Postcondition, match=f"{retyped.name!r} computes in float16 by the plan"):
        ApplyPlanPass(run).ensures(model)
    set_dtype(bound, Dtype.FLOAT16)
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
    off = replace(run, setup=replace(run.setup, decision_metadata=False))
    decided.metadata_props["ampconfig.rule"] = "white_list"
    with pytest.raises(Postcondition, match="asked away"):
        RecordDecisionsPass(off).ensures(model)


def test_the_check_ensures_a_verdict() -> None:
    model, run = _context(transformer_block())
    run = _through(CheckOutputPass, model, run)
    with pytest.raises(Postcondition, match="no verdict"):
        CheckOutputPass(run).ensures(model)
