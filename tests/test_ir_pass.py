"""ampconfig as an onnx-ir pass (ampconfig/ir_pass.py) and the public judgement hook
(ampconfig/decide/user_judgements.py).

- MixedPrecisionPass keeps onnx-ir's PassBase contract (in place: the model handed in is rewritten), runs in a
  PassManager beside onnx-ir's own common passes, gives the model rewrite_model gives, and its decisions are
  reachable; a second run over its own output changes nothing, so a PassManager stops early.
- A judgement for a contrib op: "must stay float32" on com.microsoft::FastGelu (ONNX Runtime runs the result on the
  CPU), "safe in low precision, gamma and beta kept" on com.microsoft::GroupNorm; a kept input the schema ties to
  the output, and an unknown colour, are input errors; a mixlist that names the op wins over the judgement.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common
import pytest
from onnx import helper as oh
from typer.testing import CliRunner

import ampconfig
from ampconfig import Judgement, MixedPrecisionPass, MixedPrecisionResult, rewrite_model, rewrite_model_detailed
from ampconfig.cli import app
from ampconfig.decide.decisions import NodeDecision, Rule
from ampconfig.decide.ranges_input import structure_sha256
from ampconfig.decide.rewrite_options import RewriteOptions
from ampconfig.errors import AmpconfigError
from ampconfig.examples import example_path
from ampconfig.precision_modes import PrecisionMode
from tests import exporter_models
from tests.graphs import FLOAT, IR_VERSION, rel_l2, run, tensor, transformer_block, weight
from tests.test_api import _random_like_nodes
from tests.worker_faults import fresh_worker, inject, reads_float32, transpose_model

__all__ = ["fresh_worker"]  # the fixture, used by name

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
    decisions = {d.name: d for d in MixedPrecisionPass.result_of(model).decisions}  # the manager's is a PassResult
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
    assert not any(d.changed for d in MixedPrecisionPass.result_of(again.model).decisions)


def test_one_pass_rewrites_several_models_at_once_each_keeping_its_own_result() -> None:
    """The pass keeps nothing of a run: two threads share one pass, each model carries its own decisions (a
    transformer block and a convnet, whose decisions differ), and a model no pass rewrote has none."""
    from concurrent.futures import ThreadPoolExecutor

    mixed = MixedPrecisionPass("force_fp16", target="cuda")
    protos = {"block": transformer_block(), "convnet": exporter_models.cnn()}
    models = {name: ir.serde.deserialize_model(proto) for name, proto in protos.items()}
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(models, pool.map(mixed, models.values()), strict=True))
    for name, proto in protos.items():
        expected = rewrite_model_detailed(proto, "force_fp16", target="cuda")
        kept = MixedPrecisionPass.result_of(models[name])
        assert kept is results[name].rewrite
        assert [(d.name, d.dtype) for d in kept.decisions] == [(d.name, d.dtype) for d in expected.decisions]
    assert not hasattr(mixed, "result")
    with pytest.raises(LookupError, match="no MixedPrecisionPass"):
        MixedPrecisionPass.result_of(ir.serde.deserialize_model(transformer_block()))


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


def _decision(model: onnx.ModelProto, name: str, **options: object) -> NodeDecision:
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


# ------------------------------------------------------------------------------------- the pass is the pipeline


def if_model() -> onnx.ModelProto:
    """x -> ReduceSum -> Greater -> If (then: MatMul with an outer weight; else: Relu) -> Sigmoid -> y."""
    then = oh.make_graph(
        [oh.make_node("MatMul", ["x", "w"], ["t"], name="mm_then")], "then", [], [tensor("t", FLOAT, [2, 8])]
    )
    other = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["e"], name="relu_else")], "else", [], [tensor("e", FLOAT, [2, 8])]
    )
    nodes = [
        oh.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        oh.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
        oh.make_node("If", ["c"], ["y0"], name="branch", then_branch=then, else_branch=other),
        oh.make_node("Sigmoid", ["y0"], ["y"], name="sig"),
    ]
    zero = onnx.numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    graph = oh.make_graph(
        nodes, "if_model", [tensor("x", FLOAT, [2, 8])], [tensor("y", FLOAT, [2, 8])], [weight("w", 8, 8), zero]
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=IR_VERSION)


def _models(tmp_path: Path) -> list[Path]:
    paths = [example_path("transformer_block"), example_path("small_convnet")]
    for name, proto in (("gpt2", exporter_models.gpt2()), ("cnn", exporter_models.cnn()), ("if", if_model())):
        path = tmp_path / f"{name}.onnx"
        onnx.save(proto, path)
        paths.append(path)
    return paths


@pytest.mark.parametrize(
    ("mode", "target"), [(MIXED, "cuda"), ("force_fp16", "cpu"), ("allow_mix_precision_bf16", "cuda")]
)
def test_the_pass_in_a_pass_manager_writes_the_bytes_ampconfig_rewrite_writes(
    tmp_path: Path, mode: str, target: str
) -> None:
    for path in _models(tmp_path):
        written = tmp_path / f"{path.stem}.{mode}.onnx"
        cli = CliRunner().invoke(
            app, ["rewrite", str(path), "-o", str(written), "--precision-mode", mode, "--target", target]
        )
        assert cli.exit_code == 0, cli.output
        model = ir.load(path)
        result = ir.passes.PassManager([MixedPrecisionPass(mode, target=target)])(model)
        assert result.model is model and result.modified
        assert ir.serde.serialize_model(model).SerializeToString() == written.read_bytes(), path.name


def _big_weight_model() -> tuple[onnx.ModelProto, bytes]:
    """x -> MatMul(w, 64x64) -> Softmax -> MatMul(w2) -> y, and w's bytes (16 KiB: a weight the check lifts)."""
    w = weight("w", 64, 64, seed=7)
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm1"),
        oh.make_node("Softmax", ["h"], ["p"], name="softmax"),
        oh.make_node("MatMul", ["p", "w2"], ["y"], name="mm2"),
    ]
    graph = oh.make_graph(
        nodes, "big", [tensor("x", FLOAT, [2, 64])], [tensor("y", FLOAT, [2, 64])], [w, weight("w2", 64, 64, seed=8)]
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=IR_VERSION)
    return model, onnx.numpy_helper.to_array(w).tobytes()


def _ranges_file(folder: Path, proto: onnx.ModelProto) -> Path:
    """A ranges file for ``proto`` in which h's values pass float16's range: mm1 (which makes h) keeps float32."""
    values = {name: {"min": -1.0, "max": 1.0, "max_abs": 1.0, "nonfinite": 0} for name in ("x", "p", "y")}
    values["h"] = {"min": -1e6, "max": 1e6, "max_abs": 1e6, "nonfinite": 0}
    document = {
        "format": "ampconfig-value-ranges",
        "format_version": 1,
        "ampconfig": ampconfig.__version__,
        "device": "cpu",
        "model": {"path": None, "structure_sha256": structure_sha256(proto)},
        "data": {"source": "generated", "samples": 1, "sha256": "0" * 64},
        "values": values,
    }
    path = folder / "ranges.json"
    path.write_text(json.dumps(document))
    return path


def _stale_declaration(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The model with h declared int64 in value_info (a stale declaration the admission drops) and its nodes out of
    order (which it sorts)."""
    proto.graph.value_info.append(tensor("h", onnx.TensorProto.INT64, [2, 64]))
    nodes = list(proto.graph.node)
    del proto.graph.node[:]
    proto.graph.node.extend([nodes[1], nodes[0], nodes[2]])
    return proto


def _opset_12(proto: onnx.ModelProto) -> onnx.ModelProto:
    del proto.opset_import[:]
    proto.opset_import.append(oh.make_opsetid("", 12))
    return proto


#: (mode, how the model is changed, whether a ranges file is given, the protos the pass makes of the model)
SERIALISED_CASES = {
    "fp32": ("force_fp32", None, False, 2),
    "mixed": (MIXED, None, False, 2),
    "repaired input": (MIXED, _stale_declaration, False, 2),
    "bf16 opset raise": ("allow_mix_precision_bf16", _opset_12, False, 3),
    "ranges file": (MIXED, None, True, 3),
}


@pytest.mark.parametrize("case", list(SERIALISED_CASES))
def test_the_pass_serialises_no_weight_of_the_model_it_is_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, case: str
) -> None:
    """Counted, not mocked: every ir.serde.serialize_model call (what the pass makes protos of the model with) and
    every ModelProto.SerializeToString (what ONNX's checker, inference and version converter are handed), each
    looked at for w's bytes. What remains is light: one proto of the input for its admission, one of the output
    for its check, each with the weights over 1 KiB left out (lifted to graph inputs, or emptied in the skeleton),
    and, to raise the opset or check a ranges file against the model's structure, one with the weights as
    initializers without their bytes. An input the admission repairs (declarations, node order) is repaired in the
    IR, from what was found on the light proto. Each output is the API's, byte for byte."""
    mode, change, with_ranges, protos = SERIALISED_CASES[case]
    proto, w_bytes = _big_weight_model()
    proto = change(proto) if change is not None else proto
    ranges = _ranges_file(tmp_path, proto) if with_ranges else None
    model = ir.serde.deserialize_model(proto)
    made: list[onnx.ModelProto] = []
    serialised: list[bytes] = []
    serialize_model, serialize_to_string = ir.serde.serialize_model, onnx.ModelProto.SerializeToString

    def counted_model(*args: Any, **kwargs: Any) -> onnx.ModelProto:
        made.append(serialize_model(*args, **kwargs))
        return made[-1]

    def counted_bytes(self: onnx.ModelProto, *args: Any, **kwargs: Any) -> bytes:
        serialised.append(serialize_to_string(self, *args, **kwargs))
        return serialised[-1]

    monkeypatch.setattr(ir.serde, "serialize_model", counted_model)
    monkeypatch.setattr(onnx.ModelProto, "SerializeToString", counted_bytes)
    result = MixedPrecisionPass(mode, target="cuda", ranges=ranges)(model)
    monkeypatch.undo()
    assert result.model is model and result.rewrite is not None
    assert len(made) == protos
    assert serialised  # the checker and inference did run on the light protos
    assert not [p for p in made if any(t.name == "w" and t.raw_data for t in p.graph.initializer)]
    assert not [blob for blob in serialised if w_bytes in blob]
    expected = rewrite_model_detailed(proto, mode, target="cuda", ranges=ranges)
    assert _serialized(model) == _serialized(expected.model)
    assert result.rewrite.warnings == expected.warnings
    if change is _stale_declaration:
        assert any("'h'" in warning for warning in expected.warnings)
        assert any("topological order" in warning for warning in expected.warnings)
    if change is _opset_12:
        assert expected.stats.opset_raised_to == 13 and model.opset_imports[""] == 13
    if with_ranges:
        assert {d.name: d.rule for d in expected.decisions}["mm1"] is Rule.RANGE_EXCEEDS


def test_modified_is_false_when_nothing_changes_and_true_otherwise() -> None:
    proto, _ = _big_weight_model()
    typed = onnx.shape_inference.infer_shapes(proto)  # every value declared: the typing step has nothing to add
    model = ir.serde.deserialize_model(typed)
    handed_in = _serialized(model)
    # Without the decisions written into the nodes' metadata, force_fp32 changes nothing here.
    fp32 = MixedPrecisionPass("force_fp32", target="cuda", decision_metadata=False)(model)
    assert not fp32.modified and fp32.rewrite is not None and not any(d.changed for d in fp32.rewrite.decisions)
    assert _serialized(fp32.model) == handed_in  # and indeed nothing did
    # With them (the default), the first run records every node's decision, and a second run has nothing to add.
    recorded = MixedPrecisionPass("force_fp32", target="cuda")
    assert recorded(model).modified
    assert {n.metadata_props["ampconfig.rule"] for n in model.graph} == {"mode_keeps"}
    before_again = _serialized(model)
    assert not recorded(model).modified and _serialized(model) == before_again
    untyped = MixedPrecisionPass("force_fp32", target="cuda")(ir.serde.deserialize_model(proto))
    assert untyped.modified  # the values got their types (written as value_info)
    mixed = MixedPrecisionPass(MIXED, target="cuda")
    once = mixed(ir.serde.deserialize_model(typed))
    assert once.modified
    before = _serialized(once.model)
    again = mixed(once.model)
    assert not again.modified and _serialized(again.model) == before


def test_options_are_one_object_the_api_the_pass_and_settings_share() -> None:
    mixed = MixedPrecisionPass("force_fp16", target="cpu", keep_io_types=False)
    assert mixed.options == RewriteOptions(PrecisionMode.FORCE_FP16, target="cpu", keep_io_types=False)
    with pytest.raises(AmpconfigError, match="no_such_mode"):
        MixedPrecisionPass("no_such_mode")


def test_the_pass_starts_again_from_the_model_it_was_given_when_the_checker_rejects_nodes() -> None:
    """The checker rejects two nodes in float16: the pass runs the pipeline again from its copy of the input graph,
    on the same model object, and gives the API's bytes."""
    proto = _random_like_nodes()
    model = ir.serde.deserialize_model(proto)
    result = MixedPrecisionPass("force_fp16", target="cuda")(model)
    assert result.model is model and result.modified and result.rewrite is not None
    kept = {d.name for d in result.rewrite.decisions if d.rule is Rule.CHECKER_REJECTS}
    assert kept == {"noise", "coin"}
    assert _serialized(model) == _serialized(rewrite_model(proto, "force_fp16", target="cuda"))


def test_an_input_the_admission_repairs_is_rewritten_as_the_api_rewrites_it() -> None:
    """A stale value_info (an int64 declaration of a float value) is repaired before the rewrite: the pass takes
    the API's way for it (the one whole-model proto it still makes) and the same bytes come out, in its model."""
    proto = _random_like_nodes()
    proto.graph.value_info.append(tensor("r", onnx.TensorProto.INT64, [2, 3]))
    model = ir.serde.deserialize_model(proto)
    result = MixedPrecisionPass(MIXED, target="cuda")(model)
    assert result.model is model and result.modified and result.rewrite is not None
    assert any("'r'" in warning for warning in result.rewrite.warnings)
    assert _serialized(model) == _serialized(rewrite_model(proto, MIXED, target="cuda"))


def test_an_input_the_checker_rejects_is_serialised_once_for_onnx_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """The output's declared shape contradicts the graph (kept: it is the interface), so the checker rejects the
    input and ONNX Runtime must load it, from its bytes: the one proto of the whole model the pass makes. The
    output is the API's, byte for byte, with the same warnings."""
    proto, _ = _big_weight_model()
    proto.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 4
    model = ir.serde.deserialize_model(proto)
    made: list[onnx.ModelProto] = []
    serialize_model = ir.serde.serialize_model

    def counted_model(*args: Any, **kwargs: Any) -> onnx.ModelProto:
        made.append(serialize_model(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(ir.serde, "serialize_model", counted_model)
    result = MixedPrecisionPass(MIXED, target="cuda")(model)
    monkeypatch.undo()
    assert result.rewrite is not None
    assert len([p for p in made if any(t.name == "w" and t.raw_data for t in p.graph.initializer)]) == 1
    expected = rewrite_model_detailed(proto, MIXED, target="cuda")
    assert any("does not pass the ONNX checker" in warning for warning in expected.warnings)
    assert result.rewrite.warnings == expected.warnings
    assert _serialized(model) == _serialized(expected.model)


# ---------------------------------------------------------------------------------------- the load check (issue 43)


def test_the_pass_keeps_a_node_whose_float16_form_crashes_onnx_runtime_in_the_model_handed_in(
    monkeypatch: pytest.MonkeyPatch, fresh_worker: None
) -> None:
    """In place still: the repaired rewrite is the model handed in. On main the pass built no session and left the
    float16 Transpose."""
    inject(monkeypatch, "load:segv:lowered:Transpose")
    model = ir.serde.deserialize_model(transpose_model())
    result = ir.passes.PassManager([MixedPrecisionPass("force_fp16", target="cpu")])(model)
    assert result.model is model
    rewrite = MixedPrecisionPass.result_of(model)
    assert rewrite.ir_model is model
    assert {d.name: d.rule for d in rewrite.decisions}["transpose"] is Rule.RUNTIME_REFUSES
    assert any(w.startswith("node transpose kept float32 (rule runtime_refuses)") for w in rewrite.warnings)
    written = ir.serde.serialize_model(model)
    assert reads_float32(written, "Transpose") and not reads_float32(written, "MatMul")
    onnx.checker.check_model(written, full_check=True)


def test_the_pass_without_its_load_check_builds_no_session(monkeypatch: pytest.MonkeyPatch, fresh_worker: None) -> None:
    inject(monkeypatch, "load:segv:any")
    model = ir.serde.deserialize_model(transpose_model())
    MixedPrecisionPass("force_fp16", target="cpu", load_check=False)(model)
    assert not reads_float32(ir.serde.serialize_model(model), "Transpose")
    with pytest.raises(AmpconfigError, match="could not find the nodes that cause it"):
        MixedPrecisionPass("force_fp16", target="cpu")(ir.serde.deserialize_model(transpose_model()))
