"""Step 3b, read the weights: a large float32 weight held in a protobuf message is read once, before the decision,
for both the values check and the float16 conversion. The decisions and the output's bytes are those of the same
rewrite reading each weight where it is used (the weights given as arrays in memory, which the step leaves alone)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.contracts import PostconditionBroken
from ampconfig.decide.measured_facts import MeasuredFacts
from ampconfig.decide.rewrite_options import RewriteOptions
from ampconfig.engine.read_settings import read_options
from ampconfig.model_io.ir_bridge import to_ir
from ampconfig.model_io.models import light_proto
from ampconfig.rewrite.pipeline import steps
from ampconfig.rewrite.steps.admit_input import AdmitInputPass
from ampconfig.rewrite.steps.read_weights import ReadWeightsPass
from ampconfig.rewrite.steps.run_context import Admission, InputAdmission, RewriteRun
from ampconfig.rewrite.tensors import LAZY_CONVERSION_BYTES
from tests.graphs import make_model, tensor

_SIDE = 512  # a 512 x 512 float32 weight is 1 MiB: converted when written
assert _SIDE * _SIDE * 4 >= LAZY_CONVERSION_BYTES


def _weights_model() -> onnx.ModelProto:
    """Three MatMuls on large weights: one within float16's range, one holding 1e6 (its node stays float32: rule
    value_out_of_range), one holding a float32 sentinel (-3.4e38: saturated, decides nothing), and a small one."""
    rng = np.random.default_rng(7)
    arrays = {name: rng.standard_normal((_SIDE, _SIDE)).astype(np.float32) for name in ("fits", "beyond", "sentinel")}
    arrays["beyond"][3, 5] = 1e6
    arrays["sentinel"][0, 0] = -3.4e38
    arrays["small"] = rng.standard_normal((_SIDE, 4)).astype(np.float32)
    nodes = [
        oh.make_node("MatMul", ["x", "fits"], ["a"], name="fits_mm"),
        oh.make_node("MatMul", ["a", "beyond"], ["b"], name="beyond_mm"),
        oh.make_node("MatMul", ["b", "sentinel"], ["c"], name="sentinel_mm"),
        oh.make_node("MatMul", ["c", "small"], ["y"], name="small_mm"),
    ]
    initializers = [numpy_helper.from_array(array, name) for name, array in arrays.items()]
    return make_model(
        nodes, [tensor("x", TensorProto.FLOAT, [2, _SIDE])], [tensor("y", TensorProto.FLOAT, [2, 4])], initializers
    )


def _rewritten(proto: onnx.ModelProto, mode: str, as_arrays: bool) -> tuple[list[tuple[str, str]], bytes, RewriteRun]:
    """The rewrite's steps on ``proto``: each node's dtype and rule, the output's bytes and the run. With
    ``as_arrays`` every initializer is an in-memory array first (nothing read ahead)."""
    model = to_ir(proto)
    if as_arrays:
        for value in model.graph.initializers.values():
            assert value.const_value is not None
            value.const_value = ir.Tensor(value.const_value.numpy().copy(), name=value.name)
    admission = InputAdmission(light_proto(proto))
    AdmitInputPass(admission)(model)
    setup = read_options(RewriteOptions.of(mode, target="cuda")).setup(MeasuredFacts())  # type: ignore[arg-type]
    run = RewriteRun(setup, Admission(admission.types, True, lambda: None), {})  # type: ignore[arg-type]
    steps(run)(model)
    assert run.skeleton is not None
    decisions = [(decision.name, f"{decision.dtype} {decision.rule.value}") for decision in run.decisions]
    return decisions, run.skeleton.full_proto().SerializeToString(), run


@pytest.mark.parametrize("mode", ["force_fp16", "allow_mix_precision", "allow_mix_precision_bf16", "force_fp32"])
def test_weights_read_ahead_give_the_decisions_and_bytes_of_weights_read_where_used(mode: str) -> None:
    proto = _weights_model()
    decisions, output, run = _rewritten(proto, mode, as_arrays=False)
    assert run.weights is not None
    if mode in ("force_fp16", "allow_mix_precision"):
        assert sorted(weight.name or "" for weight in run.weights.bounds) == ["beyond", "fits", "sentinel"]
        assert run.weights.float16 == {}  # each handed to the conversion, or let go after it
        assert ("beyond_mm", "float32 value_out_of_range") in decisions
    else:  # lowers nothing, or to bfloat16: nothing read ahead
        assert run.weights.bounds == {} and run.weights.float16 == {}
    assert (decisions, output) == _rewritten(proto, mode, as_arrays=True)[:2]


def test_the_read_ensures_it_left_its_reads() -> None:
    proto = _weights_model()
    _, _, run = _rewritten(proto, "force_fp16", as_arrays=False)
    run.weights = None
    with pytest.raises(PostconditionBroken, match="no reads"):
        ReadWeightsPass(run).ensures(to_ir(proto))
