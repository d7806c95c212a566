"""A small MLP whose last op overflows float16, for compare / range analysis / tune tests (real ORT CPU runs).

x[4,16] -> 3 x (MatMul, Add, Relu) -> MatMul(large weights) "mm_big" -> Pow(., 2) "square" -> y

``mm_big`` reaches |x| ~ 1e3 (fits float16); ``square`` reaches ~ 1e6, beyond float16's 65504. Pow is black on
the op info, so the mixlist below makes it white (add-white + remove-black): the rewrite lowers all 11 nodes.

Why the overflowing node feeds a float16 graph output (session config ``keep_io_types: false``): ONNX Runtime's
CPU provider runs float16 nodes it has no native kernel for (MatMul, Add, Pow...) through fp32 with casts it
inserts, and drops the lossy fp32 -> fp16 -> fp32 cast pairs between such nodes, so an fp16 overflow inside a
chain does not materialise on the CPU; it does at a float16 graph output.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

IR_VERSION = 10
BLOCKS = 3
CULPRIT = "square"
MIXLIST = {"white-list": {"to-add": ["Pow"]}, "black-list": {"to-remove": ["Pow"]}}


def overflow_model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    previous = "x"
    for i in range(BLOCKS):
        inits.append(numpy_helper.from_array((rng.standard_normal((16, 16)) * 0.3).astype(np.float32), f"W{i}"))
        inits.append(numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32), f"b{i}"))
        nodes += [
            oh.make_node("MatMul", [previous, f"W{i}"], [f"m{i}"], name=f"mm{i}"),
            oh.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
            oh.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        previous = f"r{i}"
    inits.append(numpy_helper.from_array((rng.standard_normal((16, 16)) * 60).astype(np.float32), "Wbig"))
    inits.append(numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two"))
    nodes += [
        oh.make_node("MatMul", [previous, "Wbig"], ["big"], name="mm_big"),
        oh.make_node("Pow", ["big", "two"], ["y"], name=CULPRIT),
    ]
    graph = oh.make_graph(
        nodes,
        "overflow",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def write_case(folder: Path) -> dict[str, Path]:
    """The model, the mixlist that makes Pow white, and a session config (fp16 graph I/O) in ``folder``."""
    model = folder / "overflow.onnx"
    onnx.save(overflow_model(), model)
    mixlist = folder / "pow_white.mixlist.json"
    mixlist.write_text(json.dumps(MIXLIST), encoding="utf-8")
    config = folder / "session.yaml"
    config.write_text(
        "precision_mode: allow_mix_precision\n"
        "target: cpu\n"
        "keep_io_types: false\n"
        f"modify_mixlist: {mixlist.name}\n"
        "tolerance:\n  rel_l2: 0.01\n",
        encoding="utf-8",
    )
    return {"model": model, "mixlist": mixlist, "config": config}
