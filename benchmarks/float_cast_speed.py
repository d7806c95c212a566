"""How long ``float32_to_float16`` takes on a model's worth of weights (340 MB of float32 by default).

    python benchmarks/float_cast_speed.py [--elements 85000000] [--repeat 5] [--tensor-elements 2359296]

Converts random normal float32 weights, split into tensors of ``--tensor-elements`` (BERT-base's largest, 768 x
3072), ``--repeat`` times after one warm-up conversion (which starts the worker and builds its Cast session), and
prints one JSON object: the best and median seconds for the whole set, and numpy's own ``astype`` once for scale.
Run it with PYTHONPATH at another checkout for a before/after on one machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from ampconfig.rewrite.float_cast import float32_to_float16


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=85_000_000)
    parser.add_argument("--tensor-elements", type=int, default=768 * 3072)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    weights = np.random.default_rng(0).standard_normal(args.elements, dtype=np.float32)
    tensors = [weights[start : start + args.tensor_elements] for start in range(0, weights.size, args.tensor_elements)]
    float32_to_float16(tensors[0])  # the worker and its session, or onnxruntime's import, out of the timing
    seconds = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        for tensor in tensors:
            float32_to_float16(tensor)
        seconds.append(time.perf_counter() - started)
    started = time.perf_counter()
    for tensor in tensors:
        tensor.astype(np.float16)
    numpy_s = time.perf_counter() - started
    print(
        json.dumps(
            {
                "elements": args.elements,
                "tensors": len(tensors),
                "best_s": round(min(seconds), 3),
                "median_s": round(statistics.median(seconds), 3),
                "numpy_astype_s": round(numpy_s, 3),
                "onnxruntime_in_this_process": "onnxruntime" in sys.modules,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
