"""Where the underflow rule's share should lie (``ampconfig.decide.value_limits.UNDERFLOW_SHARE``).

Two measurements, printed as one JSON object:

1. **values**: magnitudes spread log-normally over many octaves (as spectra and activations are), one million per
   median, stored once in float16. Per median: the share of non-zero magnitudes below float16's smallest normal
   value (what the rule reads), the share it rounds to zero, the relative L2 error of the stored value, and the
   relative error of its median element. The relative L2 error is carried by the largest elements, so it stays
   small long after most elements have lost their precision; the median element's error is float16's ordinary
   rounding (about 2^-12) only while the share stays at or below one half.
2. **the front end** (``tests/underflow_models.py``): the recordings scaled by 2^k, so the filter bank's share
   sweeps, decided in ``allow_mix_precision`` with the share set to each candidate, and judged as ``run`` judges
   (every float16 value rounded once, ``low_precision_rounding_model``; the worst relative L2 error of the logits
   over the recordings) with the nodes each candidate keeps float32.

Run from the repository root: ``python benchmarks/underflow_share.py``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ampconfig.api import rewrite_model_detailed
from ampconfig.decide import value_limits
from ampconfig.decide.value_limits import ValueRanges
from ampconfig.engine.typing_chain import TYPING
from ampconfig.instrument.rounding import low_precision_rounding_model
from ampconfig.runner.intermediates import run_value_stats
from tests.underflow_models import cqt_front_end, waveform

CANDIDATES = (0.05, 0.25, 0.5, 0.75, 0.95)
SCALES = tuple(2.0**k for k in range(4, -7, -2))


def _values() -> list[dict[str, float]]:
    rng = np.random.default_rng(0)
    rows = []
    for median_exponent in range(-8, -31, -2):
        magnitudes = 2.0 ** (median_exponent + 3.0 * rng.standard_normal(1_000_000))
        values = (magnitudes * rng.choice([-1.0, 1.0], magnitudes.size)).astype(np.float32)
        stored = values.astype(np.float16).astype(np.float32)
        relative = np.abs(stored - values) / np.abs(values)
        rows.append(
            {
                "median": float(2.0**median_exponent),
                "share_below_normal": round(float(np.mean(np.abs(values) < 2.0**-14)), 4),
                "share_to_zero": round(float(np.mean(stored == 0)), 4),
                "rel_l2": float(f"{np.linalg.norm(stored - values) / np.linalg.norm(values):.3g}"),
                "median_element_error": float(f"{np.median(relative):.3g}"),
            }
        )
    return rows


def _rel_l2(reference: np.ndarray, candidate: np.ndarray) -> float:
    if not np.isfinite(candidate).all():
        return float("inf")
    return float(np.linalg.norm(candidate - reference) / np.linalg.norm(reference))


def _front_end() -> list[dict[str, object]]:
    model = cqt_front_end()
    fp32 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rows = []
    for scale in SCALES:
        samples = [{"audio": (waveform(seed) * np.float32(scale)).astype(np.float32)} for seed in range(4)]
        stats = run_value_stats(model, samples)
        spreads = {key: value.spread for key, value in stats.items()}
        ranges = ValueRanges({key: value.peak for key, value in stats.items()}, "recordings", spreads=spreads)
        share = ranges.underflow("re", "float16")
        row: dict[str, object] = {"scale": scale, "re_share_below_normal": round(share.share, 4) if share else 0.0}
        for candidate in CANDIDATES:
            value_limits.UNDERFLOW_SHARE = candidate
            result = rewrite_model_detailed(model, "allow_mix_precision", target="cpu", value_ranges=ranges)
            rounding, _ = low_precision_rounding_model(result.model, TYPING)
            low = ort.InferenceSession(rounding.SerializeToString(), providers=["CPUExecutionProvider"])
            error = max(_rel_l2(fp32.run(None, s)[0], low.run(None, s)[0]) for s in samples)
            kept = sorted(d.name for d in result.decisions if d.rule.value == "range_underflows")
            row[f"share {candidate}"] = {"rel_l2": float(f"{error:.3g}"), "kept": kept}
        rows.append(row)
    return rows


def main() -> None:
    started = time.strftime("%Y-%m-%d %H:%M")
    print(json.dumps({"date": started, "values": _values(), "front_end": _front_end()}, indent=1))


if __name__ == "__main__":
    main()
