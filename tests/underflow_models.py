"""A model whose float32 values live in float16's subnormal range: a constant-Q-like front end inside the graph,
then a Log and a small CNN, as a music transcriber exported by tf2onnx has them.

:func:`cqt_front_end`: a waveform [1, 1, 4096] -> two strided Convs with windowed-cosine and -sine kernels (the
constant-Q filter bank, real and imaginary parts, scaled by 1/length as CQT kernels are) -> squares added (the
power) -> Sqrt (the magnitude) -> Log -> a CNN (two 3x3 Convs with Relu, global average pool, Gemm) -> 10 logits.
On a quiet recording (:func:`waveform`: a few tones of amplitude ~0.002 in noise) the filter bank's outputs peak
near 1e-3 while most lie below float16's smallest normal value (6.1e-5) and many below its smallest subnormal:
computed in float16 the power flushes to zero where float32 had none, and the Log turns it into -inf.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from tests.graphs import make_model, tensor

SAMPLES, BINS, KERNEL, HOP, RATE = 4096, 24, 256, 64, 16000
#: The nodes of the front end, whose values the underflow rule keeps float32.
FRONT_END = ("cqt_re", "cqt_im", "square_re", "square_im", "power", "magnitude", "log")


def cqt_front_end(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    n = np.arange(KERNEL)
    window = np.hanning(KERNEL)
    frequencies = 110.0 * 2.0 ** (np.arange(BINS) / 4)  # four bins per octave from A2
    phase = 2 * np.pi * frequencies[:, None] * n[None, :] / RATE
    real = (window * np.cos(phase) / KERNEL)[:, None, :].astype(np.float32)
    imaginary = (-window * np.sin(phase) / KERNEL)[:, None, :].astype(np.float32)
    inits = [
        numpy_helper.from_array(real, "cqt.real"),
        numpy_helper.from_array(imaginary, "cqt.imag"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array((rng.standard_normal((8, 1, 3, 3)) * 0.3).astype(np.float32), "cnn1.w"),
        numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "cnn1.b"),
        numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32), "cnn2.w"),
        numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "cnn2.b"),
        numpy_helper.from_array((rng.standard_normal((10, 8)) * 0.3).astype(np.float32), "head.w"),
        numpy_helper.from_array((rng.standard_normal(10) * 0.1).astype(np.float32), "head.b"),
    ]
    nodes = [
        oh.make_node("Conv", ["audio", "cqt.real"], ["re"], name="cqt_re", strides=[HOP]),
        oh.make_node("Conv", ["audio", "cqt.imag"], ["im"], name="cqt_im", strides=[HOP]),
        oh.make_node("Mul", ["re", "re"], ["re2"], name="square_re"),
        oh.make_node("Mul", ["im", "im"], ["im2"], name="square_im"),
        oh.make_node("Add", ["re2", "im2"], ["power_out"], name="power"),
        oh.make_node("Sqrt", ["power_out"], ["magnitude_out"], name="magnitude"),
        oh.make_node("Log", ["magnitude_out"], ["log_out"], name="log"),
        oh.make_node("Unsqueeze", ["log_out", "axis1"], ["image"], name="as_image"),
        oh.make_node("Conv", ["image", "cnn1.w", "cnn1.b"], ["c1"], name="cnn1", pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        oh.make_node("Conv", ["r1", "cnn2.w", "cnn2.b"], ["c2"], name="cnn2", pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        oh.make_node("GlobalAveragePool", ["r2"], ["pooled"], name="pool"),
        oh.make_node("Flatten", ["pooled"], ["features"], name="flatten"),
        oh.make_node("Gemm", ["features", "head.w", "head.b"], ["logits"], name="head", transB=1),
    ]
    return make_model(
        nodes,
        [tensor("audio", TensorProto.FLOAT, [1, 1, SAMPLES])],
        [tensor("logits", TensorProto.FLOAT, [1, 10])],
        inits,
    )


def waveform(seed: int = 0) -> np.ndarray:
    """A quiet recording: three tones of amplitude ~0.002 (a different chord per seed) in noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(SAMPLES) / RATE
    notes = 110.0 * 2.0 ** (rng.integers(0, BINS, 3) / 4)
    tones = sum(0.002 * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi)) for f in notes)
    return (tones + rng.normal(0, 2e-5, SAMPLES)).astype(np.float32).reshape(1, 1, SAMPLES)


def write_front_end(folder: Path, samples: int = 4) -> tuple[Path, Path]:
    """The model and a data folder of ``samples`` recordings (one .npz each), written into ``folder``."""
    model_path = folder / "front_end.onnx"
    onnx.save(cqt_front_end(), model_path)
    data = folder / "recordings"
    data.mkdir(exist_ok=True)
    for index in range(samples):
        np.savez(data / f"take{index:03d}.npz", audio=waveform(index))
    return model_path, data
