"""Small models shaped like what exporters write, with the statistics trained models have, for tune and the
accuracy tests (built here, seeded weights).

With small random weights every node rounds about alike and the float16 error is spread over all of them: no
choice of pins halves it without pinning most nodes. Trained models concentrate it, and these models carry the
two concentrations real exports show most (documented where they are built):

- :func:`cnn`: a MobileNetV3/PaddleOCR-detector-like CNN on raw pixels (0-255): a 7x7 stem whose BatchNormalization
  removes a large DC component (the input normalisation folded into the first layer), Conv -> BatchNormalization ->
  HardSwish written as ``x * HardSigmoid(x)``, squeeze-excite blocks (GlobalAveragePool, Conv, Relu, Conv,
  HardSigmoid, Mul), a depthwise conv, an FPN-like top-down path with ``Resize`` (nearest) and Add, and DB's
  probability/threshold maps with the differentiable binarization ``Sigmoid(50 (P - T))``.
- :func:`gpt2`: a GPT-2-like stack as torch exports it, with a massive-activation channel in the residual stream
  (``outlier``; GPT-2's reach the hundreds to thousands): token and position embeddings (Gather), LayerNorm
  decomposed (ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul, Add), attention with a fused QKV
  MatMul + bias, Split, Reshape/Transpose heads, scaled QK^T, causal mask by ``Where`` with float32's lowest
  value, Softmax, the tanh GELU (``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 Pow(x, 3))))``), residual Adds, final
  LN and tied logits. ``outlier=300`` makes the LayerNorms' ``Pow`` overflow float16.
- :func:`ocr`: a CRNN-like text recognizer on raw pixels: the same kind of pixel stem, Conv/BatchNormalization/
  Relu/HardSwish/MaxPool pooling the height to 1, Transpose to a sequence, a bidirectional ONNX ``LSTM``, a CTC
  head (MatMul + Add + Softmax over classes) and an attention head (scores MatMul, Softmax over time, weighted sum).

Every model has opset 16 (see :data:`OPSET`), IR version 10, passes ``onnx.checker.check_model(full_check=True)``
and runs in ONNX Runtime's CPU provider; :func:`pixel_inputs` gives the pixel models their calibration inputs.
Sizes are small so a tune of each takes seconds.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Opset 16, as the exporters that write LayerNorm out emit it: from opset 17 the rewrite folds a written-out
#: LayerNorm into LayerNormalization (ampconfig/rewrite/fold.py), and these models exist to keep its hazards.
OPSET = 16
IR_VERSION = 10


class _Builder:
    """Collects nodes and initializers; every node gets a readable name, its output ``<name>_out``."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray | float | list[int]) -> str:
        array = np.asarray(value)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> str:
        return self.const(name, (mean + self.rng.standard_normal(shape) * std).astype(np.float32))

    def node(self, op_type: str, inputs: list[str], name: str, outputs: int = 1, **attrs: object) -> str:
        names = [f"{name}_out"] if outputs == 1 else [f"{name}_out{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=name, **attrs))
        return names[0]

    def model(
        self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
        onnx.checker.check_model(model, full_check=True)
        return model

    def rename_last(self, output: str) -> str:
        self.nodes[-1].output[0] = output
        return output


# ------------------------------------------------------------------------------------------------------- CNN


def _conv_bn(
    b: _Builder, x: str, cin: int, cout: int, name: str, *, k: int = 3, stride: int = 1, group: int = 1
) -> str:
    w = b.weight(f"{name}.w", (cout, cin // group, k, k), std=math.sqrt(2.0 / (cin // group * k * k)))
    conv = b.node(
        "Conv", [x, w], f"{name}.conv", kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group
    )
    scale = b.weight(f"{name}.bn.scale", (cout,), std=0.1, mean=1.0)
    bias = b.weight(f"{name}.bn.bias", (cout,), std=0.1)
    mean = b.weight(f"{name}.bn.mean", (cout,), std=0.1)
    var = b.const(f"{name}.bn.var", (0.5 + b.rng.random(cout)).astype(np.float32))
    return b.node("BatchNormalization", [conv, scale, bias, mean, var], f"{name}.bn", epsilon=1e-5)


#: Raw RGB pixels: what the models take (uniform over [0, 255] in the tests' calibration inputs).
PIXEL_MEAN, PIXEL_VAR = 127.5, 255.0**2 / 12


def _pixel_stem(b: _Builder, x: str, cout: int, name: str, *, stride: int) -> str:
    """A 7x7 conv on raw pixels (a ResNet-style stem), then the BatchNormalization training leaves behind: its
    running mean and variance are the conv output's (the input normalisation folded into the first layer). The
    filters are mostly DC (mean 0.02, spread 0.004): their outputs sit around 375 with a spread near 18, which the
    BatchNormalization subtracts; float16 keeps about 0.25 of absolute precision there, so this is where low
    precision hurts."""
    w = b.rng.normal(0.02, 0.004, (cout, 3, 7, 7)).astype(np.float32)
    conv = b.node(
        "Conv", [x, b.const(f"{name}.w", w)], f"{name}.conv", kernel_shape=[7, 7], strides=[stride] * 2, pads=[3] * 4
    )
    sums = w.reshape(cout, -1)
    mean = (PIXEL_MEAN * sums.sum(axis=1)).astype(np.float32)
    var = (PIXEL_VAR * (sums**2).sum(axis=1)).astype(np.float32)
    scale = b.weight(f"{name}.bn.scale", (cout,), std=0.1, mean=1.0)
    bias = b.weight(f"{name}.bn.bias", (cout,), std=0.1)
    inputs = [conv, scale, bias, b.const(f"{name}.bn.mean", mean), b.const(f"{name}.bn.var", var)]
    return b.node("BatchNormalization", inputs, f"{name}.bn", epsilon=1e-5)


def pixel_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Calibration inputs for the pixel models: every float input uniform over [0, 255], seeded."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.uniform(0, 255, shape).astype(np.float32)
    return feeds


def _hardswish(b: _Builder, x: str, name: str) -> str:
    gate = b.node("HardSigmoid", [x], f"{name}.hsig", alpha=1.0 / 6.0, beta=0.5)
    return b.node("Mul", [x, gate], f"{name}.hswish")


def _squeeze_excite(b: _Builder, x: str, channels: int, name: str) -> str:
    pooled = b.node("GlobalAveragePool", [x], f"{name}.pool")
    hidden = channels // 4
    w1 = b.weight(f"{name}.fc1.w", (hidden, channels, 1, 1), std=math.sqrt(2.0 / channels))
    b1 = b.weight(f"{name}.fc1.b", (hidden,), std=0.05)
    fc1 = b.node("Conv", [pooled, w1, b1], f"{name}.fc1", kernel_shape=[1, 1])
    relu = b.node("Relu", [fc1], f"{name}.relu")
    w2 = b.weight(f"{name}.fc2.w", (channels, hidden, 1, 1), std=math.sqrt(1.0 / hidden))
    b2 = b.weight(f"{name}.fc2.b", (channels,), std=0.05)
    fc2 = b.node("Conv", [relu, w2, b2], f"{name}.fc2", kernel_shape=[1, 1])
    gate = b.node("HardSigmoid", [fc2], f"{name}.gate", alpha=1.0 / 6.0, beta=0.5)
    return b.node("Mul", [x, gate], f"{name}.scale")


def cnn(seed: int = 0, head_std: float = 0.3) -> onnx.ModelProto:
    """image [1, 3, 64, 64] -> probability map [1, 1, 32, 32] (a text-detector-like CNN)."""
    b = _Builder(seed)
    stem = _hardswish(b, _pixel_stem(b, "image", 16, "stem", stride=2), "stem")  # 32x32
    c2 = _hardswish(b, _conv_bn(b, stem, 16, 16, "b1.dw", group=16), "b1.dw")
    c2 = _squeeze_excite(b, c2, 16, "b1.se")
    c2 = _conv_bn(b, c2, 16, 24, "b1.pw", k=1)
    c3 = _hardswish(b, _conv_bn(b, c2, 24, 32, "b2", stride=2), "b2")  # 16x16
    c3 = _squeeze_excite(b, c3, 32, "b2.se")
    c4 = _hardswish(b, _conv_bn(b, c3, 32, 48, "b3", stride=2), "b3")  # 8x8
    # FPN-like top-down path: 1x1 lateral convs, nearest Resize x2, Add.
    lat4 = _conv_bn(b, c4, 48, 24, "fpn.lat4", k=1)
    lat3 = _conv_bn(b, c3, 32, 24, "fpn.lat3", k=1)
    scales = b.const("fpn.scales", np.array([1, 1, 2, 2], np.float32))
    up4 = b.node("Resize", [lat4, "", scales], "fpn.up4", mode="nearest")
    p3 = b.node("Add", [lat3, up4], "fpn.p3")
    lat2 = _conv_bn(b, c2, 24, 24, "fpn.lat2", k=1)
    up3 = b.node("Resize", [p3, "", scales], "fpn.up3", mode="nearest")
    p2 = b.node("Add", [lat2, up3], "fpn.p2")
    head = b.node("Relu", [_conv_bn(b, p2, 24, 16, "head.conv")], "head.relu")
    prob = _map_head(b, head, "head.prob", "prob", head_std)
    threshold = _map_head(b, head, "head.thresh", "thresh_map", head_std)
    # DB's differentiable binarization: 1 / (1 + exp(-k (P - T))) with k = 50 amplifies any error in P and T.
    diff = b.node("Sub", [prob, threshold], "db.sub")
    steep = b.node("Mul", [diff, b.const("db.k", 50.0)], "db.mul_k")
    b.node("Sigmoid", [steep], "db.sigmoid")
    b.rename_last("binary")
    shape = [1, 1, 32, 32]
    return b.model(
        "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name in ("prob", "binary")],
    )


def _map_head(b: _Builder, x: str, name: str, output: str, std: float) -> str:
    w = b.weight(f"{name}.w", (1, 16, 1, 1), std=std)
    bias = b.const(f"{name}.b", np.array([-1.0], np.float32))
    logits = b.node("Conv", [x, w, bias], f"{name}.conv", kernel_shape=[1, 1])
    sigmoid = b.node("Sigmoid", [logits], f"{name}.sigmoid")
    return b.rename_last(output) if output == "prob" else sigmoid


# ------------------------------------------------------------------------------------------------------ GPT-2

GPT_HIDDEN = 64
GPT_HEADS = 4
GPT_LAYERS = 2
GPT_VOCAB = 256
GPT_SEQ = 16


def _layer_norm(b: _Builder, x: str, name: str) -> str:
    mean = b.node("ReduceMean", [x], f"{name}.mean", axes=[-1])  # below opset 18: axes is an attribute
    centred = b.node("Sub", [x, mean], f"{name}.sub")
    square = b.node("Pow", [centred, b.const(f"{name}.two", 2.0)], f"{name}.pow")
    var = b.node("ReduceMean", [square], f"{name}.var", axes=[-1])
    var_eps = b.node("Add", [var, b.const(f"{name}.eps", 1e-5)], f"{name}.add_eps")
    std = b.node("Sqrt", [var_eps], f"{name}.sqrt")
    normed = b.node("Div", [centred, std], f"{name}.div")
    scaled = b.node("Mul", [normed, b.weight(f"{name}.gamma", (GPT_HIDDEN,), std=0.1, mean=1.0)], f"{name}.mul")
    return b.node("Add", [scaled, b.weight(f"{name}.beta", (GPT_HIDDEN,), std=0.05)], f"{name}.add")


def _linear(b: _Builder, x: str, fan_in: int, fan_out: int, name: str, std: float = 0.02) -> str:
    mm = b.node("MatMul", [x, b.weight(f"{name}.w", (fan_in, fan_out), std=std)], f"{name}.mm")
    return b.node("Add", [mm, b.weight(f"{name}.b", (fan_out,), std=0.02)], f"{name}.bias")


def _gelu_tanh(b: _Builder, x: str, name: str) -> str:
    cube = b.node("Pow", [x, b.const(f"{name}.three", 3.0)], f"{name}.pow")
    scaled_cube = b.node("Mul", [cube, b.const(f"{name}.c", 0.044715)], f"{name}.mul_c")
    inner = b.node("Add", [x, scaled_cube], f"{name}.add")
    inner = b.node("Mul", [inner, b.const(f"{name}.k", math.sqrt(2.0 / math.pi))], f"{name}.mul_k")
    tanh = b.node("Tanh", [inner], f"{name}.tanh")
    one_plus = b.node("Add", [tanh, b.const(f"{name}.one", 1.0)], f"{name}.add_one")
    half_x = b.node("Mul", [x, b.const(f"{name}.half", 0.5)], f"{name}.mul_half")
    return b.node("Mul", [half_x, one_plus], f"{name}.out")


def _attention(b: _Builder, x: str, mask: str, name: str, qk_std: float) -> str:
    h, heads = GPT_HIDDEN, GPT_HEADS
    d = h // heads
    qkv = _linear(b, x, h, 3 * h, f"{name}.c_attn", std=qk_std)
    split = b.const(f"{name}.split", np.array([h, h, h], np.int64))
    q, k, v = (f"{name}.split_out{i}" for i in range(3))
    b.nodes.append(helper.make_node("Split", [qkv, split], [q, k, v], name=f"{name}.split", axis=-1))
    shape = b.const(f"{name}.heads_shape", np.array([0, 0, heads, d], np.int64))

    def heads_first(value: str, tag: str, perm: list[int]) -> str:
        reshaped = b.node("Reshape", [value, shape], f"{name}.{tag}.reshape")
        return b.node("Transpose", [reshaped], f"{name}.{tag}.transpose", perm=perm)

    qh = heads_first(q, "q", [0, 2, 1, 3])
    kh = heads_first(k, "k", [0, 2, 3, 1])
    vh = heads_first(v, "v", [0, 2, 1, 3])
    scores = b.node("MatMul", [qh, kh], f"{name}.qk")
    scores = b.node("Div", [scores, b.const(f"{name}.sqrt_d", math.sqrt(d))], f"{name}.scale")
    lowest = b.const(f"{name}.lowest", np.array(np.finfo(np.float32).min, np.float32))
    masked = b.node("Where", [mask, scores, lowest], f"{name}.mask")
    probs = b.node("Softmax", [masked], f"{name}.softmax", axis=-1)
    context = b.node("MatMul", [probs, vh], f"{name}.av")
    context = b.node("Transpose", [context], f"{name}.merge.transpose", perm=[0, 2, 1, 3])
    merged = b.node(
        "Reshape", [context, b.const(f"{name}.merge_shape", np.array([0, 0, h], np.int64))], f"{name}.merge"
    )
    return _linear(b, merged, h, h, f"{name}.c_proj")


def gpt2(seed: int = 0, qk_std: float = 0.02, outlier: float = 120.0) -> onnx.ModelProto:
    """input_ids int64 [1, 16] -> logits [1, 16, 256]: 2 GPT-2 blocks of hidden size 64, 4 heads; channel 7 of the
    embeddings carries ``outlier`` (a massive activation)."""
    b = _Builder(seed)
    h = GPT_HIDDEN
    table = b.rng.standard_normal((GPT_VOCAB, h)).astype(np.float32) * 0.5
    table[:, 7] += outlier  # a massive-activation channel of the residual stream
    wte = b.const("wte", table)
    tokens = b.node("Gather", [wte, "input_ids"], "wte.gather")
    positions = b.const("position_ids", np.arange(GPT_SEQ, dtype=np.int64)[None, :])
    pos = b.node("Gather", [b.weight("wpe", (GPT_SEQ, h), std=0.1), positions], "wpe.gather")
    hidden = b.node("Add", [tokens, pos], "embed.add")
    mask = b.const("causal_mask", np.tril(np.ones((GPT_SEQ, GPT_SEQ), bool))[None, None])
    for layer in range(GPT_LAYERS):
        name = f"h{layer}"
        attn = _attention(b, _layer_norm(b, hidden, f"{name}.ln_1"), mask, f"{name}.attn", qk_std)
        hidden = b.node("Add", [hidden, attn], f"{name}.res1")
        fc = _linear(b, _layer_norm(b, hidden, f"{name}.ln_2"), h, 4 * h, f"{name}.mlp.c_fc", std=0.2)
        mlp = _linear(b, _gelu_tanh(b, fc, f"{name}.mlp.gelu"), 4 * h, h, f"{name}.mlp.c_proj", std=0.05)
        hidden = b.node("Add", [hidden, mlp], f"{name}.res2")
    final = _layer_norm(b, hidden, "ln_f")
    b.node("MatMul", [final, b.node("Transpose", [wte], "wte.transpose", perm=[1, 0])], "lm_head")
    b.rename_last("logits")
    return b.model(
        "gpt2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, GPT_SEQ])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, GPT_SEQ, GPT_VOCAB])],
    )


# -------------------------------------------------------------------------------------------------------- OCR

OCR_CLASSES = 40
OCR_HIDDEN = 32


def _lstm_weights(b: _Builder, name: str, inputs: int, hidden: int) -> tuple[str, str, str]:
    std = 1.0 / math.sqrt(hidden)
    w = b.weight(f"{name}.W", (2, 4 * hidden, inputs), std=std)
    r = b.weight(f"{name}.R", (2, 4 * hidden, hidden), std=std)
    bias = b.weight(f"{name}.B", (2, 8 * hidden), std=0.05)
    return w, r, bias


def ocr(seed: int = 0, logit_std: float = 0.3) -> onnx.ModelProto:
    """image [1, 3, 32, 96] -> CTC probabilities [24, 1, 40] and attention glimpse [1, 64] (a CRNN-like recognizer)."""
    b = _Builder(seed)
    x = b.node("Relu", [_pixel_stem(b, "image", 16, "c1", stride=1)], "c1.relu")
    x = b.node("MaxPool", [x], "p1", kernel_shape=[2, 2], strides=[2, 2])  # 16x48
    x = _hardswish(b, _conv_bn(b, x, 16, 32, "c2"), "c2")
    x = b.node("MaxPool", [x], "p2", kernel_shape=[2, 2], strides=[2, 2])  # 8x24
    x = _hardswish(b, _conv_bn(b, x, 32, 32, "c3"), "c3")
    x = b.node("MaxPool", [x], "p3", kernel_shape=[2, 1], strides=[2, 1])  # 4x24
    x = b.node("Relu", [_conv_bn(b, x, 32, 48, "c4")], "c4.relu")
    x = b.node("ReduceMean", [x], "pool_h", axes=[2], keepdims=0)  # [1, 48, 24]
    seq = b.node("Transpose", [x], "to_seq", perm=[2, 0, 1])  # [24, 1, 48]
    w, r, bias = _lstm_weights(b, "lstm", 48, OCR_HIDDEN)
    y = "lstm_out0"
    b.nodes.append(
        helper.make_node("LSTM", [seq, w, r, bias], [y], name="lstm", direction="bidirectional", hidden_size=OCR_HIDDEN)
    )  # Y [24, 2, 1, 32]
    y = b.node("Transpose", [y], "lstm.transpose", perm=[0, 2, 1, 3])  # [24, 1, 2, 32]
    feats = b.node("Reshape", [y, b.const("lstm.shape", np.array([0, 0, 2 * OCR_HIDDEN], np.int64))], "lstm.merge")
    # CTC head.
    logits = _linear(b, feats, 2 * OCR_HIDDEN, OCR_CLASSES, "ctc", std=logit_std)
    b.node("Softmax", [logits], "ctc.softmax", axis=-1)
    b.rename_last("ctc_probs")
    # Attention head: one query scores every time step; the glimpse is their weighted sum.
    keys = b.node("Tanh", [_linear(b, feats, 2 * OCR_HIDDEN, OCR_HIDDEN, "att.key", std=0.3)], "att.tanh")
    scores = b.node("MatMul", [keys, b.weight("att.query", (OCR_HIDDEN, 1), std=0.5)], "att.score")  # [24, 1, 1]
    weights = b.node("Softmax", [scores], "att.softmax", axis=0)
    weighted = b.node("Mul", [feats, weights], "att.weighted")
    b.node("ReduceSum", [weighted, b.const("att.axes", np.array([0], np.int64))], "att.sum", keepdims=0)
    b.rename_last("glimpse")
    return b.model(
        "ocr",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 32, 96])],
        [
            helper.make_tensor_value_info("ctc_probs", TensorProto.FLOAT, [24, 1, OCR_CLASSES]),
            helper.make_tensor_value_info("glimpse", TensorProto.FLOAT, [1, 2 * OCR_HIDDEN]),
        ],
    )


def gpt2_overflow(seed: int = 0) -> onnx.ModelProto:
    """:func:`gpt2` with a massive activation of 300: the LayerNorms' ``Pow(x - mean, 2)`` overflows float16."""
    return gpt2(seed, outlier=300.0)


EXPORTER_MODELS = {"cnn": cnn, "gpt2": gpt2, "gpt2_overflow": gpt2_overflow, "ocr": ocr}
#: The models whose inputs are raw pixels: feed them :func:`pixel_inputs`.
PIXEL_MODELS = frozenset({"cnn", "ocr"})
