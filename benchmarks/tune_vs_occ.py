"""``ampconfig tune`` against onnxconverter-common's ``auto_convert_mixed_precision`` on the same models: model runs,
wall time, and what each answer keeps in low precision at the same tolerance.

Run by hand, not by the test suite (onnxconverter-common is a benchmark-only dependency, not in pyproject)::

    pip install onnxconverter-common
    python benchmarks/tune_vs_occ.py --json tune_vs_occ.json

Models: the bundled examples and the exporter-shaped models of ``tests/exporter_models.py`` (the pixel models get
their calibration images). Per model, the tolerance is ``--fraction`` (default 0.5: half) of the all-low error of
``force_fp16`` as ``ampconfig run`` measures it (relative L2 of the worst output).

- **ampconfig**: ``tune`` with ``force_fp16``, ``--keep-dtype-out`` (node pins), target cpu, default budget (20 runs).
- **occ**: ``auto_convert_mixed_precision(model, feeds, validate_fn, keep_io_types=True)``: it converts everything
  to float16 except a node block list it grows by bisecting segments of nodes. ``validate_fn`` is the same
  tolerance: every output's relative L2 against the fp32 outputs. Its runs are its calls of
  ``get_tensor_values_using_ort`` (each builds a session and runs the model once), counted by wrapping that
  function. occ judges on ONNX Runtime's CPU provider as it is, where chains of float16 nodes without a native
  kernel compute in float32; ampconfig judges through its rounding copy (as ``run`` does), so both answers are also
  judged the way ``run`` judges ("error as run judges").

"low kept" is the share of the model's float nodes that compute in float16 in the answer (Cast nodes excluded).
"""

from __future__ import annotations

import argparse
import contextlib
import io
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

from ampconfig.diagnose.reference_runs import accuracy_reference, prepare  # noqa: E402
from ampconfig.diagnose.tune.workflow import TuneSettings, tune  # noqa: E402
from ampconfig.examples import example_path  # noqa: E402
from ampconfig.instrument.expose import known_elem_types  # noqa: E402
from ampconfig.settings.resolve import Flags, resolve  # noqa: E402
from tests.exporter_models import EXPORTER_MODELS, PIXEL_MODELS, pixel_inputs  # noqa: E402

MODE = "force_fp16"


def _models() -> dict[str, Callable[[], onnx.ModelProto]]:
    models: dict[str, Callable[[], onnx.ModelProto]] = {
        f"example:{name}": (lambda name=name: onnx.load(example_path(name)))
        for name in ("transformer_block", "small_convnet")
    }
    models.update({f"exporter:{name}": build for name, build in EXPORTER_MODELS.items()})
    return models


def _rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not np.isfinite(got64).all():
        return float("inf")
    norm = float(np.linalg.norm(want64))
    diff = float(np.linalg.norm(got64 - want64))
    return diff / norm if norm else diff


def _low_share(model: onnx.ModelProto, original: onnx.ModelProto) -> tuple[int, int]:
    """(float nodes computing in float16, float nodes) over the original model's node names, Casts excluded."""
    types = known_elem_types(model)
    original_names = {node.name for node in original.graph.node if node.op_type != "Cast"}
    float_types = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
    floats = low = 0
    for node in model.graph.node:
        if node.name not in original_names:
            continue
        kinds = [types.get(name) for name in node.output if name]
        if any(kind in float_types for kind in kinds):
            floats += 1
            low += any(kind == onnx.TensorProto.FLOAT16 for kind in kinds)
    return low, floats


def _request(path: Path, npz: Path | None, tolerance: float | None = None, keep: Path | None = None) -> Any:
    flags = Flags(
        model=path,
        precision_mode=MODE,
        target="cpu",
        device="cpu",
        inputs_npz=npz,
        tolerance=tolerance,
        keep_dtype=keep,
    )
    return resolve(flags)


def bench_model(name: str, build: Callable[[], onnx.ModelProto], folder: Path, fraction: float) -> dict[str, Any]:
    model = build()
    path = folder / f"{name.replace(':', '_')}.onnx"
    onnx.save(model, path)
    npz = None
    if name.split(":", 1)[1] in PIXEL_MODELS:
        npz = folder / f"{path.stem}.npz"
        np.savez(npz, **pixel_inputs(model))
    prepared = prepare(_request(path, npz), command="tune")
    accuracy = accuracy_reference(prepared)
    all_low = accuracy.verdict(prepared.rewrite().model).worst_rel_l2
    tolerance = all_low * fraction
    row: dict[str, Any] = {"model": name, "nodes": len(model.graph.node), "all_low_error": all_low}
    row["tolerance"] = tolerance
    row["ampconfig"] = _bench_ampconfig(path, npz, tolerance, folder)
    row["occ"] = _bench_occ(prepared.model, dict(prepared.inputs.feeds), tolerance, accuracy)
    return row


def _bench_ampconfig(path: Path, npz: Path | None, tolerance: float, folder: Path) -> dict[str, Any]:
    keep = folder / f"{path.stem}.keep_dtype.cfg"
    started = time.perf_counter()
    report = tune(prepare(_request(path, npz, tolerance), command="tune"), TuneSettings(keep_out=keep))
    seconds = time.perf_counter() - started
    result: dict[str, Any] = {"outcome": report.outcome, "runs": report.runs, "seconds": seconds}
    if report.cost is not None and report.succeeded:
        low, floats = _low_share(_final_model(path, npz, tolerance, keep), onnx.load(path))
        result.update(
            low_kept=low,
            float_nodes=floats,
            pins=len(report.candidate.pins) if report.candidate else 0,
            error_as_run_judges=report.verified_error,
        )
    return result


def _final_model(path: Path, npz: Path | None, tolerance: float, keep: Path) -> onnx.ModelProto:
    prepared = prepare(_request(path, npz, tolerance, keep), need_inputs=False)
    return prepared.rewrite().model


def _bench_occ(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tolerance: float, accuracy: Any) -> dict[str, Any]:
    from onnxconverter_common import auto_mixed_precision as occ

    calls = {"runs": 0}
    original = occ.get_tensor_values_using_ort

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls["runs"] += 1
        return original(*args, **kwargs)

    def validate(reference: list[np.ndarray], candidate: list[np.ndarray]) -> bool:
        return all(_rel_l2(got, want) <= tolerance for got, want in zip(candidate, reference, strict=True))

    occ.get_tensor_values_using_ort = counted
    started = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            converted = occ.auto_convert_mixed_precision(model, feeds, validate, keep_io_types=True)
    except Exception as exc:  # the peer's own failures are a result, reported as such
        return {"outcome": f"failed: {type(exc).__name__}: {str(exc)[:160]}", "runs": calls["runs"]}
    finally:
        occ.get_tensor_values_using_ort = original
    seconds = time.perf_counter() - started
    low, floats = _low_share(converted, model)
    try:
        judged = accuracy.verdict(converted)  # its own tolerance is run's default: compare with this one
        as_run = judged.worst_rel_l2
        passes = as_run <= tolerance
    except Exception as exc:  # a model ampconfig's judge cannot run: say so
        as_run, passes = None, f"{type(exc).__name__}: {str(exc)[:120]}"
    return {
        "outcome": "found",
        "runs": calls["runs"],
        "seconds": seconds,
        "low_kept": low,
        "float_nodes": floats,
        "error_as_run_judges": as_run,
        "passes_as_run_judges": passes,
    }


def _cell(result: dict[str, Any]) -> str:
    if result.get("outcome") != "found":
        return f"{result.get('outcome')} ({result.get('runs')} runs)"
    share = f"{result['low_kept']}/{result['float_nodes']}"
    error = result.get("error_as_run_judges")
    error_text = "-" if error is None else f"{error:.2e}"
    verdict = {True: " (meets it as run judges)", False: " (misses it as run judges)"}.get(
        result.get("passes_as_run_judges"), ""
    )
    return f"{result['runs']} runs, {result['seconds']:.1f} s, low {share}, error {error_text}{verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma-separated subset of: " + ", ".join(_models()))
    parser.add_argument("--fraction", type=float, default=0.5, help="tolerance as a fraction of the all-low error")
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    models = _models()
    chosen = args.models.split(",") if args.models else list(models)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tune-vs-occ-") as folder:
        for name in chosen:
            row = bench_model(name, models[name], Path(folder), args.fraction)
            rows.append(row)
            share = f"{args.fraction:g} x the all-low error {row['all_low_error']:.2e}"
            print(f"{name}: tolerance {row['tolerance']:.2e} ({share})")
            print(f"  ampconfig tune: {_cell(row['ampconfig'])}")
            print(f"  occ auto_convert_mixed_precision: {_cell(row['occ'])}", flush=True)
    if args.json is not None:
        meta = {"python": platform.python_version(), "machine": platform.processor() or platform.machine()}
        payload = {"meta": meta, "mode": MODE, "fraction": args.fraction, "rows": rows}
        args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
