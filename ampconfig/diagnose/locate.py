"""Where a rewritten model goes wrong: per-node error against the fp32 run, ranked by the error each node adds.

Pure functions over the values of two runs (:mod:`ampconfig.runner.intermediates`), aligned by value key: the
rewrite keeps the original names of node outputs (casts get new names), so every node of the fp32 model finds
its outputs and inputs in the rewritten run, inside If, Loop and Scan bodies too.

- A node's ``error`` is the largest relative L2 error (:func:`ampconfig.prove.accuracy.compare_output`) over its float
  outputs; its ``input_error`` the largest over its float inputs (graph inputs and constants are exact: 0).
- ``gain = error / max(input_error, floor)`` ranks nodes by the error they ADD. The floor is the unit roundoff
  of the low dtype (2^-11 for float16, 2^-8 for bfloat16): one rounding of exact inputs gives a gain near 1,
  so a node reading exact inputs is not ranked as infinitely bad.
- The first bad node is the first, in topological order, whose error exceeds the threshold while none of its
  inputs' errors does: there the error jumps.
- Overflow: inf/NaN in the rewritten run where the fp32 run is finite, or fp32 values beyond the low type's
  largest finite value (65504 for float16), which would overflow wherever the value is computed or cast low.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from ampconfig.decide.decisions import NodeDecision
from ampconfig.diagnose.graph_values import GraphNode
from ampconfig.documents.numeric_limits import DEFAULT_THRESHOLD
from ampconfig.prove.accuracy import compare_output

#: Largest finite value of each low dtype.
LOW_MAX: dict[str, float] = {
    "float16": float(np.finfo(np.float16).max),
    "bfloat16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).max),
}
#: Unit roundoff of each low dtype: the error floor of the gain.
UNIT_ROUNDOFF: dict[str, float] = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


@dataclass(frozen=True)
class NodeError:
    name: str
    op_type: str
    original_dtype: str | None
    dtype: str | None  # the dtype the rewrite gave the node (None: not a float node)
    output: str  # the node's float output with the largest error
    error: float  # rel L2 of that output (inf when non-finite values appeared)
    worst_input: str | None
    input_error: float
    gain: float
    nonfinite: int  # inf/NaN values in the rewritten outputs where the fp32 run is finite
    reference_max_abs: float  # largest finite |value| of the node's outputs in the fp32 run
    exceeds_low_range: bool  # reference_max_abs beyond the low dtype's largest value
    overflow: tuple[str, ...] = field(default_factory=tuple)  # why this node overflows, in words
    scope: str = ""  # the If/Loop/Scan body it sits in ("" for the main graph)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("error", "input_error", "gain", "reference_max_abs"):
            data[key] = _json_float(data[key])
        data["overflow"] = list(self.overflow)
        return data


@dataclass
class Localization:
    nodes: list[NodeError]  # topological order
    threshold: float
    low_dtype: str
    first_bad: NodeError | None

    def ranked(self) -> list[NodeError]:
        """Nodes by the error they add (gain), then by their own error; nodes adding none left out."""
        adding = [node for node in self.nodes if node.gain > 0]
        return sorted(adding, key=lambda node: (-_sortable(node.gain), -_sortable(node.error), node.name))

    def overflowing(self) -> list[NodeError]:
        return [node for node in self.nodes if node.overflow]

    def by_name(self) -> dict[str, NodeError]:
        return {node.name: node for node in self.nodes}

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        ranked = self.ranked()
        return {
            "threshold": self.threshold,
            "low_dtype": self.low_dtype,
            "first_bad_node": self.first_bad.name if self.first_bad is not None else None,
            "ranked": [node.name for node in (ranked if top is None else ranked[:top])],
            "overflow_nodes": [node.name for node in self.overflowing()],
            "nodes": [node.to_dict() for node in self.nodes],
        }


def _json_float(value: float) -> float | str:
    """JSON has no infinity: non-finite errors are written as the strings "inf"/"nan"."""
    return value if math.isfinite(value) else str(value)


def _sortable(value: float) -> float:
    return math.inf if math.isnan(value) else value


def tensor_error(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Relative L2 error of one tensor (inf when the candidate has non-finite values the reference lacks)."""
    if reference.shape != candidate.shape:
        return math.inf  # a shape change is as wrong as it gets; compare_output would refuse it
    metrics = compare_output("value", reference, candidate)
    return math.inf if metrics.rel_l2 is None else metrics.rel_l2


def _new_nonfinite(reference: np.ndarray, candidate: np.ndarray) -> int:
    if reference.shape != candidate.shape:
        return 0
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    return int(np.count_nonzero(np.isfinite(ref) & ~np.isfinite(cand)))


def finite_max_abs(array: np.ndarray) -> float:
    """Largest finite |value| (0 for an empty or all-non-finite array)."""
    values = np.abs(np.asarray(array, dtype=np.float64))
    values = values[np.isfinite(values)]
    return float(values.max()) if values.size else 0.0


def _is_float_array(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" or array.dtype == ml_dtypes.bfloat16


def locate(
    nodes: Sequence[GraphNode],
    reference: Mapping[str, np.ndarray],
    candidate: Mapping[str, np.ndarray],
    decisions: Iterable[NodeDecision] = (),
    *,
    low_dtype: str = "float16",
    threshold: float = DEFAULT_THRESHOLD,
    data_max: float | None = None,
) -> Localization:
    """Per-node error of ``candidate`` against ``reference`` (value name -> array), in ``nodes`` order."""
    limit = LOW_MAX[low_dtype] if data_max is None else data_max
    floor = UNIT_ROUNDOFF[low_dtype]
    decided = {decision.name: decision for decision in decisions}  # names are unique across scopes
    errors: dict[str, float] = {}
    result: list[NodeError] = []
    first_bad: NodeError | None = None
    for node in nodes:
        outputs = [
            name
            for name in node.outputs
            if name in reference and name in candidate and _is_float_array(np.asarray(reference[name]))
        ]
        if not outputs:
            continue
        for name in outputs:
            errors[name] = tensor_error(reference[name], candidate[name])
        worst = max(outputs, key=lambda name: _sortable(errors[name]))
        inputs = [name for name in node.inputs if name in errors]
        worst_input = max(inputs, key=lambda name: _sortable(errors[name]), default=None)
        input_error = errors[worst_input] if worst_input is not None else 0.0
        error = errors[worst]
        gain = _gain(error, input_error, floor)
        nonfinite = sum(_new_nonfinite(reference[name], candidate[name]) for name in outputs)
        ref_max = max(finite_max_abs(reference[name]) for name in outputs)
        decision = decided.get(node.name)
        dtype = decision.dtype if decision is not None else None
        entry = NodeError(
            name=node.name,
            op_type=node.op_type,
            original_dtype=decision.original_dtype if decision is not None else None,
            dtype=dtype,
            output=worst,
            error=error,
            worst_input=worst_input,
            input_error=input_error,
            gain=gain,
            nonfinite=nonfinite,
            reference_max_abs=ref_max,
            exceeds_low_range=ref_max > limit,
            overflow=_overflow_reasons(nonfinite, ref_max, limit, dtype, low_dtype),
            scope=node.scope,
        )
        result.append(entry)
        if first_bad is None and _jumps(error, input_error, threshold):
            first_bad = entry
    return Localization(result, threshold, low_dtype, first_bad)


def _gain(error: float, input_error: float, floor: float) -> float:
    if math.isnan(error) or math.isinf(error):
        # Non-finite output: infinite gain only when the inputs were still finite (the node broke them).
        return math.inf if math.isfinite(input_error) else 0.0
    return error / max(input_error, floor)


def _jumps(error: float, input_error: float, threshold: float) -> bool:
    above = math.isnan(error) or error > threshold
    inputs_above = math.isnan(input_error) or input_error > threshold
    return above and not inputs_above


def _overflow_reasons(
    nonfinite: int, ref_max: float, limit: float, dtype: str | None, low_dtype: str
) -> tuple[str, ...]:
    reasons = []
    if nonfinite:
        reasons.append(f"{nonfinite} inf/NaN value(s) in the rewritten run where the fp32 run is finite")
    if ref_max > limit and dtype == low_dtype:
        reasons.append(f"fp32 values reach {ref_max:.6g}, beyond {low_dtype}'s {limit:.6g}, and it computes in {dtype}")
    return tuple(reasons)
