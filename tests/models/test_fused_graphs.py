"""Graphs fused into com.microsoft contrib ops (issue 12): written directly in contrib ops, and made by ONNX
Runtime's own optimizer (``optimize_model``, on the CPU) from BERT-like and GPT-2-like stacks built here.

Every mode and both targets: the rewrite has no checker complaint its input lacks, loads and runs in ORT CPU and
stays close to fp32; force_fp16 for cuda lowers at least 90% of the float nodes of a fused BERT-like stack (the
issue measured 0 before contrib ops were typed). ``domain::OpType`` works in a mixlist, in keep_dtype, in
``lists --json``, in ``explain`` and in ``ops-info show``. A contrib op ONNX Runtime does not know is written by
``rewrite`` untouched and refused by ``run`` with the node named.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import onnx
import pytest
from onnx import helper as oh
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented
from typer.testing import CliRunner, Result

from ampconfig import rewrite_model_detailed
from ampconfig.cli import app
from ampconfig.documents.mixlist_file import mixlist_problems, parse_mixlist
from ampconfig.errors import EXIT_OK, EXIT_USAGE
from ampconfig.rewrite.results import RewriteResult
from ampconfig.runner.sessions import cuda_unavailable_reason
from tests.graphs import FLOAT, IR_VERSION, MODES, rel_l2, run, session, tensor, weight
from tests.node_cases import new_checker_complaint
from tests.transformer_stacks import FUSED_SIZE, MS, bert_stack, fused_models, optimized, token_feeds

runner = CliRunner()

#: rel-L2 against fp32 (ORT CPU): float16 of these stacks measures 3e-4..8e-4; bfloat16 keeps 8 bits of mantissa.
TOLERANCE = {"float16": 5e-3, "bfloat16": 5e-2}
TARGETS = ("cuda", "cpu")
SKIP_LN = f"{MS}::SkipLayerNormalization"
ATTENTION = f"{MS}::Attention"
LOW = ("float16", "bfloat16")


def _text(result: Result) -> str:
    return result.stdout + (result.stderr or "")


def _invoke(*args: str | Path) -> Result:
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in _text(result) and "internal error" not in _text(result), _text(result)
    return result


def _contrib_counts(model: onnx.ModelProto) -> Counter[str]:
    return Counter(node.op_type for node in model.graph.node if node.domain == MS)


def _float_decisions(result: RewriteResult) -> list:
    return [d for d in result.decisions if d.original_dtype == "float32"]


def _save(model: onnx.ModelProto, folder: Path, name: str) -> Path:
    path = folder / name
    onnx.save(model, path)
    return path


def test_the_fused_graphs_are_what_the_optimizer_writes() -> None:
    models = fused_models()
    layers = FUSED_SIZE.layers
    bert = _contrib_counts(models["optimized_bert"])
    assert bert == {"Attention": layers, "SkipLayerNormalization": 2 * layers + 1, "BiasGelu": layers}, bert
    gpt2 = _contrib_counts(models["optimized_gpt2"])
    assert gpt2["SkipLayerNormalization"] == 2 * layers and gpt2["FastGelu"] == layers, gpt2
    assert not any(node.op_type == "Pow" for node in models["optimized_gpt2"].graph.node)  # the GELU cube fused
    direct = _contrib_counts(models["direct"])
    fused_ops = {
        "EmbedLayerNormalization",
        "Attention",
        "SkipLayerNormalization",
        "BiasGelu",
        "FastGelu",
        "FusedMatMul",
        "MultiHeadAttention",
    }
    assert set(direct) == fused_ops


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["direct", "optimized_bert", "optimized_gpt2"])
def test_every_mode_is_valid_loads_runs_and_stays_close(name: str, mode: str, target: str) -> None:
    model = fused_models()[name]
    feeds = token_feeds(model, FUSED_SIZE)
    reference = run(model, feeds)[0]
    result = rewrite_model_detailed(model, mode, target=target)
    assert new_checker_complaint(model, result.model) is None
    # Contrib ops are typed from ORT's schema registry: none is left untyped or schema-less.
    assert not [d.name for d in result.decisions if d.rule.value in ("no_schema", "untyped")]
    bfloat16_nodes = {d.name for d in result.decisions if d.dtype == "bfloat16"}
    if target == "cuda" and bfloat16_nodes:
        # A bfloat16 rewrite for cuda does not run on ORT's CPU provider, which has few bfloat16 kernels: the
        # refusal names a node the rewrite made bfloat16 (the model itself is for the GPU, and passes the checker).
        with pytest.raises(OrtNotImplemented, match="NOT_IMPLEMENTED") as refused:
            session(result.model)
        named = re.search(r"node with name '([^']+)'", str(refused.value))
        assert named is not None and named.group(1) in bfloat16_nodes, str(refused.value)
        return
    got = run(result.model, feeds)[0]
    assert got.dtype == reference.dtype and got.shape == reference.shape
    error = rel_l2(got, reference)
    assert error <= TOLERANCE[result.low_dtype], (name, mode, target, error)


@pytest.mark.parametrize("name", ["direct", "optimized_bert", "optimized_gpt2"])
def test_force_fp16_for_cuda_lowers_at_least_90_percent_of_the_float_nodes(name: str) -> None:
    model = fused_models()[name]
    result = rewrite_model_detailed(model, "force_fp16", target="cuda")
    floats = _float_decisions(result)
    lowered = [d for d in floats if d.dtype == "float16"]
    share = len(lowered) / len(floats)
    print(
        f"\n{name}: force_fp16 for cuda lowers {len(lowered)}/{len(floats)} float nodes ({share:.0%}), "
        f"{result.stats.casts_inserted} casts"
    )
    assert share >= 0.9, [(d.name, d.rule.value, d.reason) for d in floats if d.dtype != "float16"]
    # The contrib ops themselves go low, not only the plain ops between them.
    contrib = [d for d in floats if d.op_type.startswith(f"{MS}::")]
    assert contrib and all(d.dtype == "float16" for d in contrib)
    assert result.stats.casts_inserted <= 2  # the graph input and output only (keep_io_types)


def test_mixlist_moves_a_contrib_op_by_its_domain_key(tmp_path: Path) -> None:
    model = fused_models()["optimized_bert"]
    mixlist = tmp_path / "mixlist.json"
    mixlist.write_text(json.dumps({"black-list": {"to-add": [SKIP_LN]}}), encoding="utf-8")
    plain = rewrite_model_detailed(model, "allow_mix_precision", target="cuda")
    moved = rewrite_model_detailed(model, "allow_mix_precision", modify_mixlist=mixlist, target="cuda")
    before = [d for d in plain.decisions if d.op_type == SKIP_LN]
    after = [d for d in moved.decisions if d.op_type == SKIP_LN]
    assert len(after) == 2 * FUSED_SIZE.layers + 1
    assert all(d.colour == "gray" and d.dtype == "float16" for d in before)  # gray on cuda: fp32 accumulation
    assert all(d.colour == "black" and d.dtype == "float32" and d.rule.value == "black_list" for d in after)
    assert moved.stats.casts_inserted > plain.stats.casts_inserted
    feeds = token_feeds(model, FUSED_SIZE)
    assert rel_l2(run(moved.model, feeds)[0], run(model, feeds)[0]) <= TOLERANCE["float16"]


def test_keep_dtype_pins_a_contrib_op_type(tmp_path: Path) -> None:
    model = fused_models()["direct"]
    keep = tmp_path / "keep_dtype.cfg"
    keep.write_text(f"OpType::{ATTENTION}\n", encoding="utf-8")
    for source in (keep, [f"OpType::{ATTENTION}"]):
        result = rewrite_model_detailed(model, "force_fp16", keep_dtype=source, target="cuda")
        pinned = [d for d in result.decisions if d.op_type == ATTENTION]
        assert len(pinned) == 1 and pinned[0].dtype == "float32" and pinned[0].rule.value == "keep_dtype"
        others = [d for d in _float_decisions(result) if d.op_type != ATTENTION]
        assert others and all(d.dtype == "float16" for d in others)
    feeds = token_feeds(model, FUSED_SIZE)
    assert rel_l2(run(result.model, feeds)[0], run(model, feeds)[0]) <= TOLERANCE["float16"]


def test_lists_json_names_contrib_ops_by_domain_key(tmp_path: Path) -> None:
    mixlist = tmp_path / "mixlist.json"
    mixlist.write_text(json.dumps({"black-list": {"to-add": [SKIP_LN]}}), encoding="utf-8")
    base = "lists", "--precision-mode", "allow_mix_precision", "--json", "--target"
    cuda = json.loads(_invoke(*base, "cuda").stdout)
    cpu = json.loads(_invoke(*base, "cpu").stdout)
    moved = _invoke(*base, "cuda", "--modify-mixlist", mixlist)
    assert moved.exit_code == EXIT_OK
    assert SKIP_LN in cuda["gray"] and SKIP_LN in cpu["black"]  # cuda's kernel sums in float32, the CPU's reference
    assert ATTENTION in cuda["white"]
    assert SKIP_LN in json.loads(moved.stdout)["black"]


def test_explain_shows_domain_keys_for_cuda_without_a_gpu(tmp_path: Path) -> None:
    # Explaining decides and prints; it runs nothing, so it explains for cuda on a machine without a GPU too.
    path = _save(fused_models()["direct"], tmp_path, "fused.onnx")
    mixlist = tmp_path / "mixlist.json"
    mixlist.write_text(json.dumps({"black-list": {"to-add": [SKIP_LN]}}), encoding="utf-8")
    keep = tmp_path / "keep_dtype.cfg"
    keep.write_text(f"OpType::{ATTENTION}\n", encoding="utf-8")
    args = ["explain", path, "-m", "allow_mix_precision", "--target", "cuda", "--modify-mixlist", mixlist]
    result = _invoke(*args, "--keep-dtype", keep, "--json")
    assert result.exit_code == EXIT_OK, _text(result)
    payload = json.loads(result.stdout)
    assert payload["target"] == "cuda"
    by_op = {node["op_type"]: node for node in payload["nodes"]}
    assert by_op[SKIP_LN]["rule"] == "black_list" and by_op[SKIP_LN]["colour"] == "black"
    assert by_op[ATTENTION]["rule"] == "keep_dtype" and by_op[ATTENTION]["dtype"] == "float32"
    assert by_op[f"{MS}::FusedMatMul"]["dtype"] == "float16"
    text = _invoke(*args, "--keep-dtype", keep)
    assert text.exit_code == EXIT_OK and "target cuda" in text.stdout


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="CUDA works here: nothing to refuse")
def test_explain_that_runs_decides_for_cuda_and_runs_where_it_can(tmp_path: Path) -> None:
    path = _save(fused_models()["direct"], tmp_path, "fused.onnx")
    # The decision target is cuda; the calibration run goes to the device there is (the CPU here), and the
    # generated token ids stay inside EmbedLayerNormalization's embedding tables.
    result = _invoke("explain", path, "-m", "force_fp16", "--target", "cuda", "--range-check")
    assert result.exit_code == EXIT_OK, _text(result)
    refused = _invoke("explain", path, "-m", "force_fp16", "--target", "cuda", "--range-check", "--device", "cuda")
    assert refused.exit_code == EXIT_USAGE and "CUDA cannot be used" in _text(refused)


def test_ops_info_show_a_contrib_op_for_cuda() -> None:
    result = _invoke("ops-info", "show", SKIP_LN, "--target", "cuda", "--json")
    assert result.exit_code == EXIT_OK
    payload = json.loads(result.stdout)
    assert payload["unknown"] == []
    entry = payload["ops"][SKIP_LN]
    assert entry["colour"] == "gray" and entry["accumulation"] == {"float16": "float32", "bfloat16": "float32"}
    # The fp32 accumulation depends on the ORT version (issue #29034): the op info says since which one.
    assert "1.27.0" in entry["accumulation_source"] and "#29034" in entry["accumulation_source"]
    assert {"float16", "bfloat16"} <= set(entry["dtypes"])
    table = _invoke("ops-info", "show", SKIP_LN, "--target", "cuda")
    assert table.exit_code == EXIT_OK and "gray" in table.stdout and "com.micro" in table.stdout
    cpu = json.loads(_invoke("ops-info", "show", SKIP_LN, "--target", "cpu", "--json").stdout)
    assert cpu["ops"][SKIP_LN]["colour"] == "black"


def test_mixlist_without_the_domain_hints_the_domain_key() -> None:
    mixlist = parse_mixlist(json.dumps({"black-list": {"to-add": ["SkipLayerNormalization"]}}), "m.json")
    problems = mixlist_problems(mixlist, known_ops=[SKIP_LN, "LayerNormalization"])
    assert len(problems) == 1 and "unknown" in problems[0].message
    assert problems[0].hint is not None and repr(SKIP_LN) in problems[0].hint  # not 'LayerNormalization'


def test_raw_optimizer_output_without_the_domain_import_is_rewritten_with_a_warning() -> None:
    raw = optimized(bert_stack(FUSED_SIZE, mask="mul_sub"), "bert", FUSED_SIZE, import_domain=False)
    with pytest.raises(onnx.checker.ValidationError, match=re.escape("No opset import for domain 'com.microsoft'")):
        onnx.checker.check_model(raw, full_check=True)
    result = rewrite_model_detailed(raw, "force_fp16", target="cuda")
    assert any("does not pass the ONNX checker" in w and "com.microsoft" in w for w in result.warnings)
    assert new_checker_complaint(raw, result.model) is None
    feeds = token_feeds(raw, FUSED_SIZE)
    assert rel_l2(run(result.model, feeds)[0], run(raw, feeds)[0]) <= TOLERANCE["float16"]
    assert sum(d.dtype == "float16" for d in result.decisions) >= 0.9 * len(_float_decisions(result))


def _unknown_contrib_model() -> onnx.ModelProto:
    nodes = [
        oh.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
        oh.make_node("NoSuchFusedOp", ["a"], ["b"], domain=MS, name="fused_thing"),
        oh.make_node("MatMul", ["b", "w2"], ["y"], name="mm2"),
    ]
    graph = oh.make_graph(
        nodes,
        "unknown_contrib",
        [tensor("x", FLOAT, [2, 4])],
        [tensor("y", FLOAT, [2, 4])],
        [weight("w1", 4, 4), weight("w2", 4, 4)],
        value_info=[tensor("b", FLOAT, [2, 4])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid(MS, 1)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)  # the checker cannot judge a contrib op: it passes
    return model


def test_contrib_op_ort_does_not_know_rewrite_keeps_it_exactly_and_run_refuses(tmp_path: Path) -> None:
    """What ``rewrite`` does with it (documented here): the node is never retyped (rule no_schema), its neighbours
    are decided from the declared types, and casts keep its tensors float32; the output is written (no ORT
    session is needed for a checker-clean input). ``run`` asks ORT, which refuses: exit 2, node named, no output."""
    model = _unknown_contrib_model()
    result = rewrite_model_detailed(model, "force_fp16", target="cuda")
    decisions = {d.name: d for d in result.decisions}
    assert decisions["fused_thing"].rule.value == "no_schema" and decisions["fused_thing"].dtype is None
    assert decisions["mm1"].dtype == decisions["mm2"].dtype == "float16"
    graph = result.model.graph
    unknown = next(node for node in graph.node if node.op_type == "NoSuchFusedOp")
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.value_info, *graph.input, *graph.output)}
    assert types[unknown.input[0]] == types[unknown.output[0]] == FLOAT
    assert result.stats.casts_inserted == 4  # x down, a up, b down, y up
    onnx.checker.check_model(result.model, full_check=True)

    path = _save(model, tmp_path, "contrib.onnx")
    written = tmp_path / "rewritten.onnx"
    rewrite = _invoke("rewrite", path, "-o", written, "--precision-mode", "force_fp16", "--target", "cuda")
    assert rewrite.exit_code == EXIT_OK and written.is_file()
    out = tmp_path / "run_out.onnx"
    refused = _invoke("run", path, "-m", "force_fp16", "-o", out, "--iterations", "1", "--target", "cpu")
    assert refused.exit_code == EXIT_USAGE, _text(refused)
    assert not out.exists()
    text = _text(refused)
    assert str(path) in text and "'fused_thing'" in text and f"{MS}::NoSuchFusedOp" in text
