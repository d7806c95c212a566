"""Build the example models bundled with ampconfig (``ampconfig/examples/*.onnx``).

Run from the repository root::

    python examples/build_examples.py

The weights are seeded random numbers, so the files are byte-for-byte reproducible. Both models use opset 17
and IR version 10 (ONNX Runtime 1.31 reads IR versions up to 13; onnx 1.23's default of 14 would not load)
and pass ``onnx.checker.check_model(full_check=True)``.

- ``transformer_block.onnx``: token ids int64 [batch, seq] -> embedding Gather -> LayerNormalization ->
  4-head self-attention (MatMul, scaled by 1/sqrt(d), Softmax, MatMul) -> residual Add ->
  LayerNormalization -> MLP (MatMul, Add, GELU in Erf form, MatMul, Add) -> residual Add -> logits MatMul
  [batch, seq, 1000] against the transposed embedding table (tied weights, as in GPT-2). One embedding channel
  carries a large offset (:data:`MASSIVE_ACTIVATION`) on every token, the "massive activation" trained
  transformers have in their residual stream: that is where float16 loses precision in real models, so
  ``ampconfig tune`` has something to find, as on them.
- ``small_convnet.onnx``: image float [N, 3, 32, 32] -> (Conv, BatchNormalization, Relu, MaxPool) x 2 ->
  GlobalAveragePool -> Flatten -> Gemm -> logits [N, 10].
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 10
OUT_DIR = Path(__file__).resolve().parent.parent / "ampconfig" / "examples"

HIDDEN = 64
HEADS = 4
HEAD_DIM = HIDDEN // HEADS
VOCAB = 1000
MLP = 4 * HIDDEN
#: (channel, offset) of the embedding's massive activation (GPT-2's residual stream has channels in the hundreds).
MASSIVE_ACTIVATION = (5, 60.0)


class _Graph:
    """Collects nodes and initializers with unique, readable names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def weight(self, name: str, shape: tuple[int, ...], std: float) -> str:
        value = (self.rng.standard_normal(shape) * std).astype(np.float32)
        return self.constant(name, value)

    def constant(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op_type: str, inputs: list[str], name: str, **attrs: object) -> str:
        output = f"{name}_out"
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=name, **attrs))
        return output

    def model(
        self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto], doc: str
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.initializers)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="ampconfig-examples",
            doc_string=doc,
        )
        onnx.checker.check_model(model, full_check=True)
        return model


def _rename_output(graph: _Graph, output: str) -> None:
    graph.nodes[-1].output[0] = output


def _layer_norm(g: _Graph, x: str, name: str) -> str:
    scale = g.constant(f"{name}.weight", (1.0 + 0.1 * g.rng.standard_normal(HIDDEN)).astype(np.float32))
    bias = g.weight(f"{name}.bias", (HIDDEN,), 0.02)
    return g.node("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=1e-5)


def _linear(g: _Graph, x: str, name: str, n_in: int, n_out: int, bias: bool = True) -> str:
    w = g.weight(f"{name}.weight", (n_in, n_out), 1.0 / math.sqrt(n_in))
    y = g.node("MatMul", [x, w], f"{name}/MatMul")
    if bias:
        b = g.weight(f"{name}.bias", (n_out,), 0.02)
        y = g.node("Add", [y, b], f"{name}/Add")
    return y


def _split_heads(g: _Graph, x: str, name: str, perm: list[int]) -> str:
    shape = g.constant(f"{name}.shape", np.array([0, 0, HEADS, HEAD_DIM], dtype=np.int64))
    x = g.node("Reshape", [x, shape], f"{name}/Reshape")
    return g.node("Transpose", [x], f"{name}/Transpose", perm=perm)


def _attention(g: _Graph, x: str) -> str:
    q = _split_heads(g, _linear(g, x, "attn.q", HIDDEN, HIDDEN), "attn.q_heads", [0, 2, 1, 3])
    k = _split_heads(g, _linear(g, x, "attn.k", HIDDEN, HIDDEN), "attn.k_heads", [0, 2, 3, 1])
    v = _split_heads(g, _linear(g, x, "attn.v", HIDDEN, HIDDEN), "attn.v_heads", [0, 2, 1, 3])
    scores = g.node("MatMul", [q, k], "attn.scores/MatMul")
    scale = g.constant("attn.scale", np.array(1.0 / math.sqrt(HEAD_DIM), dtype=np.float32))
    scores = g.node("Mul", [scores, scale], "attn.scores/Mul")
    probs = g.node("Softmax", [scores], "attn/Softmax", axis=-1)
    context = g.node("MatMul", [probs, v], "attn.context/MatMul")
    context = g.node("Transpose", [context], "attn.context/Transpose", perm=[0, 2, 1, 3])
    merged = g.constant("attn.merge_shape", np.array([0, 0, HIDDEN], dtype=np.int64))
    context = g.node("Reshape", [context, merged], "attn.context/Reshape")
    return _linear(g, context, "attn.out", HIDDEN, HIDDEN)


def _gelu(g: _Graph, x: str) -> str:
    sqrt2 = g.constant("mlp.gelu.sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    one = g.constant("mlp.gelu.one", np.array(1.0, dtype=np.float32))
    half = g.constant("mlp.gelu.half", np.array(0.5, dtype=np.float32))
    y = g.node("Div", [x, sqrt2], "mlp.gelu/Div")
    y = g.node("Erf", [y], "mlp.gelu/Erf")
    y = g.node("Add", [y, one], "mlp.gelu/Add")
    y = g.node("Mul", [x, y], "mlp.gelu/Mul")
    return g.node("Mul", [y, half], "mlp.gelu/Mul_half")


def build_transformer_block(seed: int = 0) -> onnx.ModelProto:
    g = _Graph(seed)
    channel, offset = MASSIVE_ACTIVATION
    values = (g.rng.standard_normal((VOCAB, HIDDEN)) * 1.0).astype(np.float32)
    values[:, channel] += offset
    table = g.constant("embedding.weight", values)
    x = g.node("Gather", [table, "input_ids"], "embedding/Gather", axis=0)
    attn = _attention(g, _layer_norm(g, x, "ln_1"))
    x = g.node("Add", [x, attn], "residual_1/Add")
    hidden = _gelu(g, _linear(g, _layer_norm(g, x, "ln_2"), "mlp.fc1", HIDDEN, MLP))
    mlp = _linear(g, hidden, "mlp.fc2", MLP, HIDDEN)
    x = g.node("Add", [x, mlp], "residual_2/Add")
    # The logits projection is tied to the embedding table, as in GPT-2: one 1000x64 matrix, not two.
    tied = g.node("Transpose", [table], "lm_head/Transpose", perm=[1, 0])
    g.node("MatMul", [x, tied], "lm_head/MatMul")
    _rename_output(g, "logits")
    return g.model(
        "transformer_block",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", VOCAB])],
        "One pre-LN transformer block with random weights (hidden 64, 4 heads, vocab 1000).",
    )


def _conv_block(g: _Graph, x: str, name: str, c_in: int, c_out: int) -> str:
    w = g.weight(f"{name}.conv.weight", (c_out, c_in, 3, 3), math.sqrt(2.0 / (c_in * 9)))
    b = g.weight(f"{name}.conv.bias", (c_out,), 0.02)
    y = g.node("Conv", [x, w, b], f"{name}/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    scale = g.constant(f"{name}.bn.weight", (1.0 + 0.1 * g.rng.standard_normal(c_out)).astype(np.float32))
    shift = g.weight(f"{name}.bn.bias", (c_out,), 0.1)
    mean = g.weight(f"{name}.bn.running_mean", (c_out,), 0.1)
    var = g.constant(f"{name}.bn.running_var", g.rng.uniform(0.5, 1.5, c_out).astype(np.float32))
    y = g.node("BatchNormalization", [y, scale, shift, mean, var], f"{name}/BatchNormalization", epsilon=1e-5)
    y = g.node("Relu", [y], f"{name}/Relu")
    return g.node("MaxPool", [y], f"{name}/MaxPool", kernel_shape=[2, 2], strides=[2, 2])


def build_small_convnet(seed: int = 1) -> onnx.ModelProto:
    g = _Graph(seed)
    x = _conv_block(g, "image", "block1", 3, 16)
    x = _conv_block(g, x, "block2", 16, 32)
    x = g.node("GlobalAveragePool", [x], "pool/GlobalAveragePool")
    x = g.node("Flatten", [x], "pool/Flatten", axis=1)
    w = g.weight("fc.weight", (10, 32), 1.0 / math.sqrt(32))
    b = g.weight("fc.bias", (10,), 0.02)
    g.node("Gemm", [x, w, b], "fc/Gemm", transB=1)
    _rename_output(g, "logits")
    return g.model(
        "small_convnet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        "Two Conv-BatchNorm-Relu-MaxPool blocks and a Gemm classifier with random weights (10 classes).",
    )


BUILDERS = {"transformer_block": build_transformer_block, "small_convnet": build_small_convnet}


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, build in BUILDERS.items():
        path = OUT_DIR / f"{name}.onnx"
        onnx.save_model(build(), path)
        onnx.checker.check_model(str(path), full_check=True)
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
