"""``ampconfig tune`` on real exported models, on the device, as a user runs it: the command line, a tolerance of
a fraction of the all-low error that ``ampconfig run`` measures, and the wall time, runs and answer it reports.

Run by hand where ``benchmarks/gpu_models.py`` has exported the models (``--work``, the same folder); not by the
test suite::

    python benchmarks/gpu_models.py --work /root/gw --models resnet50,bert_base --export-only
    python benchmarks/gpu_tune.py --work /root/gw --models resnet50,bert_base --json tune-gpu.json

For each model it writes the inputs the benchmark measures with (``gpu_models.make_feeds``) to an ``.npz``, runs
``ampconfig run --json`` for the all-low error, then ``ampconfig tune --json`` at ``--fraction`` of it, and
records both commands' JSON, exit codes and wall times.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_models

MODES = {"resnet50": "force_fp16", "vit_b_16": "force_fp16", "bert_base": "allow_mix_precision"}


def _ampconfig(*args: str) -> tuple[int, dict[str, Any] | None, float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ampconfig", *args], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    try:
        payload = json.loads(done.stdout) if done.stdout.strip() else None
    except json.JSONDecodeError:
        payload = None
    return done.returncode, payload, seconds, done.stderr[-2000:]


def tune_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    config = gpu_models._default_config(name, args.smoke)
    model = Path(args.work) / f"{config.key}.onnx"
    if not model.is_file():
        return {"error": f"no export at {model}: run gpu_models.py --export-only first"}
    feeds = gpu_models.make_feeds(config, args.seed)
    inputs = Path(args.work) / f"{config.key}.tune-inputs.npz"
    np.savez(inputs, **feeds)
    mode = MODES.get(name, "allow_mix_precision")
    common = [str(model), "-m", mode, "--target", "cuda", "--device", args.device, "--inputs", str(inputs)]
    code, run, run_s, run_err = _ampconfig("run", *common, "--json", "--warmup", "2", "--iterations", "5")
    row: dict[str, Any] = {"model": name, "mode": mode, "run_exit": code, "run_seconds": round(run_s, 1)}
    if run is None or "outputs" not in run:
        return {**row, "error": f"run gave no report: {run_err}"}
    all_low = max(output["rel_l2"] for output in run["outputs"] if output.get("rel_l2") is not None)
    tolerance = args.fraction * all_low
    keep = Path(args.work) / f"{config.key}.keep_dtype.cfg"
    keep.unlink(missing_ok=True)
    code, tuned, tune_s, tune_err = _ampconfig(
        "tune", *common, "--tolerance", f"{tolerance:.6g}", "--keep-dtype-out", str(keep), "--json"
    )
    row.update(
        all_low_error=all_low,
        tolerance=tolerance,
        device=run.get("device"),
        tune_exit=code,
        tune_seconds=round(tune_s, 1),
        tune=tuned,
        tune_stderr_tail=tune_err[-600:] if code else "",
    )
    return row


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="the folder gpu_models.py exported into")
    parser.add_argument("--models", default="resnet50,bert_base")
    parser.add_argument("--fraction", type=float, default=0.5, help="tolerance as a fraction of the all-low error")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu", "auto"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="the smoke exports (tiny models), for a CPU check")
    parser.add_argument("--json", dest="json_out", type=Path, required=True)
    args = parser.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        row = tune_model(name.strip(), args)
        rows.append(row)
        tune = row.get("tune") or {}
        print(
            f"{name}: all-low {row.get('all_low_error', float('nan')):.3g}, tune exit {row.get('tune_exit')} in "
            f"{row.get('tune_seconds')} s, runs {tune.get('model_runs')}, outcome {tune.get('outcome')}",
            flush=True,
        )
        args.json_out.write_text(json.dumps({"rows": rows}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
