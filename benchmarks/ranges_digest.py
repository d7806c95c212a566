"""What binding a ranges file to the weights costs: the weights digest a version 2 file is checked against.

A model of ``--megabytes`` of float32 weights (square MatMuls) is written twice, as one file (opened with its large
weights left in it, as the commands open it) and with external data. For each, the median of ``--repeat`` runs of:

- ``read``: the floor, every byte of the model's files read once in 1 MiB chunks into SHA-256;
- ``structure``: the structure hash alone (what a version 1 file was checked against; no weight read);
- ``identity``: the structure hash and the weights digest in one walk (``decide.ranges_input.ranges_identity``).

Run by hand: ``python benchmarks/ranges_digest.py --megabytes 256 --repeat 3``; it prints one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from large_model import matmul_chain

from ampconfig.decide.ranges_input import ranges_identity, structure_sha256
from ampconfig.model_io.models import open_model


def _model(megabytes: int) -> onnx.ModelProto:
    side = 1024
    layers = max(1, megabytes * (1 << 20) // (side * side * 4))
    return matmul_chain(layers, side)


def _read_once(paths: list[Path]) -> None:
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)


def _median(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    result: dict[str, object] = {"date": time.strftime("%Y-%m-%d"), "megabytes": args.megabytes}
    with tempfile.TemporaryDirectory(prefix="ampconfig-digest-") as name:
        folder = Path(name)
        onnx.save(_model(args.megabytes), folder / "single.onnx")
        onnx.save(_model(args.megabytes), folder / "external.onnx", save_as_external_data=True, size_threshold=0)
        for layout in ("single", "external"):
            path = folder / f"{layout}.onnx"
            opened = open_model(path, map_weights=True)
            files = [path, *sorted(opened.external_files)]
            result[layout] = {
                "read": _median(args.repeat, lambda files=files: _read_once(files)),
                "structure": _median(args.repeat, lambda opened=opened: structure_sha256(opened.proto)),
                "identity": _median(args.repeat, lambda opened=opened, path=path: ranges_identity(opened.proto, path)),
            }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
