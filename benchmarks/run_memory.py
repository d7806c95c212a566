"""``ampconfig run``'s peak memory against the size of its largest output: the command's and its worker's peaks.

    python benchmarks/run_memory.py --mib 64 256 512 [--folder /tmp/ampconfig-run-memory] [--source DIR]

For each size, a model whose one output is that many MiB of float32 (a [1, 4096] input, Expand to [rows, 4096];
the output is the model's only large value) runs through ``ampconfig run MODEL -m force_fp16 --device cpu
--warmup 1 --iterations 1`` in a fresh interpreter (the console script's own entry, so the worker is forked as it
is for a user), and so does a one-node model (Relu on 4 floats), the fixed cost. Each run reports the peak
resident set of the command (``VmHWM``) and of its worker (read from ``/proc`` before the worker ends). Printed: one
JSON object with, for each size, the summed peak less the one-node model's, in MiB and as a multiple of the
output, against issue 43's bound (4x the largest output plus the model file). ``--source``: the ampconfig checkout
to measure (its root goes first on PYTHONPATH), for a before/after on one machine. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MIB = 1 << 20
#: The output's columns: a row is 16 KiB of float32.
COLUMNS = 4096

#: Runs ``ampconfig ARGS`` as the console script does and writes the two peaks (bytes) to the file in argv[1].
DRIVER = """
import atexit, json, os, sys
from ampconfig.worker import client as worker  # imported first: its atexit shutdown then runs after the report below


def peak(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def report():
    live = worker._current
    peaks = {"main": peak(os.getpid()), "worker": peak(live.pid) if live is not None and live.alive else None}
    with open(REPORT, "w") as stream:
        json.dump(peaks, stream)


REPORT = sys.argv[1]
atexit.register(report)
sys.argv = ["ampconfig", *sys.argv[2:]]
from ampconfig.entry import main
main()
"""


def output_model(mib: int) -> onnx.ModelProto:
    """x [1, COLUMNS] -> Expand to [rows, COLUMNS]: one float32 output of ``mib`` MiB, the model's only large value."""
    rows = mib * MIB // (4 * COLUMNS)
    initializers = [numpy_helper.from_array(np.array([rows, COLUMNS], np.int64), "shape")]
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")],
        f"output_{mib}_mib",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, COLUMNS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, COLUMNS])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def one_node_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "one_node",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def run_peaks(model: Path, source: Path | None = None) -> dict[str, int]:
    """The command's and its worker's peak resident bytes for ``ampconfig run MODEL`` in a fresh interpreter."""
    report = model.with_suffix(".peaks.json")
    report.unlink(missing_ok=True)
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source.resolve()), env.get("PYTHONPATH")]))
    args = ["run", str(model), "-m", "force_fp16", "--device", "cpu", "--warmup", "1", "--iterations", "1", "--json"]
    done = subprocess.run(  # in the model's folder: ``python -c`` puts the working folder first on the path
        [sys.executable, "-c", DRIVER, str(report), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=model.parent,
        timeout=900,
    )
    if done.returncode != 0 or not report.is_file():
        raise RuntimeError(f"ampconfig run {model.name} failed ({done.returncode}): {done.stderr[-2000:]}")
    peaks = json.loads(report.read_text())
    if peaks["worker"] is None:
        raise RuntimeError(f"ampconfig run {model.name}: its worker had ended before the report")
    return {"main": int(peaks["main"]), "worker": int(peaks["worker"])}


def measure(folder: Path, sizes: list[int], source: Path | None = None) -> dict[str, Any]:
    """Peaks of the one-node model and of each output size, and each size's excess over the one-node model."""
    folder.mkdir(parents=True, exist_ok=True)
    base_path = folder / "one_node.onnx"
    onnx.save(one_node_model(), base_path)
    base = run_peaks(base_path, source)
    results: dict[str, Any] = {"one_node": base, "sizes": {}}
    for mib in sizes:
        path = folder / f"output_{mib}.onnx"
        onnx.save(output_model(mib), path)
        peaks = run_peaks(path, source)
        excess = peaks["main"] + peaks["worker"] - base["main"] - base["worker"]
        bound = 4 * mib * MIB + path.stat().st_size
        results["sizes"][str(mib)] = {
            **peaks,
            "excess_mib": round(excess / MIB, 1),
            "times_output": round(excess / (mib * MIB), 2),
            "bound_mib": round(bound / MIB, 1),
            "within_bound": excess <= bound,
        }
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, nargs="+", default=[64, 256, 512])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/ampconfig-run-memory"))
    parser.add_argument("--source", type=Path, default=None, help="the ampconfig checkout to measure")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.folder, args.mib, args.source), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
