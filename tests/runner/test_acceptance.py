"""ONNX Runtime as the judge of a rewrite whose input the ONNX checker rejects (runner/acceptance.py): a rewrite for
another target whose only refusal on the CPU is a missing kernel is resolved, not refused; anything else ONNX
Runtime refuses stays a failure, for every target."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

from ampconfig.runner.acceptance import check_output_runs, load_failure
from ampconfig.runner.sessions import KernelMissing, create_session


def _matmul(dtype: int) -> onnx.ModelProto:
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["a", "b"], ["y"], name="scores")],
        "matmul",
        [oh.make_tensor_value_info("a", dtype, [2, 3]), oh.make_tensor_value_info("b", dtype, [3, 4])],
        [oh.make_tensor_value_info("y", dtype, [2, 4])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=9)


def _type_error() -> onnx.ModelProto:
    """A graph ONNX Runtime does not resolve: Relu has no int8 in its schema."""
    graph = oh.make_graph(
        [oh.make_node("Relu", ["a"], ["y"], name="relu")],
        "bad",
        [oh.make_tensor_value_info("a", TensorProto.INT8, [2])],
        [oh.make_tensor_value_info("y", TensorProto.INT8, [2])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)], ir_version=9)


def test_a_missing_cpu_kernel_is_its_own_refusal() -> None:
    with pytest.raises(KernelMissing, match="scores"):
        create_session(_matmul(TensorProto.BFLOAT16), "cpu", what="a bfloat16 MatMul")


def test_a_rewrite_for_cuda_whose_cpu_kernel_is_missing_is_resolved_not_refused() -> None:
    check = check_output_runs(_matmul(TensorProto.FLOAT), _matmul(TensorProto.BFLOAT16), "cuda")
    assert check.failure is None and not check.ran and not check.loaded
    assert "cuda" in check.proof() and "scores" in check.proof()


def test_the_same_rewrite_for_the_cpu_is_worse_than_its_input() -> None:
    check = check_output_runs(_matmul(TensorProto.FLOAT), _matmul(TensorProto.BFLOAT16), "cpu")
    assert check.failure is not None and "scores" in check.failure


def test_a_graph_onnx_runtime_does_not_resolve_fails_for_every_target() -> None:
    for target in ("cpu", "cuda"):
        assert check_output_runs(_matmul(TensorProto.FLOAT), _type_error(), target).failure is not None
        assert load_failure(_type_error(), target) is not None


def test_an_input_for_cuda_is_accepted_when_only_a_cpu_kernel_is_missing() -> None:
    assert load_failure(_matmul(TensorProto.BFLOAT16), "cuda") is None
    assert load_failure(_matmul(TensorProto.BFLOAT16), "cpu") is not None
