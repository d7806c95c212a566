"""How much of a model can stay low at a tolerance, found without tune: a greedy oracle to judge tune's answer by.

Each node the mode lowers is run alone in low precision (every other one pinned to float32 with keep_dtype) to
measure its own error; then nodes are added, least sensitive first, while ``ampconfig run`` stays within the
tolerance. It costs one run per node and one per addition, far more than tune's budget, and it is greedy, not
optimal; where it keeps no more than tune does, tune's "no useful answer" reflects the model, not the search.

Run by hand (``-`` for generated inputs):

    python benchmarks/tune_oracle.py MODEL.onnx INPUTS.npz|- TOLERANCE [--mode force_fp16]

It prints each node's error alone, then how many nodes the greedy order keeps and the error it ends at.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

AMPCONFIG = [sys.executable, "-m", "ampconfig"]


def lowered_nodes(model: str, mode: str) -> list[str]:
    """The nodes the mode alone puts in low precision."""
    done = subprocess.run([*AMPCONFIG, "explain", model, "-m", mode, "--json"], capture_output=True, text=True)
    return [node["name"] for node in json.loads(done.stdout)["nodes"] if node["dtype"] in ("float16", "bfloat16")]


def worst_error(model: str, inputs: str, mode: str, pinned: list[str], folder: Path) -> float:
    """The worst output rel-L2 of ``run`` with ``pinned`` kept float32 (no range check: the pins alone decide)."""
    command = [*AMPCONFIG, "run", model, "-m", mode, "--json", "--warmup", "0", "--iterations", "1"]
    command += ["--no-range-check"] + (["--inputs", inputs] if inputs != "-" else [])
    if pinned:
        keep = folder / "keep.cfg"
        keep.write_text("".join(f"{name}\n" for name in pinned))
        command += ["--keep-dtype", str(keep)]
    report = json.loads(subprocess.run(command, capture_output=True, text=True).stdout)
    return max(output["rel_l2"] for output in report["outputs"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("inputs", help="an .npz of the model's inputs, or - to generate them")
    parser.add_argument("tolerance", type=float)
    parser.add_argument("--mode", default="force_fp16")
    args = parser.parse_args(argv)
    low = lowered_nodes(args.model, args.mode)
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)

        def error(kept_low: list[str]) -> float:
            return worst_error(args.model, args.inputs, args.mode, [n for n in low if n not in kept_low], folder)

        alone = {node: error([node]) for node in low}
        kept: list[str] = []
        for node in sorted(low, key=alone.__getitem__):
            if error([*kept, node]) <= args.tolerance:
                kept.append(node)
        final = error(kept)
    print(json.dumps({"alone": alone, "kept": kept, "kept_of": [len(kept), len(low)], "error": final}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
