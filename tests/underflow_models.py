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


# ------------------------------------------------------------------------------------------- a constant-Q bank
#: The constant-Q bank's octaves: per octave its filters' length (longer for lower notes, as a constant-Q
#: transform's are; every kernel zero-padded to the longest, centred, so all octaves share their frames) and the gain
#: its exporter folded into the kernels (a per-octave normalisation).
OCTAVES = ((512, 64.0), (256, 8.0), (128, 8.0), (64, 8.0), (32, 4.0), (16, 4.0))
BANK_BINS, BANK_HOP, BANK_KERNEL, BANK_EPS = 6, 128, 512, 1e-9
BANK_FRAMES = (SAMPLES - BANK_KERNEL) // BANK_HOP + 1
#: The head's outputs per frame (note activations).
NOTES = 10


def _bank_kernels(octave: int, length: int, gain: float) -> np.ndarray:
    """One octave's filters, ``[2 * BANK_BINS, 1, BANK_KERNEL]``: windowed cosines then sines scaled by
    gain/length, centred in the kernel."""
    n = np.arange(length)
    window = np.hanning(length)
    frequencies = 55.0 * 2.0 ** (octave + np.arange(BANK_BINS) / BANK_BINS)
    phase = 2 * np.pi * frequencies[:, None] * n[None, :] / RATE
    filters = np.concatenate([window * np.cos(phase), -window * np.sin(phase)]) * gain / length
    kernels = np.zeros((2 * BANK_BINS, 1, BANK_KERNEL))
    start = (BANK_KERNEL - length) // 2
    kernels[:, 0, start : start + length] = filters
    return kernels.astype(np.float32)


def cq_bank_model(seed: int = 0) -> onnx.ModelProto:
    """A constant-Q-like front end and a small head, as a music transcriber has them: per octave a strided Conv1d
    bank (real and imaginary filters as channels) -> Reshape [1, 2, bins, frames] -> Pow 2 -> ReduceSum over the
    pair (the power) -> Sqrt (the magnitude); the octaves concatenated -> Add eps -> Log; then a head that
    normalises the log spectrogram per bin over time (ReduceMean, Sub) and scores notes per frame (Transpose,
    MatMul, Add). The front end is 33 of the 38 nodes. Names: ``bank{k}``, ``pair{k}``, ``square{k}``,
    ``power{k}``, ``magnitude{k}``, ``octaves``, ``floor``, ``log``; values ``z{k}`` (the filter outputs),
    ``pw{k}`` (the powers)."""
    rng = np.random.default_rng(seed)
    bins = len(OCTAVES) * BANK_BINS
    inits = [
        numpy_helper.from_array(np.array([1, 2, BANK_BINS, BANK_FRAMES], np.int64), "pair_shape"),
        numpy_helper.from_array(np.array([1], np.int64), "pair_axis"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(BANK_EPS, np.float32), "eps"),
        numpy_helper.from_array((rng.standard_normal((bins, NOTES)) * 0.3).astype(np.float32), "head.w"),
        numpy_helper.from_array((rng.standard_normal(NOTES) * 0.1).astype(np.float32), "head.b"),
    ]
    nodes = []
    for octave, (length, gain) in enumerate(OCTAVES):
        inits.append(numpy_helper.from_array(_bank_kernels(octave, length, gain), f"bank{octave}.w"))
        k = octave
        nodes += [
            oh.make_node("Conv", ["audio", f"bank{k}.w"], [f"z{k}"], name=f"bank{k}", strides=[BANK_HOP]),
            oh.make_node("Reshape", [f"z{k}", "pair_shape"], [f"zz{k}"], name=f"pair{k}"),
            oh.make_node("Pow", [f"zz{k}", "two"], [f"sq{k}"], name=f"square{k}"),
            oh.make_node("ReduceSum", [f"sq{k}", "pair_axis"], [f"pw{k}"], name=f"power{k}", keepdims=0),
            oh.make_node("Sqrt", [f"pw{k}"], [f"mag{k}"], name=f"magnitude{k}"),
        ]
    nodes += [
        oh.make_node("Concat", [f"mag{k}" for k in range(len(OCTAVES))], ["spectrum"], name="octaves", axis=1),
        oh.make_node("Add", ["spectrum", "eps"], ["floored"], name="floor"),
        oh.make_node("Log", ["floored"], ["log_spectrum"], name="log"),
        oh.make_node("ReduceMean", ["log_spectrum"], ["level"], name="level", axes=[2]),
        oh.make_node("Sub", ["log_spectrum", "level"], ["normalised"], name="normalise"),
        oh.make_node("Transpose", ["normalised"], ["by_frame"], name="by_frame", perm=[0, 2, 1]),
        oh.make_node("MatMul", ["by_frame", "head.w"], ["scores"], name="head"),
        oh.make_node("Add", ["scores", "head.b"], ["logits"], name="head_bias"),
    ]
    return make_model(
        nodes,
        [tensor("audio", TensorProto.FLOAT, [1, 1, SAMPLES])],
        [tensor("logits", TensorProto.FLOAT, [1, BANK_FRAMES, NOTES])],
        inits,
    )


def piano_take(seed: int = 0, amplitude: float = 2e-3) -> np.ndarray:
    """A quiet recording: a bass line, one note of ``amplitude`` in each of the bank's two lowest octaves (which of
    their bins differs per seed) held for the first half of the take, over a cymbal (noise a third as loud,
    filtered to the higher octaves) and a noise floor 60 dB below the notes. The bass octaves' filters hear the
    notes, then near silence; the higher octaves' hear the cymbal throughout."""
    rng = np.random.default_rng(seed)
    t = np.arange(SAMPLES) / RATE
    notes = 55.0 * 2.0 ** ((rng.integers(0, BANK_BINS, 2) + np.array([0, BANK_BINS])) / BANK_BINS)
    held = t < t[-1] / 2
    tones = sum(amplitude * held * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi)) for f in notes)
    spectrum = np.fft.rfft(rng.standard_normal(SAMPLES))
    frequencies = np.fft.rfftfreq(SAMPLES, 1 / RATE)
    spectrum[(frequencies < 55.0 * 2**2) | (frequencies > 55.0 * 2 ** len(OCTAVES))] = 0
    cymbal = np.fft.irfft(spectrum, SAMPLES)
    cymbal *= amplitude / cymbal.std()
    floor = rng.normal(0, amplitude / 1000, SAMPLES)
    return (tones + cymbal + floor).astype(np.float32).reshape(1, 1, SAMPLES)
