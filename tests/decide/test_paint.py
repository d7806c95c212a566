"""The painting rules of docs/design.md §5 on small graphs, with op colours fixed by the test."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as oh

from ampconfig.decide.decisions import Rule
from tests.graphs import (
    DESIGN_COLOURS,
    FLOAT,
    FLOAT16,
    const,
    dtypes_by_name,
    library,
    make_model,
    plan_for,
    tensor,
    weight,
)

LOW, FP32 = "float16", "float32"


def test_tensorflow_deny_propagation_example() -> None:
    # TensorFlow's documented example: black -> gray -> clear -> gray -> clear -> white -> gray
    # ends as black, black, black, black, clear, white, gray.
    nodes = [
        oh.make_node("Exp", ["x"], ["a"], name="black"),
        oh.make_node("Add", ["a", "c"], ["b"], name="gray1"),
        oh.make_node("Relu", ["b"], ["d"], name="clear1"),
        oh.make_node("Sub", ["d", "c"], ["e"], name="gray2"),
        oh.make_node("Identity", ["e"], ["f"], name="clear2"),
        oh.make_node("MatMul", ["f", "w"], ["g"], name="white"),
        oh.make_node("Mul", ["g", "c"], ["y"], name="gray3"),
    ]
    model = make_model(
        nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [2, 4])], [const("c", 2.0), weight("w", 4, 4)]
    )
    _, plan = plan_for(model, "allow_mix_precision")
    decisions = {d.name: d for d in plan.decisions()}
    assert [decisions[n].dtype for n in ("black", "gray1", "clear1", "gray2")] == [FP32] * 4
    assert [decisions[n].rule for n in ("gray1", "clear1", "gray2")] == [Rule.DENY_PROPAGATION] * 3
    assert decisions["gray1"].cause == "black"
    # The second clear node leads only into the white node: not denied; it then follows its low consumer.
    assert decisions["clear2"].rule is Rule.FOLLOWS_CONSUMERS and decisions["clear2"].dtype == LOW
    assert decisions["white"].dtype == LOW and decisions["white"].rule is Rule.WHITE_LIST
    assert decisions["gray3"].dtype == LOW and decisions["gray3"].rule is Rule.FOLLOWS_INPUTS
    assert decisions["gray3"].cause == "white"


def test_gelu_between_two_white_ops_is_all_low() -> None:
    nodes = [
        oh.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        oh.make_node("Div", ["h", "sqrt2"], ["d"], name="div"),
        oh.make_node("Erf", ["d"], ["e"], name="erf"),
        oh.make_node("Add", ["e", "one"], ["a"], name="add"),
        oh.make_node("Mul", ["h", "a"], ["m"], name="mul"),
        oh.make_node("MatMul", ["m", "w2"], ["y"], name="fc2"),
    ]
    model = make_model(
        nodes,
        [tensor("x", FLOAT, [2, 8])],
        [tensor("y", FLOAT, [2, 8])],
        [weight("w1", 8, 8), weight("w2", 8, 8), const("sqrt2", np.sqrt(2)), const("one", 1.0)],
    )
    _, plan = plan_for(model, "allow_mix_precision")
    assert set(dtypes_by_name(plan).values()) == {LOW}


def test_residual_from_black_layernorm_stays_fp32() -> None:
    nodes = [
        oh.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, name="ln1"),
        oh.make_node("MatMul", ["ln", "w"], ["m"], name="fc"),
        oh.make_node("Add", ["m", "ln"], ["r"], name="residual"),
        oh.make_node("LayerNormalization", ["r", "g", "b"], ["y"], axis=-1, name="ln2"),
    ]
    model = make_model(
        nodes,
        [tensor("x", FLOAT, [2, 8])],
        [tensor("y", FLOAT, [2, 8])],
        [weight("w", 8, 8), const("g", np.ones(8)), const("b", np.zeros(8))],
    )
    _, plan = plan_for(model, "allow_mix_precision")
    decisions = {d.name: d for d in plan.decisions()}
    assert decisions["fc"].dtype == LOW
    assert decisions["residual"].dtype == FP32
    assert decisions["residual"].cause == "ln1"
    assert decisions["ln2"].dtype == FP32


def test_clear_node_before_white_takes_the_cast_before_it() -> None:
    nodes = [
        oh.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        oh.make_node("Transpose", ["r"], ["t"], perm=[1, 0], name="transpose"),
        oh.make_node("MatMul", ["t", "w"], ["y"], name="fc"),
    ]
    shape = oh.make_tensor("shape", 7, [2], [8, 4])
    model = make_model(nodes, [tensor("x", FLOAT, [4, 8])], [tensor("y", FLOAT, [4, 4])], [shape, weight("w", 8, 4)])
    _, plan = plan_for(model, "allow_mix_precision")
    decisions = {d.name: d for d in plan.decisions()}
    assert decisions["reshape"].dtype == LOW and decisions["reshape"].rule is Rule.FOLLOWS_CONSUMERS
    assert decisions["transpose"].dtype == LOW
    assert decisions["reshape"].cause == "transpose"


def test_clear_node_with_two_fp32_inputs_is_not_pulled_low() -> None:
    # Concat of two fp32 graph inputs feeding a MatMul: pulling Concat low would need two casts instead of one.
    nodes = [
        oh.make_node("Concat", ["a", "b"], ["c"], axis=1, name="concat"),
        oh.make_node("MatMul", ["c", "w"], ["y"], name="fc"),
    ]
    model = make_model(
        nodes,
        [tensor("a", FLOAT, [2, 4]), tensor("b", FLOAT, [2, 4])],
        [tensor("y", FLOAT, [2, 4])],
        [weight("w", 8, 4)],
    )
    _, plan = plan_for(model, "allow_mix_precision")
    assert dtypes_by_name(plan) == {"concat": FP32, "fc": LOW}


def test_black_fp16_node_is_raised_and_others_stay_low() -> None:
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
        oh.make_node("Softmax", ["m"], ["s"], axis=-1, name="softmax"),
        oh.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    w16 = oh.make_tensor("w", FLOAT16, [4, 4], np.eye(4, dtype=np.float16).tobytes(), raw=True)
    model = make_model(nodes, [tensor("x", FLOAT16, [2, 4])], [tensor("y", FLOAT16, [2, 4])], [w16])
    _, plan = plan_for(model, "allow_mix_precision")
    decisions = {d.name: d for d in plan.decisions()}
    assert decisions["fc"].dtype == LOW and decisions["fc"].rule is Rule.ALREADY_LOW
    assert decisions["softmax"].dtype == FP32 and decisions["softmax"].rule is Rule.BLACK_LIST
    assert decisions["relu"].dtype == LOW


def test_no_low_kernel_keeps_white_op_fp32() -> None:
    nodes = [oh.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    model = make_model(nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [2, 4])], [weight("w", 4, 4)])
    _, plan = plan_for(model, "allow_mix_precision", library({"MatMul": "white"}, dtypes=("float32",)))
    (decision,) = plan.decisions()
    assert decision.dtype == FP32 and decision.rule is Rule.NO_LOW_KERNEL
    assert "no float16 kernel" in decision.reason


def test_bf16_mode_paints_bfloat16() -> None:
    nodes = [oh.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    model = make_model(nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [2, 4])], [weight("w", 4, 4)])
    _, plan = plan_for(model, "mixed_bfloat16")
    assert dtypes_by_name(plan) == {"fc": "bfloat16"}


def test_non_mixed_modes() -> None:
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
        oh.make_node("Softmax", ["m"], ["y"], axis=-1, name="softmax"),
    ]
    model = make_model(nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [2, 4])], [weight("w", 4, 4)])
    expected = {
        "force_fp32": {"fc": FP32, "softmax": FP32},
        "force_fp16": {"fc": LOW, "softmax": LOW},
        "allow_fp32_to_fp16": {"fc": LOW, "softmax": FP32},
        "must_keep_origin_dtype": {"fc": FP32, "softmax": FP32},
        "allow_fp32_to_bf16": {"fc": FP32, "softmax": FP32},
    }
    for mode, want in expected.items():
        _, plan = plan_for(model, mode)
        assert dtypes_by_name(plan) == want, mode


def test_a_gather_reading_token_ids_names_its_constant_table_not_fed_only_by_constants() -> None:
    """An embedding Gather's only float input is its table; its indices come from the graph (issue 31: the reason
    said "fed only by constants" of a node reading the input_ids)."""
    nodes = [
        oh.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
        oh.make_node("Exp", ["e"], ["y"], name="black"),  # Exp is black: the Gather's consumer needs float32
    ]
    table = weight("table", 10, 4)
    model = make_model(nodes, [tensor("ids", TensorProto.INT64, [2])], [tensor("y", FLOAT, [2, 4])], [table])
    _, plan = plan_for(model, "allow_mix_precision", library({**DESIGN_COLOURS, "Gather": "clear"}))
    embed = {d.name: d for d in plan.decisions()}["embed"]
    assert (embed.dtype, embed.rule, embed.cause) == (FP32, Rule.FOLLOWS_CONSUMERS, "black")
    assert embed.reason == "its float input table is a constant; a consumer needs float32"
