"""onnx-ir versus raw protobuf for the graph work a rewrite does, on a large synthetic graph.

The work, done the same way in both: index producers and consumers, insert a Cast in front of every second
node's first input, retype the cast outputs, topologically sort, produce a ModelProto. Run by hand:

    python benchmarks/ir_vs_protobuf.py --nodes 100000 --repeat 3

It prints one JSON object with the median seconds of each step per representation.
"""

from __future__ import annotations

import argparse
import heapq
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig.gc_pause import gc_paused


def chain_model(nodes: int, width: int = 4) -> onnx.ModelProto:
    """A long chain of Add/Mul/Relu nodes over ``width`` parallel lanes, each fed by a small initializer."""
    graph_nodes, inits = [], []
    lanes = [f"x{i}" for i in range(width)]
    ops = ("Add", "Mul", "Relu")
    for index in range(nodes):
        lane = index % width
        op = ops[index % 3]
        out = f"v{index}"
        inputs = [lanes[lane]] if op == "Relu" else [lanes[lane], f"c{index % 64}"]
        graph_nodes.append(oh.make_node(op, inputs, [out], name=f"n{index}"))
        lanes[lane] = out
    for c in range(64):
        inits.append(numpy_helper.from_array(np.full((16,), 0.5, np.float32), f"c{c}"))
    inputs = [oh.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [16]) for i in range(width)]
    outputs = [oh.make_tensor_value_info(name, TensorProto.FLOAT, [16]) for name in lanes]
    model = oh.make_model(oh.make_graph(graph_nodes, "chain", inputs, outputs, inits))
    model.ir_version = 10
    return model


def with_ir(proto: onnx.ModelProto) -> onnx.ModelProto:
    model = ir.serde.deserialize_model(proto)
    graph = model.graph
    for index, node in enumerate(list(graph)):
        if index % 2 or node.inputs[0] is None:
            continue
        source = node.inputs[0]
        out = ir.Value(name=f"{source.name}_cast{index}", type=ir.TensorType(ir.DataType.FLOAT16))
        cast = ir.Node("", "Cast", [source], [ir.AttrInt64("to", TensorProto.FLOAT16)], outputs=[out])
        graph.insert_before(node, cast)
        node.replace_input_with(0, out)
        _ = [use.node for use in source.uses()]  # consumer lookup, as painting does
    graph.sort()
    return ir.serde.serialize_model(model)


def with_protobuf(proto: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    producers: dict[str, int] = {}
    consumers: dict[str, list[int]] = defaultdict(list)
    for index, node in enumerate(graph.node):
        for name in node.output:
            producers[name] = index
        for name in node.input:
            consumers[name].append(index)
    new_nodes = []
    for index, node in enumerate(graph.node):
        if index % 2 == 0 and node.input:
            source = node.input[0]
            out = f"{source}_cast{index}"
            new_nodes.append(oh.make_node("Cast", [source], [out], to=TensorProto.FLOAT16))
            node.input[0] = out
            graph.value_info.append(oh.make_tensor_value_info(out, TensorProto.FLOAT16, None))
            _ = consumers[source]
        new_nodes.append(node)
    # Stable Kahn sort by original position, like onnx-ir's.
    produced_by = {name: i for i, n in enumerate(new_nodes) for name in n.output}
    children: dict[int, list[int]] = defaultdict(list)
    indegree = [0] * len(new_nodes)
    for i, node in enumerate(new_nodes):
        for name in node.input:
            if name in produced_by:
                children[produced_by[name]].append(i)
                indegree[i] += 1
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for child in children[i]:
            indegree[child] -= 1
            if indegree[child] == 0:
                heapq.heappush(ready, child)
    sorted_nodes = [new_nodes[i] for i in order]
    del graph.node[:]
    graph.node.extend(sorted_nodes)
    return model


def median_seconds(func: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``func``, with Python's cyclic garbage collector paused as ampconfig's rewrite pauses
    it (``ampconfig.gc_pause``): both representations are timed the same way."""
    times = []
    for _ in range(repeat):
        with gc_paused():
            start = time.perf_counter()
            func()
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[25_000, 50_000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results = {}
    for count in args.nodes:
        proto = chain_model(count)
        results[count] = {
            "onnx_ir_s": round(median_seconds(lambda p=proto: with_ir(p), args.repeat), 3),
            "protobuf_s": round(median_seconds(lambda p=proto: with_protobuf(p), args.repeat), 3),
        }
        onnx.checker.check_model(with_ir(proto))
        onnx.checker.check_model(with_protobuf(proto))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
