"""Models whose float32 values leave float16's range only on real-looking data: what value ranges are for.

``power_spectrum_model``: a log-mel front end. Frames [T, 64] -> MatMul with a cosine and a sine basis -> squares
added (the power spectrum) -> MatMul with a mel filter bank -> Add(eps) -> Log. On audio-like frames of amplitude
~300 the power reaches ~1e9, far beyond float16's 65504; on generated inputs (values in [0, 1)) it stays below a
few hundred, so only a range check on real data keeps the power nodes float32. The matrix ops are white in the
mixed modes: without ranges they go float16 and the output becomes non-finite.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

IR_VERSION = 10
FRAME = 64
BINS = 33
MELS = 8
#: Nodes whose values pass float16's range on :func:`loud_frames`.
POWER_NODES = ("square_re", "square_im", "power")


def power_spectrum_model() -> onnx.ModelProto:
    n = np.arange(FRAME)
    k = np.arange(BINS)[:, None]
    cos = np.cos(2 * np.pi * k * n / FRAME).T.astype(np.float32)
    sin = (-np.sin(2 * np.pi * k * n / FRAME)).T.astype(np.float32)
    rng = np.random.default_rng(3)
    mel = np.abs(rng.standard_normal((BINS, MELS))).astype(np.float32) / BINS
    inits = [
        numpy_helper.from_array(cos, "dft_cos"),
        numpy_helper.from_array(sin, "dft_sin"),
        numpy_helper.from_array(mel, "mel_bank"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
    ]
    nodes = [
        oh.make_node("MatMul", ["frames", "dft_cos"], ["re"], name="dft_re"),
        oh.make_node("MatMul", ["frames", "dft_sin"], ["im"], name="dft_im"),
        oh.make_node("Mul", ["re", "re"], ["re2"], name="square_re"),
        oh.make_node("Mul", ["im", "im"], ["im2"], name="square_im"),
        oh.make_node("Add", ["re2", "im2"], ["power"], name="power"),
        oh.make_node("MatMul", ["power", "mel_bank"], ["mel"], name="mel"),
        oh.make_node("Add", ["mel", "eps"], ["mel_eps"], name="floor"),
        oh.make_node("Log", ["mel_eps"], ["log_mel"], name="log"),
    ]
    graph = oh.make_graph(
        nodes,
        "log_mel",
        [oh.make_tensor_value_info("frames", TensorProto.FLOAT, ["T", FRAME])],
        [oh.make_tensor_value_info("log_mel", TensorProto.FLOAT, ["T", MELS])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def loud_frames(frames: int = 12, seed: int = 0) -> np.ndarray:
    """Audio-like frames: a few loud tones and noise, amplitude ~300 (what a 16-bit recording scaled by 1/100 holds)."""
    rng = np.random.default_rng(seed)
    t = np.arange(frames * FRAME).reshape(frames, FRAME)
    tones = sum(np.sin(2 * np.pi * f * t / 800 + p) for f, p in ((50, 0.1), (120, 1.3), (300, 2.0)))
    return (300 * tones / 3 + rng.normal(0, 5, t.shape)).astype(np.float32)


def write_power_spectrum(folder: Path) -> tuple[Path, Path]:
    """The model and an ``.npz`` of loud frames, written into ``folder``."""
    model_path = folder / "log_mel.onnx"
    onnx.save(power_spectrum_model(), model_path)
    inputs = folder / "frames.npz"
    np.savez(inputs, frames=loud_frames())
    return model_path, inputs
