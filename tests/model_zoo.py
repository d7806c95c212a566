"""Every model the accuracy tests judge, by name: the engine's test graphs, the bundled examples, and models that
break float16 in known ways. Each builder returns a checked ``onnx.ModelProto`` (IR version set explicitly).

``run``, ``compare`` and ``tune`` must judge each of them the same way (tests/prove/test_judge.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from ampconfig.examples import example_path
from tests.exporter_models import EXPORTER_MODELS
from tests.graphs import FLOAT, const, make_model, tensor, transformer_block, weight
from tests.overflow_model import overflow_model

#: Node names of :func:`overflow_chain`, in order.
OVERFLOW_CHAIN = ("mm", "scale", "square", "sum", "sqrt", "div")


def overflow_chain() -> onnx.ModelProto:
    """The hostile-input report's model: MatMul -> x300 -> Pow 2 -> ReduceSum -> Sqrt -> Div (an L2 normalisation).

    Under force_fp16 the Pow overflows float16 (|x*300|^2 ~ 1e6), the norm becomes inf and the output 0; on the
    CPU that only shows when every float16 value is rounded as float16 hardware stores it.
    """
    nodes = [
        onnx.helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        onnx.helper.make_node("Mul", ["m", "k300"], ["ms"], name="scale"),
        onnx.helper.make_node("Pow", ["ms", "two"], ["p"], name="square"),
        onnx.helper.make_node("ReduceSum", ["p", "axes"], ["r"], name="sum", keepdims=1),
        onnx.helper.make_node("Sqrt", ["r"], ["n"], name="sqrt"),
        onnx.helper.make_node("Div", ["ms", "n"], ["y"], name="div"),
    ]
    initializers = [
        weight("w", 32, 32, scale=0.5),
        const("k300", 300.0),
        const("two", 2.0),
        onnx.numpy_helper.from_array(np.array([-1], np.int64), "axes"),
    ]
    return make_model(nodes, [tensor("x", FLOAT, [4, 32])], [tensor("y", FLOAT, [4, 32])], initializers, opset=18)


def _example(name: str) -> Callable[[], onnx.ModelProto]:
    return lambda: onnx.load(example_path(name))


#: name -> builder: the engine's graphs, the bundled examples, the overflow cases and the exporter-shaped models.
ZOO: dict[str, Callable[[], onnx.ModelProto]] = {
    "transformer_block": transformer_block,
    "overflow_mlp": overflow_model,
    "overflow_chain": overflow_chain,
    "example_transformer_block": _example("transformer_block"),
    "example_small_convnet": _example("small_convnet"),
    **{f"exporter_{name}": build for name, build in EXPORTER_MODELS.items()},
}
