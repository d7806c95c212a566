"""What the load check costs ``ampconfig rewrite`` (issue 43): the written model loaded once in ONNX Runtime's
worker, on its target's provider at the default optimisation level, before it is reported written.

The same ``rewrite`` runs with the check (the default) and with ``--no-load-check``, each a fresh process (the
console script's entry, its worker forked; :func:`benchmarks.worker.timed`), in interleaved rounds so that a loaded
machine moves both columns alike. Two models: the bundled transformer block (36 nodes) and the BERT-base-sized stack
of ``tests/transformer_stacks.py`` (12 layers, hidden 768, FFN 3072: 343 MB of float32 weights). Two targets:
``cpu`` (the model is loaded: the check's real cost) and ``cuda`` (the default; no CUDA on this machine, so the check
asks the worker whether CUDA can be used and notes that it cannot: the cost of the skip). Reported: the median wall
time of the whole process and its CPU time (the process and its worker, user + system).

    python benchmarks/load_check.py [--rounds 3] [--skip-bert] [--json out.json]
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.worker import WITH_WORKER, timed  # noqa: E402

WAYS = {"checked": [], "--no-load-check": ["--no-load-check"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-bert", action="store_true", help="the bundled example only")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args()

    from ampconfig.examples import example_path

    models: dict[str, str] = {"bundled example (36 nodes)": str(example_path("transformer_block"))}
    results: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "rounds": args.rounds,
        "runs": {},
    }
    with tempfile.TemporaryDirectory() as folder:
        if not args.skip_bert:
            import onnx

            from tests.transformer_stacks import StackSize, bert_stack

            stack = Path(folder) / "bert_base_stack.onnx"
            size = StackSize(layers=12, hidden=768, heads=12, ffn=3072, vocab=512, max_positions=512)
            onnx.save_model(bert_stack(size), stack)
            models["BERT-base-sized stack (343 MB)"] = str(stack)
        output = str(Path(folder) / "out.onnx")
        for model, path in models.items():
            for target in ("cpu", "cuda"):
                command = ["rewrite", path, "-o", output, "-m", "allow_mix_precision", "--target", target]
                walls: dict[str, list[float]] = {way: [] for way in WAYS}
                cpus: dict[str, list[float]] = {way: [] for way in WAYS}
                for round_number in range(args.rounds):
                    order = list(WAYS)[round_number % 2 :] + list(WAYS)[: round_number % 2]
                    for way in order:
                        wall, cpu, _ = timed(WITH_WORKER, [*command, *WAYS[way]], ROOT)
                        walls[way].append(wall)
                        cpus[way].append(cpu)
                row = {
                    way: {
                        "wall_s": round(statistics.median(walls[way]), 2),
                        "cpu_s": round(statistics.median(cpus[way]), 2),
                    }
                    for way in WAYS
                }
                results["runs"][f"{model}, target {target}"] = row
                print(f"{model}, target {target}: {json.dumps(row)}", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
