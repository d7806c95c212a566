"""What the checker's safety net costs when it fires: a model whose rewrite the ONNX checker rejects at k nodes.

``rewrite_model_detailed`` keeps a changed node the checker rejects in its original dtype. The model is a chain of
N Sigmoid/Relu nodes with k Bernoulli nodes whose ``dtype`` attribute (float32) the op info does not see: in
``force_fp16`` each is decided float16 and the checker rejects it. Counted, by wrapping the functions: how many
times the pipeline applied a plan (``ampconfig.rewrite.steps.apply_plan.apply_plan``), and the ONNX checker's calls
on the whole model and on small pieces of it (any other model), with the wall time of the rewrite.

    python benchmarks/checker_repair.py --nodes 2000 --rejected 1 4 16

Works against any checkout of ampconfig on the path (to compare with one before the change).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import onnx
from onnx import TensorProto
from onnx import helper as oh

import ampconfig.api
from ampconfig.rewrite.steps import apply_plan as apply_step


def chain(nodes: int, rejected: int) -> onnx.ModelProto:
    every = max(1, nodes // (rejected + 1))
    made, last = [], "x"
    for index in range(nodes):
        if rejected and index % every == every - 1 and index // every < rejected:
            made.append(oh.make_node("Bernoulli", [last], [f"b{index}"], name=f"coin_{index}", dtype=TensorProto.FLOAT))
            made.append(oh.make_node("Add", [f"b{index}", last], [f"v{index}"], name=f"add_{index}"))
        else:
            made.append(oh.make_node("Sigmoid" if index % 2 else "Relu", [last], [f"v{index}"], name=f"n_{index}"))
        last = f"v{index}"
    made.append(oh.make_node("Identity", [last], ["y"], name="out"))
    x, y = (oh.make_tensor_value_info(name, TensorProto.FLOAT, [8, 16]) for name in ("x", "y"))
    model = oh.make_model(oh.make_graph(made, "chain", [x], [y]), opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def measured(model: onnx.ModelProto) -> dict[str, Any]:
    counts = {"pipeline runs": 0, "whole-model checks": 0, "piece checks": 0}
    whole = len(model.graph.node)
    apply_plan, check_model = apply_step.apply_plan, onnx.checker.check_model

    def counted_apply(*args: Any, **kwargs: Any) -> Any:
        counts["pipeline runs"] += 1
        return apply_plan(*args, **kwargs)

    def counted_check(proto: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(proto, onnx.ModelProto) and len(proto.graph.node) >= whole:
            counts["whole-model checks"] += bool(kwargs.get("full_check"))
        else:
            counts["piece checks"] += 1
        return check_model(proto, *args, **kwargs)

    apply_step.apply_plan, onnx.checker.check_model = counted_apply, counted_check  # type: ignore[assignment]
    try:
        start = time.perf_counter()
        result = ampconfig.api.rewrite_model_detailed(model, "force_fp16", target="cuda")
        seconds = time.perf_counter() - start
    finally:
        apply_step.apply_plan, onnx.checker.check_model = apply_plan, check_model  # type: ignore[assignment]
    kept = sum(d.rule.value == "checker_rejects" for d in result.decisions)
    return {**counts, "kept": kept, "seconds": round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--rejected", type=int, nargs="+", default=[0, 1, 4, 16])
    args = parser.parse_args()
    measured(chain(50, 0))  # imports and caches warm
    print("| rejected nodes | pipeline runs | whole-model full checks | piece checks | nodes kept | seconds |")
    print("|---|---|---|---|---|---|")
    for rejected in args.rejected:
        row = measured(chain(args.nodes, rejected))
        print(
            f"| {rejected} | {row['pipeline runs']} | {row['whole-model checks']} | {row['piece checks']} | "
            f"{row['kept']} | {row['seconds']} |"
        )


if __name__ == "__main__":
    main()
