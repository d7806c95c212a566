"""A > 2 GB model with external data: ampconfig versus its peers, time and peak memory, in one run.

    python benchmarks/large_model.py --folder /tmp/ampconfig-large --layers 10 --width 8192

Builds (once) a chain of MatMuls whose float32 weights (width x width each; 10 x 8192^2 = 2.68 GB) live in an
external data file, then converts it to float16 with each tool in a fresh subprocess, measured with
``/usr/bin/time -v`` (wall time, peak RSS):

- ampconfig: ``ampconfig rewrite MODEL -o OUT --precision-mode force_fp16`` (reads tensors lazily from the
  data file, converts one tensor at a time while writing ``OUT.data``);
- occ / ORT float16: ``onnx.load`` with external data, ``convert_float_to_float16(keep_io_types=True)``,
  ``onnx.save`` with external data (the peers take a ModelProto, so every weight is in memory).

Each output is checked with ``onnx.checker.check_model(path, full_check=True)``. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

PEER_SCRIPT = textwrap.dedent(
    """
    import sys, onnx
    source, target, tool = sys.argv[1:4]
    model = onnx.load(source, load_external_data=True)
    if tool == "occ":
        from onnxconverter_common import float16
        converted = float16.convert_float_to_float16(model, keep_io_types=True)
    else:
        from onnxruntime.transformers import float16
        converted = float16.convert_float_to_float16(model, keep_io_types=True)
    onnx.save(converted, target, save_as_external_data=True, location=target.split("/")[-1] + ".data")
    """
)


def build(folder: Path, layers: int, width: int) -> Path:
    path = folder / "large.onnx"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    nodes, weights, current = [], [], "x"
    for layer in range(layers):
        weights.append(
            numpy_helper.from_array(rng.standard_normal((width, width), dtype=np.float32) * 0.01, f"w{layer}")
        )
        nodes.append(oh.make_node("MatMul", [current, f"w{layer}"], [f"h{layer}"], name=f"fc{layer}"))
        current = f"h{layer}"
    graph = oh.make_graph(
        nodes,
        "large",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [oh.make_tensor_value_info(current, TensorProto.FLOAT, [1, width])],
        weights,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, path, save_as_external_data=True, location="large.onnx.data", size_threshold=1024)
    return path


def measured(command: list[str]) -> dict[str, object]:
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    seconds = None
    if wall:
        parts = [float(p) for p in wall.group(1).split(":")]
        seconds = sum(p * 60**i for i, p in enumerate(reversed(parts)))
    return {
        "exit_code": done.returncode,
        "seconds": seconds,
        "peak_rss_mb": int(rss.group(1)) / 1024 if rss else None,
        # The program's own last lines, before /usr/bin/time's report.
        "error": done.stderr.split("\tCommand being timed")[0].strip().splitlines()[-4:] if done.returncode else None,
    }


def valid(path: Path) -> bool:
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/ampconfig-large"))
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--width", type=int, default=8192)
    parser.add_argument("--tools", default="ampconfig,occ,ort-float16")
    args = parser.parse_args()
    source = build(args.folder, args.layers, args.width)
    model_bytes = (args.folder / "large.onnx.data").stat().st_size
    results: dict[str, object] = {"model_bytes": model_bytes, "tools": {}}
    for tool in args.tools.split(","):
        target = args.folder / f"out-{tool}.onnx"
        if tool == "ampconfig":
            command = ["ampconfig", "rewrite", str(source), "-o", str(target), "--precision-mode", "force_fp16"]
        else:
            command = [sys.executable, "-c", PEER_SCRIPT, str(source), str(target), tool]
        row = measured(command)
        row["valid"] = row["exit_code"] == 0 and valid(target)
        if row["peak_rss_mb"]:
            row["peak_rss_over_model"] = round(row["peak_rss_mb"] * 2**20 / model_bytes, 3)
        results["tools"][tool] = row
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
