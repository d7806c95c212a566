"""runner/proof.py: the reference and the rewritten model on the same inputs. Here: a QDQ model's Q/DQ pairs run
on the CPU as the CUDA provider runs them (float ops), not fused into ONNX Runtime's CPU int8 kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from ampconfig.runner.proof import prove
from ampconfig.runner.sessions import DeviceChoice
from tests.quantized_models import block_inputs, qdq_block


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray], level: ort.GraphOptimizationLevel) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


def test_a_qdq_model_runs_its_quantizers_as_float_ops_on_the_cpu(tmp_path: Path) -> None:
    model = onnx.load(qdq_block(tmp_path))
    feeds = block_inputs(0)
    fused = _ort(model, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)  # DQ -> MatMul -> Q as QLinearMatMul
    float_qdq = _ort(model, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)  # nothing fused: as on CUDA
    gap = float(np.linalg.norm(fused - float_qdq) / np.linalg.norm(float_qdq))
    assert gap > 0.01  # the int8 kernels alone would miss the default tolerance
    choice = DeviceChoice("cpu", "cpu")
    proof = prove(model, model, feeds, choice, warmup=0, iterations=1, float_qdq=True)
    np.testing.assert_allclose(proof.reference.outputs["y"], float_qdq, rtol=0, atol=1e-5)
    assert any("QuantizeLinear/DequantizeLinear pairs" in note for note in proof.notes)
    fused_proof = prove(model, model, feeds, choice, warmup=0, iterations=1)
    np.testing.assert_array_equal(fused_proof.reference.outputs["y"], fused)
