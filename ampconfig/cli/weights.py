"""How the decision-only commands (rewrite, explain without runs) convert float32 weights to float16."""

from __future__ import annotations

import numpy as np

from ampconfig.rewrite.tensors import LARGE_ARRAY_ELEMENTS


def float16_by_onnx_runtime(array: np.ndarray) -> np.ndarray:
    """Large weights go through ONNX Runtime's Cast kernel (10-20x numpy's cast; bit-identical): the command line
    loads onnxruntime for that, only once a large weight is converted, so a model whose weights are all small is
    decided and rewritten without it. The library's default stays numpy."""
    if array.size < LARGE_ARRAY_ELEMENTS:
        return array.astype(np.float16)
    from ampconfig.runner.float_cast import float32_to_float16

    return float32_to_float16(array)
