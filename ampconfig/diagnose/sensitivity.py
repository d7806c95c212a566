"""How much each low-precision node adds to the output error, from three runs instead of one run per node.

The runs (values by name, as :mod:`ampconfig.runner.intermediates` returns them):

- ``reference``: the fp32 model, every intermediate exposed;
- ``low``: the rewrite (the copy ``run`` judges) on the same inputs, every intermediate exposed;
- ``replay``: every lowered node computed once more in fp32 on the inputs it had in the ``low`` run
  (:func:`ampconfig.instrument.inject.injection_model` fed with the ``low`` values): one run for all nodes.

From them, per node:

- ``local_error``: ``low`` against ``replay``: the relative error the node's own rounding adds (its weights, its
  computation and its output stored low), with its inputs as they were;
- ``transmission``: ``replay`` against ``reference`` over the error of its inputs: how a relative error of its
  inputs comes out of it (softmax over large logits and cancellation amplify, normalizations and saturating
  activations damp);
- ``amplification`` of a value: the largest product of transmissions along any path to a graph output (1 for a
  graph output);
- ``contribution``: local error x amplification of its outputs, an estimate of what the node alone adds to the
  worst output's relative L2 error. Independent rounding errors add in quadrature, so
  ``sqrt(sum(contribution**2))`` over the low nodes estimates the output error.

Values are compared after clipping to the low type's range, so a saturating constant (a ``-3.4e38`` mask that
float16 stores as ``-65504``) is not an error; real overflow is found by range analysis (:func:`damaged_nodes`).
Pure: arrays in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ampconfig.diagnose.graph_values import GraphNode
from ampconfig.diagnose.locate import LOW_MAX, UNIT_ROUNDOFF
from ampconfig.diagnose.ranges import RangeFinding
from ampconfig.prove.accuracy import compare_output

#: Largest transmission believed: beyond it the input error is too small to divide by meaningfully.
MAX_TRANSMISSION = 1e4
#: Input errors below this fraction of the unit roundoff count as exact inputs (transmission unknown: 1).
EXACT_FRACTION = 0.1


@dataclass(frozen=True)
class NodeSensitivity:
    name: str
    op_type: str
    local_error: float
    transmission: float
    amplification: float

    @property
    def contribution(self) -> float:
        if math.isinf(self.local_error):
            return math.inf
        return self.local_error * self.amplification

    def to_dict(self) -> dict[str, float | str]:
        return {
            "name": self.name,
            "op_type": self.op_type,
            "local_error": _json(self.local_error),
            "transmission": _json(self.transmission),
            "amplification": _json(self.amplification),
            "contribution": _json(self.contribution),
        }


def _json(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def _is_float(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" or array.dtype.name == "bfloat16"


def value_error(reference: np.ndarray, candidate: np.ndarray, limit: float) -> float:
    """Relative L2 error of ``candidate`` after clipping both to ``[-limit, limit]``; inf for a new inf/NaN."""
    ref, cand = np.asarray(reference, np.float64), np.asarray(candidate, np.float64)
    if ref.shape != cand.shape:
        return math.inf
    new_nonfinite = np.isfinite(ref) & ~np.isfinite(cand)
    if new_nonfinite.any():
        return math.inf
    metrics = compare_output("value", np.clip(ref, -limit, limit), np.clip(cand, -limit, limit))
    return math.inf if metrics.rel_l2 is None or math.isnan(metrics.rel_l2) else metrics.rel_l2


def sensitivities(
    nodes: Sequence[GraphNode],
    lowered: Collection[str],
    reference: Mapping[str, np.ndarray],
    low: Mapping[str, np.ndarray],
    replay: Mapping[str, np.ndarray],
    graph_outputs: Collection[str],
    low_dtype: str = "float16",
) -> dict[str, NodeSensitivity]:
    """Per lowered node of ``nodes`` (topological order), its :class:`NodeSensitivity` (see the module docstring).

    ``replay`` holds the lowered nodes' outputs recomputed in fp32 from their ``low``-run inputs, by the
    original value names.
    """
    limit = LOW_MAX[low_dtype]
    exact = UNIT_ROUNDOFF[low_dtype] * EXACT_FRACTION
    errors = {
        name: value_error(reference[name], low[name], limit)
        for name in reference
        if name in low and _is_float(np.asarray(reference[name]))
    }
    wanted = set(lowered)
    local: dict[str, float] = {}
    transmission: dict[str, float] = {}
    for node in nodes:
        outputs = [name for name in node.outputs if name in errors]
        if not outputs:
            continue
        input_error = max((errors[name] for name in node.inputs if name in errors), default=0.0)
        replayed = [name for name in outputs if name in replay]
        if node.name in wanted and replayed:
            carried = max(value_error(reference[name], replay[name], limit) for name in replayed)
            local[node.name] = max(value_error(replay[name], low[name], limit) for name in replayed)
        else:
            carried = max(errors[name] for name in outputs)
        transmission[node.name] = _transmission(carried, input_error, exact)
    amplification = _amplification(nodes, transmission, graph_outputs)
    return {
        node.name: NodeSensitivity(
            node.name,
            node.op_type,
            local.get(node.name, 0.0),
            transmission.get(node.name, 1.0),
            max((amplification.get(name, 0.0) for name in node.outputs), default=0.0),
        )
        for node in nodes
        if node.name in wanted
    }


def _transmission(carried: float, input_error: float, exact: float) -> float:
    if not (math.isfinite(carried) and math.isfinite(input_error)) or input_error < exact:
        return 1.0  # exact or broken inputs: how the node passes errors on cannot be read from this run
    return min(carried / input_error, MAX_TRANSMISSION)


def _amplification(
    nodes: Sequence[GraphNode], transmission: Mapping[str, float], graph_outputs: Collection[str]
) -> dict[str, float]:
    """Per value, the largest product of transmissions along a path to a graph output (reverse topological)."""
    consumers: dict[str, list[GraphNode]] = {}
    for node in nodes:
        for name in node.inputs:
            consumers.setdefault(name, []).append(node)
    outputs = set(graph_outputs)
    amplification: dict[str, float] = {}
    for node in reversed(nodes):
        for name in node.outputs:
            best = 1.0 if name in outputs else 0.0
            for consumer in consumers.get(name, ()):
                if consumer.name in transmission:
                    downstream = max((amplification.get(out, 0.0) for out in consumer.outputs), default=0.0)
                    best = max(best, transmission[consumer.name] * downstream)
            amplification[name] = best
    return amplification


def damaged_nodes(
    findings: Sequence[RangeFinding],
    nodes: Sequence[GraphNode],
    lowered: Collection[str],
    reference: Mapping[str, np.ndarray],
    low: Mapping[str, np.ndarray],
) -> dict[str, str]:
    """The lowered nodes that must stay float32 because float16 breaks their values, with the reason.

    A range finding counts when the value it names really turns inf/NaN in the ``low`` run (a constant the rewrite
    clamps, such as a ``-3.4e38`` mask, does not); a node whose output turns inf/NaN while its inputs are finite
    counts too (an underflow into a division, a log of a rounded zero).
    """
    wanted = set(lowered)
    damaged: dict[str, str] = {}
    broken = {name for name in reference if name in low and _new_nonfinite(reference[name], low[name])}
    for finding in findings:
        if finding.node in wanted and finding.kind != "constant" and finding.value in broken:
            damaged.setdefault(finding.node, finding.reason + "; it turns inf/NaN in low precision")
    for node in nodes:
        if node.name not in wanted or node.name in damaged:
            continue
        if any(name in broken for name in node.outputs) and not any(name in broken for name in node.inputs):
            damaged[node.name] = "its output turns inf/NaN in low precision while its inputs are finite"
    return damaged


def _new_nonfinite(reference: np.ndarray, candidate: np.ndarray) -> bool:
    ref, cand = np.asarray(reference), np.asarray(candidate)
    if ref.shape != cand.shape or not _is_float(ref):
        return False
    ref64, cand64 = ref.astype(np.float64), cand.astype(np.float64)
    return bool((np.isfinite(ref64) & ~np.isfinite(cand64)).any())
