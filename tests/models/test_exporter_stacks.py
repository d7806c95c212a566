"""Exporter-shaped transformer stacks (issue 13, "Done when"): BERT-like and GPT-2-like stacks as torch's dynamo
export writes them (LayerNormalization, Softmax, the mask as a large negative constant through Where, Erf GELU for
BERT, tanh GELU with ``Pow(x, 3.0)`` for GPT-2, residual Adds, Reshape/Transpose head splits).

- allow_mix_precision for cuda adds at most 2 casts per layer over force_fp16;
- its CPU accuracy, measured as ``run`` measures it (the copy that rounds every float16 value), is no worse than
  force_fp16's;
- the same stacks with LayerNorm written out (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div): from opset 17 the
  rewrite folds each chain into a LayerNormalization node (ampconfig/rewrite/fold.py), which goes low like the
  op, and the 2-casts-per-layer bound holds. Below opset 17 every LayerNorm is one float32 island (Pow(x, 2) ->
  ReduceMean stays black, the rest is denied by propagation, and the fusion guard keeps GPT-2's residual Adds in
  float32), which costs up to 2 casts per LayerNorm; ONNX Runtime loads the result and its LayerNorm fusion folds
  every island.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from ampconfig import rewrite_model_detailed
from ampconfig.documents.session_config import Tolerance
from ampconfig.domains import is_default_domain
from ampconfig.prove.verdict import AccuracyReference, accuracy_model
from ampconfig.rewrite.results import RewriteResult
from tests.transformer_stacks import StackSize, bert_stack, gpt2_stack, token_feeds

SIZE = StackSize(layers=3)
STACKS: dict[str, Callable[..., onnx.ModelProto]] = {"bert": bert_stack, "gpt2": gpt2_stack}
#: How much worse than force_fp16 allow_mix_precision may measure: noise, not a trend (rel-L2 ~1e-3 here).
EPSILON = 1e-4
#: Per decomposed LayerNorm, the nodes of the island (suffixes of the node names the builder gives).
LN_PARTS = {"mean": "ReduceMean", "sub": "Sub", "pow": "Pow", "var": "ReduceMean", "add_eps": "Add", "sqrt": "Sqrt"}
LN_PARTS |= {"div": "Div", "scale": "Mul", "shift": "Add"}


def _stack(name: str, decomposed: bool, opset: int | None = None) -> onnx.ModelProto:
    model = STACKS[name](SIZE, decomposed_ln=decomposed)
    if opset is not None:  # the written-out stacks use nothing newer than opset 13; below 17 nothing can fold
        for entry in model.opset_import:
            if is_default_domain(entry.domain):
                entry.version = opset
        onnx.checker.check_model(model, full_check=True)
    return model


def _rewrites(model: onnx.ModelProto, target: str = "cuda") -> dict[str, RewriteResult]:
    return {mode: rewrite_model_detailed(model, mode, target=target) for mode in ("force_fp16", "allow_mix_precision")}


def _layer_norm_names(model: onnx.ModelProto) -> list[str]:
    return sorted({node.name.rsplit(".", 1)[0] for node in model.graph.node if node.name.endswith(".var")})


@pytest.mark.parametrize("name", sorted(STACKS))
def test_mixed_precision_for_cuda_adds_at_most_two_casts_per_layer_over_force_fp16(name: str) -> None:
    rewrites = _rewrites(_stack(name, decomposed=False))
    fp16, mixed = (rewrites[m].stats.casts_inserted for m in ("force_fp16", "allow_mix_precision"))
    print(f"\n{name} x{SIZE.layers} layers, cuda: force_fp16 {fp16} casts, allow_mix_precision {mixed} casts")
    assert mixed - fp16 <= 2 * SIZE.layers
    # Why it is cheap: the norms and softmaxes are gray on cuda (their float16 kernels sum in float32) and the
    # GELU's cube is judged by its structure, so nothing of a layer stays float32.
    decisions = rewrites["allow_mix_precision"].decisions
    for op in ("LayerNormalization", "Softmax"):
        nodes = [d for d in decisions if d.op_type == op]
        assert nodes and all(d.dtype == "float16" and d.colour == "gray" for d in nodes), op
        assert all("accumulate in float32" in d.reason for d in nodes if d.rule.value == "follows_inputs")
    cubes = [d for d in decisions if d.op_type == "Pow"]
    assert len(cubes) == (SIZE.layers if name == "gpt2" else 0)
    assert all(d.dtype == "float16" and d.colour == "gray" and "Tanh" in d.reason for d in cubes)


@pytest.mark.parametrize("target", ["cuda", "cpu"])
@pytest.mark.parametrize("decomposed", [False, True], ids=["layer_norm_op", "decomposed_ln"])
@pytest.mark.parametrize("name", sorted(STACKS))
def test_cpu_accuracy_with_float16_rounding_is_no_worse_than_force_fp16(
    name: str, decomposed: bool, target: str
) -> None:
    model = _stack(name, decomposed)
    accuracy = AccuracyReference.from_reference_run(model, token_feeds(model, SIZE), "cpu", Tolerance())
    errors = {}
    for mode, result in _rewrites(model, target).items():
        assert accuracy_model(result.model, "cpu")[1] > 0  # the rounding copy is what is judged
        judgement = accuracy.verdict(result.model)
        assert judgement.passed, judgement.failures
        errors[mode] = judgement.worst_rel_l2
    print(f"\n{name} ({'decomposed LN' if decomposed else 'LayerNormalization'}), {target}: {errors}")
    assert errors["allow_mix_precision"] <= errors["force_fp16"] + EPSILON


@pytest.mark.parametrize("name", sorted(STACKS))
def test_below_opset_17_a_decomposed_layer_norm_is_one_float32_island_that_ort_loads_and_fuses(
    name: str, tmp_path: Path
) -> None:
    model = _stack(name, decomposed=True, opset=16)  # no LayerNormalization op to fold into
    rewrites = _rewrites(model)
    mixed = rewrites["allow_mix_precision"]
    decisions = {d.name: d for d in mixed.decisions}
    norms = _layer_norm_names(model)
    assert len(norms) == 2 * SIZE.layers + 1
    for norm in norms:
        parts = {suffix: decisions[f"{norm}.{suffix}"] for suffix in LN_PARTS}
        assert all(d.dtype == "float32" for d in parts.values()), norm
        # Pow(x, 2) -> ReduceMean can overflow float16 (ReduceMean writes its sum in float16 on cuda): black.
        assert parts["pow"].rule.value == parts["mean"].rule.value == parts["var"].rule.value == "black_list"
        assert {parts[s].rule.value for s in ("sub", "add_eps", "sqrt", "div", "scale", "shift")} == {
            "deny_propagation"
        }
    # One island per LayerNorm: at most a cast in and a cast out each.
    casts = mixed.stats.casts_inserted
    extra = casts - rewrites["force_fp16"].stats.casts_inserted
    guarded = sorted(d.name for d in mixed.decisions if d.rule.value == "fusion_guard")
    print(
        f"\n{name} decomposed LN x{SIZE.layers} layers, cuda: allow_mix_precision {casts} casts "
        f"({extra / SIZE.layers:.1f} per layer over force_fp16, {len(norms)} LayerNorms); fusion guard: {guarded}"
    )
    assert casts <= 2 * len(norms)
    # GPT-2 is pre-LN: each residual Add heads a LayerNorm and is kept float32 by the fusion guard, naming it.
    if name == "gpt2":
        assert len(guarded) == 2 * SIZE.layers and all(".res" in g for g in guarded)
        assert all(decisions[g].cause is not None and decisions[g].cause.endswith(".mean") for g in guarded)
    # ORT loads it, and its LayerNorm fusion folds every float32 island (no cast inside one to break it).
    optimized = tmp_path / "ort_optimized.onnx"
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(optimized)
    ort.InferenceSession(mixed.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    fused = collections.Counter(node.op_type for node in onnx.load(optimized).graph.node)
    assert fused["LayerNormalization"] == len(norms) and fused["ReduceMean"] == 0


@pytest.mark.parametrize("name", sorted(STACKS))
def test_decomposed_layer_norm_adds_at_most_two_casts_per_layer_over_force_fp16(name: str) -> None:
    model = _stack(name, decomposed=True)
    rewrites = _rewrites(model)
    extra = rewrites["allow_mix_precision"].stats.casts_inserted - rewrites["force_fp16"].stats.casts_inserted
    assert extra <= 2 * SIZE.layers
    # At opset 17 every written-out LayerNorm is folded into a LayerNormalization node, gray on cuda, and goes low.
    norms = _layer_norm_names(model)
    for mode, result in rewrites.items():
        assert result.stats.layer_norms_folded == len(norms), mode
        folded = [d for d in result.decisions if d.op_type == "LayerNormalization"]
        assert len(folded) == len(norms) and all(d.dtype == "float16" for d in folded), mode
        assert not any(d.op_type == "ReduceMean" for d in result.decisions), mode
