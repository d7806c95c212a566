"""Range analysis, the inference analog of loss scaling: which nodes must stay float32 because the values they
read or write do not fit the low dtype.

Training keeps fp16 gradients in range by scaling the loss; inference has no such knob, so a node whose values
leave the low type's range is kept in float32 instead. From one calibration run of the fp32 model (every
intermediate exposed, :mod:`ampconfig.runner.intermediates`) a node is flagged when

- one of its float outputs reaches beyond ``data_max`` (computing it low overflows to inf), or
- one of its float inputs does: a graph input, another node's output (a low consumer casts it down to inf), or
  an initializer/Constant (the rewrite would clamp it to the low type's max and count it).

``data_max`` defaults to the low type's largest finite value (65504 for float16, about 3.39e38 for bfloat16);
a smaller value leaves headroom for inputs larger than the calibration set. The result is the
``overflow_nodes`` mapping of :func:`ampconfig.api.rewrite_model_detailed` (rule ``range_overflow``).
Pure: values in, findings out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ampconfig.diagnose.graph_values import GraphNode
from ampconfig.diagnose.locate import LOW_MAX, finite_max_abs
from ampconfig.errors import AmpconfigError


@dataclass(frozen=True)
class RangeFinding:
    node: str
    op_type: str
    value: str  # the value out of range
    kind: str  # "output", "input" (a graph input or another node's output) or "constant"
    max_abs: float
    data_max: float

    @property
    def reason(self) -> str:
        what = {"output": "output", "input": "input", "constant": "constant input"}[self.kind]
        return f"calibration: {what} {self.value!r} reaches |x| = {self.max_abs:.6g} > {self.data_max:.6g}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reason": self.reason}


def default_data_max(low_dtype: str) -> float:
    return LOW_MAX[low_dtype]


def check_data_max(value: float | None, low_dtype: str) -> float:
    """``value`` (or the low dtype's default) when it is a positive number within the low type's range."""
    if value is None:
        return default_data_max(low_dtype)
    if not (0 < value <= LOW_MAX[low_dtype]):
        raise AmpconfigError(
            f"--data-max {value:g} is out of range for {low_dtype}",
            hint=f"give a positive value up to {LOW_MAX[low_dtype]:.6g}",
        )
    return float(value)


def range_findings(
    nodes: Sequence[GraphNode],
    values: Mapping[str, np.ndarray],
    constants: Mapping[str, np.ndarray],
    data_max: float,
) -> list[RangeFinding]:
    """Every out-of-range float value each node reads or writes, in node order (one finding per node and value)."""
    peaks: dict[str, float] = {}

    def peak(name: str, array: np.ndarray) -> float:
        if name not in peaks:
            arr = np.asarray(array)
            peaks[name] = finite_max_abs(arr) if arr.dtype.kind == "f" else 0.0
        return peaks[name]

    findings: list[RangeFinding] = []
    for node in nodes:
        if node.op_type == "Constant":
            continue  # its value is reported at its consumers, which are what the rewrite decides
        seen: set[str] = set()
        for kind, names in (("output", node.outputs), ("input", node.inputs)):
            for name in names:
                if name in seen:
                    continue
                seen.add(name)
                if name in constants:
                    found_kind, array = "constant", constants[name]
                elif name in values:
                    found_kind, array = kind, values[name]
                else:
                    continue
                max_abs = peak(name, array)
                if max_abs > data_max:
                    findings.append(RangeFinding(node.name, node.op_type, name, found_kind, max_abs, data_max))
    return findings


def overflow_nodes(findings: Sequence[RangeFinding]) -> dict[str, str]:
    """``{node name: reason}`` for ``rewrite_model_detailed(overflow_nodes=...)``; several findings joined."""
    reasons: dict[str, list[str]] = {}
    for finding in findings:
        reasons.setdefault(finding.node, []).append(finding.reason)
    return {node: "; ".join(items) for node, items in reasons.items()}
