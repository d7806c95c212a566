"""What ``--data FOLDER`` costs per sample file: 200 and 2,000 files (issue 31).

The output guard compared every declared sample file with every other one before any work began (``realpath``
twice a pair): 500 files took 4.4 s, 2,000 files 47.6 s, 10,000 more than 600 s. Declared files are now looked up
by identity; the whole command should grow with the number of files, not with its square.

For each folder size this times, median of ``--repeat`` runs:

  declare  the guard declaring the folder's files as inputs (``settings.declared_files.declare_inputs``' loop), in
           this process with the garbage collector paused as the command line pauses it
  read     ``load_data``: every file read and checked against the model's inputs, in this process, the same way
  run      ``ampconfig run m.onnx --device cpu --data FOLDER`` as a user runs it: a fresh process, wall time (two
           sessions and two runs per sample on a one-Relu model, so the per-file costs show)
  per file what ``run`` took beyond a run on a folder of one file (start-up, sessions), per file

Run by hand (``PYTHONPATH`` picks the checkout measured, e.g. an older one for the numbers before a change):

    python benchmarks/data_folder.py --files 200 2000 --repeat 3

It prints the machine, a Markdown table and, per step, how many times longer the largest folder took than the
smallest (linear: the ratio of the file counts).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

sys.path.insert(0, str(Path(__file__).resolve().parent))
from large_model import ampconfig_command

from ampconfig.files.guard import OutputGuard
from ampconfig.gc_pause import gc_paused
from ampconfig.inputs.datasets import load_data


def tiny_model() -> onnx.ModelProto:
    graph = oh.make_graph(
        [oh.make_node("Relu", ["x"], ["y"], name="relu")],
        "one_relu",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def sample_folder(folder: Path, files: int) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir()
    for index in range(files):
        np.savez(folder / f"sample_{index:05d}.npz", x=rng.standard_normal((1, 4)).astype(np.float32))
    return folder


def _median(step: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _declare(folder: Path) -> None:
    with OutputGuard() as guard:
        guard.read_all("data set (--data)", [item for item in folder.iterdir() if item.suffix == ".npz"])


def _run(model: Path, folder: Path) -> None:
    command = [*ampconfig_command(), "run", str(model), "--device", "cpu", "--data", str(folder), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")


def measure(root: Path, files: int, repeat: int) -> dict[str, float]:
    model_path = root / "model.onnx"
    if not model_path.exists():
        onnx.save(tiny_model(), model_path)
    folder = sample_folder(root / f"samples_{files}", files)
    model = onnx.load(model_path)
    with gc_paused():
        declare = _median(lambda: _declare(folder), repeat)
        read = _median(lambda: load_data(folder, model), repeat)
    return {"declare": declare, "read": read, "run": _median(lambda: _run(model_path, folder), repeat)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, nargs="+", default=[200, 2000], help="folder sizes, in sample files")
    parser.add_argument("--repeat", type=int, default=3, help="runs per step and size (the median is shown)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        one = measure(Path(temporary), 1, args.repeat)["run"]
        results = {files: measure(Path(temporary), files, args.repeat) for files in args.files}
    for files, seconds in results.items():
        seconds["per file"] = (seconds["run"] - one) / files
    print(
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, load "
        f"{os.getloadavg()[0]:.1f}, median of {args.repeat}"
    )
    print(f"| files | declare s | read s | `ampconfig run --data` s | per file ms (beyond {one:.2f} s for 1 file) |")
    print("|---|---|---|---|---|")
    for files, seconds in results.items():
        print(
            f"| {files:,} | {seconds['declare']:.3f} | {seconds['read']:.3f} | {seconds['run']:.2f} | "
            f"{seconds['per file'] * 1000:.2f} |"
        )
    smallest, largest = min(results), max(results)
    if smallest != largest:
        ratios = ", ".join(
            f"{step} {results[largest][step] / results[smallest][step]:.1f}x" for step in results[smallest]
        )
        print(f"{largest:,} files against {smallest:,} ({largest / smallest:.0f}x the files): {ratios}")


if __name__ == "__main__":
    main()
