"""``ampconfig tune``'s budget (issue 42 item 3): model runs and low-precision share on the two recognizers of
``tests/recognizer_models.py``, with the search's trace, for the ampconfig the command imports.

- **spread**: conv + BiLSTM + attention whose force_fp16 error (0.0134) comes from eight convs in eight layers,
  tuned at rel-L2 5e-3 (target: at most 10 runs, at least 80% of the low nodes kept low);
- **near miss**: the same model with one conv's DC only (0.0173), tuned at 1e-2 (target: at most 4 runs, at least
  95% kept), and the runs ``run``'s FAIL predicts for it (issue 42 item 4).

Run by hand (CPU; ``--pythonpath ''`` runs the installed package instead of this checkout: the "before")::

    python benchmarks/tune_budget.py [--pythonpath DIR] [--json OUT]

Each tune is one ``python -m ampconfig tune ... --json`` with the default budget; it prints the runs, the share kept
low, the verified error, and per trial what was tried, the prediction and the measured error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.recognizer_models import near_miss_recognizer, recognizer_inputs, spread_recognizer  # noqa: E402

CASES = (("spread", spread_recognizer, 5e-3), ("near miss", near_miss_recognizer, 1e-2))


def ampconfig(args: list[str], pythonpath: str) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    done = subprocess.run(
        [sys.executable, "-m", "ampconfig", *args], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir()
    )
    return done.returncode, json.loads(done.stdout)


def measure(pythonpath: str, folder: Path) -> list[dict[str, Any]]:
    results = []
    for name, build, tolerance in CASES:
        model, npz = folder / f"{name.replace(' ', '_')}.onnx", folder / f"{name.replace(' ', '_')}.npz"
        onnx.save(build(), model)
        np.savez(npz, **recognizer_inputs())
        common = [
            str(model),
            "-m",
            "force_fp16",
            "--target",
            "cpu",
            "--inputs",
            str(npz),
            "--tolerance",
            repr(tolerance),
        ]
        _, tuned = ampconfig(["tune", *common, "--keep-dtype-out", str(folder / "keep.cfg"), "--json"], pythonpath)
        _, ran = ampconfig(["run", *common, "--warmup", "0", "--iterations", "1", "--json"], pythonpath)
        cost = tuned.get("cost") or {}
        fix = ran.get("fix") or {}
        results.append(
            {
                "model": name,
                "tolerance": tolerance,
                "all_low_error": tuned.get("all_low_error"),
                "outcome": tuned["outcome"],
                "model_runs": tuned["model_runs"],
                "seconds": tuned["seconds"],
                "low_nodes": cost.get("low_nodes"),
                "low_nodes_all_low": cost.get("low_nodes_all_low"),
                "low_fraction": cost.get("low_fraction"),
                "verified_rel_l2": tuned.get("verified_rel_l2"),
                "run_log": tuned.get("run_log", []),
                "steps": tuned.get("steps", []),
                "run_predicts_tune_runs": fix.get("predicted_tune_runs"),
            }
        )
    return results


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pythonpath", default=str(ROOT), help="PYTHONPATH of the ampconfig measured ('' = installed)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as name:
        results = measure(args.pythonpath, Path(name))
    for item in results:
        print(
            f"{item['model']}: tolerance {item['tolerance']:g}, all-low {item['all_low_error']:.4g}: "
            f"{item['outcome']} in {item['model_runs']} runs ({item['seconds']:.1f} s), "
            f"{item['low_nodes']}/{item['low_nodes_all_low']} low "
            f"({item['low_fraction']}), verified {item['verified_rel_l2']}; run's FAIL predicts "
            f"{item['run_predicts_tune_runs']}"
        )
        for step in item["steps"]:
            predicted = step.get("predicted_rel_l2")
            print(
                f"  {step['what']}: predicted {predicted if predicted is None else f'{predicted:.3g}'}, measured "
                f"{step['worst_rel_l2']:.3g} ({'pass' if step['passed'] else 'miss'}), {step['low_nodes']} low"
            )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
