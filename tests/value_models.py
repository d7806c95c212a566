"""Models for issue 19 (decisions that know the values), built with onnx.helper and ONNX Runtime's quantizer.

Each stands for a kind of real model that broke when the decisions looked at op types alone:

- :func:`nms_head`: a detector head whose box count changes when the scores are rounded to float16;
- :func:`vad_if`: a voice-activity model whose float nodes all sit inside the branches of one If (the sample
  rate picks the branch), with a log-magnitude front end and an LSTM;
- :func:`char_lstm_loop`: a character model that runs an ONNX LSTM one character per Loop iteration, the state
  carried between iterations;
- :func:`if_overflow`: an If branch whose intermediate value passes float16's range;
- :func:`detector_bn`: a DB-like text detector (opset 12) whose BatchNormalization variance is far beyond
  float16's range;
- :func:`quantized_stacks`: Conv and MatMul stacks dynamically quantized by ONNX Runtime, whose int32 sums pass
  float16's range before they are scaled back.
"""

from __future__ import annotations

from pathlib import Path

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
    """x [4, 8], flag bool -> y [4, 8]. Inside the then-branch ``big = x * 3e4`` passes float16's range once
    ``|x| > 2.2``, before ``y = big / 1e4`` brings it back; the else-branch is a Relu. Lowered, the branch's Mul
    overflows to inf."""
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


# ---------------------------------------------------------------------------------------------- values beyond range

#: The running variance a PaddleOCR-family detector's first BatchNormalization carries: far beyond float16's 65504.
DETECTOR_IMAGE = (1, 3, 32, 32)


def detector_bn(seed: int = 0, opset: int = 12) -> onnx.ModelProto:
    """image [1, 3, 32, 32] (raw pixels, 0-255) -> probability map [1, 1, 16, 16]: a DB-like text detector.

    Its stem convolution reads unnormalised pixels with large filters (std 20), as a detector whose input scaling
    was folded into its first layer: the BatchNormalization after it carries the running mean and variance of the
    convolution's outputs (variance about 6e7, far beyond float16's 65504, while the outputs themselves stay
    within it). Then two Conv/BatchNormalization/Relu blocks (one strided), a 1x1 Conv head and the
    differentiable binarization ``Sigmoid(50 (P - T))`` of DB's probability and threshold maps. Opset 12: its
    BatchNormalization types every input alike (opset 15 lets mean and variance stay float32)."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def const(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def conv_bn_relu(x: str, name: str, weight: np.ndarray, mean: np.ndarray, var: np.ndarray, stride: int) -> str:
        cout = weight.shape[0]
        k = weight.shape[-1]
        nodes.append(
            oh.make_node(
                "Conv",
                [x, const(f"{name}.w", weight)],
                [f"{name}.conv_out"],
                name=f"{name}.conv",
                kernel_shape=[k, k],
                pads=[k // 2] * 4,
                strides=[stride, stride],
            )
        )
        scale = const(f"{name}.bn.scale", 1.0 + 0.1 * rng.standard_normal(cout))
        bias = const(f"{name}.bn.bias", 0.1 * rng.standard_normal(cout))
        nodes.append(
            oh.make_node(
                "BatchNormalization",
                [f"{name}.conv_out", scale, bias, const(f"{name}.bn.mean", mean), const(f"{name}.bn.var", var)],
                [f"{name}.bn_out"],
                name=f"{name}.bn",
                epsilon=1e-5,
            )
        )
        nodes.append(oh.make_node("Relu", [f"{name}.bn_out"], [f"{name}.relu_out"], name=f"{name}.relu"))
        return f"{name}.relu_out"

    stem = rng.normal(0.0, 20.0, (16, 3, 3, 3)).astype(np.float32)
    pixels = rng.uniform(0, 255, (256, 27))  # the convolution's statistics over raw pixels, as training leaves them
    responses = pixels @ stem.reshape(16, -1).T
    x = conv_bn_relu("image", "stem", stem, responses.mean(axis=0), responses.var(axis=0), 1)
    for index, stride in enumerate((2, 1)):
        weight = rng.normal(0.0, np.sqrt(2.0 / (16 * 9)), (16, 16, 3, 3))
        x = conv_bn_relu(x, f"block{index}", weight, 0.1 * rng.standard_normal(16), 0.5 + rng.random(16), stride)
    maps = const("head.w", rng.normal(0.0, 0.3, (2, 16, 1, 1)))
    nodes += [
        oh.make_node(
            "Conv", [x, maps, const("head.b", np.array([0.0, 0.2]))], ["maps"], name="head", kernel_shape=[1, 1]
        ),
        oh.make_node("Sigmoid", ["maps"], ["maps_sig"], name="maps_sigmoid"),
        oh.make_node("Split", ["maps_sig"], ["prob", "thresh"], name="split_maps", axis=1),
        oh.make_node("Sub", ["prob", "thresh"], ["margin"], name="db_margin"),
        oh.make_node("Mul", ["margin", const("db_k", np.array(50.0))], ["db_logit"], name="db_scale"),
        oh.make_node("Sigmoid", ["db_logit"], ["binary"], name="db_binarize"),
    ]
    return make_model(
        nodes,
        [tensor("image", TensorProto.FLOAT, list(DETECTOR_IMAGE))],
        [tensor("binary", TensorProto.FLOAT, [1, 1, 16, 16])],
        inits,
        opset=opset,
    )


def pixels(seed: int = 0, shape: tuple[int, ...] = DETECTOR_IMAGE) -> np.ndarray:
    """Raw pixels, uniform over [0, 255]."""
    return np.random.default_rng(seed).uniform(0, 255, shape).astype(np.float32)


def quantized_stacks(folder: Path, seed: int = 0) -> Path:
    """A Conv stack and a MatMul stack, dynamically quantized by ONNX Runtime's ``quantize_dynamic`` (written to
    ``folder``; its path returned): x [1, 8, 16, 16] -> ConvInteger/Cast/Mul per Conv -> flattened ->
    MatMulInteger/Cast/Mul per MatMul -> logits [1, 10].

    The int32 sums of ConvInteger and MatMulInteger (hundreds of uint8 x int8 products) reach past float16's
    65504, so the Casts after them turn them into inf wherever they are retargeted to float16; once scaled back
    (Mul by the two scales) the values are small again."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    x = "x"
    for index, cin in enumerate((8, 32)):
        weight = numpy_helper.from_array(
            rng.normal(0, np.sqrt(2.0 / (cin * 9)), (32, cin, 3, 3)).astype(np.float32), f"conv{index}.w"
        )
        bias = numpy_helper.from_array((0.1 * rng.standard_normal(32)).astype(np.float32), f"conv{index}.b")
        inits += [weight, bias]
        nodes.append(
            oh.make_node(
                "Conv",
                [x, weight.name, bias.name],
                [f"conv{index}_out"],
                name=f"conv{index}",
                kernel_shape=[3, 3],
                pads=[1, 1, 1, 1],
            )
        )
        nodes.append(oh.make_node("Relu", [f"conv{index}_out"], [f"relu{index}_out"], name=f"relu{index}"))
        x = f"relu{index}_out"
    nodes.append(oh.make_node("Flatten", [x], ["flat"], name="flatten"))
    x = "flat"
    for index, (fan_in, fan_out) in enumerate(((32 * 16 * 16, 64), (64, 10))):
        weight = numpy_helper.from_array(
            rng.normal(0, np.sqrt(1.0 / fan_in), (fan_in, fan_out)).astype(np.float32), f"fc{index}.w"
        )
        inits.append(weight)
        nodes.append(oh.make_node("MatMul", [x, weight.name], [f"fc{index}_out"], name=f"fc{index}"))
        x = f"fc{index}_out"
        if index == 0:
            nodes.append(oh.make_node("Relu", [x], ["fc_relu_out"], name="fc_relu"))
            x = "fc_relu_out"
    nodes.append(oh.make_node("Softmax", [x], ["probs"], name="softmax", axis=-1))
    fp32 = make_model(
        nodes,
        [tensor("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [tensor("probs", TensorProto.FLOAT, [1, 10])],
        inits,
        opset=13,
    )
    source, target = folder / "stacks_fp32.onnx", folder / "stacks_int8.onnx"
    onnx.save_model(fp32, source)
    quantize_dynamic(source, target, weight_type=QuantType.QInt8, op_types_to_quantize=["Conv", "MatMul"])
    return target


def gpt2_token_outliers(seed: int = 0, base: float = 150.0, spread: float = 120.0) -> onnx.ModelProto:
    """``tests.exporter_models.gpt2`` whose massive-activation channel depends on the token, as in trained models
    (a few tokens carry far larger outliers than the rest): ``base + spread * u**4`` for a uniform ``u`` per
    token, so most tokens stay near ``base`` and a rare few approach ``base + spread``. The LayerNorms square it:
    22,500 to 72,900, around float16's 65504, so a calibration set that misses the rarest tokens sees less than
    held-out data does."""
    from tests.exporter_models import gpt2

    model = gpt2(seed, outlier=0.0)
    table = next(init for init in model.graph.initializer if init.name == "wte")
    values = numpy_helper.to_array(table).copy()
    u = np.random.default_rng(seed + 7).random(values.shape[0])
    values[:, 7] += (base + spread * u**4).astype(np.float32)
    table.CopyFrom(numpy_helper.from_array(values, "wte"))
    return model


def midtone_pixels(seed: int = 0, shape: tuple[int, ...] = DETECTOR_IMAGE) -> np.ndarray:
    """A photo-like image: pixels uniform over [64, 192] (what a calibration set of scenes holds)."""
    return np.random.default_rng(seed).uniform(64, 192, shape).astype(np.float32)


def page_pixels(seed: int = 0, shape: tuple[int, ...] = DETECTOR_IMAGE, ink: float = 0.15) -> np.ndarray:
    """A document-like image: black ink (0) on white paper (255) in every channel, ``ink`` of the pixels inked.
    Its contrast is the largest an image has: a stem convolution's outputs reach about twice what mid-tone
    scenes give them."""
    rng = np.random.default_rng(seed)
    inked = rng.random((shape[0], 1, *shape[2:])) < ink
    return np.where(np.broadcast_to(inked, shape), 0.0, 255.0).astype(np.float32)


FILM_SHAPE = (1, 16, 16, 16)


def film_block(seed: int = 0, peak: float = 2.3e5, offset: float = 16.0) -> onnx.ModelProto:
    """A FiLM-conditioned gate as diffusion UNets write it: x [1, 16, 16, 16], cond [1, 16] -> Conv (its outputs
    offset by ``offset``: a mean well above the deviation) -> InstanceNormalization -> Mul by per-channel scales
    (cond @ diag, log-spaced 1 .. ``peak``) -> Sigmoid -> gate times the Conv's output -> Conv -> residual Add.
    With cond all ones the product reaches ~6e5 and the scales pass float16's range."""
    rng = np.random.default_rng(seed)
    channels = FILM_SHAPE[1]

    def init(name: str, value: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(value, np.float32), name)

    fan = 1 / np.sqrt(channels * 9)
    inits = [
        init("conv0.w", rng.normal(0, fan, (channels, channels, 3, 3))),
        init("conv0.b", rng.normal(0, 0.1, channels) + offset),
        init("norm.scale", np.ones(channels)),
        init("norm.bias", np.zeros(channels)),
        init("film.w", np.diag(np.logspace(0, np.log10(peak), channels))),
        numpy_helper.from_array(np.array([1, channels, 1, 1], np.int64), "film.shape"),
        init("conv1.w", rng.normal(0, fan, (channels, channels, 3, 3))),
        init("conv1.b", rng.normal(0, 0.1, channels)),
    ]
    pads = [1, 1, 1, 1]
    nodes = [
        oh.make_node("Conv", ["x", "conv0.w", "conv0.b"], ["h0"], name="conv0", pads=pads),
        oh.make_node("InstanceNormalization", ["h0", "norm.scale", "norm.bias"], ["n"], name="norm", epsilon=1e-5),
        oh.make_node("MatMul", ["cond", "film.w"], ["s"], name="film.linear"),
        oh.make_node("Reshape", ["s", "film.shape"], ["s4"], name="film.reshape"),
        oh.make_node("Mul", ["n", "s4"], ["m"], name="film.mul"),
        oh.make_node("Sigmoid", ["m"], ["g"], name="gate"),
        oh.make_node("Mul", ["g", "h0"], ["gh"], name="gated"),
        oh.make_node("Conv", ["gh", "conv1.w", "conv1.b"], ["h1"], name="conv1", pads=pads),
        oh.make_node("Add", ["h1", "h0"], ["y"], name="residual"),
    ]
    return make_model(
        nodes,
        [tensor("x", TensorProto.FLOAT, list(FILM_SHAPE)), tensor("cond", TensorProto.FLOAT, [1, channels])],
        [tensor("y", TensorProto.FLOAT, list(FILM_SHAPE))],
        inits,
    )


def film_inputs(seed: int = 1) -> dict[str, np.ndarray]:
    x = np.random.default_rng(seed).standard_normal(FILM_SHAPE).astype(np.float32)
    return {"x": x, "cond": np.ones((1, FILM_SHAPE[1]), np.float32)}


def near_miss_mlp(layers: int = 8, width: int = 32, offset: float = 32.0, seed: int = 0) -> onnx.ModelProto:
    """x [4, ``width``] -> ``layers`` x (MatMul -> bias Add -> Tanh), with one shift-and-unshift in the middle
    (``amp.shift`` adds ``offset``, ``amp.unshift`` takes it away): float16 rounds the shifted value to the
    offset's ulp, so force_fp16 misses rel_l2 0.01 by less than 2x (offset 16: 0.0126, 32: 0.0194) while every
    other node's error is ~2e-4. Pinning ``amp.shift`` alone does not help: ``amp.unshift`` reads it in float16."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current = "x"
    for index in range(layers):
        weight = rng.standard_normal((width, width)) / np.sqrt(width)
        inits += [
            numpy_helper.from_array(weight.astype(np.float32), f"l{index}.w"),
            numpy_helper.from_array((rng.standard_normal(width) * 0.1).astype(np.float32), f"l{index}.b"),
        ]
        nodes += [
            oh.make_node("MatMul", [current, f"l{index}.w"], [f"l{index}.mm"], name=f"l{index}.matmul"),
            oh.make_node("Add", [f"l{index}.mm", f"l{index}.b"], [f"l{index}.h"], name=f"l{index}.bias"),
        ]
        current = f"l{index}.h"
        if index == layers // 2:
            inits.append(numpy_helper.from_array(np.array(offset, np.float32), "amp.offset"))
            nodes += [
                oh.make_node("Add", [current, "amp.offset"], ["amp.up"], name="amp.shift"),
                oh.make_node("Sub", ["amp.up", "amp.offset"], ["amp.down"], name="amp.unshift"),
            ]
            current = "amp.down"
        if index < layers - 1:
            nodes.append(oh.make_node("Tanh", [current], [f"l{index}.a"], name=f"l{index}.act"))
            current = f"l{index}.a"
    nodes.append(oh.make_node("Identity", [current], ["y"], name="out"))
    return make_model(
        nodes, [tensor("x", TensorProto.FLOAT, [4, width])], [tensor("y", TensorProto.FLOAT, [4, width])], inits
    )


#: The main-graph value named as :func:`branch_named_main`'s then-branch value ``t2`` would be keyed without escaping.
COLLIDING_NAME = "if0.then_branch/t2"


def branch_named_main() -> onnx.ModelProto:
    """A main-graph value named ``if0.then_branch/t2`` (x times 3e4: beyond the margin for |x| > 1.1) beside the If
    ``if0`` whose then-branch computes its own ``t2`` (x times 2 plus 1, small): two values one key would mix up."""
    then_branch = oh.make_graph(
        [
            oh.make_node("Mul", ["x", "two"], ["t1"], name="branch_double"),
            oh.make_node("Add", ["t1", "one"], ["t2"], name="branch_shift"),
        ],
        "then",
        [],
        [tensor("t2", TensorProto.FLOAT, [4])],
    )
    else_branch = oh.make_graph(
        [oh.make_node("Sub", ["x", "one"], ["e1"], name="branch_other")],
        "else",
        [],
        [tensor("e1", TensorProto.FLOAT, [4])],
    )
    inits = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(3e4, np.float32), "huge"),
        numpy_helper.from_array(np.array(1 / 3e4, np.float32), "tiny"),
    ]
    nodes = [
        oh.make_node("Mul", ["x", "huge"], [COLLIDING_NAME], name="main_blow_up"),
        oh.make_node("Mul", [COLLIDING_NAME, "tiny"], ["back"], name="main_scale_back"),
        oh.make_node("If", ["cond"], ["branch_out"], name="if0", then_branch=then_branch, else_branch=else_branch),
        oh.make_node("Add", ["back", "branch_out"], ["y"], name="join"),
    ]
    return make_model(
        nodes,
        [tensor("x", TensorProto.FLOAT, [4]), tensor("cond", TensorProto.BOOL, [])],
        [tensor("y", TensorProto.FLOAT, [4])],
        inits,
    )


MLP_WIDTH = 32


def mlp(scale: float = 1.0, layers: int = 4, seed: int = 0) -> onnx.ModelProto:
    """x [4, 32] -> ``layers`` x (MatMul -> bias Add -> Relu) -> y. ``scale`` multiplies every weight and bias: the
    same graph retrained to larger values (x1e5: the weights stay within float16's range, 1.8e4 at most, while the
    activations pass it from the first layer on)."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current = "x"
    for index in range(layers):
        weight = rng.uniform(-1, 1, (MLP_WIDTH, MLP_WIDTH)) / np.sqrt(MLP_WIDTH) * scale
        bias = rng.uniform(-0.1, 0.1, MLP_WIDTH) * scale
        inits += [
            numpy_helper.from_array(weight.astype(np.float32), f"l{index}.w"),
            numpy_helper.from_array(bias.astype(np.float32), f"l{index}.b"),
        ]
        nodes += [
            oh.make_node("MatMul", [current, f"l{index}.w"], [f"l{index}.mm"], name=f"l{index}.matmul"),
            oh.make_node("Add", [f"l{index}.mm", f"l{index}.b"], [f"l{index}.h"], name=f"l{index}.bias"),
            oh.make_node("Relu", [f"l{index}.h"], [f"l{index}.a"], name=f"l{index}.relu"),
        ]
        current = f"l{index}.a"
    nodes.append(oh.make_node("Identity", [current], ["y"], name="out"))
    return make_model(
        nodes, [tensor("x", TensorProto.FLOAT, [4, MLP_WIDTH])], [tensor("y", TensorProto.FLOAT, [4, MLP_WIDTH])], inits
    )
