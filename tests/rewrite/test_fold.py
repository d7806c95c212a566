"""Folding written-out LayerNorms into LayerNormalization (ampconfig/rewrite/fold.py): what folds, what must not,
and that the folded model computes the same function."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as oh

from ampconfig import rewrite_model_detailed
from tests.graphs import FLOAT, const, make_model, rel_l2, run, tensor, weight

HIDDEN = 16


def _written_out_norm(
    *, square: str = "Pow", affine: bool = True, opset: int = 17, extra_use: bool = False, source: str = "h"
) -> onnx.ModelProto:
    """x -> MatMul -> [LayerNorm written out on ``source``] -> MatMul -> y, as exporters below opset 17 write it."""
    mean_axes = {"axes": [-1]} if opset < 18 else {}
    axes_inputs = [] if opset < 18 else ["axes"]
    nodes = [
        oh.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        oh.make_node("ReduceMean", [source, *axes_inputs], ["mean"], name="ln.mean", **mean_axes),
        oh.make_node("Sub", [source, "mean"], ["d"], name="ln.sub"),
        oh.make_node("Pow", ["d", "two"], ["sq"], name="ln.pow")
        if square == "Pow"
        else oh.make_node("Mul", ["d", "d"], ["sq"], name="ln.pow"),
        oh.make_node("ReduceMean", ["sq", *axes_inputs], ["var"], name="ln.var", **mean_axes),
        oh.make_node("Add", ["var", "eps"], ["ve"], name="ln.add_eps"),
        oh.make_node("Sqrt", ["ve"], ["std"], name="ln.sqrt"),
        oh.make_node("Div", ["d", "std"], ["n"], name="ln.div"),
    ]
    last = "n"
    if affine:
        nodes += [
            oh.make_node("Mul", ["n", "gamma"], ["scaled"], name="ln.scale"),
            oh.make_node("Add", ["scaled", "beta"], ["normed"], name="ln.shift"),
        ]
        last = "normed"
    nodes.append(oh.make_node("MatMul", [last, "w2"], ["y"], name="fc2"))
    outputs = [tensor("y", FLOAT, [2, 4, HIDDEN])]
    if extra_use:
        nodes.append(oh.make_node("Relu", ["d"], ["side"], name="side"))
        outputs.append(tensor("side", FLOAT, [2, 4, HIDDEN]))
    rng = np.random.default_rng(0)
    initializers = [
        weight("w1", HIDDEN, HIDDEN),
        weight("w2", HIDDEN, HIDDEN),
        const("two", 2.0),
        const("eps", 1e-5),
        const("gamma", 1.0 + 0.1 * rng.standard_normal(HIDDEN)),
        const("beta", 0.1 * rng.standard_normal(HIDDEN)),
    ]
    if opset >= 18:
        initializers.append(onnx.numpy_helper.from_array(np.array([-1], np.int64), "axes"))
    return make_model(nodes, [tensor("x", FLOAT, [2, 4, HIDDEN])], outputs, initializers, opset=opset)


def _feeds() -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(1).standard_normal((2, 4, HIDDEN)) * 3).astype(np.float32)}


@pytest.mark.parametrize(
    "variant",
    [{}, {"square": "Mul"}, {"affine": False, "source": "x"}, {"opset": 18}],
    ids=["pow", "mul_square", "no_affine", "opset18_axes_input"],
)
def test_a_written_out_layer_norm_folds_and_computes_the_same(variant: dict) -> None:
    model = _written_out_norm(**variant)
    result = rewrite_model_detailed(model, "allow_mix_precision", target="cuda")
    assert result.stats.layer_norms_folded == 1
    ops = [node.op_type for node in result.model.graph.node]
    assert ops.count("LayerNormalization") == 1 and "ReduceMean" not in ops and "Sqrt" not in ops
    norm = next(d for d in result.decisions if d.op_type == "LayerNormalization")
    # It follows its input like the op it is: low after the MatMul, float32 straight from the float32 graph input.
    assert norm.name == "ln.mean_folded_layer_norm"
    assert norm.dtype == ("float32" if variant.get("source") == "x" else "float16")
    onnx.checker.check_model(result.model, full_check=True)
    # The folded function is the same: in float32 it matches the written-out chain to rounding.
    exact = rewrite_model_detailed(model, "allow_mix_precision", target="cuda", modify_mixlist=_all_fp32())
    assert exact.stats.layer_norms_folded == 1
    assert rel_l2(run(exact.model, _feeds())[0], run(model, _feeds())[0]) < 1e-6
    assert rel_l2(run(result.model, _feeds())[0], run(model, _feeds())[0]) < 5e-3


def _all_fp32() -> dict:
    return {"black-list": {"to-add": ["MatMul", "LayerNormalization"]}}


def test_nothing_folds_below_opset_17_in_modes_that_keep_float32_or_with_an_outside_use() -> None:
    assert rewrite_model_detailed(_written_out_norm(opset=16), "force_fp16").stats.layer_norms_folded == 0
    for mode in ("force_fp32", "must_keep_origin_dtype", "allow_fp32_to_fp16"):
        assert rewrite_model_detailed(_written_out_norm(), mode).stats.layer_norms_folded == 0, mode
    # The centred value is used outside the chain: folding would lose it.
    assert rewrite_model_detailed(_written_out_norm(extra_use=True), "force_fp16").stats.layer_norms_folded == 0
    # No scale to reuse, and the axis size of an intermediate is not stated: no ones-vector can be made for it.
    assert rewrite_model_detailed(_written_out_norm(affine=False), "force_fp16").stats.layer_norms_folded == 0


def test_a_pinned_node_keeps_its_chain_written_out() -> None:
    model = _written_out_norm()
    result = rewrite_model_detailed(model, "allow_mix_precision", keep_dtype=["ln.sqrt"], target="cuda")
    assert result.stats.layer_norms_folded == 0
    assert next(d for d in result.decisions if d.name == "ln.sqrt").rule.value == "keep_dtype"
