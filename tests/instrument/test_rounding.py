"""The CPU accuracy copy (ampconfig/instrument/rounding.py): a float16 node the CPU provider has no kernel for computes
in float32 between explicit casts. The value it renames (``s`` becomes ``s_fp32``) gives its declaration to the
rounded value that takes its name, and the casts declare no shape: the copy claims nothing the rewrite did not."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper as oh

from ampconfig import rewrite_model
from ampconfig.engine.typing_chain import TYPING
from ampconfig.instrument.rounding import low_precision_rounding_model
from tests.graphs import FLOAT, make_model, run, tensor
from tests.shape_claims import added_shape_claims, declared_shape


def _declared_sigmoids() -> onnx.ModelProto:
    """a [N], b [N] -> Sigmoid each (declared [N]) -> Concat -> Sigmoid -> y [N]."""
    nodes = [
        oh.make_node("Sigmoid", ["a"], ["sa"], name="sigmoid_a"),
        oh.make_node("Sigmoid", ["b"], ["sb"], name="sigmoid_b"),
        oh.make_node("Concat", ["sa", "sb"], ["joined"], name="concat", axis=0),
        oh.make_node("Sigmoid", ["joined"], ["y"], name="sigmoid_y"),
    ]
    model = make_model(nodes, [tensor("a", FLOAT, ["N"]), tensor("b", FLOAT, ["N"])], [tensor("y", FLOAT, ["N"])])
    model.graph.value_info.extend([tensor("sa", FLOAT, ["N"]), tensor("sb", FLOAT, ["N"])])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_the_copy_declares_nothing_the_rewrite_did_not_and_runs_on_sizes_that_differ() -> None:
    model = _declared_sigmoids()
    rewritten = rewrite_model(model, "force_fp16", target="cpu")
    copy, wrapped = low_precision_rounding_model(rewritten, TYPING)
    assert wrapped == 3  # every Sigmoid: the CPU provider has no float16 Sigmoid
    assert added_shape_claims(rewritten, copy) == []
    shapes = {entry.name: declared_shape(entry.type) for entry in copy.graph.value_info}
    assert shapes["sa"] == ("N",) and shapes["sa_fp32"] is None  # the rounded sa keeps sa's declaration
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal(10).astype(np.float32), "b": rng.standard_normal(14).astype(np.float32)}
    (got,), (want,) = run(copy, feeds), run(model, feeds)
    np.testing.assert_allclose(got, want, atol=2e-3)
