"""Small transformer stacks for the fused-graph and exporter-shape tests (issues 12 and 13), built with onnx.helper.

- :func:`bert_stack`: a post-LN BERT-like encoder as exporters write it: word + position + token-type embeddings
  (Gather) and LayerNormalization, Q/K/V MatMul + bias, Reshape/Transpose head splits, scaled QK^T, the attention
  mask added as a large negative bias, Softmax, AV, merged heads, output projection, residual Add and
  LayerNormalization, the Erf GELU MLP. ``mask="where"`` writes the mask as torch's dynamo export of recent
  transformers does (``Where(mask, 0, float32 lowest)``); ``mask="mul_sub"`` as the TorchScript exporter wrote
  HF BERT (``(1 - mask[:, None, None, :]) * -10000``), the pattern ONNX Runtime's attention fusion matches.
- :func:`fused_bert_stack`: a BERT-like stack written directly in com.microsoft ops (EmbedLayerNormalization,
  Attention, SkipLayerNormalization, BiasGelu, FastGelu, FusedMatMul, MultiHeadAttention).
- :func:`optimized`: a stack through ``onnxruntime.transformers.optimizer.optimize_model`` (on the CPU), as
  production models come; :func:`fused_models` gives the three fused graphs the tests share.
- :func:`gpt2_stack`: a pre-LN GPT-2-like decoder: fused QKV MatMul + Split, causal mask by ``Where`` with float32's
  lowest value, the tanh GELU with ``Pow(x, 3.0)``, residual Adds, final LayerNorm and tied logits.

Both take ``decomposed_ln=True`` for the LayerNorm older exporters write out (ReduceMean, Sub, Pow 2, ReduceMean,
Add eps, Sqrt, Div, Mul gamma, Add beta). Opset 17, IR version 10, seeded weights scaled 1/sqrt(fan-in) so the
activations stay O(1); every model passes ``onnx.checker.check_model(full_check=True)`` and runs in ORT CPU.
"""

from __future__ import annotations

import functools
import math
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.graphs import IR_VERSION

OPSET = 17
MS = "com.microsoft"
#: What HF/torch use as "minus infinity" in attention masks: float32's lowest value (beyond float16's range).
FLOAT32_LOWEST = float(np.finfo(np.float32).min)


@dataclass(frozen=True)
class StackSize:
    layers: int = 2
    hidden: int = 32
    heads: int = 4
    ffn: int = 64
    vocab: int = 50
    max_positions: int = 16

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class StackBuilder:
    """Collects nodes and initializers; node ``name`` gets the output ``name`` (or ``name_out{i}``)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.domains: set[str] = set()

    def const(self, name: str, value: object, dtype: type = np.float32) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def weight(self, name: str, *shape: int, scale: float | None = None) -> str:
        scale = 1.0 / math.sqrt(shape[0]) if scale is None else scale
        return self.const(name, self.rng.standard_normal(shape) * scale)

    def node(self, op: str, inputs: list[str], name: str, outputs: int = 1, domain: str = "", **attrs: object) -> str:
        names = [name] if outputs == 1 else [f"{name}_out{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=name, domain=domain, **attrs))
        if domain:
            self.domains.add(domain)
        return names[0]

    def split(self, name: str, outputs: int) -> list[str]:
        return [f"{name}_out{i}" for i in range(outputs)]

    def linear(self, x: str, name: str, n_in: int, n_out: int) -> str:
        y = self.node("MatMul", [x, self.weight(f"{name}.weight", n_in, n_out)], f"{name}.matmul")
        return self.node("Add", [y, self.const(f"{name}.bias", self.rng.standard_normal(n_out) * 0.02)], f"{name}.add")

    def model(
        self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)
        opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, 1) for d in sorted(self.domains)]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model


def layer_norm(b: StackBuilder, x: str, name: str, hidden: int, decomposed: bool) -> str:
    gamma = b.const(f"{name}.gamma", 1.0 + b.rng.standard_normal(hidden) * 0.05)
    beta = b.const(f"{name}.beta", b.rng.standard_normal(hidden) * 0.05)
    if not decomposed:
        return b.node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-5)
    mean = b.node("ReduceMean", [x], f"{name}.mean", axes=[-1])  # opset 17: axes is an attribute
    centred = b.node("Sub", [x, mean], f"{name}.sub")
    square = b.node("Pow", [centred, b.const(f"{name}.two", 2.0)], f"{name}.pow")
    variance = b.node("ReduceMean", [square], f"{name}.var", axes=[-1])
    std = b.node("Sqrt", [b.node("Add", [variance, b.const(f"{name}.eps", 1e-5)], f"{name}.add_eps")], f"{name}.sqrt")
    normed = b.node("Div", [centred, std], f"{name}.div")
    return b.node("Add", [b.node("Mul", [normed, gamma], f"{name}.scale"), beta], f"{name}.shift")


def gelu_erf(b: StackBuilder, x: str, name: str) -> str:
    erf = b.node("Erf", [b.node("Div", [x, b.const(f"{name}.sqrt2", math.sqrt(2.0))], f"{name}.div")], f"{name}.erf")
    inner = b.node("Add", [erf, b.const(f"{name}.one", 1.0)], f"{name}.add")
    return b.node("Mul", [b.node("Mul", [x, inner], f"{name}.mul"), b.const(f"{name}.half", 0.5)], f"{name}.mul_half")


def gelu_tanh(b: StackBuilder, x: str, name: str) -> str:
    """GPT-2's gelu_new, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with the cube as ``Pow(x, 3.0)``."""
    cube = b.node("Pow", [x, b.const(f"{name}.three", 3.0)], f"{name}.pow")
    cube = b.node("Mul", [cube, b.const(f"{name}.c", 0.044715)], f"{name}.mul_c")
    inner = b.node("Add", [x, cube], f"{name}.add_cube")
    scaled = b.node("Mul", [inner, b.const(f"{name}.k", math.sqrt(2.0 / math.pi))], f"{name}.mul_k")
    tanh = b.node("Tanh", [scaled], f"{name}.tanh")
    one_plus = b.node("Add", [tanh, b.const(f"{name}.one", 1.0)], f"{name}.add_one")
    half_x = b.node("Mul", [x, b.const(f"{name}.half", 0.5)], f"{name}.mul_half")
    return b.node("Mul", [half_x, one_plus], f"{name}.mul")


def attention(b: StackBuilder, q: str, k: str, v: str, size: StackSize, name: str, mask: tuple[str, str]) -> str:
    """Multi-head attention as exporters write it; ``mask`` is ("add", bias) or ("where", condition)."""
    heads_shape = b.const(f"{name}.heads_shape", [0, 0, size.heads, size.head_dim], np.int64)
    qh = b.node(
        "Transpose", [b.node("Reshape", [q, heads_shape], f"{name}.q_reshape")], f"{name}.q_t", perm=[0, 2, 1, 3]
    )
    kt = b.node(
        "Transpose", [b.node("Reshape", [k, heads_shape], f"{name}.k_reshape")], f"{name}.k_t", perm=[0, 2, 3, 1]
    )
    vh = b.node(
        "Transpose", [b.node("Reshape", [v, heads_shape], f"{name}.v_reshape")], f"{name}.v_t", perm=[0, 2, 1, 3]
    )
    scores = b.node("MatMul", [qh, kt], f"{name}.qk")
    scores = b.node("Div", [scores, b.const(f"{name}.scale", math.sqrt(size.head_dim))], f"{name}.div_scale")
    kind, mask_value = mask
    if kind == "add":
        scores = b.node("Add", [scores, mask_value], f"{name}.mask")
    else:
        scores = b.node("Where", [mask_value, scores, b.const(f"{name}.fill", FLOAT32_LOWEST)], f"{name}.mask")
    probs = b.node("Softmax", [scores], f"{name}.softmax", axis=-1)
    context = b.node("Transpose", [b.node("MatMul", [probs, vh], f"{name}.av")], f"{name}.ctx_t", perm=[0, 2, 1, 3])
    merged = b.node(
        "Reshape", [context, b.const(f"{name}.merge_shape", [0, 0, size.hidden], np.int64)], f"{name}.merge"
    )
    return b.linear(merged, f"{name}.out", size.hidden, size.hidden)


def _positions(b: StackBuilder, ids: str) -> str:
    """Position ids 0..seq-1 from the input's shape, as exports compute them."""
    seq = b.node("Gather", [b.node("Shape", [ids], "pos.shape"), b.const("pos.axis", 1, np.int64)], "pos.seq", axis=0)
    return b.node("Range", [b.const("pos.start", 0, np.int64), seq, b.const("pos.step", 1, np.int64)], "pos.range")


def bert_stack(
    size: StackSize = StackSize(), *, decomposed_ln: bool = False, mask: str = "where", seed: int = 0
) -> onnx.ModelProto:
    """input_ids, token_type_ids, attention_mask (int64 [batch, seq]) -> last_hidden_state [batch, seq, hidden]."""
    b = StackBuilder(seed)
    h = size.hidden
    word = b.node("Gather", [b.weight("emb.word", size.vocab, h, scale=0.5), "input_ids"], "emb.word_gather")
    pos = b.node(
        "Gather", [b.weight("emb.pos", size.max_positions, h, scale=0.5), _positions(b, "input_ids")], "emb.pos_gather"
    )
    typ = b.node("Gather", [b.weight("emb.type", 2, h, scale=0.5), "token_type_ids"], "emb.type_gather")
    summed = b.node("Add", [b.node("Add", [word, pos], "emb.add_pos"), typ], "emb.add_type")
    x = layer_norm(b, summed, "emb.ln", h, decomposed_ln)
    if mask == "mul_sub":
        # (1 - mask[:, None, None, :]) * -10000, with two Unsqueezes, as ORT's attention fusion expects it.
        unsq = b.node("Unsqueeze", ["attention_mask", b.const("mask.axis1", [1], np.int64)], "mask.unsqueeze1")
        unsq = b.node("Unsqueeze", [unsq, b.const("mask.axis2", [2], np.int64)], "mask.unsqueeze2")
        flt = b.node("Cast", [unsq], "mask.cast", to=TensorProto.FLOAT)
        inverted = b.node("Sub", [b.const("mask.one", 1.0), flt], "mask.sub")
        bias = b.node("Mul", [inverted, b.const("mask.fill", -10000.0)], "mask.mul")
    else:
        # Where(mask, 0, lowest): the additive mask torch's dynamo export of recent transformers writes.
        unsq = b.node("Unsqueeze", ["attention_mask", b.const("mask.axes", [1, 2], np.int64)], "mask.unsqueeze")
        keep = b.node("Cast", [unsq], "mask.cast", to=TensorProto.BOOL)
        bias = b.node("Where", [keep, b.const("mask.zero", 0.0), b.const("mask.fill", FLOAT32_LOWEST)], "mask.where")
    for layer in range(size.layers):
        p = f"l{layer}"
        q, k, v = (b.linear(x, f"{p}.{n}", h, h) for n in ("query", "key", "value"))
        attn = attention(b, q, k, v, size, f"{p}.attn", ("add", bias))
        x = layer_norm(b, b.node("Add", [attn, x], f"{p}.res1"), f"{p}.ln1", h, decomposed_ln)
        ffn = gelu_erf(b, b.linear(x, f"{p}.fc1", h, size.ffn), f"{p}.gelu")
        ffn = b.linear(ffn, f"{p}.fc2", size.ffn, h)
        x = layer_norm(b, b.node("Add", [ffn, x], f"{p}.res2"), f"{p}.ln2", h, decomposed_ln)
    b.nodes[-1].output[0] = "last_hidden_state"
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in BERT_INPUTS]
    out = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", h])
    return b.model("bert_stack", ids, [out])


BERT_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def gpt2_stack(size: StackSize = StackSize(), *, decomposed_ln: bool = False, seed: int = 1) -> onnx.ModelProto:
    """input_ids (int64 [batch, seq]) -> logits [batch, seq, vocab]."""
    b = StackBuilder(seed)
    h = size.hidden
    wte = b.weight("wte", size.vocab, h, scale=0.5)
    word = b.node("Gather", [wte, "input_ids"], "emb.word_gather")
    pos = b.node(
        "Gather", [b.weight("wpe", size.max_positions, h, scale=0.5), _positions(b, "input_ids")], "emb.pos_gather"
    )
    x = b.node("Add", [word, pos], "emb.add")
    # The causal mask: a [1, 1, max, max] boolean buffer sliced to [seq, seq].
    seq = b.node("Unsqueeze", ["pos.seq", b.const("causal.axis", [0], np.int64)], "causal.seq")
    ends = b.node("Concat", [seq, seq], "causal.ends", axis=0)
    tri = np.tril(np.ones((size.max_positions, size.max_positions), dtype=bool))[None, None]
    causal = b.node(
        "Slice",
        [
            b.const("causal.buffer", tri, bool),
            b.const("causal.starts", [0, 0], np.int64),
            ends,
            b.const("causal.axes", [2, 3], np.int64),
        ],
        "causal.slice",
    )
    split = b.const("qkv.split", [h, h, h], np.int64)
    for layer in range(size.layers):
        p = f"h{layer}"
        qkv = b.linear(layer_norm(b, x, f"{p}.ln_1", h, decomposed_ln), f"{p}.c_attn", h, 3 * h)
        q, k, v = b.split(f"{p}.qkv_split", 3)
        b.node("Split", [qkv, split], f"{p}.qkv_split", outputs=3, axis=-1)
        x = b.node("Add", [x, attention(b, q, k, v, size, f"{p}.attn", ("where", causal))], f"{p}.res1")
        hidden = b.linear(layer_norm(b, x, f"{p}.ln_2", h, decomposed_ln), f"{p}.c_fc", h, size.ffn)
        hidden = b.linear(gelu_tanh(b, hidden, f"{p}.gelu"), f"{p}.c_proj", size.ffn, h)
        x = b.node("Add", [x, hidden], f"{p}.res2")
    final = layer_norm(b, x, "ln_f", h, decomposed_ln)
    head = b.node("Transpose", [wte], "lm_head.t", perm=[1, 0])
    b.node("MatMul", [final, head], "lm_head")
    b.nodes[-1].output[0] = "logits"
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", size.vocab])
    return b.model("gpt2_stack", [ids], [out])


def token_feeds(
    model: onnx.ModelProto, size: StackSize, batch: int = 2, seq: int = 8, seed: int = 0
) -> dict[str, np.ndarray]:
    """Inputs for the stacks: random token ids, token types 0/1, and an attention mask whose second row is padded
    (so the masking path is exercised)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        elem = value.type.tensor_type.elem_type
        dtype = np.int32 if elem == TensorProto.INT32 else np.int64
        if "mask" in value.name:
            mask = np.ones((batch, seq), dtype)
            mask[1:, seq // 2 :] = 0
            feeds[value.name] = mask
        elif "type" in value.name or "segment" in value.name:
            feeds[value.name] = rng.integers(0, 2, (batch, seq)).astype(dtype)
        else:
            feeds[value.name] = rng.integers(0, size.vocab, (batch, seq)).astype(dtype)
    return feeds


def fused_bert_stack(size: StackSize = StackSize(), seed: int = 2) -> onnx.ModelProto:
    """A BERT-like stack written directly in the com.microsoft ops ONNX Runtime's optimizer emits:
    EmbedLayerNormalization -> Attention -> MatMul -> SkipLayerNormalization (with bias) -> MatMul -> BiasGelu ->
    MatMul -> SkipLayerNormalization -> MatMul -> FastGelu (with bias) -> FusedMatMul (transB) ->
    MultiHeadAttention (self-attention, unpacked q/k/v) -> output. input_ids, segment_ids, input_mask: int32."""
    b = StackBuilder(seed)
    h = size.hidden
    emb = b.node(
        "EmbedLayerNormalization",
        [
            "input_ids",
            "segment_ids",
            b.weight("emb.word", size.vocab, h, scale=0.5),
            b.weight("emb.pos", size.max_positions, h, scale=0.5),
            b.weight("emb.segment", 2, h, scale=0.5),
            b.const("emb.gamma", np.ones(h)),
            b.const("emb.beta", np.zeros(h)),
            "input_mask",
        ],
        "embed_ln",
        outputs=2,
        domain=MS,
        epsilon=1e-5,
    )
    mask_index = "embed_ln_out1"
    qkv_bias = b.const("attn.bias", b.rng.standard_normal(3 * h) * 0.02)
    attn = b.node(
        "Attention",
        [emb, b.weight("attn.qkv", h, 3 * h), qkv_bias, mask_index],
        "attention",
        domain=MS,
        num_heads=size.heads,
    )
    projected = b.node("MatMul", [attn, b.weight("attn.out", h, h)], "attn_out")

    def skip_ln(x: str, skip: str, name: str) -> str:
        inputs = [x, skip, b.const(f"{name}.gamma", np.ones(h)), b.const(f"{name}.beta", np.zeros(h))]
        inputs.append(b.const(f"{name}.bias", b.rng.standard_normal(h) * 0.02))
        return b.node("SkipLayerNormalization", inputs, name, domain=MS, epsilon=1e-5)

    x = skip_ln(projected, emb, "skip_ln1")
    hidden = b.node("MatMul", [x, b.weight("fc1.weight", h, size.ffn)], "fc1")
    hidden = b.node(
        "BiasGelu", [hidden, b.const("fc1.bias", b.rng.standard_normal(size.ffn) * 0.02)], "bias_gelu", domain=MS
    )
    hidden = b.node("MatMul", [hidden, b.weight("fc2.weight", size.ffn, h)], "fc2")
    x = skip_ln(hidden, x, "skip_ln2")
    hidden = b.node("MatMul", [x, b.weight("fc3.weight", h, size.ffn)], "fc3")
    hidden = b.node(
        "FastGelu", [hidden, b.const("fc3.bias", b.rng.standard_normal(size.ffn) * 0.02)], "fast_gelu", domain=MS
    )
    # FusedMatMul with transB: the weight is stored [out, in], as ORT's MatMul+Transpose fusion leaves it.
    y = b.node(
        "FusedMatMul",
        [hidden, b.weight("fc4.weight", h, size.ffn, scale=size.ffn**-0.5)],
        "fused_matmul",
        domain=MS,
        transB=1,
    )
    b.node("MultiHeadAttention", [y, y, y], "mha", domain=MS, num_heads=size.heads)
    b.nodes[-1].output[0] = "output"
    ids = [
        helper.make_tensor_value_info(n, TensorProto.INT32, ["batch", "seq"])
        for n in ("input_ids", "segment_ids", "input_mask")
    ]
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", "seq", h])
    return b.model("fused_bert_stack", ids, [out])


def optimized(
    model: onnx.ModelProto, model_type: str, size: StackSize, *, import_domain: bool = True
) -> onnx.ModelProto:
    """``model`` fused by ``onnxruntime.transformers.optimizer.optimize_model`` at opt_level 0 (ORT's Python
    fusions only; no session, no GPU). It writes contrib ops without importing their domain, which the checker
    rejects; ``import_domain`` adds the import, as benchmarks/gpu_models.py does."""
    from onnxruntime.transformers.optimizer import optimize_model

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        onnx.save(model, path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = optimize_model(
                str(path), model_type=model_type, num_heads=size.heads, hidden_size=size.hidden, opt_level=0
            )
    proto = result.model
    if import_domain and not any(opset.domain == MS for opset in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid(MS, 1))
    return proto


FUSED_SIZE = StackSize()


@functools.cache
def fused_models() -> dict[str, onnx.ModelProto]:
    """The fused graphs the tests share (never modify them): written directly in contrib ops, and ORT's optimizer
    run on a BERT-like stack (mask as the TorchScript exporter wrote it, which ORT's attention fusion matches) and
    on a GPT-2-like one."""
    return {
        "direct": fused_bert_stack(FUSED_SIZE),
        "optimized_bert": optimized(bert_stack(FUSED_SIZE, mask="mul_sub"), "bert", FUSED_SIZE),
        "optimized_gpt2": optimized(gpt2_stack(FUSED_SIZE), "gpt2", FUSED_SIZE),
    }
