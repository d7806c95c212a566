"""float32 -> float16 conversion of weights: the one encoder the API and every command use.

numpy converts float32 to float16 element by element in portable C (about 5 ns an element on a 2.8 GHz Xeon);
ONNX Runtime's MLAS uses the CPU's F16C / AVX-512 conversion instructions and its thread pool, 10-20x faster
(BERT-base's 85 M weights: 0.45 s with numpy). Both round to nearest even, overflow to inf and keep NaNs:
``benchmarks/float_cast_check.py`` compares them on every one of the 2**32 float32 bit patterns, and the test
suite on a sample. Small arrays stay with numpy, where a session run costs more than the conversion.

onnxruntime is imported when the first large array is converted, not when this module is: a rewrite whose
weights are all small (and every decision-only call) never loads it. Where it cannot be imported or its session
cannot be built, numpy converts (over threads), with the same bits.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import numpy as np

from ampconfig.opinfo.targets import CPU_PROVIDER
from ampconfig.rewrite.tensors import LARGE_ARRAY_ELEMENTS, numpy_float16

log = logging.getLogger(__name__)

#: Below this many elements numpy's own cast is as fast as a session run.
MIN_ELEMENTS = LARGE_ARRAY_ELEMENTS


def _cast_model() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)],
        "float32_to_float16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n"])],
    )
    # IR 8 / opset 17: loadable by every onnxruntime ampconfig supports.
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


@functools.lru_cache(maxsize=1)
def _cast_session() -> Any:
    """ONNX Runtime's session of one Cast node, or None where onnxruntime cannot give one."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        log.info("onnxruntime cannot be imported (%s): weights are converted by numpy", exc)
        return None
    from ampconfig.runner.ort_worker import SESSION_LOG_SEVERITY  # onnxruntime is loaded by now

    options = ort.SessionOptions()
    options.log_severity_level = SESSION_LOG_SEVERITY
    # No arena: the outputs are written into numpy buffers, and an arena would keep the largest input's worth of
    # memory for the life of the process.
    options.enable_cpu_mem_arena = False
    try:
        session = ort.InferenceSession(_cast_model(), options, providers=[CPU_PROVIDER])
    # A broken ORT install must not stop a rewrite (numpy gives the same bits, slower).
    except Exception as exc:  # noqa: BLE001
        log.info("ONNX Runtime's Cast kernel is unavailable (%s): large weights are converted by numpy", exc)
        return None
    log.info("ONNX Runtime session for float16 weight conversion (Cast kernel): providers %s", session.get_providers())
    return session


def float32_to_float16(array: np.ndarray) -> np.ndarray:
    """``array.astype(np.float16)``, bit for bit; large float32 arrays go through ONNX Runtime's Cast kernel."""
    session = _cast_session() if array.dtype == np.float32 and array.size >= MIN_ELEMENTS else None
    if session is None:
        return numpy_float16(array)
    source = np.ascontiguousarray(array).reshape(-1)
    converted = np.empty(source.shape, np.float16)
    binding = session.io_binding()
    binding.bind_cpu_input("x", source)
    # The kernel writes straight into ``converted``: no second copy of the result.
    binding.bind_output("y", "cpu", 0, np.float16, list(source.shape), converted.ctypes.data)
    session.run_with_iobinding(binding)
    return converted.reshape(array.shape)
