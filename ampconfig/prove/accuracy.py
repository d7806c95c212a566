"""Accuracy of a rewritten model's outputs against the fp32 reference: pure numpy, computed in float64 a chunk at a
time (:data:`CHUNK_ELEMENTS`: no float64 copy of a whole output).

Per output: relative L2 error ``||rewritten - reference|| / ||reference||``, max absolute error, cosine
similarity, the number of non-finite values in the rewritten output, and for logits-like float outputs (rank 2
or 3) the fraction of rows whose arg-max over the last axis agrees.

Edge cases, decided here once:

- Positions where both outputs hold the same non-finite value (``-inf`` masks, NaN in both) are left out of
  the metrics; any other non-finite value makes ``rel_l2`` and ``max_abs`` infinite. An inf/NaN in the
  rewritten output where the reference is finite is counted (``new_nonfinite``) and always fails, whatever the
  tolerance.
- An all-zero reference has no relative error: ``rel_l2`` is then the absolute L2 norm of the difference, and
  the metrics carry a note saying so.
- Non-float outputs (integers, bools) also report the exact-match fraction and the mismatch count; their
  numeric metrics are computed on the values cast to float64. String outputs have only the exact match.
- A sequence of maps (ZipMap's class probabilities, one map per row, as every scikit-learn classifier export
  ends) is compared as rows of the maps' values in key order; a sequence of equal-shaped tensors as their stack.
- A different shape (a detector whose box count changes) is an accuracy failure, never a silently broadcast
  comparison: the metrics carry both shapes (``rewritten_shape``), ``rel_l2`` and ``max_abs`` are infinite and
  the output fails whatever the tolerance. A missing output is an error (:class:`OutputMismatchError`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ampconfig.documents.tolerance import Tolerance

__all__ = [
    "OutputMetrics",
    "OutputMismatchError",
    "OutputSpread",
    "Tolerance",
    "compare_output",
    "compare_outputs",
    "output_failures",
    "tolerance_failures",
]


class OutputMismatchError(ValueError):
    """The two outputs cannot be compared (an output is missing from one side)."""


@dataclass(frozen=True)
class OutputMetrics:
    name: str
    dtype: str
    shape: tuple[int, ...]
    rel_l2: float | None
    max_abs: float | None
    cosine: float | None
    nonfinite: int
    argmax_agreement: float | None = None
    new_nonfinite: int = 0  # inf/NaN in the rewritten output where the reference is finite
    exact_match: float | None = None  # non-float outputs: fraction of equal elements
    mismatches: int | None = None  # non-float outputs: number of differing elements
    notes: tuple[str, ...] = field(default_factory=tuple)
    rewritten_shape: tuple[int, ...] | None = None  # set only when it differs from ``shape`` (the reference's)

    def to_dict(self) -> dict[str, object]:
        """JSON-safe: infinities and NaN become ``null`` (``nonfinite`` and ``passed`` still tell)."""
        data: dict[str, object] = {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "rel_l2": _json_float(self.rel_l2),
            "max_abs": _json_float(self.max_abs),
            "cosine": _json_float(self.cosine),
            "nonfinite": self.nonfinite,
            "new_nonfinite": self.new_nonfinite,
        }
        if self.argmax_agreement is not None:
            data["argmax_agreement"] = _json_float(self.argmax_agreement)
        if self.exact_match is not None:
            data["exact_match"] = _json_float(self.exact_match)
            data["mismatches"] = self.mismatches
        if self.rewritten_shape is not None:
            data["rewritten_shape"] = list(self.rewritten_shape)
        if self.notes:
            data["notes"] = list(self.notes)
        return data


@dataclass(frozen=True)
class OutputSpread:
    """One output's relative L2 error over the samples of a data set (inf where a sample broke)."""

    name: str
    samples: int
    worst: float | None
    p95: float | None
    median: float | None
    worst_sample: int
    failing_samples: int

    def to_dict(self) -> dict[str, object]:
        def number(value: float | None) -> float | str | None:
            return value if value is None or math.isfinite(value) else str(value)

        return {
            "name": self.name,
            "samples": self.samples,
            "rel_l2_worst": number(self.worst),
            "rel_l2_p95": number(self.p95),
            "rel_l2_median": number(self.median),
            "worst_sample": self.worst_sample,
            "failing_samples": self.failing_samples,
        }


def _json_float(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _is_float(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" or array.dtype.name == "bfloat16"


def _is_numeric(array: np.ndarray) -> bool:
    return _is_float(array) or array.dtype.kind in "iub"


def as_array(value: object) -> np.ndarray:
    """An output as one array: a sequence of maps with the same keys becomes one row of values (in key order) per
    map, a sequence of equal-shaped tensors their stack, anything else what numpy makes of it."""
    if isinstance(value, dict):
        return _map_rows([value])
    if isinstance(value, list) and value:
        if all(isinstance(item, dict) for item in value) and _same_keys(value):
            return _map_rows(value)
        if all(isinstance(item, np.ndarray) for item in value) and len({item.shape for item in value}) == 1:
            return np.stack(value)
    return np.asarray(value)


def _same_keys(maps: list[dict[object, object]]) -> bool:
    return all(item.keys() == maps[0].keys() for item in maps)


def _map_key(key: object) -> tuple[str, object]:
    """A ZipMap's keys are all int64 or all strings: sorted within their type."""
    return (type(key).__name__, key)


def _map_rows(maps: list[dict[object, object]]) -> np.ndarray:
    keys = sorted(maps[0], key=_map_key)
    return np.array([[item[key] for key in keys] for item in maps])


def compare_output(name: str, reference: np.ndarray, candidate: np.ndarray) -> OutputMetrics:
    """Metrics for one output; a shape change gives infinite errors and both shapes (see the module docstring)."""
    reference, candidate = as_array(reference), as_array(candidate)
    if reference.shape != candidate.shape:
        return _shape_changed(name, reference, candidate)
    if not (_is_numeric(reference) and _is_numeric(candidate)):
        return _compare_exact_only(name, reference, candidate)
    sums = _Sums(count_mismatches=not _is_float(reference))
    for ref_chunk, cand_chunk in _chunks(reference, candidate):
        sums.add(ref_chunk, cand_chunk)
    rel_l2, max_abs, cosine, notes = sums.metrics()
    exact, mismatches = None, None
    if not _is_float(reference):
        mismatches = sums.mismatches
        exact = 1.0 - mismatches / reference.size if reference.size else 1.0
    argmax = _argmax_agreement(reference, candidate) if _is_float(reference) else None
    return OutputMetrics(
        name=name,
        dtype=str(reference.dtype),
        shape=tuple(int(d) for d in reference.shape),
        rel_l2=rel_l2,
        max_abs=max_abs,
        cosine=cosine,
        nonfinite=sums.nonfinite,
        argmax_agreement=argmax,
        new_nonfinite=sums.new_nonfinite,
        exact_match=exact,
        mismatches=mismatches,
        notes=tuple(notes),
    )


#: Elements compared at a time: the float64 copies and masks are of one chunk (512 KiB a copy), never of a whole
#: output, so comparing two outputs of N bytes needs the two outputs and a few chunks, not 8x N.
CHUNK_ELEMENTS = 1 << 16


def _chunks(*arrays: np.ndarray) -> Iterator[tuple[np.ndarray, ...]]:
    """Same-sized flat chunks of same-shaped arrays (views where the arrays are contiguous)."""
    flats = [array.reshape(-1) for array in arrays]
    for start in range(0, flats[0].size, CHUNK_ELEMENTS):
        yield tuple(flat[start : start + CHUNK_ELEMENTS] for flat in flats)


def finite_counts(array: np.ndarray) -> tuple[int, int]:
    """How many of a numeric array's values are finite and how many are NaN, a chunk at a time."""
    finite = nan = 0
    for (chunk,) in _chunks(array):
        wide = chunk.astype(np.float64)
        finite += int(np.count_nonzero(np.isfinite(wide)))
        nan += int(np.count_nonzero(np.isnan(wide)))
    return finite, nan


@dataclass
class _Sums:
    """What the metrics need, summed over chunks (float64 within a chunk, as the metrics are defined)."""

    nonfinite: int = 0  # non-finite values in the rewritten output
    new_nonfinite: int = 0  # ... where the reference is finite
    same_nonfinite: int = 0  # positions non-finite and equal in both: left out
    kept: int = 0  # positions compared (all but the equal non-finite ones)
    other_nonfinite: bool = False  # a compared position is non-finite on some side
    squared_diff: float = 0.0  # over the positions finite on both sides
    squared_ref: float = 0.0
    squared_cand: float = 0.0
    dot: float = 0.0
    max_abs: float = 0.0
    count_mismatches: bool = False
    mismatches: int = 0  # elements that differ in their own dtype (non-float outputs)

    def add(self, reference: np.ndarray, candidate: np.ndarray) -> None:
        if self.count_mismatches:
            self.mismatches += int(np.count_nonzero(reference != candidate))
        ref, cand = reference.astype(np.float64), candidate.astype(np.float64)
        ref_finite, cand_finite = np.isfinite(ref), np.isfinite(cand)
        self.nonfinite += int(cand.size - np.count_nonzero(cand_finite))
        self.new_nonfinite += int(np.count_nonzero(ref_finite & ~cand_finite))
        same = ~ref_finite & ((ref == cand) | (np.isnan(ref) & np.isnan(cand)))
        same_count = int(np.count_nonzero(same))
        finite = ref_finite & cand_finite
        finite_count = int(np.count_nonzero(finite))
        self.same_nonfinite += same_count
        self.kept += ref.size - same_count
        self.other_nonfinite |= finite_count < ref.size - same_count
        if finite_count < ref.size:
            ref, cand = ref[finite], cand[finite]
        if not ref.size:
            return
        diff = cand - ref
        self.squared_diff += float(np.dot(diff, diff))
        self.squared_ref += float(np.dot(ref, ref))
        self.squared_cand += float(np.dot(cand, cand))
        self.dot += float(np.dot(ref, cand))
        self.max_abs = max(self.max_abs, float(np.max(np.abs(diff))))

    def metrics(self) -> tuple[float, float, float, list[str]]:
        """rel_l2, max_abs, cosine, with the non-finite and zero rules."""
        notes: list[str] = []
        if self.same_nonfinite:
            notes.append(f"{self.same_nonfinite} non-finite value(s) equal in both outputs left out")
        if not self.kept:
            return 0.0, 0.0, 1.0, notes
        cosine = self._cosine()
        if self.other_nonfinite:
            return math.inf, math.inf, cosine, notes
        diff_norm, ref_norm = math.sqrt(self.squared_diff), math.sqrt(self.squared_ref)
        if ref_norm == 0.0:
            notes.append("reference is all zeros: rel_l2 is the absolute L2 norm of the difference")
            return diff_norm, self.max_abs, cosine, notes
        return diff_norm / ref_norm, self.max_abs, cosine, notes

    def _cosine(self) -> float:
        ref_norm, cand_norm = math.sqrt(self.squared_ref), math.sqrt(self.squared_cand)
        if ref_norm == 0.0 and cand_norm == 0.0:
            return 1.0
        if ref_norm == 0.0 or cand_norm == 0.0:
            return 0.0
        return max(-1.0, min(1.0, self.dot / (ref_norm * cand_norm)))


def _shape_changed(name: str, reference: np.ndarray, candidate: np.ndarray) -> OutputMetrics:
    numeric = _is_numeric(candidate)
    nonfinite = candidate.size - finite_counts(candidate)[0] if numeric else 0
    return OutputMetrics(
        name=name,
        dtype=str(reference.dtype),
        shape=tuple(int(d) for d in reference.shape),
        rel_l2=math.inf if numeric else None,
        max_abs=math.inf if numeric else None,
        cosine=None,
        nonfinite=nonfinite,
        rewritten_shape=tuple(int(d) for d in candidate.shape),
        notes=("the shape changed: the elements cannot be paired",),
    )


def _compare_exact_only(name: str, reference: np.ndarray, candidate: np.ndarray) -> OutputMetrics:
    mismatches = int(np.count_nonzero(reference != candidate))
    return OutputMetrics(
        name=name,
        dtype=str(reference.dtype),
        shape=tuple(int(d) for d in reference.shape),
        rel_l2=None,
        max_abs=None,
        cosine=None,
        nonfinite=0,
        exact_match=1.0 - mismatches / reference.size if reference.size else 1.0,
        mismatches=mismatches,
    )


def _argmax_agreement(reference: np.ndarray, candidate: np.ndarray) -> float | None:
    """Fraction of rows whose arg-max over the last axis agrees, for rank-2/3 (logits-like) outputs (a chunk of
    rows at a time)."""
    if reference.ndim not in (2, 3) or reference.shape[-1] < 2 or reference.size == 0:
        return None
    width = reference.shape[-1]
    ref_rows, cand_rows = reference.reshape(-1, width), candidate.reshape(-1, width)
    step = max(1, CHUNK_ELEMENTS // width)
    agree = 0
    for start in range(0, ref_rows.shape[0], step):
        ref = np.argmax(ref_rows[start : start + step].astype(np.float64), axis=-1)
        cand = np.argmax(cand_rows[start : start + step].astype(np.float64), axis=-1)
        agree += int(np.count_nonzero(ref == cand))
    return agree / ref_rows.shape[0]


def compare_outputs(
    reference: Mapping[str, np.ndarray],
    candidate: Mapping[str, np.ndarray],
    names: Sequence[str] | None = None,
) -> list[OutputMetrics]:
    """Metrics for every output (in ``names`` order, else the reference's); a missing output is an error."""
    order = list(names) if names is not None else list(reference)
    metrics = []
    for name in order:
        if name not in reference or name not in candidate:
            side = "reference" if name not in reference else "rewritten model"
            raise OutputMismatchError(f"output {name!r} is missing from the {side}")
        metrics.append(compare_output(name, reference[name], candidate[name]))
    return metrics


def tolerance_failures(metrics: Sequence[OutputMetrics], tolerance: Tolerance) -> list[str]:
    """One line per broken bound; empty means the outputs meet the tolerance."""
    failures: list[str] = []
    for item in metrics:
        failures.extend(output_failures(item, tolerance))
    return failures


def output_failures(item: OutputMetrics, tolerance: Tolerance) -> list[str]:
    """The bounds one output breaks, one line each ("name: rel_l2 0.02 > 0.01")."""
    if item.rewritten_shape is not None:
        return [
            f"{item.name}: shape {list(item.rewritten_shape)} in the rewritten model, {list(item.shape)} in the fp32 "
            "reference (a count or size changed)"
        ]
    if item.rel_l2 is None:  # strings: exact match only
        return [f"{item.name}: {item.mismatches} element(s) differ"] if item.mismatches else []
    failures = []
    if item.new_nonfinite:
        failures.append(f"{item.name}: {item.new_nonfinite} inf/NaN value(s) where the fp32 reference is finite")
    if not item.rel_l2 <= tolerance.rel_l2:
        failures.append(f"{item.name}: rel_l2 {_fmt(item.rel_l2)} > {_fmt(tolerance.rel_l2)}")
    if tolerance.max_abs is not None and not (item.max_abs is not None and item.max_abs <= tolerance.max_abs):
        failures.append(f"{item.name}: max_abs {_fmt(item.max_abs)} > {_fmt(tolerance.max_abs)}")
    if tolerance.min_cosine is not None and not (item.cosine is not None and item.cosine >= tolerance.min_cosine):
        failures.append(f"{item.name}: cosine {_fmt(item.cosine)} < {_fmt(tolerance.min_cosine)}")
    return failures


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"
