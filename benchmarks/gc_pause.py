"""What pausing Python's garbage collector is worth, through the command line and through the library.

The command line pauses the collector around each command; the library leaves it alone unless the caller opts in
with ``ampconfig.gc_paused()`` (:mod:`ampconfig.gc_pause`). This times both on a node-heavy graph
(``compare_peers.build_synthetic``, 25,000 nodes by default), each measurement in a fresh process:

  library            ``rewrite_model_detailed(proto, "allow_mix_precision", target="cpu")``, the collector on
  library+gc_paused  the same call inside ``with ampconfig.gc_paused():``
  cli                ``ampconfig rewrite MODEL -o OUT -m allow_mix_precision --target cpu``: wall time of the process,
                     imports and writing the model included

Run by hand (``--source DIR`` times another checkout, e.g. the commit before the change, with the same script):

    python benchmarks/gc_pause.py --nodes 25000 --repeat 3 [--source /tmp/before]

It prints one JSON object: the machine, and per variant every time in seconds and their median.
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

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS))

from compare_peers import build_synthetic  # noqa: E402

_LIBRARY = """
import sys, time, onnx
import ampconfig
from ampconfig import rewrite_model_detailed
proto = onnx.load(sys.argv[1])
paused = sys.argv[2] == "paused"
start = time.perf_counter()
if paused:
    with ampconfig.gc_paused():
        rewrite_model_detailed(proto, "allow_mix_precision", target="cpu")
else:
    rewrite_model_detailed(proto, "allow_mix_precision", target="cpu")
print(time.perf_counter() - start)
print(ampconfig.__file__, file=sys.stderr)
"""

_LIBRARY_BEFORE = _LIBRARY.replace("with ampconfig.gc_paused():", "if True:")  # older checkouts have no gc_paused


def _env(source: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = str(source) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _library(model: Path, variant: str, source: Path | None) -> float:
    code = _LIBRARY_BEFORE if source is not None else _LIBRARY
    done = subprocess.run(
        [sys.executable, "-c", code, str(model), variant],
        capture_output=True,
        text=True,
        env=_env(source),
        cwd=model.parent,  # not the checkout: `python -c` puts the working folder first on sys.path
        check=True,
    )
    _check_source(done.stderr, source)
    return float(done.stdout.strip().splitlines()[-1])


def _cli(model: Path, folder: Path, source: Path | None) -> float:
    out = folder / "out.onnx"
    command = [sys.executable, "-m", "ampconfig", "rewrite", str(model), "-o", str(out), "-m", "allow_mix_precision"]
    start = time.perf_counter()
    subprocess.run([*command, "--target", "cpu"], capture_output=True, env=_env(source), cwd=folder, check=True)
    return time.perf_counter() - start


def _check_source(stderr: str, source: Path | None) -> None:
    where = stderr.strip().splitlines()[-1]
    if source is not None and not where.startswith(str(source)):
        raise SystemExit(f"--source {source} was not the ampconfig that ran ({where})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=25_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--source", type=Path, help="another checkout's root to time instead of this one")
    args = parser.parse_args()
    variants = ["library", "cli"] if args.source is not None else ["library", "library+gc_paused", "cli"]
    times: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="ampconfig-gc-") as name:
        folder = Path(name)
        model = folder / "synthetic.onnx"
        onnx.save(build_synthetic(args.nodes), model)
        for _ in range(args.repeat):
            for variant in variants:
                if variant == "cli":
                    times[variant].append(_cli(model, folder, args.source))
                else:
                    paused = "paused" if variant.endswith("gc_paused") else "on"
                    times[variant].append(_library(model, paused, args.source))
    result = {
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
        "cpus": os.cpu_count(),
        "nodes": args.nodes,
        "source": str(args.source) if args.source else "this checkout",
        "seconds": {
            name: {"runs": [round(t, 3) for t in ts], "median": round(statistics.median(ts), 3)}
            for name, ts in times.items()
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
