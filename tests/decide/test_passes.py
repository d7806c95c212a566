"""The decision passes (ampconfig/decide/passes/) and the rewrite's cast accounting, proven on small real graphs.

- Every pass: a state where its postcondition (``ensures``) must hold does hold, and a deliberately corrupted
  state makes ``ensures`` (or ``CheckReasons``) raise :class:`ContractBroken`.
- The old bug of issue 13: the LayerNorm fusion guard flips a producer to float32 after its consumers were decided
  from the old dtype; every reason must agree with its neighbours' final dtypes.
- "No round trips": a Cast(x -> T) whose output is wanted back in x's dtype is replaced by x, not cast again.
- The models of the tests (:func:`_test_models`), on which tests/decide/test_needs.py compares the plan's casts and the
  island counts with the Cast nodes the rewrite inserts.
- Cast-aware islands: an island goes low under ``cast_aware_island`` where that saves casts, and not where its
  boundary casts do not outnumber its nodes.
- Overflow hazards judged by structure (``decide/hazards.py``), and a mixlist that names the op wins over them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh

from ampconfig import rewrite_model_detailed
from ampconfig.contracts import ContractBroken
from ampconfig.decide.context import DecisionContext, Verdict
from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.decisions import NodeDecision, Rule
from ampconfig.decide.facts import Scope, iter_scopes
from ampconfig.decide.pass_pipelines import FOLLOW_UNTIL_STABLE as follow_until_stable
from ampconfig.decide.passes.assign_colours import AssignColours
from ampconfig.decide.passes.deny import PropagateDeny
from ampconfig.decide.passes.fixed import FixedVerdicts
from ampconfig.decide.passes.flexible import SettleFlexible
from ampconfig.decide.passes.follow import FollowNeighbours
from ampconfig.decide.passes.fusion_guard import GuardLayerNormFusion
from ampconfig.decide.passes.islands import LowerCastBoundIslands
from ampconfig.decide.passes.listed import PaintListed
from ampconfig.decide.passes.mode_rules import ModePolicy
from ampconfig.decide.passes.reasons import CheckReasons
from ampconfig.dtypes import Dtype
from ampconfig.opinfo.library import Colour, OpInfoLibrary
from ampconfig.precision_modes import parse_mode
from ampconfig.rewrite.names import name_unnamed_nodes
from ampconfig.rewrite.types import annotate_dtypes
from tests.graphs import (
    DESIGN_COLOURS,
    FLOAT,
    FLOAT16,
    const,
    library,
    make_model,
    rel_l2,
    run,
    tensor,
    weight,
)

MIXED = "allow_mix_precision"
F16, F32 = Dtype.FLOAT16, Dtype.FLOAT32
#: The design's colours plus what a written-out LayerNorm needs (ReduceMean and Pow black, as TF/torch list them).
COLOURS = DESIGN_COLOURS | {"ReduceMean": "black", "Pow": "black"}


# ------------------------------------------------------------------------------------------------ the graphs


def chain() -> onnx.ModelProto:
    """x -> mm1 (white) -> add (gray) -> relu (clear) -> exp (black) -> mul (gray) -> tr (clear) -> mm2 (white).

    Mixed: mm1, add, relu low; exp float32 (black); mul denied by exp; tr float32 by its input, then low because
    its one consumer is (the cast goes before the Transpose); mm2 low."""
    nodes = [
        oh.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
        oh.make_node("Add", ["a", "bias"], ["b"], name="add"),
        oh.make_node("Relu", ["b"], ["r"], name="relu"),
        oh.make_node("Exp", ["r"], ["e"], name="exp"),
        oh.make_node("Mul", ["e", "half"], ["m"], name="mul"),
        oh.make_node("Transpose", ["m"], ["t"], perm=[1, 0], name="tr"),
        oh.make_node("MatMul", ["t", "w2"], ["y"], name="mm2"),
    ]
    inits = [weight("w1", 4, 4), const("bias", np.full(4, 0.1)), const("half", 0.5), weight("w2", 2, 4)]
    return make_model(nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [4, 4])], inits)


def guarded_layer_norm() -> onnx.ModelProto:
    """mm1 (white) -> add (gray) -> a written-out LayerNorm (ReduceMean black ... Div), and add -> mul (gray) ->
    mm2 (white). Following inputs makes add and mul low; the fusion guard then forces add to float32 (a cast
    between it and the float32 LayerNorm would be absorbed by ORT's LayerNorm fusion), so mul must follow again."""
    nodes = [
        oh.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
        oh.make_node("Add", ["a", "bias"], ["h"], name="add"),
        oh.make_node("ReduceMean", ["h"], ["mu"], axes=[-1], name="ln_mean"),
        oh.make_node("Sub", ["h", "mu"], ["c"], name="ln_sub"),
        oh.make_node("Pow", ["c", "two"], ["sq"], name="ln_pow"),
        oh.make_node("ReduceMean", ["sq"], ["var"], axes=[-1], name="ln_var"),
        oh.make_node("Add", ["var", "eps"], ["ve"], name="ln_add_eps"),
        oh.make_node("Sqrt", ["ve"], ["sd"], name="ln_sqrt"),
        oh.make_node("Div", ["c", "sd"], ["ln"], name="ln_div"),
        oh.make_node("Mul", ["h", "half"], ["m"], name="mul"),
        oh.make_node("MatMul", ["m", "w2"], ["y"], name="mm2"),
    ]
    inits = [weight("w1", 4, 4), const("bias", np.full(4, 0.1)), const("two", 2.0), const("eps", 1e-5)]
    inits += [const("half", 0.5), weight("w2", 4, 4)]
    outputs = [tensor("ln", FLOAT, [2, 4]), tensor("y", FLOAT, [2, 4])]
    return make_model(nodes, [tensor("x", FLOAT, [2, 4])], outputs, inits)


def island(length: int) -> onnx.ModelProto:
    """mm1 (white, low) -> ``length`` gray nodes, the first also fed by the float32 graph input ``y`` -> mm2.

    The gray chain follows ``y`` to float32: an island with a cast in from mm1 and a cast out to mm2 (2 casts).
    Low, it needs one cast (of ``y``)."""
    nodes = [oh.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"), oh.make_node("Add", ["a", "y"], ["g0"], name="g0")]
    for i in range(1, length):
        nodes.append(oh.make_node("Mul" if i % 2 else "Sub", [f"g{i - 1}", "k"], [f"g{i}"], name=f"g{i}"))
    nodes.append(oh.make_node("MatMul", [f"g{length - 1}", "w2"], ["out"], name="mm2"))
    inputs = [tensor("x", FLOAT, [2, 4]), tensor("y", FLOAT, [2, 4])]
    inits = [weight("w1", 4, 4), weight("w2", 4, 4), const("k", 0.5)]
    return make_model(nodes, inputs, [tensor("out", FLOAT, [2, 4])], inits)


def existing_cast() -> onnx.ModelProto:
    """x (float32) -> to_half = Cast(x -> float16) -> mm (MatMul, float16 model part) -> y1, and -> exp (float16,
    black) -> y2. In mixed precision exp is raised to float32 and needs ``to_half``'s output back in float32: that
    is ``x`` itself; a Cast of it would be a round trip float32 -> float16 -> float32."""
    nodes = [
        oh.make_node("Cast", ["x"], ["h"], to=FLOAT16, name="to_half"),
        oh.make_node("MatMul", ["h", "w16"], ["y1"], name="mm"),
        oh.make_node("Exp", ["h"], ["y2"], name="exp"),
    ]
    w16 = onnx.numpy_helper.from_array(
        (np.random.default_rng(0).standard_normal((4, 4)) * 0.1).astype(np.float16), "w16"
    )
    outputs = [tensor("y1", FLOAT16, [2, 4]), tensor("y2", FLOAT16, [2, 4])]
    return make_model(nodes, [tensor("x", FLOAT, [2, 4])], outputs, [w16])


# ------------------------------------------------------------------------------------------------ the state


@dataclasses.dataclass
class Decided:
    state: DecisionState
    scope: Scope

    def node(self, name: str) -> ir.Node:
        return next(facts.node for facts in self.scope.facts if facts.node.name == name)

    def verdict(self, name: str) -> Verdict:
        return self.state.verdicts[self.node(name)]

    def set(self, name: str, dtype: Dtype | None, rule: Rule, cause: str | None = None) -> None:
        """Corrupt: overwrite a node's verdict."""
        self.state.verdicts[self.node(name)] = Verdict(dtype, rule, "corrupted by the test", cause)


def decided(
    model: onnx.ModelProto,
    mode: str = MIXED,
    lib: OpInfoLibrary | None = None,
    pinned: tuple[str, ...] = (),
    steps: tuple[Callable[[DecisionState, Scope], None], ...] = (),
) -> Decided:
    """The decision state of ``model``'s main graph after ``steps`` (passes, in order)."""
    ir_model = ir.serde.deserialize_model(model)
    name_unnamed_nodes(ir_model)
    annotate_dtypes(ir_model)
    lib = lib or library(COLOURS)
    nodes = {node.name: node for node in ir_model.graph}
    ctx = DecisionContext(parse_mode(mode), lib.lists(), lib, {nodes[name] for name in pinned})
    scopes = list(iter_scopes(ir_model, ctx.low, ctx.typing))
    result = Decided(DecisionState.of(scopes, ctx), scopes[0])
    for step in steps:
        step(result.state, result.scope)
    return result


def painted() -> tuple[Callable[[DecisionState, Scope], None], ...]:
    """The mixed modes' passes up to following neighbours (no islands, no final check), in build_plan's order."""
    return (FixedVerdicts(), AssignColours(), PaintListed(), PropagateDeny(), follow_until_stable)


def raises(check: Callable[[DecisionState, Scope], None], decided_state: Decided, fragment: str) -> None:
    with pytest.raises(ContractBroken, match=fragment):
        check(decided_state.state, decided_state.scope)


# ------------------------------------------------------------------------------------ each pass: holds / broken


def test_fixed_verdicts_keep_a_pinned_node_and_catch_a_retyped_pin() -> None:
    fixed = FixedVerdicts()
    d = decided(chain(), pinned=("add",), steps=(fixed,))
    assert d.verdict("add") == Verdict(F32, Rule.KEEP_DTYPE, "pinned to its original dtype by keep_dtype")
    fixed.ensures(d.state, d.scope)
    d.set("add", F16, Rule.KEEP_DTYPE)
    raises(fixed.ensures, d, "add changed dtype under rule keep_dtype")


def test_mode_policy_decides_every_node_and_refuses_a_painted_mode() -> None:
    policy = ModePolicy()
    d = decided(chain(), mode="force_fp16", steps=(FixedVerdicts(), policy))
    assert {facts.node.name: d.state.dtype_of(facts.node) for facts in d.scope.facts} == dict.fromkeys(
        ("mm1", "add", "relu", "exp", "mul", "tr", "mm2"), F16
    )
    policy.ensures(d.state, d.scope)
    del d.state.verdicts[d.node("exp")]
    raises(policy.ensures, d, "exp has no verdict")
    raises(policy.requires, decided(chain()), "allow_mix_precision is painted")


def test_assign_colours_colours_every_paintable_node() -> None:
    colours = AssignColours()
    d = decided(chain(), steps=(FixedVerdicts(), colours))
    assert d.state.colours[d.node("exp")] is Colour.BLACK and d.state.colours[d.node("tr")] is Colour.CLEAR
    colours.ensures(d.state, d.scope)
    del d.state.colours[d.node("relu")]
    raises(colours.ensures, d, "relu has no colour")


def test_paint_listed_white_low_black_float32_and_catches_a_white_node_left_float32() -> None:
    listed = PaintListed()
    d = decided(chain(), steps=(FixedVerdicts(), AssignColours(), listed))
    assert d.verdict("mm1").rule is Rule.WHITE_LIST and d.verdict("mm1").dtype is F16
    assert d.verdict("exp").rule is Rule.BLACK_LIST and d.verdict("exp").dtype is F32
    listed.ensures(d.state, d.scope)
    d.set("mm2", F32, Rule.WHITE_LIST)
    raises(listed.ensures, d, "white mm2 is not low")
    d.set("mm2", F16, Rule.WHITE_LIST)
    d.set("exp", F16, Rule.BLACK_LIST)
    raises(listed.ensures, d, "black exp is not float32")


def test_deny_propagation_names_a_float32_cause_and_catches_a_float16_one() -> None:
    deny = PropagateDeny()
    d = decided(chain(), steps=(FixedVerdicts(), AssignColours(), PaintListed(), deny))
    assert d.verdict("mul").rule is Rule.DENY_PROPAGATION and d.verdict("mul").cause == "exp"
    assert d.node("tr") not in d.state.verdicts  # clear, and it leads into a white node only: not denied
    deny.ensures(d.state, d.scope)
    d.set("exp", F16, Rule.BLACK_LIST)  # the cause of mul's denial is now float16
    raises(deny.ensures, d, "mul is denied by exp, which is not float32")
    raises(CheckReasons().ensures, d, "mul is denied by exp, which is not float32")


def test_follow_neighbours_decides_every_node_consistently_and_catches_an_undecided_one() -> None:
    follow = FollowNeighbours()
    d = decided(chain(), steps=(FixedVerdicts(), AssignColours(), PaintListed(), PropagateDeny(), follow))
    assert (d.verdict("add").rule, d.verdict("add").dtype) == (Rule.FOLLOWS_INPUTS, F16)
    assert (d.verdict("relu").rule, d.verdict("relu").dtype) == (Rule.FOLLOWS_INPUTS, F16)
    assert (d.verdict("tr").rule, d.verdict("tr").dtype, d.verdict("tr").cause) == (Rule.FOLLOWS_CONSUMERS, F16, "mm2")
    follow.ensures(d.state, d.scope)
    CheckReasons().ensures(d.state, d.scope)
    del d.state.verdicts[d.node("relu")]
    raises(follow.ensures, d, "relu is undecided")


def test_check_reasons_catches_a_low_follower_whose_input_is_float32() -> None:
    d = decided(chain(), steps=painted())
    CheckReasons().ensures(d.state, d.scope)
    d.set("mm1", F32, Rule.WHITE_LIST)  # add still says "every float input is float16"
    raises(CheckReasons().ensures, d, r"add \(follows_inputs\) says every float input is low, but one arrives")


def test_check_reasons_catches_a_float32_follower_whose_inputs_are_all_low() -> None:
    d = decided(chain(), steps=painted())
    d.set("relu", F32, Rule.FOLLOWS_INPUTS, "add")
    raises(CheckReasons().ensures, d, r"relu \(follows_inputs\) says a float input comes from float32")


def test_check_reasons_catches_a_node_lowered_where_the_target_has_no_kernel() -> None:
    d = decided(chain(), steps=painted())
    CheckReasons().ensures(d.state, d.scope)
    float32_only = library(COLOURS, dtypes=("float32",))
    d.state.ctx = dataclasses.replace(d.state.ctx, library=float32_only)
    raises(CheckReasons().ensures, d, "went float16 where the target or schema forbids it")


def test_settle_flexible_requires_every_other_node_decided_and_settles_every_cast() -> None:
    undecided = decided(existing_cast(), steps=(FixedVerdicts(), AssignColours()))
    raises(SettleFlexible().requires, undecided, "is undecided")
    d = decided(existing_cast(), steps=painted())
    settle = SettleFlexible()
    settle(d.state, d.scope)
    assert d.verdict("to_half").rule is Rule.MODE_KEEPS  # its consumers need float16 (mm) and float32 (exp)
    del d.state.verdicts[d.node("to_half")]
    raises(settle.ensures, d, "to_half has no verdict")


# ------------------------------------------------------------------------- the fusion guard and the old bug


def test_fusion_guard_keeps_the_producer_float32_and_its_followers_agree() -> None:
    guard = GuardLayerNormFusion()
    d = decided(guarded_layer_norm(), steps=painted())
    add, mul = d.verdict("add"), d.verdict("mul")
    assert (add.rule, add.dtype, add.cause) == (Rule.FUSION_GUARD, F32, "ln_mean")
    assert (mul.rule, mul.dtype, mul.cause) == (Rule.FOLLOWS_INPUTS, F32, "add")  # re-followed after the guard
    guard.ensures(d.state, d.scope)
    CheckReasons().ensures(d.state, d.scope)
    d.set("add", F16, Rule.FOLLOWS_INPUTS, "mm1")
    raises(guard.ensures, d, "add is low and feeds a float32 decomposed LayerNorm")


def test_a_guard_without_following_again_is_the_old_bug_and_check_reasons_catches_it() -> None:
    # Issue 13: the guard flipped add after mul had been decided from add's old (low) dtype. One follow and one
    # guard, without the driver's loop, rebuild exactly that state, and CheckReasons refuses it.
    steps = (FixedVerdicts(), AssignColours(), PaintListed(), PropagateDeny(), FollowNeighbours())
    d = decided(guarded_layer_norm(), steps=steps)
    assert d.verdict("mul").dtype is F16
    GuardLayerNormFusion()(d.state, d.scope)
    assert d.verdict("add").rule is Rule.FUSION_GUARD
    raises(CheckReasons().ensures, d, r"mul \(follows_inputs\) says every float input is low, but one arrives")


def _reasons_agree(decisions: list[NodeDecision], model: onnx.ModelProto) -> list[str]:
    """Independent of CheckReasons: every follows_inputs/deny_propagation/fusion_guard reason against the final
    dtypes of the neighbours it is about. Returns the disagreements."""
    by_name = {d.name: d for d in decisions}
    producer = {output: node.name for node in model.graph.node for output in node.output}
    constants = {init.name for init in model.graph.initializer}
    problems = []
    for node in model.graph.node:
        decision = by_name[node.name]
        rule = decision.rule.value
        float_inputs = [name for name in node.input if name and name not in constants and name in producer]
        inputs = [by_name[producer[name]].dtype for name in float_inputs]
        if rule == "follows_inputs" and decision.dtype == "float16" and "float32" in inputs:
            problems.append(f"{node.name}: low, but an input is float32")
        cause = by_name.get(decision.cause or "")
        if rule == "follows_inputs" and decision.dtype == "float32" and cause and cause.dtype != "float32":
            problems.append(f"{node.name}: float32 because of {decision.cause}, which is not")
        if rule in ("deny_propagation", "fusion_guard") and decision.dtype != "float32":
            problems.append(f"{node.name}: {rule} but not float32")
    return problems


def test_every_reason_agrees_with_its_neighbours_on_a_guarded_layer_norm() -> None:
    model = guarded_layer_norm()
    result = rewrite_model_detailed(model, MIXED, target="cuda")
    decisions = {d.name: d for d in result.decisions}
    assert decisions["add"].rule is Rule.FUSION_GUARD and decisions["add"].cause == "ln_mean"
    assert decisions["mul"].dtype == "float32" and decisions["mul"].cause == "add"
    assert _reasons_agree(result.decisions, model) == []
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    for got, want in zip(run(result.model, {"x": x}), run(model, {"x": x}), strict=True):
        assert rel_l2(got, want) < 1e-2


# ----------------------------------------------------------------------------------------------- islands


def _island_cast_count(model: onnx.ModelProto, pin: tuple[str, ...] = ()) -> tuple[int, dict[str, NodeDecision]]:
    result = rewrite_model_detailed(model, MIXED, keep_dtype=list(pin) or None, target="cuda")
    return result.stats.casts_inserted, {d.name: d for d in result.decisions}


def test_an_island_whose_casts_outnumber_its_nodes_goes_low_and_the_casts_drop() -> None:
    model = island(1)
    casts, decisions = _island_cast_count(model)
    node = decisions["g0"]
    assert (node.rule.value, node.dtype) == ("cast_aware_island", "float16")
    assert "cost 2 casts at its boundary; in float16 it costs 1" in node.reason
    pinned_casts, pinned = _island_cast_count(model, pin=("g0",))  # the same node kept float32
    assert pinned["g0"].dtype == "float32"
    assert casts == pinned_casts - 1  # x, y, out vs x, a up, g0 down, out
    feeds = {n: np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32) for n in ("x", "y")}
    assert rel_l2(run(rewrite_model_detailed(model, MIXED, target="cuda").model, feeds)[0], run(model, feeds)[0]) < 1e-2


@pytest.mark.parametrize("length", [2, 3])
def test_an_island_as_long_as_its_boundary_casts_stays_float32(length: int) -> None:
    _, decisions = _island_cast_count(island(length))
    chain_nodes = [decisions[f"g{i}"] for i in range(length)]
    assert all(d.dtype == "float32" and d.rule.value == "follows_inputs" for d in chain_nodes)


def test_islands_pass_ensures_it_saved_casts() -> None:
    islands = LowerCastBoundIslands()
    d = decided(island(1), lib=library(COLOURS), steps=(*painted(), islands))
    assert [(sorted(n.name for n in group), before, after) for group, before, after in d.state.lowered_islands] == [
        (["g0"], 2, 1)
    ]
    islands.ensures(d.state, d.scope)
    d.set("g0", F32, Rule.CAST_AWARE_ISLAND)
    raises(islands.ensures, d, r"island \['g0'\] was lowered without saving casts")


# ------------------------------------------------------------------------------------------- no round trips


def test_a_cast_wanted_back_in_its_source_dtype_reads_the_source() -> None:
    model = existing_cast()
    result = rewrite_model_detailed(model, MIXED, target="cuda")
    decisions = {d.name: d for d in result.decisions}
    assert decisions["exp"].dtype == "float32" and decisions["mm"].dtype == "float16"
    graph = result.model.graph
    producers = {output: node for node in graph.node for output in node.output}
    chained = [
        node.name
        for node in graph.node
        if node.op_type == "Cast" and node.input[0] in producers and producers[node.input[0]].op_type == "Cast"
    ]
    assert chained == []  # no Cast(Cast(x))
    exp = next(node for node in graph.node if node.op_type == "Exp")
    assert list(exp.input) == ["x"]
    assert result.stats.casts_inserted == 1  # only exp's float32 output back to the float16 graph output
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    for got, want in zip(run(result.model, {"x": x}), run(model, {"x": x}), strict=True):
        assert got.dtype == want.dtype and rel_l2(got, want) < 1e-2


# ------------------------------------------------------------------------------------------------ hazards


def _hazard_model(*nodes: onnx.NodeProto, inits: list[onnx.TensorProto], width: int = 8) -> onnx.ModelProto:
    """x -> MatMul (white, low) -> ``nodes`` -> y [2, width]."""
    all_nodes = [oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"), *nodes]
    output = tensor("y", FLOAT, [2, width])
    return make_model(all_nodes, [tensor("x", FLOAT, [2, 8])], [output], [weight("w", 8, 8), *inits])


def _colour(model: onnx.ModelProto, name: str, mixlist: dict | None = None) -> NodeDecision:
    result = rewrite_model_detailed(model, MIXED, modify_mixlist=mixlist, target="cuda")
    return next(d for d in result.decisions if d.name == name)


def sqrt_pow() -> onnx.ModelProto:
    return _hazard_model(oh.make_node("Pow", ["h", "half"], ["y"], name="pow"), inits=[const("half", 0.5)])


def gelu_cube() -> onnx.ModelProto:
    nodes = [
        oh.make_node("Pow", ["h", "three"], ["cube"], name="pow"),
        oh.make_node("Mul", ["cube", "c"], ["cc"], name="mul_c"),
        oh.make_node("Add", ["h", "cc"], ["inner"], name="add"),
        oh.make_node("Mul", ["inner", "k"], ["scaled"], name="mul_k"),
        oh.make_node("Tanh", ["scaled"], ["t"], name="tanh"),
        oh.make_node("Add", ["t", "one"], ["t1"], name="add_one"),
        oh.make_node("Mul", ["h", "t1"], ["y"], name="mul"),
    ]
    inits = [const("three", 3.0), const("c", 0.044715), const("k", np.sqrt(2 / np.pi)), const("one", 1.0)]
    return _hazard_model(*nodes, inits=inits)


def squared_mean() -> onnx.ModelProto:
    nodes = [
        oh.make_node("Pow", ["h", "two"], ["sq"], name="pow"),
        oh.make_node("ReduceMean", ["sq"], ["y"], axes=[-1], name="mean"),
    ]
    return _hazard_model(*nodes, inits=[const("two", 2.0)], width=1)


def exp_minus_max() -> onnx.ModelProto:
    nodes = [
        oh.make_node("ReduceMax", ["h"], ["mx"], axes=[-1], name="max"),
        oh.make_node("Sub", ["h", "mx"], ["shifted"], name="sub"),
        oh.make_node("Exp", ["shifted"], ["y"], name="exp"),
    ]
    return _hazard_model(*nodes, inits=[])


def plain_exp() -> onnx.ModelProto:
    return _hazard_model(oh.make_node("Exp", ["h"], ["y"], name="exp"), inits=[])


@pytest.mark.parametrize(
    ("build", "node", "colour", "dtype", "reason"),
    [
        (sqrt_pow, "pow", "gray", "float16", "Pow(x, 0.5) cannot leave the range of x"),
        (gelu_cube, "pow", "gray", "float16", "the tanh form of GELU"),
        (squared_mean, "pow", "black", "float32", "on the black list"),
        (exp_minus_max, "exp", "gray", "float16", "exp(x - max(x)) is at most 1"),
        (plain_exp, "exp", "black", "float32", "on the black list"),
    ],
    ids=["pow_half", "gelu_cube", "pow2_reducemean", "exp_minus_max", "plain_exp"],
)
def test_overflow_hazards_are_judged_by_structure(
    build: Callable[[], onnx.ModelProto], node: str, colour: str, dtype: str, reason: str
) -> None:
    decision = _colour(build(), node)
    assert (decision.colour, decision.dtype) == (colour, dtype), decision
    assert reason in decision.reason


@pytest.mark.parametrize(("build", "op", "node"), [(sqrt_pow, "Pow", "pow"), (exp_minus_max, "Exp", "exp")])
def test_a_mixlist_that_names_the_op_keeps_the_users_colour(
    build: Callable[[], onnx.ModelProto], op: str, node: str
) -> None:
    # Adding an op to the list it is already on is still the user's word: the structural judgement steps aside.
    decision = _colour(build(), node, {"black-list": {"to-add": [op]}})
    assert (decision.colour, decision.dtype, decision.rule.value) == ("black", "float32", "black_list")
    assert "cannot" not in decision.reason and "at most 1" not in decision.reason


# ------------------------------------------------------------------------------------- the models of the tests


def _test_models() -> Iterator[tuple[str, Callable[[], onnx.ModelProto]]]:
    from tests.model_zoo import ZOO
    from tests.models.test_real_exports import DEFECTS
    from tests.rewrite.test_apply import _if_model
    from tests.runner.test_sessions import mlp, token_model
    from tests.transformer_stacks import StackSize, bert_stack, fused_models, gpt2_stack

    size = StackSize()
    yield from ZOO.items()
    yield from ((f"defect_{name}", build) for name, build in DEFECTS.items())
    local = (chain, guarded_layer_norm, existing_cast, sqrt_pow, gelu_cube, squared_mean, exp_minus_max, plain_exp)
    yield from ((build.__name__, build) for build in local)
    yield from ((f"island_{n}", lambda n=n: island(n)) for n in (1, 2, 3))
    yield from (("if_model", _if_model), ("mlp", mlp), ("token_model", token_model))
    for ln in (False, True):
        yield f"bert_stack_{ln}", lambda ln=ln: bert_stack(size, decomposed_ln=ln)
        yield f"gpt2_stack_{ln}", lambda ln=ln: gpt2_stack(size, decomposed_ln=ln)
    yield from ((f"fused_{name}", lambda name=name: fused_models()[name]) for name in fused_models())


def test_checker_rejected_input_for_cuda_in_bfloat16_is_resolved_on_the_cpu() -> None:
    """Deciding and rewriting for cuda need no GPU: the rewrite of a checker-rejected input is judged by ONNX Runtime
    on the CPU, whose provider has no bfloat16 MatMul; its graph resolves, which is the proof (runner/acceptance)."""
    from tests.models.test_real_exports import DEFECTS

    model = DEFECTS["stale_output_shape"]()  # ORT loads it; the checker rejects its declared output shape
    result = rewrite_model_detailed(model, "allow_mix_precision_bf16", target="cuda")
    assert any(d.dtype == "bfloat16" and d.op_type in ("MatMul", "Gemm", "Conv") for d in result.decisions)
    assert any("is resolved by ONNX Runtime" in warning and "cuda" in warning for warning in result.warnings)
