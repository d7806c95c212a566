"""What the worker's progress messages cost a timed run: a one-Relu model timed in the worker through the API, with
a progress listener and without, and the wall time per timed iteration beside ONNX Runtime's own median.

Before the throttle every iteration sent a message, listened to or not; now none goes without a listener and at most
about ten a second with one. The difference between the wall time per iteration and the median is what the worker
adds per iteration (the timing loop, the messages).

    python benchmarks/worker_progress.py [--iterations 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ampconfig.runner.sessions import create_session
from ampconfig.worker import client as worker
from tests.graphs import one_relu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    session = create_session(one_relu(), "cpu")
    feeds = {"x": np.array([-1.0, 2.0], np.float32)}
    received = 0

    def listen(label: str, done: int, total: int) -> None:
        nonlocal received
        received += 1

    for way, progress in (("no listener", None), ("a listener", listen)):
        walls, medians = [], []
        for _ in range(args.rounds):
            received = 0
            started = time.perf_counter()
            latency = session.time(feeds, warmup=0, iterations=args.iterations, progress=progress)
            walls.append((time.perf_counter() - started) / args.iterations * 1e6)
            medians.append(latency.median_ms * 1e3)
        print(
            f"{way}: {statistics.median(walls):.1f} us wall per iteration, ONNX Runtime's median "
            f"{statistics.median(medians):.1f} us, {received} progress messages in the last round"
        )
    worker.shutdown()


if __name__ == "__main__":
    main()
