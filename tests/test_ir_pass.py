"""ampconfig as an onnx-ir pass (ampconfig/ir_pass.py) and the public judgement hook (ampconfig/decide/judgements.py).

- MixedPrecisionPass keeps onnx-ir's PassBase contract (in place: the model handed in is rewritten), runs in a
  PassManager beside onnx-ir's own common passes, gives the model rewrite_model gives, and its decisions are
  reachable; a second run over its own output changes nothing, so a PassManager stops early.
- A judgement for a contrib op: "must stay float32" on com.microsoft::FastGelu (ONNX Runtime runs the result on the
  CPU), "safe in low precision, gamma and beta kept" on com.microsoft::GroupNorm; a kept input the schema ties to
  the output, and an unknown colour, are input errors; a mixlist that names the op wins over the judgement.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common
import pytest
from onnx import helper as oh

import ampconfig
from ampconfig import Judgement, MixedPrecisionPass, MixedPrecisionResult, rewrite_model, rewrite_model_detailed
from ampconfig.errors import AmpconfigError
from tests.graphs import FLOAT, IR_VERSION, rel_l2, run, tensor, transformer_block, weight

MS = "com.microsoft"
MIXED = "allow_mix_precision"


def _serialized(model: ir.Model | onnx.ModelProto) -> bytes:
    proto = ir.serde.serialize_model(model) if isinstance(model, ir.Model) else model
    return proto.SerializeToString(deterministic=True)


def test_the_pass_runs_in_a_pass_manager_beside_onnx_irs_own_passes() -> None:
    proto = transformer_block()
    model = ir.serde.deserialize_model(proto)
    mixed = MixedPrecisionPass(MIXED, target="cpu")
    assert mixed.in_place and mixed.changes_input  # in place, as onnx-ir defines it
    manager = ir.passes.PassManager(
        [common.RemoveUnusedNodesPass(), mixed, common.TopologicalSortPass(), common.CheckerPass(full_check=True)]
    )
    result = manager(model)
    assert result.modified and result.model is model  # the model handed in is the one rewritten
    assert mixed.result is not None
    decisions = {d.name: d for d in mixed.result.decisions}
    assert sum(d.changed for d in decisions.values()) > 0
    assert decisions == {d.name: d for d in rewrite_model_detailed(proto, MIXED, target="cpu").decisions}
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 8, 32)).astype(np.float32)}
    rewritten = ir.serde.serialize_model(result.model)
    for got, want in zip(run(rewritten, feeds), run(proto, feeds), strict=True):
        assert rel_l2(got, want) < 1e-2


def test_the_pass_gives_the_model_rewrite_model_gives_and_its_decisions_on_the_result() -> None:
    proto = transformer_block()
    result = MixedPrecisionPass("force_fp16", target="cuda")(ir.serde.deserialize_model(proto))
    assert isinstance(result, MixedPrecisionResult) and result.rewrite is not None
    assert _serialized(result.model) == _serialized(rewrite_model(proto, "force_fp16", target="cuda"))
    assert result.rewrite.stats.casts_inserted > 0 and result.rewrite.precision_mode == "force_fp16"


def test_an_option_rewrite_model_detailed_does_not_take_is_refused_when_the_pass_is_made() -> None:
    with pytest.raises(TypeError, match="keep_io_type"):
        MixedPrecisionPass(MIXED, keep_io_type=False)


def test_a_second_run_changes_nothing_and_a_pass_manager_stops_early() -> None:
    mixed = MixedPrecisionPass(MIXED, target="cuda")
    once = mixed(ir.serde.deserialize_model(transformer_block()))
    assert once.modified
    again = ir.passes.PassManager([mixed], steps=3)(once.model)
    assert not again.modified
    assert mixed.result is not None and not any(d.changed for d in mixed.result.decisions)


# ------------------------------------------------------------------------------------------------ judgements


def fast_gelu_model() -> onnx.ModelProto:
    """x -> MatMul (white) -> com.microsoft::FastGelu (gray in the op info) -> MatMul (white) -> y."""
    nodes = [
        oh.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        oh.make_node("FastGelu", ["h"], ["g"], name="gelu", domain=MS),
        oh.make_node("MatMul", ["g", "w2"], ["y"], name="mm2"),
    ]
    graph = oh.make_graph(
        nodes,
        "fast_gelu",
        [tensor("x", FLOAT, [2, 8])],
        [tensor("y", FLOAT, [2, 8])],
        [weight("w1", 8, 8), weight("w2", 8, 8)],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(MS, 1)], ir_version=IR_VERSION)


def _decision(model: onnx.ModelProto, name: str, **options: object) -> ampconfig.api.NodeDecision:
    result = rewrite_model_detailed(model, MIXED, target="cpu", **options)  # type: ignore[arg-type]
    return next(d for d in result.decisions if d.name == name)


def test_a_judgement_keeps_a_contrib_op_float32_and_onnx_runtime_runs_the_result() -> None:
    model = fast_gelu_model()
    assert _decision(model, "gelu").dtype == "float16"  # gray: it follows its low inputs
    judges = {f"{MS}::FastGelu": Judgement("black", "our FastGelu overflows float16 on long rows")}
    result = rewrite_model_detailed(model, MIXED, target="cpu", judges=judges)
    decisions = {d.name: d for d in result.decisions}
    gelu = decisions["gelu"]
    assert (gelu.dtype, gelu.colour, gelu.rule.value) == ("float32", "black", "black_list")
    assert gelu.reason == "our FastGelu overflows float16 on long rows"
    assert decisions["mm1"].dtype == decisions["mm2"].dtype == "float16"
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    assert rel_l2(run(result.model, {"x": x})[0], run(model, {"x": x})[0]) < 1e-2


def test_a_judge_function_judges_node_by_node_and_a_mixlist_naming_the_op_wins() -> None:
    def judge(node: ir.Node) -> Judgement | None:
        return Judgement("black", "this one node overflows") if node.name == "gelu" else None

    assert _decision(fast_gelu_model(), "gelu", judges={f"{MS}::FastGelu": judge}).dtype == "float32"
    mixlist = {"white-list": {"to-add": [f"{MS}::FastGelu"]}}
    decided = _decision(fast_gelu_model(), "gelu", judges={f"{MS}::FastGelu": judge}, modify_mixlist=mixlist)
    assert (decided.dtype, decided.colour) == ("float16", "white")


def group_norm_model() -> onnx.ModelProto:
    """x (NHWC) -> Mul -> com.microsoft::GroupNorm(gamma, beta), black in the cuda op info (torch autocast keeps
    group_norm float32). Its schema types gamma and beta ``M``, apart from ``X``/``Y`` (``T``)."""
    nodes = [
        oh.make_node("Mul", ["x", "two"], ["h"], name="scale"),
        oh.make_node(
            "GroupNorm", ["h", "gamma", "beta"], ["y"], name="norm", domain=MS, activation=0, epsilon=1e-5, groups=2
        ),
    ]
    inits = [
        onnx.numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two"),
        onnx.numpy_helper.from_array(np.ones(4, dtype=np.float32), "gamma"),
        onnx.numpy_helper.from_array(np.zeros(4, dtype=np.float32), "beta"),
    ]
    shape = [1, 2, 2, 4]
    graph = oh.make_graph(nodes, "group_norm", [tensor("x", FLOAT, shape)], [tensor("y", FLOAT, shape)], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(MS, 1)], ir_version=IR_VERSION)


def _input_types(model: onnx.ModelProto, node_name: str) -> list[int]:
    types = {init.name: init.data_type for init in model.graph.initializer}
    types |= {v.name: v.type.tensor_type.elem_type for v in (*model.graph.value_info, *model.graph.input)}
    node = next(n for n in model.graph.node if n.name == node_name)
    return [types[name] for name in node.input]


def test_a_judgement_lowers_a_contrib_op_and_keeps_its_float32_scale_and_bias() -> None:
    model = group_norm_model()
    plain = rewrite_model_detailed(model, "force_fp16", target="cuda")
    assert _input_types(plain.model, "norm") == [onnx.TensorProto.FLOAT16] * 3  # gamma and beta go along

    safe = Judgement("white", "ONNX Runtime's CUDA GroupNorm sums in float32", kept_inputs=(1, 2))
    for mode in (MIXED, "force_fp16"):
        result = rewrite_model_detailed(model, mode, target="cuda", judges={f"{MS}::GroupNorm": safe})
        norm = next(d for d in result.decisions if d.name == "norm")
        assert norm.dtype == "float16", (mode, norm)
        assert _input_types(result.model, "norm") == [
            onnx.TensorProto.FLOAT16,
            onnx.TensorProto.FLOAT,
            onnx.TensorProto.FLOAT,
        ]
    assert norm.reason != safe.reason  # force_fp16 paints nothing: the colour is the mixed modes' business
    mixed = rewrite_model_detailed(model, MIXED, target="cuda", judges={f"{MS}::GroupNorm": safe})
    assert next(d for d in mixed.decisions if d.name == "norm").reason == safe.reason
    assert rewrite_model_detailed(model, MIXED, target="cuda").decisions[-1].dtype == "float32"  # black without it


def test_keeping_an_input_the_schema_ties_to_the_output_is_an_input_error() -> None:
    model = fast_gelu_model()
    tied = {f"{MS}::FastGelu": Judgement("white", "safe", kept_inputs=(0,))}
    with pytest.raises(AmpconfigError, match=r"keeps input 0 of node gelu in its dtype, but the schema types it T"):
        rewrite_model_detailed(model, MIXED, target="cpu", judges=tied)
    with pytest.raises(AmpconfigError, match="has no such input"):
        rewrite_model_detailed(model, MIXED, target="cpu", judges={f"{MS}::FastGelu": Judgement("white", "", (3,))})
    with pytest.raises(AmpconfigError, match="a judgement's colour is 'pink'"):
        Judgement("pink", "no such colour")
