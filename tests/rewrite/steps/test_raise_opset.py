"""Raising the opset for bfloat16 (ampconfig/rewrite/steps/raise_opset.py): ONNX's version converter infers shapes
and writes them as declarations; the converted model keeps the input's declarations and no others."""

from __future__ import annotations

import onnx
from onnx import helper as oh

from ampconfig import rewrite_model_detailed
from tests.graphs import FLOAT, IR_VERSION, tensor, weight
from tests.shape_claims import added_shape_claims, declared_shape


def _opset_11_model() -> onnx.ModelProto:
    """a [N, 4], b [N, 4] -> Max, Relu / Max -> Concat -> MatMul -> y [N, 4]; the input declares ``relu`` only."""
    nodes = [
        oh.make_node("Max", ["a", "a"], ["a_max"], name="max_a"),
        oh.make_node("Relu", ["a_max"], ["relu"], name="relu"),
        oh.make_node("Max", ["b", "b"], ["b_max"], name="max_b"),
        oh.make_node("Concat", ["relu", "b_max"], ["joined"], name="concat", axis=0),
        oh.make_node("MatMul", ["joined", "w"], ["y"], name="mm"),
    ]
    graph = oh.make_graph(
        nodes,
        "opset_11",
        [tensor("a", FLOAT, ["N", 4]), tensor("b", FLOAT, ["N", 4])],
        [tensor("y", FLOAT, ["N", 4])],
        [weight("w", 4, 4)],
        value_info=[tensor("relu", FLOAT, ["N", 4])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 11)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def test_the_converted_model_declares_what_the_input_declared_and_nothing_more() -> None:
    model = _opset_11_model()
    result = rewrite_model_detailed(model, "allow_mix_precision_bf16", target="cuda")
    assert result.stats.opset_raised_to == 13
    rewritten = result.model
    assert added_shape_claims(model, rewritten) == []  # the converter inferred [N, 4] for a_max, b_max, joined
    shapes = {entry.name: declared_shape(entry.type) for entry in rewritten.graph.value_info}
    assert shapes["relu"] == ("N", 4)  # the input's own declaration stays
    assert shapes["a_max"] is None and shapes["joined"] is None
    onnx.checker.check_model(rewritten, full_check=True)
