"""Contrib ops typed from ONNX Runtime's own schema registry (opinfo/ort_schemas.py), as the decision core types the
default domain from onnx.defs: same NodeTyping rules, checked against onnx.defs and against real ORT sessions."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import helper

from ampconfig.dtypes import Dtype
from ampconfig.opinfo.kernels import CPU, KernelStatus, check_kernel
from ampconfig.opinfo.ort_schemas import (
    OrtSchemaTyping,
    ort_node_typing,
    ort_schemas,
    schema_at,
)
from ampconfig.opinfo.schema import ABSENT, NodeTyping, compute_variables, node_typing
from ampconfig.opinfo.typing_source import ChainedTyping, OnnxTyping, TypingSource
from tests.graphs import IR_VERSION

MS = "com.microsoft"
F32, F16, I32, I64 = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64)
LOW_FLOATS = {"tensor(float)", "tensor(float16)", "tensor(bfloat16)"}
TYPING = OrtSchemaTyping()


def _typing(op: str, n_in: int, n_out: int) -> NodeTyping:
    found = TYPING.typing(op, MS, 1, n_in, n_out)
    assert found is not None, op
    return found


def _moved(typing: NodeTyping, inputs: list[str | None], outputs: list[str | None]) -> frozenset[str]:
    found = compute_variables(typing, inputs, outputs, "float16")
    assert found is not None
    return found[1]


def test_registry_lists_the_contrib_ops_ort_optimizers_write() -> None:
    fused = {
        "Attention",
        "MultiHeadAttention",
        "GroupQueryAttention",
        "SkipLayerNormalization",
        "SkipSimplifiedLayerNormalization",
        "EmbedLayerNormalization",
        "BiasGelu",
        "FastGelu",
        "QuickGelu",
        "BiasAdd",
        "BiasSplitGelu",
        "FusedMatMul",
        "RotaryEmbedding",
        "GemmFastGelu",
    }
    contrib = {name for (domain, name) in ort_schemas() if domain == MS}
    assert fused <= contrib
    assert len(contrib) > 100  # the whole com.microsoft registry, not a hand list
    # SimplifiedLayerNormalization is an ORT op registered in the default ONNX domain; onnx.defs does not know it.
    assert schema_at("SimplifiedLayerNormalization", "", 17) is not None
    assert node_typing("SimplifiedLayerNormalization", "", 17, 2, 1) is None
    assert ort_schemas() is ort_schemas()  # read once per process


def test_skip_layer_normalization_keeps_mean_and_inv_std_var_float() -> None:
    typing = _typing("SkipLayerNormalization", 5, 4)
    assert [slot.type_var for slot in typing.inputs] == ["T"] * 5
    assert [slot.type_var for slot in typing.outputs] == ["T", "U", "U", "T"]
    assert typing.inputs[0].allowed == LOW_FLOATS
    assert typing.outputs[1].allowed == {"tensor(float)"}
    assert _moved(typing, ["float32"] * 5, ["float32"] * 4) == {"T"}  # U cannot be float16: it stays float


def test_attention_mask_index_is_int32_and_only_the_data_moves() -> None:
    typing = _typing("Attention", 4, 1)
    assert [slot.type_var for slot in typing.inputs] == ["T", "T", "T", "M"]
    assert typing.inputs[3].allowed == {"tensor(int32)"}
    assert typing.var_allows("T", "float16") and typing.var_allows("T", "bfloat16")
    assert _moved(typing, ["float32", "float32", "float32", None], ["float32"]) == {"T"}


def test_multi_head_attention_optional_inputs_left_out() -> None:
    # query, key, value, (no bias), key_padding_mask, attention_bias: positions count the blank one.
    typing = _typing("MultiHeadAttention", 6, 1)
    assert [slot.type_var for slot in typing.inputs] == ["T", "T", "T", "T", "M", "T"]
    assert typing.inputs[4].allowed == {"tensor(int32)"}
    inputs: list[str | None] = ["float32", "float32", "float32", ABSENT, None, "float32"]
    assert _moved(typing, inputs, ["float32"]) == {"T"}
    # Asking for more inputs than the schema declares gives only the declared slots (no variadic tail).
    declared = len(schema_at("MultiHeadAttention", MS, 1).inputs)  # type: ignore[union-attr]
    assert len(_typing("MultiHeadAttention", declared + 3, 1).inputs) == declared


def test_embed_layer_normalization_integer_ids_and_mask_index() -> None:
    typing = _typing("EmbedLayerNormalization", 7, 2)
    assert [slot.type_var for slot in typing.inputs] == ["T1", "T1", "T", "T", "T", "T", "T"]
    assert typing.inputs[0].allowed == {"tensor(int32)"}
    assert typing.outputs[1].type_var == "T1"
    assert typing.var_allows("T", "float16") and not typing.var_allows("T", "bfloat16")
    assert _moved(typing, [None, None] + ["float32"] * 5, ["float32", None]) == {"T"}


def test_group_query_attention_cache_moves_with_the_data() -> None:
    typing = _typing("GroupQueryAttention", 7, 3)
    assert [slot.type_var for slot in typing.inputs] == ["T", "T", "T", "T_CACHE", "T_CACHE", "M", "M"]
    assert [slot.type_var for slot in typing.outputs] == ["T", "T_CACHE", "T_CACHE"]
    moved = _moved(typing, ["float32"] * 5 + [None, None], ["float32"] * 3)
    assert moved == {"T", "T_CACHE"}  # a float32 KV cache goes to float16 with the query, as ORT requires


@pytest.mark.parametrize(("op", "n_in"), [("FastGelu", 2), ("BiasGelu", 2), ("FusedMatMul", 2)])
def test_elementwise_and_matmul_fusions_share_one_variable(op: str, n_in: int) -> None:
    typing = _typing(op, n_in, 1)
    assert {slot.type_var for slot in typing.inputs + typing.outputs} == {"T"}
    assert typing.var_allows("T", "float16") and typing.var_allows("T", "bfloat16")
    assert typing.since_version == 1


def test_default_domain_typing_is_identical_to_onnx_defs() -> None:
    """Where ORT's registry and onnx.defs hold the same schema version, the two readers agree slot for slot
    (variadic, optional, heterogeneous): one rule, two sources."""
    compared = 0
    for (domain, name), versions in ort_schemas().items():
        if domain != "":
            continue
        for schema in versions:
            try:
                onnx_schema = onnx.defs.get_schema(name, schema.since_version, "")
            except onnx.defs.SchemaError:
                continue  # an ORT-only default-domain op (SimplifiedLayerNormalization, ...)
            if onnx_schema.since_version != schema.since_version:
                continue
            n_out = len(onnx_schema.outputs)
            for n_in in {len(onnx_schema.inputs), len(onnx_schema.inputs) + 2, max(len(onnx_schema.inputs) - 1, 0)}:
                ours = ort_node_typing(name, "", schema.since_version, n_in, n_out)
                theirs = node_typing(name, "", schema.since_version, n_in, n_out)
                assert ours is not None and theirs is not None
                assert (ours.inputs, ours.outputs, ours.since_version) == (
                    theirs.inputs,
                    theirs.outputs,
                    theirs.since_version,
                ), (name, schema.since_version, n_in)
                compared += 1
    assert compared > 1000  # every default-domain op with history, not a sample
    # Heterogeneous variadics (Loop state) bind no shared variable in either reader.
    loop = ort_node_typing("Loop", "", 17, 4, 2)
    assert loop is not None and loop.inputs[2].type_var is None and not loop.inputs[2].homogeneous


def test_typing_sources_chain_onnx_first_then_ort() -> None:
    chained = ChainedTyping((OnnxTyping(), OrtSchemaTyping()))
    assert isinstance(OrtSchemaTyping(), TypingSource) and isinstance(chained, TypingSource)
    relu = chained.typing("Relu", "", 17, 1, 1)
    assert relu is node_typing("Relu", "", 17, 1, 1)  # the onnx.defs object itself
    simplified = chained.typing("SimplifiedLayerNormalization", "", 17, 2, 2)
    assert simplified is not None and [s.type_var for s in simplified.outputs] == ["V", "U"]
    assert chained.typing("SkipLayerNormalization", MS, 1, 3, 1) is ort_node_typing(
        "SkipLayerNormalization", MS, 1, 3, 1
    )
    assert chained.typing("MyCustomOp", "my.domain", 1, 1, 1) is None
    assert OrtSchemaTyping(frozenset({MS})).typing("Relu", "", 17, 1, 1) is None  # limited to contrib domains
    assert TYPING.typing("Attention", MS, 0, 3, 1) is None  # no version in force at opset 0


def _one_node(
    op: str, inputs: list[tuple[str, int]], outputs: list[tuple[str, int]], **attrs: object
) -> onnx.ModelProto:
    node = helper.make_node(op, [n for n, _ in inputs], [n for n, _ in outputs], domain=MS, **attrs)
    graph = helper.make_graph(
        [node],
        "contrib",
        [helper.make_tensor_value_info(n, e, None) for n, e in inputs],
        [helper.make_tensor_value_info(n, e, None) for n, e in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = IR_VERSION
    return model


def _retyped_skip_layer_norm(move_u: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """SkipLayerNormalization retyped to float16 by the registry's typing (U kept float unless ``move_u``)."""
    typing = _typing("SkipLayerNormalization", 3, 3)
    moved = _moved(typing, ["float32"] * 3, ["float32"] * 3) | ({"U"} if move_u else set())
    elem = {var: (F16 if var in moved else F32) for var in ("T", "U")}
    names_in, names_out = ["input", "skip", "gamma"], ["output", "mean", "inv_std_var"]
    inputs = [(n, elem[s.type_var]) for n, s in zip(names_in, typing.inputs)]  # type: ignore[index]
    outputs = [(n, elem[s.type_var]) for n, s in zip(names_out, typing.outputs)]  # type: ignore[index]
    rng = np.random.default_rng(0)
    feeds = {"input": rng.standard_normal((1, 2, 4)), "skip": rng.standard_normal((1, 2, 4)), "gamma": np.ones(4)}
    return _one_node("SkipLayerNormalization", inputs, outputs), {k: v.astype(np.float16) for k, v in feeds.items()}


def test_registry_typing_is_what_ort_runs_and_the_fixed_type_is_enforced() -> None:
    model, feeds = _retyped_skip_layer_norm(move_u=False)
    verdict = check_kernel(model, CPU, feeds)
    assert verdict.status is KernelStatus.NATIVE and verdict.ran, verdict.message
    refused, _ = _retyped_skip_layer_norm(move_u=True)  # mean/inv_std_var as float16: U forbids it
    assert check_kernel(refused, CPU, feeds).status is KernelStatus.FAILED


def test_group_query_attention_typed_by_the_registry_loads_in_ort() -> None:
    typing = _typing("GroupQueryAttention", 7, 3)
    moved = _moved(typing, ["float32"] * 5 + [None, None], ["float32"] * 3)
    names_in = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]
    names_out = ["output", "present_key", "present_value"]
    elem = Dtype.FLOAT16.elem_type
    inputs = [(n, elem if s.type_var in moved else I32) for n, s in zip(names_in, typing.inputs)]
    outputs = [(n, elem) for n in names_out]
    model = _one_node("GroupQueryAttention", inputs, outputs, num_heads=1, kv_num_heads=1)
    assert check_kernel(model, CPU).status is KernelStatus.NATIVE
