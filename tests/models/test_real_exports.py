"""The acceptance rule (issue 12): ampconfig accepts every model ONNX Runtime loads.

Models carry the defects real exporters leave behind (PaddlePaddle's rank-0 placeholder shapes, -1 dimensions,
wrong element types on intermediates, duplicate or orphan value_info, stale output shapes), built with
onnx.helper. Each is rewritten in every precision mode: the output has no full-checker complaint its input did
not have, loads and runs in ONNX Runtime and computes what the clean model computes; every repair warning names
the value. Models ORT itself refuses get exit 2 with a located message and no output. The IR version item of
issue 10: an IR-14 model (onnx 1.23's default) is written at an IR version the installed ORT loads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto
from onnx import helper as oh
from typer.testing import CliRunner, Result

from ampconfig import rewrite_model_detailed
from ampconfig.cli import app
from ampconfig.errors import EXIT_OK, EXIT_USAGE, AmpconfigError
from ampconfig.model_io.ir_version import installed_onnxruntime, max_ir_version_loadable
from ampconfig.model_io.repair import contradiction
from tests.graphs import FLOAT, IR_VERSION, MODES, rel_l2, run, weight
from tests.node_cases import new_checker_complaint

runner = CliRunner()
BATCH = 2
FEEDS = {"x": np.random.default_rng(7).standard_normal((BATCH, 3, 8, 8)).astype(np.float32)}
#: rel-L2 of a rewrite against the clean fp32 model: float16 rounding of a small conv net, bfloat16's coarser one.
TOLERANCE = {"float16": 1e-2, "bfloat16": 5e-2}


# ----------------------------------------------------------------------------------------------- the models


def conv_net(
    value_info: list[onnx.ValueInfoProto] | None = None, output: onnx.ValueInfoProto | None = None
) -> onnx.ModelProto:
    """A small OCR-style backbone: Conv -> Relu -> Conv -> residual Add -> GlobalAveragePool -> Flatten ->
    MatMul -> Softmax. Shapes are fixed, as exporters with a fixed batch write them."""
    nodes = [
        oh.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        oh.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        oh.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        oh.make_node("Add", ["c2", "r1"], ["res"], name="residual"),
        oh.make_node("GlobalAveragePool", ["res"], ["pooled"], name="gap"),
        oh.make_node("Flatten", ["pooled"], ["flat"], name="flatten"),
        oh.make_node("MatMul", ["flat", "wf"], ["logits"], name="fc"),
        oh.make_node("Softmax", ["logits"], ["y"], axis=-1, name="softmax"),
    ]
    initializers = [
        weight("w1", 8, 3, 3, 3),
        weight("b1", 8),
        weight("w2", 8, 8, 3, 3),
        weight("b2", 8),
        weight("wf", 8, 4, scale=1.0),
    ]
    graph = oh.make_graph(
        nodes,
        "ocr_backbone",
        [oh.make_tensor_value_info("x", FLOAT, [BATCH, 3, 8, 8])],
        [output or oh.make_tensor_value_info("y", FLOAT, [BATCH, 4])],
        initializers,
        value_info=value_info or [],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], producer_name="paddle2onnx")
    model.ir_version = IR_VERSION
    return model


def vi(name: str, shape: list[int | str] | None, elem: int = FLOAT) -> onnx.ValueInfoProto:
    return oh.make_tensor_value_info(name, elem, shape)


#: Each defect model, by name.
DEFECTS: dict[str, Callable[[], onnx.ModelProto]] = {
    # PaddlePaddle writes rank-0 placeholders for tensors of rank 4: "differ in rank: (4) vs (0)". ORT merges one
    # leniently; with several in a chain its own inference fails (it refuses rank0_everywhere).
    "rank0_value_info": lambda: conv_net([vi("c1", [])]),
    "rank0_everywhere": lambda: conv_net([vi("c1", []), vi("r1", []), vi("res", []), vi("logits", [])]),
    "rank0_output": lambda: conv_net(output=vi("y", [])),
    "negative_dims": lambda: conv_net([vi("pooled", [-1, 8, -1, -1])], output=vi("y", [-1, 4])),
    "wrong_elem_types": lambda: conv_net([vi("r1", [BATCH, 8, 8, 8], TensorProto.INT64), vi("flat", None, 10)]),
    "missing_shapes": lambda: conv_net([vi("c1", None), vi("logits", None)], output=vi("y", None)),
    "duplicate_value_info": lambda: conv_net(
        [vi("c1", [BATCH, 8, 8, 8]), vi("c1", [BATCH, 8, 8, 8]), vi("logits", [BATCH, 4]), vi("logits", [1, 5])]
    ),
    "orphan_value_info": lambda: conv_net([vi("ghost_tensor", [3, 3]), vi("c2", [BATCH, 8, 8, 8])]),
    "stale_output_shape": lambda: conv_net(output=vi("y", [BATCH, 10])),
    "unsorted_nodes": lambda: _reversed_nodes(conv_net()),  # ORT sorts a graph itself; ONNX requires the order
}


def _reversed_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    nodes = [onnx.NodeProto.FromString(node.SerializeToString()) for node in model.graph.node]
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    return model


#: The values the warnings about each defect model must name.
NAMED = {
    "rank0_value_info": ["c1"],
    "rank0_everywhere": ["c1", "r1", "res", "logits"],
    "rank0_output": ["y"],
    "negative_dims": ["pooled", "y"],
    "wrong_elem_types": ["r1", "flat"],
    "missing_shapes": ["y"],  # a graph output needs a shape (the checker says); value_info without one is fine
    "duplicate_value_info": ["c1", "logits"],
    "orphan_value_info": ["ghost_tensor"],
    "stale_output_shape": ["y"],
    "unsorted_nodes": ["ocr_backbone"],  # the graph
}
#: Inputs ONNX Runtime itself refuses: ampconfig repairs them all the same.
ORT_REFUSES = {"rank0_everywhere", "wrong_elem_types"}
#: Inputs the full checker rejects before any repair.
CHECKER_REJECTS = set(DEFECTS) - {"orphan_value_info"}


def _fails_full_check(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return True
    return False


@pytest.fixture(scope="module")
def clean_outputs() -> np.ndarray:
    return run(conv_net(), FEEDS)[0]


def test_defects_are_what_real_exporters_write() -> None:
    # The premise: the checker rejects these models and ONNX Runtime loads and runs them, except the two that
    # ORT refuses too: ampconfig repairs those as well.
    for name, build in DEFECTS.items():
        model = build()
        assert _fails_full_check(model) == (name in CHECKER_REJECTS), name
        if name in ORT_REFUSES:
            with pytest.raises(Exception, match=r"ShapeInferenceError|does not match expected type"):
                run(model, FEEDS)
        else:
            assert run(model, FEEDS)[0].shape == (BATCH, 4), name


# ------------------------------------------------------------------------------------------- every mode


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_defect_model_is_rewritten_in_every_mode(defect: str, mode: str, clean_outputs: np.ndarray) -> None:
    model = DEFECTS[defect]()
    before = model.SerializeToString()
    result = rewrite_model_detailed(model, mode, target="cpu")
    assert model.SerializeToString() == before, "the caller's model was modified"

    for value in NAMED[defect]:
        assert any(f"'{value}'" in warning for warning in result.warnings), (value, result.warnings)
    named = {match for warning in result.warnings for match in re.findall(r"^(?:value|graph) '([^']+)'", warning)}
    assert named == set(NAMED[defect]), result.warnings  # no warning about a value that is fine

    out = result.model
    assert new_checker_complaint(model, out) is None
    if defect != "stale_output_shape":  # the only complaint left is the one kept on purpose
        onnx.checker.check_model(out, full_check=True)
    got = run(out, FEEDS)[0]
    assert got.shape == (BATCH, 4)
    assert rel_l2(got, clean_outputs) < TOLERANCE.get(result.low_dtype, 1e-2)


def test_rank0_placeholder_output_gets_the_inferred_shape_and_keeps_its_type() -> None:
    result = rewrite_model_detailed(DEFECTS["rank0_output"](), "force_fp16", target="cpu")
    (output,) = result.model.graph.output
    assert output.type.tensor_type.elem_type == FLOAT
    assert [d.dim_value for d in output.type.tensor_type.shape.dim] == [BATCH, 4]
    (warning,) = [w for w in result.warnings if "'y'" in w]
    assert "placeholder shape float[]" in warning and "float[2,4]" in warning


def test_negative_dims_are_placeholders_replaced_only_where_they_contradict() -> None:
    result = rewrite_model_detailed(DEFECTS["negative_dims"](), "allow_mix_precision", target="cpu")
    (output,) = result.model.graph.output
    assert [d.dim_value for d in output.type.tensor_type.shape.dim] == [BATCH, 4]
    assert "pooled" not in {v.name for v in result.model.graph.value_info if _has_negative_dim(v)}


def _has_negative_dim(value: onnx.ValueInfoProto) -> bool:
    return any(d.HasField("dim_value") and d.dim_value < 0 for d in value.type.tensor_type.shape.dim)


def test_stale_output_shape_is_kept_and_reported_not_changed() -> None:
    model = DEFECTS["stale_output_shape"]()
    result = rewrite_model_detailed(model, "force_fp16", target="cpu")
    (warning,) = [w for w in result.warnings if "'y'" in w]
    assert "float[2,10]" in warning and "float[2,4]" in warning and "kept" in warning
    assert any("does not pass the ONNX checker" in w and "runs in ONNX Runtime" in w for w in result.warnings)
    (output,) = result.model.graph.output
    assert [d.dim_value for d in output.type.tensor_type.shape.dim] == [BATCH, 10]


def test_duplicates_that_disagree_are_all_dropped_and_identical_ones_collapse() -> None:
    result = rewrite_model_detailed(DEFECTS["duplicate_value_info"](), "force_fp32", target="cpu")
    declared = [v.name for v in result.model.graph.value_info]
    assert declared.count("c1") <= 1 and declared.count("logits") <= 1
    (logits,) = [w for w in result.warnings if "'logits'" in w]
    assert "different types" in logits and "float[2,4]" in logits and "float[1,5]" in logits


def test_a_clean_model_gets_no_repair_warning() -> None:
    result = rewrite_model_detailed(conv_net(), "allow_mix_precision", target="cpu")
    assert result.warnings == []


def test_graph_output_element_type_is_never_changed_and_ort_decides(tmp_path: Path) -> None:
    # An output declared int64 where the graph computes float: not a placeholder, so kept; ORT refuses the
    # model too ("does not match expected type"), so it is exit 2 with nothing written.
    path = tmp_path / "typed.onnx"
    onnx.save(conv_net(output=vi("y", [BATCH, 4], TensorProto.INT64)), str(path))
    result, out, text = _rewrite_cli(tmp_path, path)
    assert result.exit_code == EXIT_USAGE, text
    assert not out.exists()
    assert str(path) in text and "ONNX Runtime cannot load it" in text
    assert "output arg (y) of node (softmax)" in text


def test_contradiction_ignores_what_is_unknown() -> None:
    declared = vi("a", ["N", 3, 3]).type
    assert contradiction(declared, vi("a", [2, 3, 3]).type) is None  # a symbolic dim contradicts nothing
    assert contradiction(declared, vi("a", None).type) is None
    assert contradiction(declared, vi("a", [2, 3, 4]).type) == "dimension 2"
    assert contradiction(declared, vi("a", [2, 3]).type) == "the rank"
    assert contradiction(declared, vi("a", ["N", 3, 3], TensorProto.INT64).type) == "the element type"


# --------------------------------------------------------------------------- subgraphs and the rare path


def test_stale_value_info_and_order_inside_an_if_branch_are_repaired() -> None:
    then_branch = oh.make_graph(
        # Unsorted, with a rank-0 placeholder: both repaired inside the subgraph.
        [oh.make_node("Neg", ["inner"], ["neg"]), oh.make_node("Relu", ["x"], ["inner"], name="inner_relu")],
        "then",
        [],
        [vi("neg", [2, 3])],
        value_info=[vi("inner", [])],
    )
    else_branch = oh.make_graph([oh.make_node("Identity", ["x"], ["same"])], "else", [], [vi("same", [2, 3])])
    nodes = [
        oh.make_node("ReduceSum", ["x"], ["total"], keepdims=0, name="sum"),
        oh.make_node("Greater", ["total", "zero"], ["cond"], name="positive"),
        oh.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch, name="branch"),
    ]
    zero = onnx.numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero")
    graph = oh.make_graph(nodes, "if_model", [vi("x", [2, 3])], [vi("y", [2, 3])], [zero])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    assert _fails_full_check(model)
    result = rewrite_model_detailed(model, "force_fp16", target="cpu")
    assert any("'inner'" in w and "rank-0 placeholder" in w for w in result.warnings), result.warnings
    assert any(w.startswith("graph 'then': nodes were not in topological order") for w in result.warnings)
    onnx.checker.check_model(result.model, full_check=True)
    x = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]], dtype=np.float32)
    np.testing.assert_allclose(run(result.model, {"x": x})[0], -np.maximum(x, 0), rtol=1e-3)


def mvn_model() -> onnx.ModelProto:
    """ONNX's node test ``test_mvn`` as that test builds it (opset 13, IR 7): strict inference expands the
    MeanVarianceNormalization function, leaves its ``axes`` Constant without a value and rejects the model."""
    node = oh.make_node("MeanVarianceNormalization", ["X"], ["Y"])
    graph = oh.make_graph([node], "test_mvn", [vi("X", [3, 3, 3, 1])], [vi("Y", [3, 3, 3, 1])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])
    model.ir_version = 7
    return model


@pytest.mark.parametrize("mode", MODES)
def test_mvn_is_rewritten_with_its_own_complaint_and_runs(mode: str) -> None:

    model = mvn_model()
    assert _fails_full_check(model)  # the premise: ONNX's own test model fails the strict check
    result = rewrite_model_detailed(model, mode, target="cpu")
    assert new_checker_complaint(model, result.model) is None
    (note,) = [w for w in result.warnings if "does not pass the ONNX checker" in w]
    assert "MeanVarianceNormalization" in note and "loads and runs in ONNX Runtime" in note
    x = np.random.default_rng(3).standard_normal((3, 3, 3, 1)).astype(np.float32)
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    expected = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True) + 1e-9)
    np.testing.assert_allclose(run(result.model, {"X": x})[0], expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("defect", ["stale_output_shape", "rank0_value_info"])
def test_external_data_model_with_defects_is_rewritten_from_files(tmp_path: Path, defect: str) -> None:
    # Weights stay on disk: the repair works on the proto, ORT loads the input from its file and the output from
    # a temporary copy before the real one is written.
    path = tmp_path / f"{defect}.onnx"
    onnx.save(DEFECTS[defect](), str(path), save_as_external_data=True, location="weights.data", size_threshold=0)
    result, out, text = _rewrite_cli(tmp_path, path)
    assert result.exit_code == EXIT_OK, text
    assert f"value '{NAMED[defect][0]}'" in text
    assert (tmp_path / "out.onnx.data").is_file()
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert session.run(None, FEEDS)[0].shape == (BATCH, 4)
    expected = {path.name, "weights.data", "out.onnx", "out.onnx.data"}
    assert {p.name for p in tmp_path.iterdir()} == expected  # nothing left behind


@pytest.mark.parametrize("defect", ["rank0_output", "stale_output_shape"])
def test_run_proves_a_defect_model_against_the_model_as_given(tmp_path: Path, defect: str) -> None:
    path = _save(DEFECTS[defect](), tmp_path, f"{defect}.onnx")
    args = ["run", str(path), "-m", "allow_mix_precision", "--iterations", "1", "--warmup", "0", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == EXIT_OK, _text(result)
    report = json.loads(result.stdout)
    assert any("'y'" in warning for warning in report["warnings"]), report["warnings"]


# ------------------------------------------------------------------------------ models ORT refuses


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _text(result: Result) -> str:
    parts = [result.stdout]
    with contextlib.suppress(ValueError):  # older click mixes stderr into stdout and raises here
        parts.append(result.stderr)
    return "\n".join(parts)


def _rewrite_cli(folder: Path, path: Path, *extra: str) -> tuple[Result, Path, str]:
    out = folder / "out.onnx"
    before = _digest(path)
    result = runner.invoke(app, ["rewrite", str(path), "-o", str(out), "-m", "force_fp16", *extra])
    text = _text(result)
    assert "Traceback" not in text and "internal error" not in text, text
    assert _digest(path) == before, "the input file was modified"
    return result, out, text


def _save(model: onnx.ModelProto, folder: Path, name: str) -> Path:
    path = folder / name
    onnx.save(model, str(path))
    return path


def _single(node: onnx.NodeProto, opsets: tuple[tuple[str, int], ...] = (("", 17),)) -> onnx.ModelProto:
    graph = oh.make_graph([node], "single", [vi("x", [2, 3])], [vi("y", [2, 3])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = IR_VERSION
    return model


@pytest.mark.parametrize(
    ("case", "node", "names"),
    [
        ("unknown_attribute", oh.make_node("Relu", ["x"], ["y"], name="relu_with_foo", foo=1), "relu_with_foo"),
        ("axis_out_of_range", oh.make_node("Softmax", ["x"], ["y"], axis=5, name="bad_softmax"), "bad_softmax"),
    ],
)
def test_model_ort_refuses_is_exit_2_located_and_nothing_written(
    tmp_path: Path, case: str, node: onnx.NodeProto, names: str
) -> None:
    path = _save(_single(node), tmp_path, f"{case}.onnx")
    result, out, text = _rewrite_cli(tmp_path, path)
    assert result.exit_code == EXIT_USAGE, text
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    assert str(path) in text and names in text and "ONNX Runtime cannot load it" in text


def test_truncated_file_is_exit_2_and_named(tmp_path: Path) -> None:
    path = tmp_path / "cut.onnx"
    path.write_bytes(conv_net().SerializeToString()[:300])
    result, out, text = _rewrite_cli(tmp_path, path)
    assert result.exit_code == EXIT_USAGE and not out.exists()
    assert str(path) in text


def test_contrib_op_ort_does_not_know_fails_run_with_the_node_named(tmp_path: Path) -> None:
    # The checker cannot judge a com.microsoft op (no ONNX schema), so `rewrite` (no ORT) writes it untouched;
    # `run` asks ORT, which refuses: exit 2, the file and the node named, nothing written.
    model = _single(
        oh.make_node("NoSuchFusedOp", ["x"], ["y"], domain="com.microsoft", name="fused_thing"),
        (("", 17), ("com.microsoft", 1)),
    )
    path = _save(model, tmp_path, "contrib.onnx")
    out = tmp_path / "run_out.onnx"
    result = runner.invoke(app, ["run", str(path), "-m", "force_fp16", "-o", str(out), "--iterations", "1"])
    text = _text(result)
    assert result.exit_code == EXIT_USAGE, text
    assert not out.exists()
    assert str(path) in text and "'fused_thing'" in text and "com.microsoft::NoSuchFusedOp" in text


def test_output_ort_cannot_run_is_refused_when_the_input_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The guard itself: a checker-rejected input whose rewrite ORT would not load is refused, nothing returned.
    # The rewrite is made unloadable by a real defect (an op ORT does not know), not by a mock of ORT.
    import ampconfig.rewrite.steps.apply_plan as apply_step

    original = apply_step.apply_plan

    def apply_then_break(ir_model, plan, names, *encoder):
        stats = original(ir_model, plan, names, *encoder)
        node = next(iter(ir_model.graph))
        node.domain, node.op_type = "com.microsoft", "NoSuchFusedOp"
        ir_model.opset_imports["com.microsoft"] = 1
        return stats

    monkeypatch.setattr(apply_step, "apply_plan", apply_then_break)
    with pytest.raises(AmpconfigError, match="worse than the input, so nothing was written") as caught:
        rewrite_model_detailed(DEFECTS["stale_output_shape"](), "force_fp16", target="cpu")
    assert "NoSuchFusedOp" in caught.value.message


# ---------------------------------------------------------------------------------------------- IR version


def test_the_ir_table_is_right_for_the_installed_onnxruntime() -> None:
    installed = installed_onnxruntime()
    assert installed is not None and installed[1] == ort.__version__
    limit = max_ir_version_loadable(installed[1])
    assert limit is not None
    model = conv_net()
    model.ir_version = limit
    run(model, FEEDS)
    model.ir_version = limit + 1
    with pytest.raises(Exception, match=f"max supported IR version: {limit}"):
        run(model, FEEDS)


def _ir14_model() -> onnx.ModelProto:
    model = conv_net()
    graph = model.graph
    rebuilt = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])  # onnx 1.23 stamps its own IR (14)
    assert rebuilt.ir_version == onnx.IR_VERSION == 14
    return rebuilt


def test_ir14_model_is_written_at_an_ir_version_ort_loads(tmp_path: Path) -> None:
    path = _save(_ir14_model(), tmp_path, "ir14.onnx")
    result, out, text = _rewrite_cli(tmp_path, path)
    assert result.exit_code == EXIT_OK, text
    written = onnx.load(str(out))
    assert written.ir_version == max_ir_version_loadable(ort.__version__) == 13
    onnx.checker.check_model(written, full_check=True)
    assert run(written, FEEDS)[0].shape == (BATCH, 4)
    assert "IR version lowered from 14 to 13" in text


def test_run_on_an_ir14_model_runs_both_models(tmp_path: Path) -> None:
    path = _save(_ir14_model(), tmp_path, "ir14.onnx")
    args = ["run", str(path), "-m", "allow_mix_precision", "--iterations", "1", "--warmup", "0", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == EXIT_OK, result.stdout


def test_ir14_model_using_an_ir14_type_is_refused_with_the_reason(tmp_path: Path) -> None:
    model = _ir14_model()
    model.graph.input.append(vi("scale_f6", [1], TensorProto.FLOAT6E2M3))  # a type only IR 14 has
    path = _save(model, tmp_path, "float6.onnx")
    result, out, text = _rewrite_cli(tmp_path, path)
    assert result.exit_code == EXIT_USAGE, text
    assert not out.exists()
    assert "FLOAT6E2M3 (IR 14)" in text and "loads IR versions up to 13" in text and str(path) in text
