"""What a decision costs: its casts, an estimated GPU time, and the float32 islands that cost most.

A float32 island is a connected group of nodes that stay float32 while a neighbour computes low: every edge
between it and a low node is a cast, and a cast is a kernel like any other. ``explain`` shows the islands with
the most casts first and the rule that keeps each one float32, so a user sees where a mixlist change would pay.

Times come from the H100 kernel cost table (:mod:`ampconfig.opinfo.costs`) at the sizes the model states (a
dimension the model leaves symbolic counts as 1, so small graphs are costed launch-bound): an estimate for
comparing decisions of one model, not a benchmark. Pure: a plan and its graph in, data out.
"""

from __future__ import annotations

import math
from collections import Counter

import onnx_ir as ir

from ampconfig.decide.decision_state import FLEXIBLE_OPS
from ampconfig.decide.decisions import DecisionCost, Float32Island, Rule
from ampconfig.decide.facts import connected_groups, is_onnx_op
from ampconfig.decide.needs import Cast
from ampconfig.decide.plan import Plan
from ampconfig.dtypes import Dtype
from ampconfig.opinfo.costs import cast_us, kernel_us


def _elements(value: ir.Value | None) -> int:
    if value is None or value.shape is None:
        return 1
    return math.prod(dim if isinstance(dim, int) else 1 for dim in value.shape)


_SOFT = frozenset({Rule.FOLLOWS_INPUTS, Rule.FOLLOWS_CONSUMERS, Rule.DENY_PROPAGATION})


def decision_cost(plan: Plan) -> DecisionCost:
    """The casts ``plan`` implies, the estimated time of its kernels and casts, and its float32 islands."""
    kernels: list[float] = []
    fp32: list[float] = []
    for node, verdict in plan.verdicts.items():
        facts = plan.facts_of[node]
        if facts.dtype is None:
            continue
        size = max((_elements(value) for value in node.outputs), default=1)
        kernels.append(kernel_us(facts.key, verdict.dtype, size))
        fp32.append(kernel_us(facts.key, Dtype.FLOAT32, size))
    casts = plan.casts()
    by_value: dict[ir.Value, set[Cast]] = {}
    for value, dtype in casts:
        by_value.setdefault(value, set()).add((value, dtype))
    islands = sorted(_islands(plan, by_value), key=lambda island: (-island.casts, island.nodes))
    # Exact sums (fsum): the casts are a set, whose order follows the hash seed, and a lock records these times
    # byte for byte; a plain sum's last bits would depend on the order.
    return DecisionCost(
        casts=len(casts),
        cast_us=math.fsum(cast_us(_elements(value)) for value, _ in casts),
        kernel_us=math.fsum(kernels),
        float32_kernel_us=math.fsum(fp32),
        islands=islands,
    )


def _is_float32_node(plan: Plan, node: ir.Node) -> bool:
    verdict = plan.verdicts.get(node)
    facts = plan.facts_of.get(node)
    return (
        verdict is not None
        and facts is not None
        and verdict.dtype is Dtype.FLOAT32
        and facts.dtype is Dtype.FLOAT32
        and not is_onnx_op(node, FLEXIBLE_OPS)
    )


def _neighbours(plan: Plan, node: ir.Node) -> list[ir.Node]:
    facts = plan.facts_of[node]
    found = [use.node for i in facts.output_slots for use in node.outputs[i].uses()]
    for i in facts.input_slots:
        value = node.inputs[i]
        producer = value.producer() if value is not None else None
        if producer is not None:
            found.append(producer)
    return found


def _islands(plan: Plan, casts: dict[ir.Value, set[Cast]]) -> list[Float32Island]:
    float32 = [node for node in plan.verdicts if _is_float32_node(plan, node)]
    order = {node: index for index, node in enumerate(plan.verdicts)}
    islands: list[Float32Island] = []
    for group in connected_groups(float32, lambda node: _neighbours(plan, node)):
        edges = plan.needs.boundary_casts(group, known=casts)
        if not edges:
            continue  # no low neighbour: not an island, the model simply stays float32 there
        members = sorted(group, key=order.__getitem__)  # graph order: the report reads the same on every run
        rules = Counter(plan.verdicts[node].rule.value for node in members)
        hard = [node for node in members if plan.verdicts[node].rule not in _SOFT]
        anchor = hard[0].name or "" if hard else ""
        islands.append(
            Float32Island(
                nodes=tuple(node.name or "" for node in members),
                casts=len(edges),
                cast_us=math.fsum(cast_us(_elements(value)) for value, _ in edges),
                rules=dict(rules.most_common()),
                anchor=anchor,
            )
        )
    return islands
