"""Which nodes the full checker rejects, traced by checking each node in a small model of its own: the verdicts,
not the checker's wording, decide."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

from ampconfig.model_io.node_checks import BATCH_NODES, NodePieces, check_output, passes_checker
from tests.graphs import FLOAT, FLOAT16, IR_VERSION, tensor


def _model(nodes: list[onnx.NodeProto], value_info: Sequence[onnx.ValueInfoProto] = ()) -> onnx.ModelProto:
    """A chain over x [4, 4] ending in y, not checked (some are meant to be rejected)."""
    graph = oh.make_graph(nodes, "g", [tensor("x", FLOAT, [4, 4])], [tensor("y", FLOAT, [4, 4])], value_info=value_info)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def _bernoulli_declared_float16() -> onnx.ModelProto:
    """Bernoulli's ``dtype`` attribute says float32, its output is declared float16: the checker rejects the node.
    Every other node is fine."""
    return _model(
        [
            oh.make_node("Sigmoid", ["x"], ["p"], name="sigmoid"),
            oh.make_node("Bernoulli", ["p"], ["b"], name="bernoulli", dtype=TensorProto.FLOAT),
            oh.make_node("Cast", ["b"], ["b32"], name="cast", to=FLOAT),
            oh.make_node("Add", ["b32", "x"], ["y"], name="add"),
        ],
        [tensor("b", FLOAT16, [4, 4])],
    )


def test_the_node_the_checker_rejects_is_found_by_its_piece() -> None:
    model = _bernoulli_declared_float16()
    assert not passes_checker(model)  # the premise: the whole model is rejected
    pieces = NodePieces(model)
    assert pieces.rejected(pieces.names) == ["bernoulli"]
    assert pieces.rejected(["sigmoid", "add", "no such node"]) == []


def test_a_value_of_unknown_rank_feeds_a_piece_as_it_is() -> None:
    """A Reshape by a computed shape leaves its output's rank unknown: a graph input cannot say that, so the piece
    reads it through a reshape of its own, and the node that reads it passes as it does in the model."""
    model = _model(
        [
            oh.make_node("Shape", ["x"], ["s"], name="shape"),
            oh.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
            oh.make_node("Relu", ["r"], ["q"], name="relu"),
            oh.make_node("Add", ["q", "x"], ["y"], name="add"),
        ]
    )
    assert passes_checker(model)
    pieces = NodePieces(model)
    assert pieces.rejected(pieces.names) == []


def test_many_nodes_are_checked_in_batches_and_each_rejected_one_found() -> None:
    """More nodes than one batch holds, two of them rejected (a Bernoulli as above, its Cast back reading the
    declared float16 as it does in the model), in different batches."""
    nodes, value_info, last = [], [], "x"
    for index in range(BATCH_NODES + 20):
        if index in (3, BATCH_NODES + 5):
            nodes.append(oh.make_node("Bernoulli", [last], [f"b{index}"], name=f"bernoulli_{index}", dtype=FLOAT))
            nodes.append(oh.make_node("Cast", [f"b{index}"], [f"v{index}"], name=f"cast_{index}", to=FLOAT))
            value_info.append(tensor(f"b{index}", FLOAT16, [4, 4]))
        else:
            nodes.append(oh.make_node("Sigmoid", [last], [f"v{index}"], name=f"sigmoid_{index}"))
        last = f"v{index}"
    nodes.append(oh.make_node("Identity", [last], ["y"], name="last"))
    pieces = NodePieces(_model(nodes, value_info))
    assert pieces.rejected(pieces.names) == ["bernoulli_3", f"bernoulli_{BATCH_NODES + 5}"]


def test_a_node_with_a_subgraph_reads_the_outer_scope_in_its_piece() -> None:
    branch = oh.make_graph([oh.make_node("Relu", ["x"], ["z"], name="inner")], "b", [], [tensor("z", FLOAT, [4, 4])])
    model = _model(
        [
            oh.make_node("ReduceSum", ["x"], ["total"], name="sum", keepdims=0),
            oh.make_node("Greater", ["total", "zero"], ["cond"], name="greater"),
            oh.make_node("If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=branch),
        ]
    )
    model.graph.initializer.append(oh.make_tensor("zero", FLOAT, [], [0.0]))
    assert passes_checker(model)
    pieces = NodePieces(model)
    assert pieces.rejected(pieces.names) == []
    assert "inner" in pieces.names  # nodes of subgraphs are judged too


def test_a_clean_input_any_complaint_is_new_and_traced_to_changed_nodes() -> None:
    output = _bernoulli_declared_float16()
    reference = _model(
        [
            oh.make_node("Sigmoid", ["x"], ["p"], name="sigmoid"),
            oh.make_node("Bernoulli", ["p"], ["b"], name="bernoulli", dtype=TensorProto.FLOAT),
            oh.make_node("Add", ["b", "x"], ["y"], name="add"),
        ]
    )
    check = check_output(output, ["bernoulli", "sigmoid"], lambda: NodePieces(reference))
    assert check.complaint and set(check.rejected) == {"bernoulli"} and check.located
    # A rejected node the rewrite did not change cannot be repaired by keeping it: not located.
    unrepairable = check_output(output, ["sigmoid"], lambda: NodePieces(reference))
    assert unrepairable.complaint and not unrepairable.rejected and not unrepairable.located
    assert (
        check_output(reference, ["bernoulli"], lambda: pytest.fail("not needed for a valid output")).complaint is None
    )


def test_an_input_with_complaints_is_held_only_to_them() -> None:
    """The input declares a stale shape for one value (the checker rejects it); its rewrite keeps that complaint
    and adds the Bernoulli one: only the new one counts, and its node is named."""
    stale = tensor("q", FLOAT, [4, 5])
    reference = _model(
        [
            oh.make_node("Relu", ["x"], ["q"], name="relu"),
            oh.make_node("Sigmoid", ["q"], ["p"], name="sigmoid"),
            oh.make_node("Bernoulli", ["p"], ["b"], name="bernoulli", dtype=TensorProto.FLOAT),
            oh.make_node("Add", ["b", "x"], ["y"], name="add"),
        ],
        [stale],
    )
    assert not passes_checker(reference)
    same = check_output(reference, ["relu"], lambda: NodePieces(reference), input_passes=False)
    assert same.complaint is None
    output = _bernoulli_declared_float16()
    output.graph.node.insert(0, oh.make_node("Relu", ["x"], ["q"], name="relu"))
    output.graph.node[1].input[0] = "q"
    output.graph.value_info.append(stale)
    check = check_output(output, ["bernoulli", "relu"], lambda: NodePieces(reference), input_passes=False)
    assert check.complaint is not None and check.complaint.startswith("node bernoulli: ")
    assert set(check.rejected) == {"bernoulli"} and check.located
