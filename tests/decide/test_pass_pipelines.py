"""The decision pipelines as data (ampconfig/decide/pass_pipelines.py).

- Each mode's pipeline is a declared list; build_plan runs the mode's.
- Every pass says whether it changed the state, and run again on a decided model it changes nothing.
- The until-stable step re-runs following after the fusion guard forced a node, and the second one (after the
  islands pass) runs only when an island went low.
- A pass's failed pre- or postcondition names the pass, the scope and the passes already run there.
- A new pass is added by putting it in a list; a hard pass that sets a dtype and per-input dtypes (on the verdict,
  read by decide/needs.py) goes between the fixed rules, and the rewrite realises exactly the casts it implies.
- Only the state's methods write verdicts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh

import ampconfig.decide
from ampconfig.contracts import ContractBroken
from ampconfig.decide.context import DecisionContext, Verdict
from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import Scope
from ampconfig.decide.pass_pipelines import (
    FOLLOW_UNTIL_STABLE,
    HARD,
    MIXED,
    ORIGIN,
    POLICY,
    Pipeline,
    UntilStable,
    pipeline_for,
)
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.decide.passes.fixed import UNRETYPABLE, FixedVerdicts
from ampconfig.decide.passes.mode_rules import ModePolicy
from ampconfig.decide.plan import build_plan
from ampconfig.dtypes import Dtype
from ampconfig.precision_modes import PrecisionMode
from ampconfig.rewrite.apply import apply_plan
from ampconfig.rewrite.names import name_unnamed_nodes
from ampconfig.rewrite.types import annotate_dtypes
from tests.decide.test_passes import chain, decided, guarded_layer_norm, island
from tests.graphs import DESIGN_COLOURS, FLOAT, MODES, library, make_model, tensor
from tests.package_readings import pass_names


class Probe(DecisionPass):
    """Fails its postcondition on purpose, so the error shows which passes ran before it."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        return False

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        raise self.unkept("probed")


def ran_before_probe(model: onnx.ModelProto, steps: tuple) -> list[str]:
    d = decided(model)
    with pytest.raises(ContractBroken) as failure:
        Pipeline("probe", (*steps, Probe())).run(d.state)
    assert failure.value.pass_name == "Probe" and failure.value.scope == "the main graph"
    return list(failure.value.ran)


def test_each_mode_has_a_declared_pipeline() -> None:
    assert pass_names(MIXED) == [
        "CustomizedDtypes",
        "FixedVerdicts",
        "KeepValuesInRange",
        "BoundIntegerAccumulators",
        "KeepQuantizerInputs",
        "AssignColours",
        "PaintListed",
        "PropagateDeny",
        "UntilStable(FollowNeighbours, GuardLayerNormFusion)",
        "LowerCastBoundIslands",
        "UntilStable(FollowNeighbours, GuardLayerNormFusion)",
        "CheckReasons",
        "SettleFlexible",
    ]
    assert (
        pass_names(POLICY)
        == pass_names(ORIGIN)
        == [
            "CustomizedDtypes",
            "FixedVerdicts",
            "KeepValuesInRange",
            "BoundIntegerAccumulators",
            "KeepQuantizerInputs",
            "ModePolicy",
            "SettleFlexible",
        ]
    )
    assert ORIGIN.checks and not POLICY.checks
    chosen = {mode: pipeline_for(PrecisionMode(mode)).name for mode in MODES}
    assert chosen == {
        "force_fp32": "mode policy",
        "force_fp16": "mode policy",
        "allow_fp32_to_fp16": "mode policy",
        "must_keep_origin_dtype": "must_keep_origin_dtype",
        "allow_mix_precision": "mixed precision",
        "allow_mix_precision_bf16": "mixed precision",
        "allow_fp32_to_bf16": "mode policy",
    }


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("build", [chain, guarded_layer_norm, lambda: island(1)], ids=["chain", "ln", "island"])
def test_every_pass_says_whether_it_changed_and_changes_nothing_the_second_time(mode: str, build) -> None:
    d = decided(build(), mode)
    pipeline = pipeline_for(PrecisionMode(mode))
    pipeline.run(d.state)
    decided_once = dict(d.state.verdicts)
    assert len(decided_once) == len(d.scope.facts)
    for step in (*pipeline.steps, *pipeline.settle):
        assert step(d.state, d.scope) is False, step.name
    assert d.state.verdicts == decided_once


def test_a_pass_that_decides_says_so() -> None:
    d = decided(chain())
    assert FixedVerdicts()(d.state, d.scope) is False  # nothing in chain() is fixed
    pinned = decided(chain(), pinned=("add",))
    assert FixedVerdicts()(pinned.state, pinned.scope) is True
    assert FixedVerdicts()(pinned.state, pinned.scope) is False


#: The mixed pipeline's steps up to its first following step.
THROUGH_FOLLOWING = MIXED.steps[: MIXED.steps.index(FOLLOW_UNTIL_STABLE) + 1]


def test_until_stable_follows_again_after_the_fusion_guard_forced_a_node() -> None:
    ran = ran_before_probe(guarded_layer_norm(), THROUGH_FOLLOWING)
    assert ran == [
        "CustomizedDtypes",
        "FixedVerdicts",
        "KeepValuesInRange",
        "BoundIntegerAccumulators",
        "KeepQuantizerInputs",
        "AssignColours",
        "PaintListed",
        "PropagateDeny",
        "FollowNeighbours",
        "GuardLayerNormFusion",  # forces add to float32: mul follows again
        "FollowNeighbours",
        "GuardLayerNormFusion",
    ]
    assert ran_before_probe(chain(), THROUGH_FOLLOWING)[-2:] == ["FollowNeighbours", "GuardLayerNormFusion"]


def test_the_second_until_stable_runs_only_when_an_island_went_low() -> None:
    lowered = ran_before_probe(island(1), MIXED.steps)
    after_islands = lowered[lowered.index("LowerCastBoundIslands") + 1 :]
    assert after_islands == ["FollowNeighbours", "GuardLayerNormFusion", "CheckReasons"]
    kept = ran_before_probe(chain(), MIXED.steps)
    assert kept[kept.index("LowerCastBoundIslands") + 1 :] == ["CheckReasons"]


def test_a_failed_precondition_names_the_pass_the_scope_and_the_passes_already_run() -> None:
    d = decided(chain())
    with pytest.raises(ContractBroken) as failure:
        Pipeline("too short", HARD).run(d.state)  # nothing paints: SettleFlexible finds undecided nodes
    message = str(failure.value)
    assert message.startswith("precondition of SettleFlexible broken: mm1 is undecided")
    assert message.endswith(
        "(in the main graph, after CustomizedDtypes, FixedVerdicts, KeepValuesInRange, BoundIntegerAccumulators, "
        "KeepQuantizerInputs)"
    )


class KeepExpFloat32(DecisionPass):
    """A hard rule of a test's own: every Exp stays float32."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        changed = False
        for facts in scope.facts:
            if facts.node.op_type == "Exp" and facts.node not in state.verdicts:
                verdict = Verdict(Dtype.FLOAT32, Rule.KEEP_DTYPE, "the test keeps Exp in float32")
                changed |= state.decide(facts.node, verdict)
        return changed


def test_a_new_pass_is_added_by_adding_it_to_a_list() -> None:
    d = decided(chain(), "force_fp16")
    Pipeline("force_fp16 and a rule", (KeepExpFloat32(), *POLICY.steps)).run(d.state)
    assert d.verdict("exp").reason == "the test keeps Exp in float32" and d.verdict("exp").dtype is Dtype.FLOAT32
    assert d.verdict("mul").dtype is Dtype.FLOAT16  # the rest as the mode decides
    plain = decided(chain(), "force_fp16")
    POLICY.run(plain.state)
    assert plain.verdict("exp").dtype is Dtype.FLOAT16


def test_until_stable_is_a_step_of_its_own() -> None:
    group = UntilStable(FixedVerdicts())
    d = decided(chain(), pinned=("add",))
    assert group(d.state, d.scope) is True and group(d.state, d.scope) is False


_WRITERS = {"pop", "clear", "update", "setdefault", "popitem", "__setitem__", "__delitem__"}


def _verdict_writes(tree: ast.AST) -> list[int]:
    """Lines that assign, delete or mutate ``<something>.verdicts`` directly."""

    def is_verdicts(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "verdicts"

    lines = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        if any(isinstance(t, ast.Subscript) and is_verdicts(t.value) for t in targets):
            lines.append(node.lineno)
        called = node.func if isinstance(node, ast.Call) else None
        if isinstance(called, ast.Attribute) and called.attr in _WRITERS and is_verdicts(called.value):
            lines.append(node.lineno)
    return lines


def test_only_the_states_methods_write_verdicts() -> None:
    package = Path(ampconfig.decide.__file__).parent
    writes = {
        str(path.relative_to(package)): lines
        for path in sorted(package.rglob("*.py"))
        if (lines := _verdict_writes(ast.parse(path.read_text())))
    }
    assert (
        writes == {"decision_state.py": writes.get("decision_state.py", [])} and len(writes["decision_state.py"]) == 2
    )


class LowerWithFloat32Parameters(DecisionPass):
    """A rule of the test's own that sets a dtype and per-input dtypes: BatchNormalization computes in float16 and
    reads its scale, bias, mean and variance in float32 (opset 15 types them apart from X)."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        changed = False
        for facts in scope.facts:
            if facts.node.op_type == "BatchNormalization" and facts.node not in state.verdicts:
                parameters = tuple((index, Dtype.FLOAT32) for index in range(1, 5))
                reason = "float16 with float32 parameters"
                verdict = Verdict(Dtype.FLOAT16, Rule.MODE_LOWERS, reason, input_dtypes=parameters)
                changed |= state.decide(facts.node, verdict)
        return changed


def batch_norm_15() -> onnx.ModelProto:
    nodes = [
        oh.make_node("Relu", ["x"], ["r"], name="relu"),
        oh.make_node("BatchNormalization", ["r", "scale", "bias", "mean", "var"], ["y"], name="bn"),
    ]
    rng = np.random.default_rng(0)
    inits = [
        onnx.numpy_helper.from_array(rng.uniform(0.5, 2.0, 3).astype(np.float32), "scale"),
        onnx.numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "bias"),
        onnx.numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "mean"),
        onnx.numpy_helper.from_array(np.array([1.0, 4.0, 9.79e7], dtype=np.float32), "var"),  # beyond float16
    ]
    shape = [1, 3, 2, 2]
    return make_model(nodes, [tensor("x", FLOAT, shape)], [tensor("y", FLOAT, shape)], inits, opset=15)


def test_a_hard_pass_that_sets_a_dtype_and_input_dtypes_goes_between_the_fixed_rules() -> None:
    # Where issue 23's customize_dtypes goes: after the nodes nothing may retype, ahead of keep_dtype.
    pipeline = Pipeline(
        "force_fp32 with a typed BatchNormalization",
        (FixedVerdicts(UNRETYPABLE), LowerWithFloat32Parameters(), FixedVerdicts(), ModePolicy()),
    )
    model = ir.serde.deserialize_model(batch_norm_15())
    name_unnamed_nodes(model)
    annotate_dtypes(model)
    lib = library(DESIGN_COLOURS)
    pinned = {node for node in model.graph if node.name == "bn"}  # keep_dtype: outranked by the pass
    ctx = DecisionContext(PrecisionMode.FORCE_FP32, lib.lists(), lib, pinned)
    plan = build_plan(model, ctx, pipeline=pipeline)
    bn = next(node for node in model.graph if node.name == "bn")
    assert plan.verdicts[bn].reason == "float16 with float32 parameters"
    assert [plan.needs.required(bn, index) for index in range(5)] == [Dtype.FLOAT16] + [Dtype.FLOAT32] * 4
    planned = {(value.name, str(dtype)) for value, dtype in plan.casts()}
    assert planned == {("r", "float16"), ("y", "float32")}  # into the float16 node, back to the float32 output
    stats = apply_plan(model, plan)
    assert stats.casts_inserted == 2 and stats.initializers_converted == 0  # the parameters stay float32
    rewritten = ir.serde.serialize_model(model)
    onnx.checker.check_model(rewritten, full_check=True)
    types = {init.name: init.data_type for init in rewritten.graph.initializer}
    assert {types[name] for name in ("scale", "bias", "mean", "var")} == {onnx.TensorProto.FLOAT}
