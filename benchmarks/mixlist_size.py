"""How long a large modify_mixlist takes to check and to apply: 5,000 entries of unknown op types (each gets a
"did you mean" search over the op info), 5,000 repeats of one op type, and 5,000 known ONNX op types.

The hostile suite feeds the same files and asserts the behaviour (exit codes, nothing lost); the time is measured
here, not asserted in a test. The "did you mean" search for 5,000 unknown names once took 12-25 s.

Run by hand:

    python benchmarks/mixlist_size.py --repeat 3

It prints one JSON object: the machine and, per mixlist kind, the median seconds of ``ampconfig validate`` and
``ampconfig rewrite`` (fresh processes, as a user runs them) on a three-node model.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto
from onnx import helper as oh

ENTRIES = 5000


def mixlists() -> dict[str, dict[str, dict[str, list[str]]]]:
    """The three 5,000-entry mixlists of the hostile suite."""
    schemas = sorted(onnx.defs.get_all_schemas_with_history(), key=lambda schema: schema.name)
    names = list(dict.fromkeys(schema.name for schema in schemas if schema.domain == ""))
    return {
        "unknown_ops": {"black-list": {"to-add": [f"CustomOp{i}" for i in range(ENTRIES)]}},
        "repeats": {"white-list": {"to-add": ["MatMul"] * ENTRIES}},
        "valid_known": {"gray-list": {"to-add": (names * 40)[:ENTRIES]}},
    }


def small_model() -> onnx.ModelProto:
    nodes = [
        oh.make_node("MatMul", ["x", "x"], ["h"], name="mm"),
        oh.make_node("Relu", ["h"], ["r"], name="relu"),
        oh.make_node("Softmax", ["r"], ["y"], name="softmax"),
    ]
    graph = oh.make_graph(
        nodes,
        "small",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8)


def _median_seconds(command: list[str], repeat: int) -> dict[str, float | int]:
    times, code = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        code = subprocess.run(command, capture_output=True, check=False).returncode
        times.append(time.perf_counter() - start)
    return {"median_s": round(statistics.median(times), 3), "exit_code": code}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[str, object] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "load_average": os.getloadavg()[0],
    }
    ampconfig = [sys.executable, "-m", "ampconfig"]
    names = ["--op-names", "onnx"]  # Max, Mean, Min, Sum and Where as ONNX's ops
    with tempfile.TemporaryDirectory() as folder:
        model = Path(folder, "model.onnx")
        onnx.save(small_model(), model)
        for kind, data in mixlists().items():
            mixlist = Path(folder, f"{kind}.json")
            mixlist.write_text(json.dumps(data))
            out = Path(folder, f"{kind}.onnx")
            validate = [*ampconfig, "validate", str(mixlist), *names]
            rewrite = [*ampconfig, "rewrite", str(model), "-o", str(out), "--modify-mixlist", str(mixlist), *names]
            results[kind] = {
                "validate": _median_seconds(validate, args.repeat),
                "rewrite": _median_seconds(rewrite, args.repeat),
            }
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
