"""Range analysis, the inference analog of loss scaling: which values the low dtype cannot hold, as the reports
list them.

Training keeps fp16 gradients in range by scaling the loss; inference has no such knob, so a node whose values
leave the low type's range is kept in float32 instead (the decision: ``ampconfig.decide.value_ranges``, rules
``range_exceeds`` and ``value_out_of_range``). From the values' peaks the decision reads (the calibration that
``run`` makes, or a ranges file: :mod:`ampconfig.prove.calibration`) a node is listed when

- one of its float outputs reaches beyond the margin (computing it low would overflow on data a little larger), or
- one of its float inputs does: a graph input or another node's output (a low consumer casts it down), or
- one of its constant inputs holds values beyond the low type's range itself (constants are known exactly: no
  margin; float32's extremes, a mask's fill, are sentinels and not listed).

The margin (``data_max``) defaults to half the low type's largest finite value (32752 for float16, see
``ampconfig.decide.value_ranges``). Pure: values in, findings out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ampconfig.decide.value_limits import check_margin, default_margin
from ampconfig.decide.value_ranges import low_max, out_of_range
from ampconfig.diagnose.graph_values import GraphNode


@dataclass(frozen=True)
class RangeFinding:
    node: str
    op_type: str
    value: str  # the value out of range
    kind: str  # "output", "input" (a graph input or another node's output) or "constant"
    max_abs: float
    data_max: float  # the bound it passed: the margin, or for a constant the low type's largest value

    @property
    def reason(self) -> str:
        what = {"output": "output", "input": "input", "constant": "constant input"}[self.kind]
        return f"calibration: {what} {self.value!r} reaches |x| = {self.max_abs:.6g} > {self.data_max:.6g}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reason": self.reason}


def check_data_max(value: float | None, low_dtype: str) -> float:
    """``value`` (or the low dtype's default margin) when it is a positive number within the low type's range."""
    checked = check_margin(value, low_dtype)
    return checked if checked is not None else default_margin(low_dtype)


def range_findings(
    nodes: Sequence[GraphNode],
    peaks: Mapping[str, float],
    constants: Mapping[str, np.ndarray],
    data_max: float,
    low_dtype: str = "float16",
) -> list[RangeFinding]:
    """Every out-of-range float value each node reads or writes, in node order (one finding per node and value):
    ``peaks`` by value key (the largest finite |value| below the sentinel, as a calibration records it)."""
    beyond: dict[str, float | None] = {}

    def constant_peak(name: str) -> float | None:
        if name not in beyond:
            found = out_of_range(constants[name], low_dtype)
            beyond[name] = found.largest if found is not None and not found.sentinel else None
        return beyond[name]

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
                    largest = constant_peak(name)
                    if largest is not None:
                        limit = low_max(low_dtype)
                        findings.append(RangeFinding(node.name, node.op_type, name, "constant", largest, limit))
                elif name in peaks and peaks[name] > data_max:
                    findings.append(RangeFinding(node.name, node.op_type, name, kind, peaks[name], data_max))
    return findings


def overflow_nodes(findings: Sequence[RangeFinding]) -> dict[str, str]:
    """``{node name: reason}``: the nodes the findings name, several findings joined."""
    reasons: dict[str, list[str]] = {}
    for finding in findings:
        reasons.setdefault(finding.node, []).append(finding.reason)
    return {node: "; ".join(items) for node, items in reasons.items()}
