"""Each mode's error and low fraction before and after the value-aware decisions, and what tune does on top, on
the test suite's own models (built with onnx.helper and ONNX Runtime's quantize_dynamic).

Run by hand, not by the test suite::

    python benchmarks/value_decisions.py --json value_decisions.json

Per model and mode (force_fp16, allow_mix_precision), decided for cuda, judged on the CPU with every float16
value rounded once as a GPU stores it (``run``'s accuracy copy), over held-out samples the decision never saw
(the worst relative L2 error of any output on any sample):

- **before**: the decisions as they were (constants beyond float16 clamped, no data): ``clamp_values=True``;
- **static**: ``rewrite`` without data: constants beyond float16 keep their nodes float32 (value_out_of_range);
- **data**: ``run``'s decision: the float32 model's value ranges on the calibration samples too (range_exceeds,
  the default margin of half float16's range);
- **tune**: ``tune -m force_fp16`` with the calibration samples as ``--data``, at half the error the data decision
  has on them (tune's all-low), node pins: model runs, low nodes kept against the all-low count, the verified
  error.

"low" is the share of float nodes computing in float16.
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ampconfig.api import rewrite_model_detailed  # noqa: E402
from ampconfig.decide.value_limits import ValueRanges  # noqa: E402
from ampconfig.decide.value_ranges import peak  # noqa: E402
from ampconfig.diagnose.tune.workflow import TuneSettings, tune  # noqa: E402
from ampconfig.engine.typing_chain import TYPING  # noqa: E402
from ampconfig.instrument.rounding import low_precision_rounding_model  # noqa: E402
from ampconfig.prove.accuracy import Tolerance  # noqa: E402
from ampconfig.prove.request import prepare  # noqa: E402
from ampconfig.prove.verdict import samples_verdict  # noqa: E402
from ampconfig.rewrite.names import with_node_names  # noqa: E402
from ampconfig.rewrite.results import RewriteResult  # noqa: E402
from ampconfig.runner.intermediates import run_samples_with_intermediates  # noqa: E402
from ampconfig.runner.sessions import create_session, run_once  # noqa: E402
from ampconfig.settings.resolve import Flags, resolve  # noqa: E402
from benchmarks.value_margin import arguments, models  # noqa: E402

MODES = ("force_fp16", "allow_mix_precision")
CALIBRATION, HELD_OUT = range(4), range(100, 108)
Samples = Callable[[int], dict[str, np.ndarray]]


def _outputs(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    session = create_session(model, "cpu")
    return [run_once(session, feeds) for feeds in samples]


def _judged(
    result: RewriteResult,
    reference: list[dict[str, np.ndarray]],
    held_out: list[dict[str, np.ndarray]],
    names: list[str],
) -> dict[str, Any]:
    judged, _ = low_precision_rounding_model(result.model, TYPING)
    judgement = samples_verdict(reference, _outputs(judged, held_out), names, Tolerance())
    floats = sum(1 for d in result.decisions if d.original_dtype is not None)
    return {
        "worst_rel_l2": judgement.worst_rel_l2,
        "passed": judgement.passed,
        "low_nodes": result.low_precision_nodes,
        "float_nodes": floats,
        "low_fraction": result.low_precision_nodes / floats if floats else 0.0,
        "clamped": result.stats.values_clamped,
        "by_rule": {
            rule: sum(1 for d in result.decisions if d.rule.value == rule)
            for rule in ("value_out_of_range", "range_exceeds")
        },
    }


def bench_model(
    name: str, model: onnx.ModelProto, calibrate: Samples, hold_out: Samples, folder: Path
) -> list[dict[str, Any]]:
    named = with_node_names(model)
    calibration = [calibrate(seed) for seed in CALIBRATION]
    held_out = [hold_out(seed) for seed in HELD_OUT]
    run = run_samples_with_intermediates(named, calibration)
    ranges = ValueRanges({key: peak(value) for key, value in run.values.items()}, "calibration")
    reference = _outputs(named, held_out)
    names = [value.name for value in named.graph.output]
    rows = []
    for mode in MODES:
        row: dict[str, Any] = {"model": name, "mode": mode}
        row["before"] = _judged(rewrite_model_detailed(named, mode, clamp_values=True), reference, held_out, names)
        row["static"] = _judged(rewrite_model_detailed(named, mode), reference, held_out, names)
        row["data"] = _judged(rewrite_model_detailed(named, mode, value_ranges=ranges), reference, held_out, names)
        if mode == "force_fp16":  # tune's tolerance: half the error the data decision has on tune's own data
            decided = rewrite_model_detailed(named, mode, value_ranges=ranges)
            own = _judged(decided, _outputs(named, calibration), calibration, names)["worst_rel_l2"]
            row["tune"] = _tune(name, named, calibration, own / 2, folder)
        rows.append(row)
    return rows


def _tune(
    name: str, model: onnx.ModelProto, calibration: list[dict[str, np.ndarray]], tolerance: float, folder: Path
) -> dict[str, Any]:
    path = folder / f"{name.replace(':', '_')}.onnx"
    onnx.save(model, path)
    data = folder / f"{path.stem}.data.npz"
    np.savez(data, **{key: np.stack([sample[key] for sample in calibration]) for key in calibration[0]})
    request = resolve(
        Flags(model=path, precision_mode="force_fp16", device="cpu", data=data, tolerance=max(tolerance, 1e-6))
    )
    started = time.perf_counter()
    report = tune(prepare(request, command="tune"), TuneSettings(keep_out=folder / f"{path.stem}.keep.cfg"))
    cost = report.cost
    return {
        "tolerance": tolerance,
        "outcome": report.outcome,
        "runs": report.runs,
        "seconds": round(time.perf_counter() - started, 1),
        "low_nodes": cost.low_nodes if cost else None,
        "low_nodes_all_low": cost.low_nodes_all_low if cost else None,
        "low_fraction": round(cost.low_fraction, 4) if cost else None,
        "verified_rel_l2": report.verified_error,
        "reason": report.reason,
    }


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def main() -> None:
    args = arguments(__doc__)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, (model, calibrate, hold_out) in models(folder).items():
            if args.only and name not in args.only:
                continue
            for row in bench_model(name, model, calibrate, hold_out, folder):
                rows.append(row)
                parts = [
                    f"{stage} {_fmt(row[stage]['worst_rel_l2'])} ({row[stage]['low_fraction']:.0%} low)"
                    for stage in ("before", "static", "data")
                ]
                line = f"{name:24s} {row['mode']:20s} " + "  ".join(parts)
                if "tune" in row:
                    t = row["tune"]
                    line += f"  tune {t['outcome']} {t['runs']} runs {t['low_nodes']}/{t['low_nodes_all_low']}"
                print(line, flush=True)
    if args.json is not None:
        meta = {
            "machine": platform.platform(),
            "python": platform.python_version(),
            "seconds": round(time.perf_counter() - started, 1),
            "date": time.strftime("%Y-%m-%d"),
        }
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
