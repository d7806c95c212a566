"""ampconfig against the peers on the two shapes issue 30 measures, this checkout and another (``--before``) in
the same interleaved rounds, so a loaded machine moves every column alike:

- **in process, weight-heavy**: ``ampconfig.rewrite_model`` (ModelProto in, ModelProto out) against ONNX Runtime's
  ``onnxruntime.transformers.float16.convert_float_to_float16`` (``keep_io_types=True``, a fresh copy of the
  model each call, made outside the timer) on a BERT-base-sized stack of ``tests/transformer_stacks.py`` (12
  layers, hidden 768, FFN 3072, vocabulary 512: 343 MB of float32 weights);
- **file to file, node-heavy**: ``ampconfig rewrite M -o OUT --precision-mode MODE`` against onnxconverter-common
  (``python -c``: load, convert with ``keep_io_types=True``, save) on ``compare_peers.build_synthetic(25000)``.

Each row is a fresh process. Every round runs each tool once, the order rotated each round; the medians of the
wall time and of the CPU time (user + system, every thread) are reported. Ratios are peer / ampconfig (> 1:
ampconfig faster) for the in-process part and ampconfig / peer for the node-heavy part (the issue's targets are
there <= 1.5x in force_fp16 and <= 2x in allow_mix_precision). Run by hand::

    python benchmarks/weight_reads.py --rounds 5 --before /tmp/before --json weight_reads.json

where ``/tmp/before`` is another checkout's root (``git archive COMMIT | tar -x -C /tmp/before``). The peers
must be importable by this interpreter (onnxconverter-common is not an ampconfig dependency).
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
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: One conversion in process, timed after an untimed warm-up (imports, op info, ONNX Runtime's cast session).
IN_PROCESS = """
import sys, time, onnx
path, tool = sys.argv[1], sys.argv[2]
model = onnx.load(path)
if tool.startswith("ampconfig:"):
    from ampconfig import rewrite_model
    convert = lambda m: rewrite_model(m, tool.split(":", 1)[1], target="cpu")
else:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    convert = lambda m: convert_float_to_float16(m, keep_io_types=True)
def fresh():
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy
convert(fresh())
copy = fresh()
wall, cpu = time.perf_counter(), time.process_time()
convert(copy)
print(time.perf_counter() - wall, time.process_time() - cpu)
if tool.startswith("ampconfig:"):
    import ampconfig
    print(ampconfig.__file__)
"""

PEER_FILE = """
import sys, onnx
from onnxconverter_common import float16
onnx.save(float16.convert_float_to_float16(onnx.load(sys.argv[1]), keep_io_types=True), sys.argv[2])
"""


#: Where every timed process starts: ``python -c`` and ``-m`` put the working folder first on ``sys.path``, so
#: started inside a checkout the "before" column would import that checkout's ampconfig.
NEUTRAL = Path("/")


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's install: bytecode cached
    return env


def _in_process(model: Path, tool: str, tree: Path) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", IN_PROCESS, str(model), tool],
        capture_output=True,
        text=True,
        env=_env(tree),
        cwd=NEUTRAL,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tool} ({tree}) failed: {done.stderr.strip()[-500:]}")
    wall, cpu, *imported = done.stdout.split()
    if imported and not Path(imported[0]).resolve().is_relative_to(tree):
        raise SystemExit(f"{tool} imported {imported[0]}, not the checkout at {tree}")
    return float(wall), float(cpu)


def _file_to_file(command: list[str], tree: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=_env(tree), cwd=NEUTRAL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command} failed: {done.stderr.strip()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def build(folder: Path) -> tuple[Path, Path]:
    import onnx

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compare_peers import build_synthetic

    from tests.transformer_stacks import StackSize, bert_stack

    folder.mkdir(parents=True, exist_ok=True)
    stack, synthetic = folder / "bert_base_stack.onnx", folder / "synthetic-25k.onnx"
    if not stack.is_file():
        model = bert_stack(StackSize(layers=12, hidden=768, heads=12, ffn=3072, vocab=512, max_positions=512))
        model.ir_version = 10
        onnx.save(model, str(stack))
    if not synthetic.is_file():
        onnx.save(build_synthetic(25000), str(synthetic))
    return stack, synthetic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another checkout's root, timed in the same rounds")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/ampconfig-weight-reads"))
    parser.add_argument("--parts", default="in-process,file", help="in-process, file, or both")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    stack, synthetic = build(args.folder)
    trees = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    jobs: dict[str, Any] = {}
    if "in-process" in args.parts:
        for label, tree in trees.items():
            for mode in ("force_fp16", "allow_mix_precision"):
                tool = f"ampconfig:{mode}"
                jobs[f"in-process {tool} {label}"] = lambda tool=tool, tree=tree: _in_process(stack, tool, tree)
        jobs["in-process ort-float16"] = lambda: _in_process(stack, "ort-float16", ROOT)
    if "file" in args.parts:
        out = args.folder / "out.onnx"
        for label, tree in trees.items():
            for mode in ("force_fp16", "allow_mix_precision"):
                command = [sys.executable, "-m", "ampconfig", "rewrite", str(synthetic), "-o", str(out), "-m", mode]
                jobs[f"file ampconfig:{mode} {label}"] = lambda c=command, t=tree: _file_to_file(c, t)
        peer = [sys.executable, "-c", PEER_FILE, str(synthetic), str(out)]
        jobs["file occ"] = lambda: _file_to_file(peer, ROOT)
    for job in jobs.values():  # warm-up: page cache, bytecode caches
        job()
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in jobs}
    names = list(jobs)
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            runs[name].append(jobs[name]())
        print(f"round {round_ + 1}/{args.rounds}, load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    medians = {
        name: {"wall_s": statistics.median(w for w, _ in got), "cpu_s": statistics.median(c for _, c in got)}
        for name, got in runs.items()
    }
    for name, row in medians.items():
        print(f"{name:52s} wall {row['wall_s']:.3f} s  cpu {row['cpu_s']:.3f} s")
    ratios = {}
    for name, row in medians.items():
        if name.startswith("in-process ampconfig") and "in-process ort-float16" in medians:
            peer = medians["in-process ort-float16"]
            ratios[f"ORT float16 / {name}"] = {k: peer[k] / row[k] for k in row}
        if name.startswith("file ampconfig") and "file occ" in medians:
            ratios[f"{name} / occ"] = {k: row[k] / medians["file occ"][k] for k in row}
    for name, ratio in ratios.items():
        print(f"{name:60s} wall {ratio['wall_s']:.2f}x  cpu {ratio['cpu_s']:.2f}x")
    if args.json:
        machine = {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
        args.json.write_text(
            json.dumps({"machine": machine, "runs": runs, "medians": medians, "ratios": ratios}, indent=2)
        )


if __name__ == "__main__":
    main()
