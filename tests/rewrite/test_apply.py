"""The rewrite on targeted graphs: every written model passes the full checker, loads and runs in ORT CPU."""

from __future__ import annotations

# The bundled CPU op info lists the dtypes ORT CPU runs (natively or through its own inserted casts), so CPU-run
# tests can lower MatMul, Softmax... on this machine.
import os

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh
from onnx import numpy_helper

from ampconfig import rewrite_model, rewrite_model_detailed
from ampconfig.decide.context import DecisionContext
from ampconfig.decide.plan import build_plan
from ampconfig.errors import AmpconfigError
from ampconfig.precision_modes import PrecisionMode
from tests.graphs import (
    FLOAT,
    FLOAT16,
    MODES,
    casts,
    const,
    library,
    make_model,
    plan_for,
    rel_l2,
    run,
    tensor,
    transformer_block,
    weight,
)
from tests.shape_claims import added_shape_claims, declared_shape
from tests.unusual_models import SHARED_SIZE_MODELS, shared_size_if_branches_model, shared_size_two_outputs_model

TARGET = os.environ.get("AMPCONFIG_TEST_TARGET", "cpu")


def valid_and_close(original: onnx.ModelProto, rewritten: onnx.ModelProto, feeds: dict, tol: float = 2e-2) -> float:
    onnx.checker.check_model(rewritten, full_check=True)
    want = run(original, feeds)
    got = run(rewritten, feeds)
    errors = [rel_l2(g, w) for g, w in zip(got, want, strict=True)]
    assert max(errors) < tol, errors
    return max(errors)


def dtype_of(model: onnx.ModelProto, name: str) -> int:
    inferred = onnx.shape_inference.infer_shapes(model)
    for info in (*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info):
        if info.name == name:
            return info.type.tensor_type.elem_type
    for init in inferred.graph.initializer:
        if init.name == name:
            return init.data_type
    raise KeyError(name)


def block_feeds(scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {"x": (rng.standard_normal((2, 8, 32)) * scale).astype(np.float32)}


def test_transformer_block_mixed_keeps_norms_fp32_with_minimal_casts() -> None:
    model = transformer_block()
    # Black LayerNorm/Softmax, as the reference lists have them (both targets make them gray, see numerics).
    norms_black = {"black-list": {"to-add": ["LayerNormalization", "Softmax"]}}
    result = rewrite_model_detailed(model, "allow_mix_precision", modify_mixlist=norms_black, target=TARGET)
    dtype = {d.name: d.dtype for d in result.decisions}
    assert all(dtype[n] == "float32" for n in ("ln1", "ln2", "softmax"))
    assert all(dtype[n] == "float16" for n in ("q_proj", "k_proj", "v_proj", "qk", "av", "o_proj", "fc1", "fc2"))
    assert all(dtype[n] == "float16" for n in ("gelu_div", "gelu_erf", "gelu_add", "gelu_mul", "gelu_half"))
    # Six boundaries and no fewer can exist with LayerNorm/Softmax in fp32 and the MatMuls in fp16:
    # ln1->projections (one cast shared by q/k/v), scaled->softmax, probs->av, o_proj->residual1 (x is fp32),
    # ln2->fc1, fc2->residual2.
    assert result.stats.casts_inserted == 6
    assert len(casts(result.model)) == 6
    valid_and_close(model, result.model, block_feeds(4.0))
    # Errors measured with float16 rounding kept (ORT's CPU provider would skip it, see
    # low_precision_rounding_model): keeping LayerNorm/Softmax in fp32 cuts the error several-fold.
    from ampconfig.engine.typing_chain import TYPING
    from ampconfig.instrument.rounding import low_precision_rounding_model

    def rounded_error(rewritten: onnx.ModelProto) -> float:
        faithful, _ = low_precision_rounding_model(rewritten, TYPING)
        return valid_and_close(model, faithful, block_feeds(4.0))

    mixed_error = rounded_error(result.model)
    fp16_error = rounded_error(rewrite_model(model, "force_fp16", target=TARGET))
    assert mixed_error * 3 < fp16_error, (mixed_error, fp16_error)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_is_valid_and_idempotent(mode: str) -> None:
    model = transformer_block()
    once = rewrite_model(model, mode, target=TARGET)
    valid_and_close(model, once, block_feeds(), tol=5e-2)
    twice = rewrite_model(once, mode, target=TARGET)
    assert twice.SerializeToString() == once.SerializeToString()


@pytest.mark.parametrize("mode", ["force_fp16", "allow_mix_precision"])
def test_a_rewrite_without_its_cost_writes_the_same_model(mode: str) -> None:
    model = transformer_block()
    costed = rewrite_model_detailed(model, mode, target=TARGET)
    uncosted = rewrite_model_detailed(model, mode, target=TARGET, with_cost=False)
    assert costed.cost is not None and costed.cost.casts > 0
    assert uncosted.cost is None
    assert uncosted.model.SerializeToString() == costed.model.SerializeToString()
    assert uncosted.decisions == costed.decisions and uncosted.stats == costed.stats


def test_input_model_is_not_modified() -> None:
    model = transformer_block()
    before = model.SerializeToString()
    rewrite_model(model, "force_fp16", target=TARGET)
    assert model.SerializeToString() == before


def test_resize_scales_stay_float32() -> None:
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
        oh.make_node("Resize", ["m", "", "scales"], ["r"], mode="nearest", name="resize"),
        oh.make_node("MatMul", ["r", "w2"], ["y"], name="fc2"),
    ]
    model = make_model(
        nodes,
        [tensor("x", FLOAT, [1, 1, 4, 4])],
        [tensor("y", FLOAT, [1, 1, 8, 4])],
        [weight("w", 4, 4), weight("w2", 8, 4), const("scales", [1.0, 1.0, 2.0, 2.0])],
    )
    result = rewrite_model_detailed(model, "allow_mix_precision", target=TARGET)
    assert {d.name: d.dtype for d in result.decisions}["resize"] == "float16"
    assert dtype_of(result.model, "scales") == FLOAT
    assert dtype_of(result.model, "r") == FLOAT16
    valid_and_close(
        model, result.model, {"x": np.random.default_rng(0).standard_normal((1, 1, 4, 4)).astype(np.float32)}
    )


def _if_model() -> onnx.ModelProto:
    then_branch = oh.make_graph(
        [oh.make_node("MatMul", ["x", "w"], ["t"], name="then_fc")], "then", [], [tensor("t", FLOAT, [2, 4])]
    )
    else_branch = oh.make_graph(
        [oh.make_node("Softmax", ["x"], ["e"], axis=-1, name="else_softmax")], "else", [], [tensor("e", FLOAT, [2, 4])]
    )
    nodes = [
        oh.make_node("If", ["cond"], ["branch"], then_branch=then_branch, else_branch=else_branch, name="if"),
        oh.make_node("MatMul", ["branch", "w"], ["y"], name="after"),
    ]
    return make_model(
        nodes,
        [tensor("x", FLOAT, [2, 4]), tensor("cond", onnx.TensorProto.BOOL, [])],
        [tensor("y", FLOAT, [2, 4])],
        [weight("w", 4, 4)],
    )


@pytest.mark.parametrize("flag", [True, False])
def test_if_branches_are_rewritten_in_their_own_scope(flag: bool) -> None:
    model = _if_model()
    result = rewrite_model_detailed(model, "allow_mix_precision", target=TARGET)
    decisions = {d.name: d for d in result.decisions}
    assert decisions["then_fc"].dtype == "float16" and decisions["then_fc"].scope == "if.then_branch"
    assert decisions["else_softmax"].dtype == "float32"
    assert decisions["if"].dtype is None or decisions["if"].rule.value == "control_flow"
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    valid_and_close(model, result.model, {"x": x, "cond": np.array(flag)})


def test_loop_body_with_outer_scope_weight() -> None:
    body = oh.make_graph(
        [
            oh.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            oh.make_node("MatMul", ["state_in", "w"], ["mm"], name="body_fc"),
            oh.make_node("Tanh", ["mm"], ["state_out"], name="body_tanh"),
        ],
        "body",
        [
            tensor("i", onnx.TensorProto.INT64, []),
            tensor("cond_in", onnx.TensorProto.BOOL, []),
            tensor("state_in", FLOAT, [2, 4]),
        ],
        [tensor("cond_out", onnx.TensorProto.BOOL, []), tensor("state_out", FLOAT, [2, 4])],
    )
    nodes = [oh.make_node("Loop", ["trips", "", "x"], ["y"], body=body, name="loop")]
    trips = numpy_helper.from_array(np.array(3, dtype=np.int64), "trips")
    model = make_model(
        nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [2, 4])], [weight("w", 4, 4, scale=0.5), trips]
    )
    result = rewrite_model_detailed(model, "allow_mix_precision", target=TARGET)
    decisions = {d.name: d for d in result.decisions}
    assert decisions["body_fc"].dtype == "float16"
    # The loop-carried state keeps its dtype at the body's boundary.
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    valid_and_close(model, result.model, {"x": x})


def test_shared_initializer_gets_one_copy_per_dtype() -> None:
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
        oh.make_node("Exp", ["w"], ["sw"], name="exp_w"),
        oh.make_node("MatMul", ["m", "sw"], ["y"], name="fc2"),
    ]
    model = make_model(nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [2, 4])], [weight("w", 4, 4)])
    result = rewrite_model_detailed(model, "allow_mix_precision", target=TARGET)
    by_name = {init.name: init.data_type for init in result.model.graph.initializer}
    assert by_name == {"w": FLOAT, "w_fp16": FLOAT16}
    assert result.stats.initializers_converted == 1
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    valid_and_close(model, result.model, {"x": x})


def test_existing_cast_is_retargeted_not_stacked() -> None:
    nodes = [
        oh.make_node("Cast", ["ids"], ["f"], to=FLOAT, name="to_float"),
        oh.make_node("MatMul", ["f", "w"], ["y"], name="fc"),
    ]
    model = make_model(
        nodes, [tensor("ids", onnx.TensorProto.INT64, [2, 4])], [tensor("y", FLOAT, [2, 4])], [weight("w", 4, 4)]
    )
    result = rewrite_model_detailed(model, "allow_mix_precision", target=TARGET)
    decisions = {d.name: d for d in result.decisions}
    assert decisions["to_float"].dtype == "float16" and decisions["to_float"].rule.value == "cast_retargeted"
    cast_nodes = casts(result.model)
    # The retargeted Cast plus the one cast back to the fp32 graph output; no Cast feeds another Cast.
    assert len(cast_nodes) == 2 and result.stats.casts_inserted == 1
    produced_by_cast = {n.output[0] for n in cast_nodes}
    assert not any(n.input[0] in produced_by_cast for n in cast_nodes)
    valid_and_close(model, result.model, {"ids": np.arange(8, dtype=np.int64).reshape(2, 4)})


def test_graph_output_fed_by_a_cast_keeps_name_and_dtype() -> None:
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
        oh.make_node("Cast", ["m"], ["y"], to=FLOAT, name="out_cast"),
    ]
    model = make_model(nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [2, 4])], [weight("w", 4, 4)])
    result = rewrite_model_detailed(model, "force_fp16", target=TARGET)
    assert [o.name for o in result.model.graph.output] == ["y"]
    assert result.model.graph.output[0].type.tensor_type.elem_type == FLOAT
    assert result.stats.casts_inserted == 1  # only x -> fp16; the existing Cast already produces fp32
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    valid_and_close(model, result.model, {"x": x})


def test_fp16_model_in_mixed_mode_raises_black_ops_only() -> None:
    w16 = numpy_helper.from_array((np.random.default_rng(0).standard_normal((4, 4)) * 0.3).astype(np.float16), "w")
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
        oh.make_node("Exp", ["m"], ["s"], name="exp"),
        oh.make_node("MatMul", ["s", "w"], ["y"], name="fc2"),
    ]
    model = make_model(nodes, [tensor("x", FLOAT16, [2, 4])], [tensor("y", FLOAT16, [2, 4])], [w16])
    result = rewrite_model_detailed(model, "allow_mix_precision", target=TARGET)
    assert {d.name: d.dtype for d in result.decisions} == {"fc": "float16", "exp": "float32", "fc2": "float16"}
    assert result.model.graph.input[0].type.tensor_type.elem_type == FLOAT16
    assert result.model.graph.output[0].type.tensor_type.elem_type == FLOAT16
    assert result.stats.casts_inserted == 2
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float16)
    valid_and_close(model, result.model, {"x": x})


def test_keep_io_types_false_lowers_graph_io() -> None:
    nodes = [oh.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    model = make_model(nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [2, 4])], [weight("w", 4, 4)])
    out = rewrite_model(model, "force_fp16", target=TARGET, keep_io_types=False)
    onnx.checker.check_model(out, full_check=True)
    assert out.graph.input[0].type.tensor_type.elem_type == FLOAT16
    assert out.graph.output[0].type.tensor_type.elem_type == FLOAT16
    assert not casts(out)


def test_keep_dtype_pins_a_node_and_unmatched_entries_fail() -> None:
    model = transformer_block()
    result = rewrite_model_detailed(model, "allow_mix_precision", keep_dtype=["fc1", "OpType::Erf"], target=TARGET)
    decisions = {d.name: d for d in result.decisions}
    assert decisions["fc1"].dtype == "float32" and decisions["fc1"].rule.value == "keep_dtype"
    assert decisions["gelu_erf"].dtype == "float32" and decisions["gelu_erf"].rule.value == "keep_dtype"
    assert decisions["fc2"].dtype == "float16"
    onnx.checker.check_model(result.model, full_check=True)
    with pytest.raises(AmpconfigError, match="no_such_node"):
        rewrite_model(model, "allow_mix_precision", keep_dtype=["no_such_node"], target=TARGET)
    result = rewrite_model_detailed(model, "allow_mix_precision", keep_dtype=["OpType::Conv"], target=TARGET)
    assert result.warnings == ["keep_dtype entry OpType::Conv matches no node in this model"]


def test_must_keep_origin_dtype_names_nodes_the_target_cannot_run() -> None:
    w16 = numpy_helper.from_array(np.eye(4, dtype=np.float16), "w")
    model = make_model(
        [oh.make_node("MatMul", ["x", "w"], ["y"], name="half_fc")],
        [tensor("x", FLOAT16, [2, 4])],
        [tensor("y", FLOAT16, [2, 4])],
        [w16],
    )
    _, plan = plan_for(model, "allow_mix_precision")  # sanity: the graph itself is fine
    assert plan.decisions()[0].dtype == "float16"
    lib = library({"MatMul": "white"}, dtypes=("float32",))
    ir_model, _ = plan_for(model, "force_fp32", lib)
    from ampconfig.precision_modes import PrecisionMode

    with pytest.raises(AmpconfigError, match=r"half_fc \(MatMul, float16\)"):
        build_plan(ir_model, DecisionContext(PrecisionMode.MUST_KEEP_ORIGIN_DTYPE, lib.lists(), lib))


def test_out_of_range_constants_are_clamped_and_counted() -> None:
    big = numpy_helper.from_array(np.array([[1e6, 1.0], [2.0, -7e4]], dtype=np.float32), "w")
    model = make_model(
        [oh.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
        [tensor("x", FLOAT, [2, 2])],
        [tensor("y", FLOAT, [2, 2])],
        [big],
    )
    # By default no value changes: the MatMul reading them keeps float32 (rule value_out_of_range).
    kept = rewrite_model_detailed(model, "force_fp16", target=TARGET)
    (fc,) = kept.decisions
    assert (fc.dtype, fc.rule.value, fc.cause) == ("float32", "value_out_of_range", "w")
    assert "1e+06" in fc.reason and kept.stats.values_clamped == 0
    (warning,) = kept.warnings  # the one node kept float32: the mode lowered nothing, and says why
    assert warning.startswith("no node computes in float16") and "value_out_of_range 1" in warning
    assert numpy_helper.to_array(kept.model.graph.initializer[0]).dtype == np.float32
    # Asked for, the values are clamped, counted, and each clamped tensor is a warning naming it.
    result = rewrite_model_detailed(model, "force_fp16", target=TARGET, clamp_values=True)
    assert result.stats.values_clamped == 2
    (w,) = [numpy_helper.to_array(t) for t in result.model.graph.initializer]
    assert w.dtype == np.float16 and w[0, 0] == np.float16(65504) and w[1, 1] == np.float16(-65504)
    assert result.warnings == [
        "2 value(s) of 'w' beyond float16's range (largest |x| = 1e+06) clamped to float16's largest finite value"
    ]


@pytest.mark.parametrize("mode", ["force_fp16", "allow_mix_precision"])
def test_large_weight_converted_at_write_is_clamped_counted_once_and_keeps_nans(mode: str) -> None:
    from ampconfig.rewrite.tensors import LAZY_CONVERSION_BYTES

    rows = LAZY_CONVERSION_BYTES // (4 * 64) + 1  # just over the size converted while the output is written
    weight = np.random.default_rng(0).standard_normal((rows, 64)).astype(np.float32)
    weight[0, :4] = [1e6, -7e4, np.nan, np.inf]
    model = make_model(
        [oh.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
        [tensor("x", FLOAT, [2, rows])],
        [tensor("y", FLOAT, [2, 64])],
        [numpy_helper.from_array(weight, "w")],
    )
    result = rewrite_model_detailed(model, mode, target=TARGET, clamp_values=True)
    assert result.stats.values_clamped == 2  # the finite out-of-range values; inf stays inf
    ir.serde.serialize_model(result.ir_model)  # a second serialisation converts again but counts nothing new
    assert result.stats.values_clamped == 2 and len(result.warnings) == 1  # one tensor, one warning
    (w,) = [numpy_helper.to_array(t) for t in result.model.graph.initializer]
    assert w.dtype == np.float16 and w[0, 0] == np.float16(65504) and w[0, 1] == np.float16(-65504)
    assert np.isnan(w[0, 2]) and w[0, 3] == np.inf
    np.testing.assert_array_equal(w[1:], weight[1:].astype(np.float16))
    assert numpy_helper.to_array(model.graph.initializer[0]).dtype == np.float32  # the input is untouched


def test_constant_node_shared_by_fp32_and_fp16_consumers() -> None:
    nodes = [
        oh.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.full((4, 4), 0.25, np.float32)), name="c"),
        oh.make_node("MatMul", ["x", "c"], ["m"], name="fc"),
        oh.make_node("Exp", ["c"], ["s"], name="exp"),
        oh.make_node("MatMul", ["m", "s"], ["y"], name="fc2"),
    ]
    model = make_model(nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [2, 4])])
    result = rewrite_model_detailed(model, "allow_mix_precision", target=TARGET)
    constants = [n for n in result.model.graph.node if n.op_type == "Constant"]
    assert sorted(n.attribute[0].t.data_type for n in constants) == [FLOAT, FLOAT16]
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    valid_and_close(model, result.model, {"x": x})


def test_bf16_on_old_opset_raises_opset_and_says_so() -> None:
    nodes = [oh.make_node("MatMul", ["x", "w"], ["m"], name="fc"), oh.make_node("Relu", ["m"], ["y"], name="relu")]
    model = make_model(nodes, [tensor("x", FLOAT, [2, 4])], [tensor("y", FLOAT, [2, 4])], [weight("w", 4, 4)], opset=11)
    result = rewrite_model_detailed(model, "allow_mix_precision_bf16", target=TARGET)
    assert result.stats.opset_raised_to == 13
    assert any("opset raised from 11 to 13" in w for w in result.warnings)
    onnx.checker.check_model(result.model, full_check=True)


def test_invalid_input_model_is_a_clear_error(tmp_path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(transformer_block().SerializeToString()[:200])
    with pytest.raises(AmpconfigError, match="cannot read model"):
        rewrite_model(broken, "force_fp16")
    nodes = [oh.make_node("Relu", ["missing"], ["y"], name="relu")]
    graph = oh.make_graph(nodes, "bad", [tensor("x", FLOAT, [2])], [tensor("y", FLOAT, [2])])
    bad = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    bad.ir_version = 10
    with pytest.raises(AmpconfigError, match="not a valid ONNX model"):
        rewrite_model(bad, "force_fp16")


def test_cpu_accuracy_copy_rounds_like_float16_hardware() -> None:
    from ampconfig.engine.typing_chain import TYPING
    from ampconfig.instrument.rounding import low_precision_rounding_model

    nodes = [
        oh.make_node("Mul", ["x", "x"], ["sq"], name="square"),
        oh.make_node("Mul", ["sq", "scale"], ["y"], name="scale_down"),
    ]
    model = make_model(nodes, [tensor("x", FLOAT, [2])], [tensor("y", FLOAT, [2])], [const("scale", [1e-3, 1e-3])])
    rewritten = rewrite_model(model, "force_fp16", target="cpu")
    x = {"x": np.array([300.0, 2.0], dtype=np.float32)}
    # ORT's CPU provider computes both fp16 Muls in fp32 and drops the rounding in between: 300^2 = 90000 never
    # overflows float16 there, although float16 storage cannot hold it.
    assert run(rewritten, x)[0][0] == pytest.approx(90.0, rel=1e-3)
    faithful, wrapped = low_precision_rounding_model(rewritten, TYPING)
    onnx.checker.check_model(faithful, full_check=True)
    assert wrapped == 2
    got = run(faithful, x)[0]
    assert np.isinf(got[0])  # 90000 stored as float16 is inf, as on a GPU
    assert got[1] == pytest.approx(4e-3, rel=1e-3)


# ---------------------------------------------------------------------------------- declarations (issue 35)
def _outputs(model: onnx.ModelProto) -> list[bytes]:
    return [value.SerializeToString() for value in model.graph.output]


def _declared(model: onnx.ModelProto) -> dict[str, list[int | str] | None]:
    """Every main-graph value_info entry's shape (None: it declares a type only)."""
    return {
        entry.name: None if (shape := declared_shape(entry.type)) is None else list(shape)
        for entry in model.graph.value_info
    }


#: The shared-size models whose casts are in the main graph (the If's are in its branches).
MAIN_GRAPH_CASTS = sorted(set(SHARED_SIZE_MODELS) - {"shared_size_if_branches"})


@pytest.mark.parametrize("name", MAIN_GRAPH_CASTS)
def test_a_cast_around_an_output_or_input_declares_no_shape_and_the_outputs_keep_theirs(name: str) -> None:
    """The float16 value feeding an output's Cast once took the output's ``[N]``, and an input's Cast the input's:
    ONNX Runtime then planned a 24-element Concat into a freed 14-element buffer."""
    model = SHARED_SIZE_MODELS[name]()
    rewritten = rewrite_model(model, "force_fp16", target=TARGET)
    assert added_shape_claims(model, rewritten) == []
    assert _outputs(rewritten) == _outputs(model)
    declared = _declared(rewritten)
    fed_to_outputs = [
        node.input[0]
        for node in rewritten.graph.node
        if node.op_type == "Cast" and node.output[0] in {v.name for v in model.graph.output}
    ]
    assert fed_to_outputs and all(declared[value] is None for value in fed_to_outputs)
    cast_inputs = [
        node.output[0]
        for node in rewritten.graph.node
        if node.op_type == "Cast" and node.input[0] in {v.name for v in model.graph.input}
    ]
    assert all(declared[value] is None for value in cast_inputs)


def test_a_subgraph_output_cast_keeps_the_declaration_and_the_value_it_reads_has_none() -> None:
    model = shared_size_if_branches_model()
    rewritten = rewrite_model(model, "force_fp16", target=TARGET)
    assert added_shape_claims(model, rewritten) == []
    (choose,) = [node for node in rewritten.graph.node if node.op_type == "If"]
    for branch in (attribute.g for attribute in choose.attribute):
        (output,) = branch.output
        cast = next(node for node in branch.node if node.output[0] == output.name)
        assert cast.op_type == "Cast" and declared_shape(output.type) == ("N",)
        (read,) = [entry for entry in branch.value_info if entry.name == cast.input[0]]
        assert read.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 and declared_shape(read.type) is None


def test_rewriting_a_float16_rewrite_back_to_float32_gives_each_output_its_own_declaration() -> None:
    # The Cast before each output is dropped as a no-op and its input takes the output's place: with the
    # output's declaration, not the declaration (none) of the value that took it.
    model = shared_size_two_outputs_model()
    back = rewrite_model(rewrite_model(model, "force_fp16", target=TARGET), "force_fp32", target=TARGET)
    assert [node.op_type for node in back.graph.node] == [node.op_type for node in model.graph.node]
    assert _outputs(back) == _outputs(model)
    assert added_shape_claims(model, back) == []


@pytest.mark.parametrize("mode", [mode.value for mode in PrecisionMode])
def test_shared_size_models_are_rewritten_idempotently(mode: str) -> None:
    for build in SHARED_SIZE_MODELS.values():
        once = rewrite_model(build(), mode, target="cuda")
        assert rewrite_model(once, mode, target="cuda").SerializeToString() == once.SerializeToString()


def test_converted_copies_of_constants_declare_no_shape() -> None:
    """A weight and a Constant read by a node kept float32 and by one going float16 get a float16 copy each: the
    weight's copy declares its own tensor's dimensions, the Constant's copy nothing (not the [4] declared for c)."""
    nodes = [
        oh.make_node("Constant", [], ["c"], name="c", value=numpy_helper.from_array(np.full(4, 0.5, np.float32))),
        oh.make_node("Mul", ["x", "w"], ["xw"], name="kept_w"),
        oh.make_node("Mul", ["x", "w"], ["xw_low"], name="low_w"),
        oh.make_node("Add", ["xw", "c"], ["kept"], name="kept_c"),
        oh.make_node("Add", ["xw_low", "c"], ["low"], name="low_c"),
        oh.make_node("Add", ["kept", "low"], ["y"], name="sum"),
    ]
    model = make_model(nodes, [tensor("x", FLOAT, ["N", 4])], [tensor("y", FLOAT, ["N", 4])], [weight("w", 4)])
    model.graph.value_info.append(tensor("c", FLOAT, [4]))
    onnx.checker.check_model(model, full_check=True)
    rewritten = rewrite_model(model, "force_fp16", keep_dtype=["kept_w", "kept_c", "sum"], target=TARGET)
    initializers = {tensor.name: tensor for tensor in rewritten.graph.initializer}
    constants = {node.output[0] for node in rewritten.graph.node if node.op_type == "Constant"}
    assert {"w", "c"} < initializers.keys() | constants and len(initializers) + len(constants) == 4  # one copy each
    assert added_shape_claims(model, rewritten) == []
    declared = _declared(rewritten)
    (copy,) = constants - {"c"}
    assert declared.get(copy) is None and declared["c"] == [4]
    x = {"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)}
    valid_and_close(model, rewritten, x)
