"""What margin below the low type's limit the range rule needs: each test model decided from its calibration
samples' value ranges with several margins, then judged on held-out samples it never saw.

Run by hand, not by the test suite::

    python benchmarks/value_margin.py --json value_margin.json

For each model of ``tests/exporter_models.py`` and ``tests/value_models.py`` and each precision mode, per margin:
the nodes the range rule keeps float32 (rule range_exceeds: their values on the calibration samples pass the
margin), the nodes left in float16, the worst relative L2 error over the held-out samples with every float16
value rounded once as a GPU stores it (``run``'s CPU accuracy copy), and how many intermediate values overflowed
on them (finite in float32, inf/NaN in the rewrite, whether or not the outputs show it). A margin is too generous
when held-out values overflow that a smaller margin would have kept; too strict when it keeps nodes float32 for
no error. AutoCast's ``data_max`` is 512 absolute; the fractions of float16's 65504 are the alternative.
"""

from __future__ import annotations

import argparse
import json
import math
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
from ampconfig.decide.decisions import Rule  # noqa: E402
from ampconfig.decide.value_limits import ValueRanges  # noqa: E402
from ampconfig.decide.value_ranges import peak  # noqa: E402
from ampconfig.engine.typing_chain import TYPING  # noqa: E402
from ampconfig.instrument.rounding import low_precision_rounding_model  # noqa: E402
from ampconfig.prove.accuracy import Tolerance  # noqa: E402
from ampconfig.prove.verdict import samples_verdict  # noqa: E402
from ampconfig.rewrite.names import with_node_names  # noqa: E402
from ampconfig.runner.intermediates import run_samples_with_intermediates  # noqa: E402
from ampconfig.runner.sessions import create_session, run_once  # noqa: E402
from tests.exporter_models import cnn, gpt2, gpt2_overflow, ocr, pixel_inputs  # noqa: E402
from tests.value_models import (  # noqa: E402
    char_lstm_loop,
    detector_bn,
    gpt2_token_outliers,
    midtone_pixels,
    page_pixels,
    quantized_stacks,
    vad_if,
    vad_inputs,
)

FLOAT16_MAX = 65504.0
MARGINS = (512.0, 4096.0, 16384.0, 0.25 * FLOAT16_MAX, 0.5 * FLOAT16_MAX, 0.75 * FLOAT16_MAX, FLOAT16_MAX, math.inf)
MODES = ("force_fp16", "allow_mix_precision")
CALIBRATION, HELD_OUT = range(4), range(100, 108)

Samples = Callable[[int], dict[str, np.ndarray]]


def _tokens(vocabulary: int, length: int) -> Samples:
    def make(seed: int) -> dict[str, np.ndarray]:
        return {"input_ids": np.random.default_rng(seed).integers(0, vocabulary, (1, length), dtype=np.int64)}

    return make


def _chars(seed: int) -> dict[str, np.ndarray]:
    return {"tokens": np.random.default_rng(seed).integers(0, 100, (1, 12), dtype=np.int64)}


def _normal(name: str, shape: tuple[int, ...]) -> Samples:
    return lambda seed: {name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def models(folder: Path) -> dict[str, tuple[onnx.ModelProto, Samples, Samples]]:
    """Each model with its calibration and held-out samples (the same kind of data, other seeds, except where
    said: the detector calibrates on photo-like mid-tone images and meets document pages, white paper and black
    ink, the highest-contrast images there are)."""
    quantized = onnx.load(quantized_stacks(folder))
    tokens = _tokens(256, 16)
    vad = lambda seed: vad_inputs(16000 if seed % 2 == 0 else 8000, seed)  # noqa: E731
    cases: dict[str, tuple[onnx.ModelProto, Samples, Samples]] = {
        "exporter:cnn": (cnn(), lambda seed: pixel_inputs(cnn(), seed), lambda seed: pixel_inputs(cnn(), seed)),
        "exporter:ocr": (ocr(), lambda seed: pixel_inputs(ocr(), seed), lambda seed: pixel_inputs(ocr(), seed)),
        "exporter:gpt2": (gpt2(), tokens, tokens),
        "exporter:gpt2_overflow": (gpt2_overflow(), tokens, tokens),
        "gpt2_token_outliers": (gpt2_token_outliers(), tokens, tokens),
        "detector_bn": (
            detector_bn(),
            lambda seed: {"image": midtone_pixels(seed)},
            lambda seed: {"image": page_pixels(seed)},
        ),
        "quantized_stacks": (quantized, _normal("x", (1, 8, 16, 16)), _normal("x", (1, 8, 16, 16))),
        "vad_if": (vad_if(), vad, vad),
        "char_lstm_loop": (char_lstm_loop(), _chars, _chars),
    }
    return cases


def _outputs(model: onnx.ModelProto, samples: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    session = create_session(model, "cpu")
    return [run_once(session, feeds) for feeds in samples]


def bench_model(name: str, model: onnx.ModelProto, calibrate: Samples, hold_out: Samples) -> list[dict[str, Any]]:
    named = with_node_names(model)
    calibration = [calibrate(seed) for seed in CALIBRATION]
    held_out = [hold_out(seed) for seed in HELD_OUT]
    ranges = run_samples_with_intermediates(named, calibration)
    peaks = {key: peak(value) for key, value in ranges.values.items()}
    reference = _outputs(named, held_out)
    exposed = run_samples_with_intermediates(named, held_out)  # every held-out value in fp32
    keys = set(exposed.values) - {value.name for value in named.graph.input}
    names = [value.name for value in named.graph.output]
    rows = []
    for mode in MODES:
        for margin in MARGINS:
            measured = ValueRanges(peaks, "calibration", margin) if math.isfinite(margin) else None
            result = rewrite_model_detailed(named, mode, target="cuda", value_ranges=measured)
            kept = sum(1 for d in result.decisions if d.rule is Rule.RANGE_EXCEEDS)
            judged, _ = low_precision_rounding_model(result.model, TYPING)
            judgement = samples_verdict(reference, _outputs(judged, held_out), names, Tolerance())
            low = run_samples_with_intermediates(judged, held_out, names=list(exposed.values))
            overflows = sum(_new_nonfinite(exposed.values[key], low.values[key]) for key in low.values.keys() & keys)
            errors = [spread.worst for spread in judgement.spreads] or [o.rel_l2 for o in judgement.outputs]
            rows.append(
                {
                    "model": name,
                    "mode": mode,
                    "margin": margin if math.isfinite(margin) else None,
                    "kept_by_range": kept,
                    "low_nodes": result.low_precision_nodes,
                    "nodes": len(result.decisions),
                    "held_out_worst_rel_l2": max((e for e in errors if e is not None), default=None),
                    "held_out_passed": judgement.passed,
                    "held_out_overflows": overflows,
                    "calibration_peak": max(peaks.values(), default=0.0),
                }
            )
    return rows


def _new_nonfinite(reference: np.ndarray, low: np.ndarray) -> int:
    """Values that are finite in the fp32 run and inf/NaN in the low-precision one (an overflow, absorbed or not)."""
    ref, got = np.asarray(reference, np.float64), np.asarray(low, np.float64)
    if ref.shape != got.shape or ref.dtype.kind != "f":
        return 0
    return int(np.count_nonzero(np.isfinite(ref) & ~np.isfinite(got)))


def arguments(doc: str) -> argparse.Namespace:
    """The two options of the value benchmarks: where to write the rows, and which models to run."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--only", nargs="*", help="model names to run")
    return parser.parse_args()


def main() -> None:
    args = arguments(__doc__)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for name, (model, calibrate, hold_out) in models(Path(folder)).items():
            if args.only and name not in args.only:
                continue
            for row in bench_model(name, model, calibrate, hold_out):
                rows.append(row)
                margin = "none" if row["margin"] is None else f"{row['margin']:g}"
                error = row["held_out_worst_rel_l2"]
                print(
                    f"{name:24s} {row['mode']:20s} margin {margin:>8s}: {row['kept_by_range']:3d} kept by range, "
                    f"{row['low_nodes']:4d}/{row['nodes']} low, held-out worst rel L2 "
                    f"{'-' if error is None else format(error, '.3g')} {'pass' if row['held_out_passed'] else 'FAIL'}, "
                    f"{row['held_out_overflows']} value(s) overflowed",
                    flush=True,
                )
    if args.json is not None:
        meta = {"machine": platform.platform(), "python": platform.python_version(), "seconds": time.perf_counter()}
        meta["seconds"] = round(time.perf_counter() - started, 1)
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
