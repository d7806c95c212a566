"""What a precision lock costs on top of the decision it records, and how large the file is.

On a node-heavy graph (``compare_peers.build_synthetic``, 25,000 nodes by default) and on the exporter-shaped GPT-2
of the tests, this times, in this process with the garbage collector paused as the command line pauses it:

  rewrite      ``rewrite_with_options``: the decision and the rewrite a lock records
  fingerprint  the model's structural fingerprint and weights hash (``model_io/identity.py``)
  lock         ``decide_lock``: both, plus the settings, versions and per-node records
  write        ``lock_text``: the file's text; its size in bytes and lines
  read         ``load_lock``: bounded reading and validation of the file
  check        ``check_lock``: read, decide again, compare

Run by hand:

    python benchmarks/lock.py --nodes 25000 --repeat 3

It prints one JSON object: the machine, and per model each step's median seconds, the lock's size and lines.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

BENCHMARKS = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCHMARKS))
sys.path.insert(0, str(BENCHMARKS.parent))

from compare_peers import build_synthetic  # noqa: E402

from ampconfig.documents.lock_file import load_lock, lock_text  # noqa: E402
from ampconfig.engine.in_place import rewrite_with_options  # noqa: E402
from ampconfig.gc_pause import gc_paused  # noqa: E402
from ampconfig.lock.check import check_lock  # noqa: E402
from ampconfig.lock.record import decide_lock  # noqa: E402
from ampconfig.model_io.identity import model_fingerprint  # noqa: E402
from ampconfig.settings.resolve import Flags, resolve  # noqa: E402
from tests.exporter_models import gpt2  # noqa: E402


def _median(step: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def measure(model: onnx.ModelProto, folder: Path, repeat: int) -> dict[str, Any]:
    path, lock_path = folder / "model.onnx", folder / "precision.lock.json"
    onnx.save(model, path)
    settings = resolve(Flags(model=path, precision_mode="allow_mix_precision", target="cuda"))
    proto = onnx.load(path)
    with gc_paused():
        seconds: dict[str, float] = {}
        seconds["rewrite"], _ = _median(lambda: rewrite_with_options(path, settings.rewrite_options), repeat)
        seconds["fingerprint"], _ = _median(lambda: model_fingerprint(proto, path), repeat)
        seconds["lock"], decided = _median(lambda: decide_lock(settings, lock_path), repeat)
        seconds["write"], text = _median(lambda: lock_text(decided.lock), repeat)
        lock_path.write_text(text, encoding="utf-8")
        seconds["read"], _ = _median(lambda: load_lock(lock_path), repeat)
        seconds["check"], checked = _median(lambda: check_lock(lock_path), repeat)
    assert not checked.diff.drifted
    return {
        "nodes": len(decided.lock.nodes),
        "seconds": {name: round(value, 3) for name, value in seconds.items()},
        "lock_bytes": len(text.encode("utf-8")),
        "lock_lines": text.count("\n"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=25_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, Any] = {
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "models": {},
    }
    with tempfile.TemporaryDirectory() as folder:
        for name, model in (("gpt2", gpt2()), (f"synthetic_{args.nodes}", build_synthetic(args.nodes))):
            (Path(folder) / name).mkdir()
            results["models"][name] = measure(model, Path(folder) / name, args.repeat)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
