"""What the measuring commands cost as graphs grow: ``compare``, ``tune``, ``explain --compare`` and ``calibrate``
on chains of Add, Mul, Relu and Tanh (``range_run.build_chain``: a [4, 8] float32 tensor, so the node count is all
that grows), each a fresh process:

    ampconfig compare -m force_fp16 chainN.onnx --json
    ampconfig tune -m force_fp16 chainN.onnx --keep-dtype-out tuned.cfg --json
    ampconfig explain -m force_fp16 --compare chainN.onnx --json
    ampconfig calibrate chainN.onnx -o ranges.json

``force_fp16`` lowers every node (in ``allow_mix_precision`` a chain fed by a graph input stays float32 and there is
nothing to compare). Timed as wall clock and as the process's CPU time (user + system), the steadier number on a
shared machine; ``--source DIR`` times another checkout (the commit before a change, e.g. ``git archive main``),
``--also DIR ...`` others in turn with it (each repeat runs every one once).
``--models`` adds data-heavy models to ``calibrate``: ``front-end`` (``tests/underflow_models.py``, four
recordings), ``convnet`` and ``convnet-64`` (16 3x3 convolutions of 16 or 64 channels on a 128x512 image, two
images).

    python benchmarks/chain_commands.py --nodes 5000 10000 20000 --repeat 2 [--source /tmp/before]

It prints one JSON object: the machine, per command and size every time and the medians, and each size's CPU time
over the smallest size's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from range_run import build_chain, medians, timed_ampconfig

from tests.underflow_models import write_front_end

COMMANDS = {
    "compare": ["compare", "-m", "force_fp16", "--json"],
    "tune": ["tune", "-m", "force_fp16", "--keep-dtype-out", "tuned.cfg", "--json"],
    "explain --compare": ["explain", "-m", "force_fp16", "--compare", "--json"],
    "calibrate": ["calibrate", "-o", "ranges.json"],
}


def convnet(folder: Path, channels: int = 16) -> tuple[Path, Path]:
    """16 3x3 convolutions of ``channels`` channels (and Relus) on a 1x1x128x512 image, and a folder of two
    images."""
    rng = np.random.default_rng(0)
    nodes, inits, previous = [], [], "x"
    for index in range(16):
        channels_in = 1 if index == 0 else channels
        weight = (rng.standard_normal((channels, channels_in, 3, 3)) * (0.8 / channels_in) ** 0.5).astype(np.float32)
        inits.append(numpy_helper.from_array(weight, f"w{index}"))
        nodes.append(oh.make_node("Conv", [previous, f"w{index}"], [f"c{index}"], name=f"conv{index}", pads=[1] * 4))
        nodes.append(oh.make_node("Relu", [f"c{index}"], [f"r{index}"], name=f"relu{index}"))
        previous = f"r{index}"
    graph = oh.make_graph(
        nodes,
        "convnet",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 128, 512])],
        [oh.make_tensor_value_info(previous, TensorProto.FLOAT, None)],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    path = folder / f"convnet{channels}.onnx"
    onnx.save(model, path)
    data = folder / f"images{channels}"
    data.mkdir()
    for index in range(2):
        np.savez(data / f"image{index}.npz", x=rng.standard_normal((1, 1, 128, 512)).astype(np.float32))
    return path, data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[5000, 10000, 20000])
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=list(COMMANDS))
    parser.add_argument("--models", nargs="*", default=[], choices=["front-end", "convnet", "convnet-64"])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--source", type=Path, help="another checkout's root to time instead of this one")
    parser.add_argument(
        "--also", type=Path, nargs="*", default=[], help="other checkouts' roots timed in turn with it, each repeat"
    )
    args = parser.parse_args()
    seconds: dict[str, dict[str, dict[str, object]]] = {}
    with tempfile.TemporaryDirectory(prefix="ampconfig-chains-") as name:
        folder = Path(name)
        models: dict[str, tuple[Path, list[str]]] = {}
        for length in args.nodes:
            path = folder / f"chain{length}.onnx"
            onnx.save(build_chain(length), path)
            models[str(length)] = (path, [])
        if "front-end" in args.models:
            path, data = write_front_end(folder)
            models["front-end"] = (path, ["--calibration-data", str(data)])
        if "convnet" in args.models:
            path, data = convnet(folder)
            models["convnet"] = (path, ["--calibration-data", str(data)])
        if "convnet-64" in args.models:
            path, data = convnet(folder, 64)
            models["convnet-64"] = (path, ["--calibration-data", str(data)])
        for command in args.commands:
            for label, (path, extra) in models.items():
                if extra and command != "calibrate":
                    continue
                sources = [args.source, *args.also]
                runs: list[list[tuple[float, float]]] = [[] for _ in sources]
                for _ in range(args.repeat):  # taking turns, so a change in the machine's load hits every source
                    for each, source in zip(runs, sources, strict=True):
                        each.append(timed_ampconfig([*COMMANDS[command], *extra, str(path)], folder, source))
                seconds.setdefault(command, {})[label] = medians(runs[0])
                for source, each in zip(args.also, runs[1:], strict=True):
                    seconds[command][f"{label} ({source})"] = medians(each)
    smallest = str(min(args.nodes))
    result = {
        "machine": {
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "load_average": [round(load, 1) for load in os.getloadavg()],
        },
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "source": str(args.source) if args.source else "this checkout",
        "seconds": seconds,
        "cpu_over_smallest": {
            command: {
                label: round(float(times["cpu_median"]) / float(sizes[smallest]["cpu_median"]), 2)
                for label, times in sizes.items()
                if label.isdigit()
            }
            for command, sizes in seconds.items()
        },
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
