"""ONNX Runtime as the judge of a rewrite whose input the ONNX checker rejects (runner/acceptance.py): a rewrite for
another target whose only refusal on the CPU is a missing kernel is resolved, not refused; anything else ONNX
Runtime refuses stays a failure, for every target."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh

from ampconfig import rewrite_model_detailed
from ampconfig.errors import AmpconfigError
from ampconfig.runner.acceptance import check_output_runs, load_check
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
        assert load_check(_type_error(), target).refusal is not None


def test_an_input_for_cuda_is_accepted_when_only_a_cpu_kernel_is_missing() -> None:
    resolved = load_check(_matmul(TensorProto.BFLOAT16), "cuda")
    assert resolved.refusal is None and not resolved.loaded
    assert "resolves its graph" in resolved.accepted("cuda") and "cuda" in resolved.accepted("cuda")
    assert load_check(_matmul(TensorProto.BFLOAT16), "cpu").refusal is not None
    assert load_check(_matmul(TensorProto.FLOAT), "cpu") == load_check(_matmul(TensorProto.FLOAT), "cuda")
    assert load_check(_matmul(TensorProto.FLOAT), "cpu").accepted("cpu") == "ONNX Runtime loads it"


def _checker_rejected_bfloat16() -> onnx.ModelProto:
    """A bfloat16 MatMul whose output declares a shape it does not compute: the checker rejects it, ONNX Runtime
    resolves it, and its CPU provider has no bfloat16 MatMul."""
    model = _matmul(TensorProto.BFLOAT16)
    del model.graph.output[:]
    model.graph.output.append(oh.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 10]))
    return model


def test_a_checker_rejected_input_for_cuda_says_it_was_resolved_not_loaded() -> None:
    result = rewrite_model_detailed(_checker_rejected_bfloat16(), "allow_mix_precision_bf16", target="cuda")
    note = next(warning for warning in result.warnings if "does not pass the ONNX checker" in warning)
    assert "ONNX Runtime resolves its graph" in note and "ONNX Runtime loads it" not in note
    assert "is resolved by ONNX Runtime" in note


def test_the_same_input_for_the_cpu_is_refused_naming_the_node() -> None:
    with pytest.raises(AmpconfigError, match="ONNX Runtime cannot load it either") as refused:
        rewrite_model_detailed(_checker_rejected_bfloat16(), "allow_mix_precision_bf16", target="cpu")
    assert "scores" in refused.value.message
