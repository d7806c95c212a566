"""What run's range check costs as graphs grow: ``ampconfig run`` with and without ``--no-range-check``.

The range check runs the fp32 model once per calibration sample with each value's range computed in the session
(:func:`ampconfig.runner.intermediates.run_value_stats`). The models are chains of Add, Mul, Relu and Tanh on a
[4, 8] float32 tensor (``--nodes``, default 1,250, 2,500 and 5,000 nodes), so the graph's size is all that grows.
Each measurement is a fresh process:

    ampconfig run -m allow_mix_precision --warmup 1 --iterations 3 [--no-range-check] MODEL

timed as wall clock and as the process's CPU time (user + system): on a shared machine the CPU time is the steadier
number. Run by hand (``--source DIR`` times another checkout, e.g. the commit before a change):

    python benchmarks/range_run.py --nodes 1250 2500 5000 --repeat 3 [--source /tmp/before]

It prints one JSON object: the machine, per size every time and the medians, the range check's cost as a ratio
(with / without), and each size's time over the previous size's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

DEFAULT_NODES = (1250, 2500, 5000)
CHAIN_OPS = ("Add", "Mul", "Relu", "Tanh")


def build_chain(length: int, ops: Sequence[str] = CHAIN_OPS) -> onnx.ModelProto:
    """x [4, 8] -> ``length`` nodes of ``ops`` in turn (Add, Mul, Relu and Tanh; Add, Mul and Sub by a constant 0.5)
    -> the last value."""
    nodes, previous = [], "x"
    for index in range(length):
        op = ops[index % len(ops)]
        inputs = [previous, "half"] if op in ("Add", "Mul", "Sub") else [previous]
        nodes.append(oh.make_node(op, inputs, [f"v{index}"], name=f"n{index}"))
        previous = f"v{index}"
    graph = oh.make_graph(
        nodes,
        f"chain{length}",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [oh.make_tensor_value_info(previous, TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(np.full((4, 8), 0.5, np.float32), "half")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10  # ORT 1.31 reads IR <= 13
    return model


def _env(source: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def timed_ampconfig(args: list[str], folder: Path, source: Path | None) -> tuple[float, float]:
    """Wall and CPU seconds of one ``ampconfig ARGS`` in a fresh process started in ``folder`` (``source``: another
    checkout's root first on its import path); a verdict (exit 0 or 1) counts, anything else stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ampconfig", *args], capture_output=True, text=True,
                          env=_env(source), cwd=folder, check=False)  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"ampconfig {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _time_run(model: Path, range_check: bool, source: Path | None) -> tuple[float, float]:
    """Wall and CPU seconds of one ``ampconfig run`` of ``model`` in a fresh process."""
    args = ["run", "-m", "allow_mix_precision", "--warmup", "1", "--iterations", "3", "--json", str(model)]
    if not range_check:
        args.append("--no-range-check")
    return timed_ampconfig(args, model.parent, source)


def medians(runs: list[tuple[float, float]]) -> dict[str, object]:
    walls, cpus = [wall for wall, _ in runs], [cpu for _, cpu in runs]
    return {
        "wall": [round(t, 2) for t in walls],
        "cpu": [round(t, 2) for t in cpus],
        "wall_median": round(statistics.median(walls), 2),
        "cpu_median": round(statistics.median(cpus), 2),
    }


def machine() -> dict[str, object]:
    """The machine a benchmark ran on, with its load when it ended (the machine may be shared)."""
    return {
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": [round(load, 1) for load in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=list(DEFAULT_NODES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--source", type=Path, help="another checkout's root to time instead of this one")
    args = parser.parse_args()
    sizes: dict[int, dict[str, dict[str, object]]] = {}
    with tempfile.TemporaryDirectory(prefix="ampconfig-range-") as name:
        folder = Path(name)
        for length in args.nodes:
            model = folder / f"chain{length}.onnx"
            onnx.save(build_chain(length), model)
            runs: dict[str, list[tuple[float, float]]] = {"range_check": [], "no_range_check": []}
            for _ in range(args.repeat):
                runs["range_check"].append(_time_run(model, True, args.source))
                runs["no_range_check"].append(_time_run(model, False, args.source))
            sizes[length] = {variant: medians(times) for variant, times in runs.items()}
    result: dict[str, object] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "source": str(args.source) if args.source else "this checkout",
        "seconds": {str(length): times for length, times in sizes.items()},
        "range_check_over_none": {
            str(length): {
                clock: round(
                    float(times["range_check"][f"{clock}_median"]) / float(times["no_range_check"][f"{clock}_median"]),
                    2,
                )
                for clock in ("wall", "cpu")
            }
            for length, times in sizes.items()
        },
        "over_previous_size": {
            f"{larger}/{smaller}": {
                variant: round(
                    float(sizes[larger][variant]["cpu_median"]) / float(sizes[smaller][variant]["cpu_median"]), 2
                )
                for variant in ("range_check", "no_range_check")
            }
            for smaller, larger in zip(args.nodes, args.nodes[1:], strict=False)
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
