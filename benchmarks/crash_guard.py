"""What ``run``'s crash guard costs: one child interpreter that loads and runs the fp32 model and the rewritten one
once on the first sample (ampconfig.runner.crash_guard), against what ``run`` does in-process anyway (build each
model's session and run it once).

The model is built with onnx.helper: ``--layers`` blocks of MatMul(hidden x hidden) -> Add -> Relu -> Mul, with
``--hidden`` 1024 and 30 layers giving 126 MB of float32 weights and 120 nodes, or ``--hidden 64 --layers 1000``
giving 4,000 nodes. Rounds are interleaved (guard, in-process, guard, ...); the median is reported.

    python benchmarks/crash_guard.py [--hidden 1024 --layers 30] [--rounds 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ampconfig.api import rewrite_model_detailed
from ampconfig.runner.crash_guard import GuardedModel, check_in_child
from ampconfig.runner.inputs import adapt_feeds
from ampconfig.runner.sessions import create_session, run_once


def build(hidden: int, layers: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    value = "x"
    for index in range(layers):
        w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, f"w{index}"),
            numpy_helper.from_array(np.full(hidden, 0.01, np.float32), f"b{index}"),
        ]
        inits.append(numpy_helper.from_array(np.array(0.9, np.float32), f"s{index}"))
        nodes += [
            helper.make_node("MatMul", [value, f"w{index}"], [f"m{index}"], name=f"mm{index}"),
            helper.make_node("Add", [f"m{index}", f"b{index}"], [f"a{index}"], name=f"add{index}"),
            helper.make_node("Relu", [f"a{index}"], [f"r{index}"], name=f"relu{index}"),
            helper.make_node("Mul", [f"r{index}", f"s{index}"], [f"y{index}"], name=f"mul{index}"),
        ]
        value = f"y{index}"
    graph = helper.make_graph(
        nodes,
        "guard_bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, hidden])],
        [helper.make_tensor_value_info(value, TensorProto.FLOAT, [4, hidden])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    model = build(args.hidden, args.layers)
    rewritten = rewrite_model_detailed(model, "force_fp16", target="cpu", with_cost=False).model
    sample = {"x": np.random.default_rng(1).standard_normal((4, args.hidden)).astype(np.float32)}
    guard_times, inline_times = [], []
    with tempfile.TemporaryDirectory() as folder:
        paths = [Path(folder) / "fp32.onnx", Path(folder) / "fp16.onnx"]
        for path, proto in zip(paths, (model, rewritten), strict=True):
            started = time.perf_counter()
            path.write_bytes(proto.SerializeToString())  # what run does for an in-memory model before the guard
            write = time.perf_counter() - started
        size = sum(path.stat().st_size for path in paths) / 1e6
        for _ in range(args.rounds):
            started = time.perf_counter()
            for path, proto in zip(paths, (model, rewritten), strict=True):
                path.write_bytes(proto.SerializeToString())
            checks = check_in_child(
                [
                    GuardedModel(p.name, p, adapt_feeds(sample, m))
                    for p, m in zip(paths, (model, rewritten), strict=True)
                ],
                "cpu",
            )
            guard_times.append(time.perf_counter() - started)
            assert all(check.ok for check in checks), checks
            started = time.perf_counter()
            for proto in (model, rewritten):
                run_once(create_session(proto, "cpu"), adapt_feeds(sample, proto))
            inline_times.append(time.perf_counter() - started)
    guard, inline = statistics.median(guard_times), statistics.median(inline_times)
    print(f"{platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"model: hidden {args.hidden}, {args.layers} layers, {len(model.graph.node)} nodes, both files {size:.0f} MB")
    print(f"guard (write both + child load/run both): median {guard:.2f} s  {[round(t, 2) for t in guard_times]}")
    print(f"in-process sessions + one run of both:    median {inline:.2f} s  {[round(t, 2) for t in inline_times]}")
    print(f"guard / in-process: {guard / inline:.2f}x (last file write {write:.2f} s)")


if __name__ == "__main__":
    main()
