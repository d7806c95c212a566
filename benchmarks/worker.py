"""What ONNX Runtime's worker process costs ``ampconfig run``, with the sessions it built.

Every session of a user's model lives in a worker process (``ampconfig/worker/client.py``); the console script forks
it at start-up. Here the same command line runs three ways, each a fresh ``python -c`` process started outside any
checkout, in interleaved rounds (so a loaded machine moves every column alike):

- **worker**: the command line as the ``ampconfig`` script runs it (``ampconfig.entry.main``: the worker forked);
- **in process**: the same, with the worker replaced by an in-process stand-in that answers each request by calling
  the worker's own code directly (no second process, no message crosses a pipe): what the guard costs is the
  difference;
- **before** (``--before TREE``): another checkout's command line (``ampconfig.cli.main`` there), e.g. the main
  before the worker, whose guard started a child interpreter that built each model's session once more.

Two models: the bundled transformer block (``ampconfig run`` with no model; 36 nodes) and a BERT-base-sized stack
of ``tests/transformer_stacks.py`` (12 layers, hidden 768, FFN 3072: 343 MB of float32 weights), both
``-m allow_mix_precision`` with the default range check. The wall time of the whole process is reported (median
of the rounds), the CPU time of the process and its worker (user + system: what a loaded machine cannot hide), and
the sessions the worker built (its own count, from ``-v``'s log line).

    python benchmarks/worker.py [--rounds 5] [--before /tmp/before] [--skip-bert] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The command line with the worker: what the console script does.
WITH_WORKER = "import sys; sys.argv[0] = 'ampconfig'; from ampconfig.entry import main; main()"
#: The command line with every request answered in this process by the worker's own code.
IN_PROCESS = """
import sys
sys.argv[0] = "ampconfig"
from ampconfig.worker import client as worker
from ampconfig.worker import server as ort_worker

class Answers:
    how, pid, alive = "in-process", 0, True
    def __init__(self):
        self.owner = __import__("os").getpid()
        self.progress = None
        self.worker = ort_worker.Worker(self)
    def send(self, message, timeout=None):  # the worker's progress messages
        if self.progress is not None:
            self.progress(*message[1:])
    def release(self, number):
        self.worker.sessions.pop(number, None)
    def ask(self, verb, arguments, phase, what, progress=None):
        self.progress = progress
        self.worker.listening = progress is not None
        try:
            return self.worker.answer(verb, arguments)
        except Exception as exc:
            raise worker.WorkerRefused(str(exc)) from None
    def end(self, kill=False):
        pass

worker._current = Answers()
from ampconfig.cli import main
main()
"""
#: Another checkout's command line, as its console script ran it.
BEFORE = "import sys; sys.argv[0] = 'ampconfig'; from ampconfig.cli import main; main()"

BUILT = re.compile(r"ONNX Runtime worker \(([\w-]+), pid \d+\): (\d+) session\(s\) built")


def timed(code: str, args: list[str], path: Path) -> tuple[float, float, int | None]:
    """Wall seconds and CPU seconds (user + system, the process and its worker) of one fresh process running
    ``code`` with ``args``; the sessions the worker said it built."""
    environment = {**os.environ, "PYTHONPATH": str(path)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tempfile.gettempdir(),
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the worker is reaped by its parent: counted here too
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{args} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    found = BUILT.search(done.stderr)
    return wall, cpu, int(found.group(2)) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another checkout's root, measured in the same rounds")
    parser.add_argument("--skip-bert", action="store_true", help="the bundled example only")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    models: dict[str, list[str]] = {"bundled example (36 nodes)": []}
    with tempfile.TemporaryDirectory() as folder:
        if not args.skip_bert:
            from tests.transformer_stacks import StackSize, bert_stack

            stack = Path(folder) / "bert_base_stack.onnx"
            import onnx

            onnx.save_model(
                bert_stack(StackSize(layers=12, hidden=768, heads=12, ffn=3072, vocab=512, max_positions=512)), stack
            )
            models["BERT-base-sized stack (343 MB)"] = [str(stack), "--shape", "input_ids=1,128"]
        ways = {"worker": (WITH_WORKER, ROOT), "in process": (IN_PROCESS, ROOT)}
        if args.before is not None:
            ways["before"] = (BEFORE, args.before.resolve())
        results: dict[str, Any] = {
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d"),
            "rounds": args.rounds,
            "models": {},
        }
        for model, model_args in models.items():
            command = ["-v", "run", *model_args, "-m", "allow_mix_precision", "--warmup", "3", "--iterations", "20"]
            walls: dict[str, list[float]] = {way: [] for way in ways}
            cpus: dict[str, list[float]] = {way: [] for way in ways}
            sessions: dict[str, int | None] = {}
            for round_number in range(args.rounds):
                order = list(ways)[round_number % len(ways) :] + list(ways)[: round_number % len(ways)]
                for way in order:
                    code, path = ways[way]
                    wall, cpu, built = timed(code, command, path)
                    walls[way].append(wall)
                    cpus[way].append(cpu)
                    sessions[way] = built if built is not None else sessions.get(way)
            medians = {way: statistics.median(values) for way, values in walls.items()}
            row = {
                "wall_s": {way: round(medians[way], 3) for way in ways},
                "cpu_s": {way: round(statistics.median(values), 3) for way, values in cpus.items()},
                "all_s": {way: [round(value, 3) for value in values] for way, values in walls.items()},
                "sessions_built": sessions,
                "worker_minus_in_process_s": round(medians["worker"] - medians["in process"], 3),
                "worker_over_in_process": round(medians["worker"] / medians["in process"], 3),
            }
            if "before" in medians:
                row["before_minus_worker_s"] = round(medians["before"] - medians["worker"], 3)
            results["models"][model] = row
            print(f"{model}: " + json.dumps(row))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
