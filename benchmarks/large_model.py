"""A > 2 GB model with external data: ampconfig versus its peers, time and peak memory, in one run.

    python benchmarks/large_model.py --folder /tmp/ampconfig-large --layers 10 --width 8192

Builds (once per folder, layers and width) a chain of MatMuls whose float32 weights (width x width each;
10 x 8192^2 = 2.68 GB) live in an external data file, then converts it to float16 with each tool in a fresh
subprocess, measured with ``/usr/bin/time -v`` (wall time, peak RSS):

- ampconfig: ``ampconfig rewrite MODEL -o OUT --precision-mode force_fp16`` (reads tensors lazily from the
  data file, converts one tensor at a time while writing ``OUT.data``);
- occ / ORT float16: ``onnx.load`` with external data, ``convert_float_to_float16(keep_io_types=True)``,
  ``onnx.save`` with external data (the peers take a ModelProto, so every weight is in memory).

Each output is checked with ``onnx.checker.check_model(path, full_check=True)``. Prints one JSON object.
``benchmarks/compare_peers.py --parts large`` runs the same comparison (``compare_large``) and prints it as a table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

TOOLS = ("ampconfig", "occ", "ort-float16")
MODEL_NAME = "large.onnx"
DATA_NAME = "large.onnx.data"

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


def _built_as_asked(path: Path, layers: int, width: int) -> bool:
    """Whether the model already in the folder has these layers and width (a stale one would be measured silently)."""
    if not path.is_file() or not (path.parent / DATA_NAME).is_file():
        return False
    try:
        weights = onnx.load(str(path), load_external_data=False).graph.initializer
    except Exception:
        return False
    return len(weights) == layers and all(list(w.dims) == [width, width] for w in weights)


def matmul_chain(layers: int, width: int) -> onnx.ModelProto:
    """x [1, width] -> ``layers`` MatMuls by float32 weights of width x width (values ~0.01, so activations stay
    small), opset 17, IR 10."""
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
    return model


def build(folder: Path, layers: int, width: int) -> Path:
    path = folder / MODEL_NAME
    if _built_as_asked(path, layers, width):
        return path
    folder.mkdir(parents=True, exist_ok=True)
    model = matmul_chain(layers, width)
    (folder / DATA_NAME).unlink(missing_ok=True)  # onnx.save appends to an existing data file
    onnx.save(model, path, save_as_external_data=True, location=DATA_NAME, size_threshold=1024)
    return path


def ampconfig_command() -> list[str]:
    """The ampconfig CLI of this interpreter's environment, not whichever ``ampconfig`` PATH finds first."""
    script = Path(sys.executable).parent / "ampconfig"  # not resolved: a venv's python is a symlink out of it
    if script.is_file():
        return [str(script)]
    spec = importlib.util.find_spec("ampconfig")  # a top-level find_spec does not import the package
    locations = (spec.submodule_search_locations or []) if spec else []
    if any((Path(p) / "__main__.py").is_file() for p in locations):
        return [sys.executable, "-m", "ampconfig"]
    # What the console script itself runs (pyproject: ampconfig = "ampconfig.entry:main").
    return [sys.executable, "-c", "import sys; from ampconfig.cli import main; sys.exit(main())"]


def measured(command: list[str]) -> dict[str, Any]:
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", done.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    seconds = None
    if wall:
        parts = [float(p) for p in wall.group(1).split(":")]
        seconds = sum(p * 60**i for i, p in enumerate(reversed(parts)))
    # The program's own last lines, before /usr/bin/time's report; its "non-zero status" line repeats the exit code.
    own = done.stderr.split("\tCommand being timed")[0].strip().splitlines()
    own = [line for line in own if not line.startswith("Command exited with non-zero status")]
    return {
        "exit_code": done.returncode,
        "seconds": seconds,
        "peak_rss_mb": int(rss.group(1)) / 1024 if rss else None,
        "error": own[-4:] if done.returncode else None,
    }


def valid(path: Path) -> bool:
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception:
        return False
    return True


def _remove_outputs(target: Path) -> None:
    """A previous run's output (or its data file) must not be checked as this run's."""
    for stale in target.parent.glob(target.name + "*"):
        stale.unlink()


def _command(tool: str, source: Path, target: Path) -> list[str]:
    if tool == "ampconfig":
        return [*ampconfig_command(), "rewrite", str(source), "-o", str(target), "--precision-mode", "force_fp16"]
    if tool in ("occ", "ort-float16"):
        return [sys.executable, "-c", PEER_SCRIPT, str(source), str(target), tool]
    raise SystemExit(f"unknown large-model tool {tool!r}; tools: {', '.join(TOOLS)}")


def compare_large(folder: Path, layers: int, width: int, tools: Sequence[str] = TOOLS) -> dict[str, Any]:
    """Builds the model (unless already there) and converts it with each tool; the raw numbers per tool."""
    for tool in tools:
        _command(tool, Path(), Path())  # an unknown tool fails before the build, not after minutes of it
    source = build(folder, layers, width)
    model_bytes = (folder / DATA_NAME).stat().st_size
    results: dict[str, Any] = {"layers": layers, "width": width, "model_bytes": model_bytes, "tools": {}}
    for tool in tools:
        target = folder / f"out-{tool}.onnx"
        _remove_outputs(target)
        print(f"  large {tool} ...", end="", flush=True, file=sys.stderr)
        row = measured(_command(tool, source, target))
        row["valid"] = row["exit_code"] == 0 and target.is_file() and valid(target)
        row["output_bytes"] = sum(p.stat().st_size for p in folder.glob(target.name + "*"))
        if row["peak_rss_mb"]:
            row["peak_rss_over_model"] = round(row["peak_rss_mb"] * 2**20 / model_bytes, 3)
        print(f" exit {row['exit_code']}, {row['seconds']} s, {row['peak_rss_mb']} MB", file=sys.stderr)
        results["tools"][tool] = row
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/ampconfig-large"))
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--width", type=int, default=8192)
    parser.add_argument("--tools", default=",".join(TOOLS))
    args = parser.parse_args()
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    print(json.dumps(compare_large(args.folder, args.layers, args.width, tools), indent=2))


if __name__ == "__main__":
    main()
