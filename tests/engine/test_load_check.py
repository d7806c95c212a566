"""prove.load_check: the load check every written model passes, on real ONNX Runtime refusals (no fault injected):
op info that claims kernels the CPU provider lacks is repaired by the API itself (the nodes ONNX Runtime refuses keep
their dtype), and an op ONNX Runtime does not know at all, which no dtype explains, is written with a warning, not
refused. The crash cases (real SIGSEGVs injected from the tests) are in tests/cli/test_rewrite_cmd.py,
tests/test_api.py and tests/test_ir_pass.py."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from ampconfig.api import rewrite_model_detailed
from ampconfig.decide.decisions import Rule
from ampconfig.runner.sessions import create_session
from tests.engine.test_safety_net import COLOURS, _resize_model
from tests.graphs import library


def test_op_info_claiming_kernels_the_cpu_lacks_is_repaired_before_the_api_returns() -> None:
    """On main the API returned bfloat16 nodes ONNX Runtime's CPU provider refuses to load."""
    lib = library(COLOURS, ("float32", "bfloat16"))
    result = rewrite_model_detailed(_resize_model(), "allow_mix_precision_bf16", op_info=lib)
    kept = {d.name for d in result.decisions if d.rule is Rule.RUNTIME_REFUSES}
    assert kept and kept <= {"mm", "reshape", "resize", "relu"}
    said = [w for w in result.warnings if "(rule runtime_refuses): ONNX Runtime refused it while loading" in w]
    assert len(said) == len(kept)
    assert create_session(result.model, "cpu").output_names == ["y"]  # it loads now


def _unknown_op_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Frobnicate", ["r"], ["f"], name="frob", domain="com.example"),
            helper.make_node("Sigmoid", ["f"], ["y"], name="sigmoid"),
        ],
        "unknown_op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        value_info=[helper.make_tensor_value_info("f", TensorProto.FLOAT, [2, 3])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def test_an_op_onnx_runtime_does_not_know_is_written_as_decided_with_a_warning() -> None:
    result = rewrite_model_detailed(_unknown_op_model(), "force_fp16", target="cpu")
    assert {d.name: d.dtype for d in result.decisions if d.changed} == {"relu": "float16", "sigmoid": "float16"}
    said = [w for w in result.warnings if "refuses the written model" in w]
    assert said == [
        "ONNX Runtime's CPUExecutionProvider refuses the written model (Fatal error: com.example:Frobnicate(-1) is "
        "not a registered function/op), and ampconfig found no node it lowered that causes it (keeping every node "
        "ampconfig lowered did not help): the model is written as decided; it loads where ONNX Runtime knows all "
        "its ops"
    ]
