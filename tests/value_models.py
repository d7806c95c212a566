"""Models for issue 19 (decisions that know the values), built with onnx.helper and ONNX Runtime's quantizer.

Each stands for a kind of real model that broke when the decisions looked at op types alone:

- :func:`nms_head`: a detector head whose box count changes when the scores are rounded to float16;
- :func:`vad_if`: a voice-activity model whose float nodes all sit inside the branches of one If (the sample
  rate picks the branch), with a log-magnitude front end and an LSTM;
- :func:`char_lstm_loop`: a character model that runs an ONNX LSTM one character per Loop iteration, the state
  carried between iterations;
- :func:`if_overflow`: an If branch whose intermediate value passes float16's range.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from tests.graphs import make_model, tensor

#: The sample rate that takes :func:`vad_if`'s then-branch (any other takes the else-branch).
VAD_RATE = 16000
VAD_SAMPLES, VAD_HIDDEN = 256, 16
CHAR_VOCAB, CHAR_EMBED, CHAR_HIDDEN, CHAR_CLASSES = 100, 16, 24, 12
#: A confident classifier: logits in the tens, where float16 keeps about 0.01 of absolute precision.
CHAR_LOGIT_STD = 6.0


class _Body:
    """Nodes and initializers of one graph, every node named ``<prefix><name>`` with output ``<prefix><name>_out``."""

    def __init__(self, prefix: str, seed: int) -> None:
        self.prefix = prefix
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, name: str, value: np.ndarray | float | list[int]) -> str:
        array = np.asarray(value)
        array = array.astype(np.float32) if array.dtype == np.float64 else array
        self.initializers.append(numpy_helper.from_array(array, self.prefix + name))
        return self.prefix + name

    def weight(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> str:
        return self.const(name, (mean + self.rng.standard_normal(shape) * std).astype(np.float32))

    def node(self, op_type: str, inputs: list[str], name: str, outputs: int = 1, **attrs: object) -> str:
        full = self.prefix + name
        names = [f"{full}_out"] if outputs == 1 else [f"{full}_out{i}" for i in range(outputs)]
        self.nodes.append(oh.make_node(op_type, inputs, names, name=full, **attrs))
        return names[0]

    def graph(
        self, name: str, outputs: list[tuple[str, str]], inputs: list[onnx.ValueInfoProto] = ()
    ) -> onnx.GraphProto:
        """A graph whose outputs rename the given values (value, output name) through Identity nodes."""
        for value, output in outputs:
            self.nodes.append(oh.make_node("Identity", [value], [output], name=output + "_identity"))
        return oh.make_graph(
            self.nodes,
            name,
            list(inputs),
            [oh.make_tensor_value_info(o, TensorProto.FLOAT, None) for _, o in outputs],
            initializer=self.initializers,
        )


def _vad_branch(prefix: str, seed: int, window: int, stride: int) -> onnx.GraphProto:
    """audio [1, samples], state [2, 1, H] (outer values) -> prob [1, 1], new state [2, 1, H]."""
    b = _Body(prefix, seed)
    frames = b.node("Reshape", ["audio", b.const("frames_shape", np.array([1, 1, -1], np.int64))], "frames")
    bins = 16
    cos = np.cos(2 * np.pi * np.outer(np.arange(bins), np.arange(window)) / window) / window
    sin = np.sin(2 * np.pi * np.outer(np.arange(bins), np.arange(window)) / window) / window
    real = b.node(
        "Conv",
        [frames, b.const("stft_real", cos[:, None, :].astype(np.float32))],
        "stft_real",
        kernel_shape=[window],
        strides=[stride],
    )
    imag = b.node(
        "Conv",
        [frames, b.const("stft_imag", sin[:, None, :].astype(np.float32))],
        "stft_imag",
        kernel_shape=[window],
        strides=[stride],
    )
    power = b.node("Add", [b.node("Mul", [real, real], "re2"), b.node("Mul", [imag, imag], "im2")], "power")
    magnitude = b.node("Sqrt", [power], "magnitude")
    log_mag = b.node("Log", [b.node("Add", [magnitude, b.const("eps", np.float32(1e-4))], "mag_eps")], "log_mag")
    x = log_mag
    for layer in range(2):
        w = b.weight(f"enc{layer}.w", (bins, bins, 3), std=0.25)
        bias = b.weight(f"enc{layer}.b", (bins,), std=0.1)
        x = b.node(
            "Relu", [b.node("Conv", [x, w, bias], f"enc{layer}", kernel_shape=[3], pads=[1, 1])], f"enc{layer}.relu"
        )
    seq = b.node("Transpose", [x], "to_seq", perm=[2, 0, 1])  # [T, 1, bins]
    h0 = b.node("Gather", ["state", b.const("h_index", np.array(0, np.int64))], "h0", axis=0)
    c0 = b.node("Gather", ["state", b.const("c_index", np.array(1, np.int64))], "c0", axis=0)
    h0 = b.node("Unsqueeze", [h0, b.const("axis0", np.array([0], np.int64))], "h0_3d")
    c0 = b.node("Unsqueeze", [c0, b.const("axis0_c", np.array([0], np.int64))], "c0_3d")
    std = 1.0 / np.sqrt(VAD_HIDDEN)
    w = b.weight("lstm.W", (1, 4 * VAD_HIDDEN, bins), std=std)
    r = b.weight("lstm.R", (1, 4 * VAD_HIDDEN, VAD_HIDDEN), std=std)
    bias = b.weight("lstm.B", (1, 8 * VAD_HIDDEN), std=0.05)
    full = b.prefix + "lstm"
    b.nodes.append(
        oh.make_node(
            "LSTM",
            [seq, w, r, bias, "", h0, c0],
            [f"{full}_y", f"{full}_h", f"{full}_c"],
            name=full,
            hidden_size=VAD_HIDDEN,
        )
    )
    state = b.node("Concat", [f"{full}_h", f"{full}_c"], "state_out", axis=0)
    last = b.node("Reshape", [f"{full}_h", b.const("h_shape", np.array([1, VAD_HIDDEN], np.int64))], "last")
    logit = b.node("MatMul", [b.node("Relu", [last], "dec.relu"), b.weight("dec.w", (VAD_HIDDEN, 1), std=0.5)], "dec")
    prob = b.node("Sigmoid", [logit], "prob")
    return b.graph(prefix + "branch", [(prob, prefix + "prob"), (state, prefix + "state")])


def vad_if() -> onnx.ModelProto:
    """audio [1, 256], sr int64 scalar, state [2, 1, 16] -> prob [1, 1], state_out [2, 1, 16].

    ``If(sr == 16000)``: both branches are a log-magnitude STFT (two Convs, Mul, Add, Sqrt, Add eps, Log), two
    Conv/Relu encoder layers, an LSTM carrying the state, and a Relu/MatMul/Sigmoid decoder; they differ in window
    and weights. The main graph holds no float node: every float node sits inside a branch."""
    then_branch = _vad_branch("hi_", 1, window=32, stride=16)
    else_branch = _vad_branch("lo_", 2, window=16, stride=8)
    nodes = [
        oh.make_node("Equal", ["sr", "rate_16k"], ["is_16k"], name="is_16k"),
        oh.make_node(
            "If",
            ["is_16k"],
            ["prob", "state_out"],
            name="rate_branch",
            then_branch=then_branch,
            else_branch=else_branch,
        ),
    ]
    return make_model(
        nodes,
        [
            tensor("audio", TensorProto.FLOAT, [1, VAD_SAMPLES]),
            tensor("sr", TensorProto.INT64, []),
            tensor("state", TensorProto.FLOAT, [2, 1, VAD_HIDDEN]),
        ],
        [tensor("prob", TensorProto.FLOAT, [1, 1]), tensor("state_out", TensorProto.FLOAT, [2, 1, VAD_HIDDEN])],
        [numpy_helper.from_array(np.array(VAD_RATE, np.int64), "rate_16k")],
        opset=16,
    )


def vad_inputs(rate: int = VAD_RATE, seed: int = 0) -> dict[str, np.ndarray]:
    """A voiced-like waveform (two tones and noise) at ``rate``, and a zero state."""
    rng = np.random.default_rng(seed)
    t = np.arange(VAD_SAMPLES) / rate
    wave = 0.5 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * 660 * t) + 0.01 * rng.standard_normal(t.size)
    return {
        "audio": wave.astype(np.float32)[None],
        "sr": np.array(rate, np.int64),
        "state": np.zeros((2, 1, VAD_HIDDEN), np.float32),
    }


def char_lstm_loop(seed: int = 3) -> onnx.ModelProto:
    """tokens int64 [1, chars] -> probs [chars, 1, 12], h [1, 1, 24]: one Loop iteration per character.

    The body gathers the character's embedding, runs one step of an ONNX LSTM from the carried state, and emits
    the Softmax of a MatMul + Add head as a scan output; the float nodes all sit inside the Loop body."""
    b = _Body("step.", seed)
    token = b.node("Gather", ["tokens", "i"], "token", axis=1)  # [1]
    table = b.weight("embedding", (CHAR_VOCAB, CHAR_EMBED), std=1.0)
    embedded = b.node("Gather", [table, token], "embed")  # [1, E]
    x = b.node("Reshape", [embedded, b.const("x_shape", np.array([1, 1, CHAR_EMBED], np.int64))], "x")
    std = 1.0 / np.sqrt(CHAR_HIDDEN)
    w = b.weight("lstm.W", (1, 4 * CHAR_HIDDEN, CHAR_EMBED), std=std)
    r = b.weight("lstm.R", (1, 4 * CHAR_HIDDEN, CHAR_HIDDEN), std=std)
    bias = b.weight("lstm.B", (1, 8 * CHAR_HIDDEN), std=0.05)
    b.nodes.append(
        oh.make_node(
            "LSTM",
            [x, w, r, bias, "", "h_in", "c_in"],
            ["step.y", "step.h", "step.c"],
            name="step.lstm",
            hidden_size=CHAR_HIDDEN,
        )
    )
    flat = b.node("Reshape", ["step.h", b.const("h_shape", np.array([1, CHAR_HIDDEN], np.int64))], "h_flat")
    logits = b.node(
        "Add",
        [
            b.node("MatMul", [flat, b.weight("head.w", (CHAR_HIDDEN, CHAR_CLASSES), std=CHAR_LOGIT_STD)], "head"),
            b.weight("head.b", (CHAR_CLASSES,), std=0.1),
        ],
        "head.bias",
    )
    probs = b.node("Softmax", [logits], "softmax", axis=-1)
    b.nodes.append(oh.make_node("Identity", ["cond_in"], ["cond_out"], name="step.cond"))
    body = oh.make_graph(
        [*b.nodes],
        "step",
        [
            tensor("i", TensorProto.INT64, []),
            tensor("cond_in", TensorProto.BOOL, []),
            tensor("h_in", TensorProto.FLOAT, [1, 1, CHAR_HIDDEN]),
            tensor("c_in", TensorProto.FLOAT, [1, 1, CHAR_HIDDEN]),
        ],
        [
            tensor("cond_out", TensorProto.BOOL, []),
            tensor("step.h", TensorProto.FLOAT, [1, 1, CHAR_HIDDEN]),
            tensor("step.c", TensorProto.FLOAT, [1, 1, CHAR_HIDDEN]),
            tensor(probs, TensorProto.FLOAT, [1, CHAR_CLASSES]),
        ],
        initializer=b.initializers,
    )
    zeros = np.zeros((1, 1, CHAR_HIDDEN), np.float32)
    nodes = [
        oh.make_node("Shape", ["tokens"], ["tokens_shape"], name="tokens_shape"),
        oh.make_node("Gather", ["tokens_shape", "one"], ["chars"], name="chars", axis=0),
        oh.make_node("Loop", ["chars", "", "h0", "c0"], ["h", "c", "probs"], name="chars_loop", body=body),
    ]
    return make_model(
        nodes,
        [tensor("tokens", TensorProto.INT64, [1, "chars"])],
        [
            tensor("probs", TensorProto.FLOAT, ["chars", 1, CHAR_CLASSES]),
            tensor("h", TensorProto.FLOAT, [1, 1, CHAR_HIDDEN]),
        ],
        [
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(zeros, "h0"),
            numpy_helper.from_array(zeros, "c0"),
        ],
        opset=16,
    )


def if_overflow() -> onnx.ModelProto:
    """x [4, 8], flag bool -> y [4, 8]. Inside the then-branch ``big = x * 3e4`` passes float16's range before
    ``y = big / 1e4`` brings it back; the else-branch is a Relu. Lowered, the branch's Mul overflows to inf."""
    then_branch = oh.make_graph(
        [
            oh.make_node("Mul", ["x", "scale_up"], ["big"], name="scale_up"),
            oh.make_node("Div", ["big", "scale_down"], ["then_y"], name="scale_down"),
        ],
        "then",
        [],
        [tensor("then_y", TensorProto.FLOAT, [4, 8])],
        [
            numpy_helper.from_array(np.array(3e4, np.float32), "scale_up"),
            numpy_helper.from_array(np.array(1e4, np.float32), "scale_down"),
        ],
    )
    else_branch = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["else_y"], name="else_relu")],
        "else",
        [],
        [tensor("else_y", TensorProto.FLOAT, [4, 8])],
    )
    nodes = [oh.make_node("If", ["flag"], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch)]
    return make_model(
        nodes,
        [tensor("x", TensorProto.FLOAT, [4, 8]), tensor("flag", TensorProto.BOOL, [])],
        [tensor("y", TensorProto.FLOAT, [4, 8])],
    )


#: The score every box of :func:`nms_head` gets in float32: above NMS's threshold of 0.5 by less than float16's
#: spacing there (2^-11), so float16 stores it as 0.5 exactly and NMS drops every box.
NMS_SCORE = 0.5002


def nms_head(boxes: int = 4) -> onnx.ModelProto:
    """feat [1, boxes, 8] -> scores = 0.5002 + 1e-6 * sum(feat) -> NonMaxSuppression -> GatherND of the boxes.

    The boxes are disjoint unit squares, so NMS keeps each box whose score passes the threshold: all of them in
    float32, none once the scores are float16. Outputs: ``selected`` [k, 3] (int64) and ``kept_boxes`` [k, 4].
    """
    corners = np.array([[i * 2.0, 0.0, i * 2.0 + 1.0, 1.0] for i in range(boxes)], np.float32)[None]
    inits = [
        numpy_helper.from_array(corners, "boxes"),
        numpy_helper.from_array(np.full((8, 1), 1e-6, np.float32), "w"),
        numpy_helper.from_array(np.array(NMS_SCORE, np.float32), "bias"),
        numpy_helper.from_array(np.array([boxes], np.int64), "max_out"),
        numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
        numpy_helper.from_array(np.array([0.5], np.float32), "score_threshold"),
        numpy_helper.from_array(np.array([0, 2], np.int64), "batch_box"),
    ]
    nodes = [
        oh.make_node("MatMul", ["feat", "w"], ["logit"], name="score_matmul"),  # [1, boxes, 1]
        oh.make_node("Add", ["logit", "bias"], ["score"], name="score_add"),
        oh.make_node("Transpose", ["score"], ["scores"], name="score_transpose", perm=[0, 2, 1]),  # [1, 1, boxes]
        oh.make_node(
            "NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_threshold"], ["selected"], name="nms"
        ),
        oh.make_node("Gather", ["selected", "batch_box"], ["picked"], name="pick_columns", axis=1),  # [k, 2]
        oh.make_node("GatherND", ["boxes", "picked"], ["kept_raw"], name="gather_boxes"),  # [k, 4]
        oh.make_node("Mul", ["kept_raw", "iou"], ["kept_boxes"], name="scale_boxes"),
    ]
    return make_model(
        nodes,
        [tensor("feat", TensorProto.FLOAT, [1, boxes, 8])],
        [tensor("selected", TensorProto.INT64, ["k", 3]), tensor("kept_boxes", TensorProto.FLOAT, ["k", 4])],
        inits,
        opset=13,
    )
