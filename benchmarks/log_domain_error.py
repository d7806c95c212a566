"""Where the log-domain rule's threshold should lie (``ampconfig.decide.value_limits.LOG_DOMAIN_ERROR``).

Random filter banks, not the tests' models: per case a signal of a few tones (amplitudes from -40 to 0 dB of full
scale) in noise (-60 to -20 dB), scaled by 2^k so that the filters' outputs sweep from float16's normal range deep
into its subnormals, and a bank of windowed cosine and sine filters (random frequencies, one random length from 16
to 512 taps, scaled by a random gain over the length, as constant-Q kernels are). The bank runs in ONNX Runtime's
CPU provider once in float32 and once in float16 (inputs, kernels and outputs in float16, as a device computing
float16 has them); then, in float64 for both, what a constant-Q front end does with it: the magnitude of each
cosine/sine pair, a Log, and the log spectrum normalised per bin over time (what a head reads).

Per case: the rule's estimate (:func:`~ampconfig.decide.value_limits.typical_error` from the exponent histograms
``calibrate`` records: the larger of the outputs' own rounding and the error the power they make carries), their
share below float16's normal range (what the underflow rule reads), the measured mean relative error of the float16
outputs, and the relative L2 error of the normalised log spectrum. Then the cases binned by estimate, between
candidate thresholds: the threshold is the largest candidate up to which every bin's median log-spectrum error stays
within half the default run tolerance (5e-3), leaving the other half to the rest of a model (a median, not a worst
case: the estimate reads a histogram, not the elements, and is off by 3x either way in some cases).

Run from the repository root: ``python benchmarks/log_domain_error.py [--cases N]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ampconfig.decide.value_limits import ValueSpread, typical_error
from ampconfig.decide.value_ranges import value_stats

SAMPLES, RATE, HOP, KERNEL, BINS = 4096, 16000, 128, 512, 8
CANDIDATES = (1e-3, 2e-3, 3e-3, 5e-3, 1e-2, 2e-2, 5e-2)
#: Where a value's large elements might start, for the carried error's reference (the rule reads the 90th percentile).
QUANTILES = (0.5, 0.75, 0.9, 0.99)
#: Half the default run tolerance: what a log-domain reader's output may err by.
BUDGET = 5e-3


def _bank(rng: np.random.Generator) -> np.ndarray:
    length = int(2 ** rng.integers(4, 10))
    n = np.arange(length)
    frequencies = rng.uniform(50.0, 4000.0, BINS)
    phase = 2 * np.pi * frequencies[:, None] * n[None, :] / RATE
    window = np.hanning(length)
    gain = 2.0 ** rng.uniform(-3, 6)
    filters = np.concatenate([window * np.cos(phase), -window * np.sin(phase)]) * gain / length
    kernels = np.zeros((2 * BINS, 1, KERNEL))
    start = (KERNEL - length) // 2
    kernels[:, 0, start : start + length] = filters
    return kernels.astype(np.float32)


def _signal(rng: np.random.Generator, scale: float) -> np.ndarray:
    t = np.arange(SAMPLES) / RATE
    tones = sum(
        10.0 ** rng.uniform(-2, 0) * np.sin(2 * np.pi * rng.uniform(50.0, 4000.0) * t + rng.uniform(0, 6.3))
        for _ in range(int(rng.integers(1, 6)))
    )
    noise = rng.normal(0, 10.0 ** rng.uniform(-3, -1), SAMPLES)
    return ((tones + noise) * scale).astype(np.float32).reshape(1, 1, SAMPLES)


def _conv(kernels: np.ndarray, elem: int) -> ort.InferenceSession:
    dtype = np.float16 if elem == TensorProto.FLOAT16 else np.float32
    graph = oh.make_graph(
        [oh.make_node("Conv", ["x", "w"], ["y"], strides=[HOP])],
        "bank",
        [oh.make_tensor_value_info("x", elem, [1, 1, SAMPLES])],
        [oh.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(kernels.astype(dtype), "w")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 10
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _normalised_log(bank: np.ndarray) -> np.ndarray:
    pairs = bank.astype(np.float64).reshape(2, BINS, -1)
    log = np.log(np.sqrt((pairs**2).sum(axis=0)) + 1e-30)
    return log - log.mean(axis=1, keepdims=True)


def _outputs_error(spread: ValueSpread, quantile: float) -> float:
    """The bank outputs' own error as the rule estimates it with its carried error taken at ``quantile``."""
    stored = typical_error(spread, "float16") or 0.0
    return max(stored, typical_error(spread, "float16", 1, quantile=quantile) or 0.0)


def _case(rng: np.random.Generator) -> dict[str, object]:
    kernels = _bank(rng)
    signal = _signal(rng, 2.0 ** rng.uniform(-16, 0))
    exact = _conv(kernels, TensorProto.FLOAT).run(None, {"x": signal})[0]
    low = _conv(kernels, TensorProto.FLOAT16).run(None, {"x": signal.astype(np.float16)})[0].astype(np.float32)
    spread = value_stats(exact).spread
    power = value_stats((exact.astype(np.float64).reshape(2, BINS, -1) ** 2).sum(axis=0)).spread
    # what the rule reads: the bank's outputs stored in float16, and the power they make, read as a magnitude
    estimate = max(typical_error(spread, "float16") or 0.0, typical_error(power, "float16", root=2) or 0.0)
    nonzero = exact != 0
    relative = np.abs(low[nonzero] - exact[nonzero]) / np.abs(exact[nonzero])
    reference, candidate = _normalised_log(exact), _normalised_log(low)
    error = float(np.linalg.norm(candidate - reference) / np.linalg.norm(reference))
    return {
        "estimate": float(f"{estimate:.3g}"),
        "share_below_normal": round(spread.below(-14) / max(spread.nonzero, 1), 4),
        "mean_element_error": float(f"{np.minimum(relative, 1.0).mean():.3g}"),
        # the outputs' error as each reference quantile would estimate it, against the mean element error measured
        "by_quantile": {str(q): float(f"{_outputs_error(spread, q):.3g}") for q in QUANTILES},
        "log_spectrum_rel_l2": float(f"{error:.3g}") if np.isfinite(error) else float("inf"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    started = time.strftime("%Y-%m-%d %H:%M")
    cases = [_case(rng) for _ in range(args.cases)]
    bins: list[dict[str, object]] = []
    chosen: float | None = 0.0
    lower = 0.0
    for candidate in CANDIDATES:
        inside = sorted(c["log_spectrum_rel_l2"] for c in cases if lower < c["estimate"] <= candidate)
        median = float(np.median(inside)) if inside else None
        bins.append(
            {
                "estimate": f"{lower:g}-{candidate:g}",
                "cases": len(inside),
                "median_log_spectrum_rel_l2": float(f"{median:.3g}") if median is not None else None,
                "p90_log_spectrum_rel_l2": float(f"{np.percentile(inside, 90):.3g}") if inside else None,
            }
        )
        if chosen == lower and (median is None or median <= BUDGET):
            chosen = candidate
        lower = candidate
    quantiles = []
    measured = np.log10([max(float(c["mean_element_error"]), 1e-12) for c in cases])
    for q in QUANTILES:
        estimated = np.log10([max(c["by_quantile"][str(q)], 1e-12) for c in cases])
        quantiles.append(
            {
                "quantile": q,
                "log_correlation": round(float(np.corrcoef(measured, estimated)[0, 1]), 3),
                "share_under_by_3x": round(float(np.mean(estimated - measured < -np.log10(3))), 3),
            }
        )
    by_share = []
    for low_share, high_share in ((0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.01)):
        inside = [case for case in cases if low_share <= case["share_below_normal"] < high_share]
        by_share.append(
            {
                "share": f"{low_share:g}-{min(high_share, 1.0):g}",
                "cases": len(inside),
                "worst_log_spectrum_rel_l2": float(f"{max((c['log_spectrum_rel_l2'] for c in inside), default=0):.3g}"),
                "over_budget": sum(1 for c in inside if c["log_spectrum_rel_l2"] > BUDGET),
                "over_threshold": sum(1 for c in inside if chosen is not None and c["estimate"] > chosen),
            }
        )
    print(
        json.dumps(
            {
                "date": started,
                "budget": BUDGET,
                "chosen": chosen,
                "bins": bins,
                "quantiles": quantiles,
                "by_share": by_share,
                "cases": cases,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
