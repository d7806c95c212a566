"""The casts a plan counts against the Cast nodes the rewrite inserts (ampconfig/decide/needs.py is the one count).

:func:`audit_casts` wraps ``ampconfig.rewrite.steps.apply_plan.apply_plan`` (our own function; the real one
runs) for the rewrites made inside it. For every plan applied it compares, as sets of (value, dtype):

- the plan's casts (``Plan.casts()``) with the Cast nodes the rewrite inserted;
- for every group of nodes the islands pass or the cost report counts (each float32 group with a low neighbour,
  each group of soft float32 nodes, each group the islands pass lowered): the island count
  (:func:`~ampconfig.decide.passes.islands.island_casts`) with the inserted Casts on the group's edges, both as
  decided and with the group's dtype flipped (float32 <-> low), that second plan rewritten on a copy of the model.

Used by tests/decide/test_needs.py (exporter-shaped and test models) and tests/models/test_conformance.py (every
ONNX node test).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import onnx_ir as ir

import ampconfig.rewrite.steps.apply_plan as apply_step
from ampconfig.decide.decision_state import FLEXIBLE_OPS
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import connected_groups, graphs_of, iter_scopes
from ampconfig.decide.passes.follow import SOFT_RULES
from ampconfig.decide.passes.islands import island_casts
from ampconfig.decide.plan import Plan, original_dtypes
from ampconfig.dtypes import Dtype
from ampconfig.rewrite.apply import apply_plan as rewrite

CastKey = tuple[str, str]  # (value name before the rewrite, dtype)


@dataclass
class CastAudit:
    plans: int = 0
    casts: int = 0  # Cast nodes inserted, summed over the plans
    groups: int = 0  # island groups compared
    mismatches: list[str] = field(default_factory=list)


def _inserted(model: ir.Model, before: set[ir.Node], names: dict[ir.Value, str]) -> list[tuple[ir.Node, CastKey]]:
    """The Cast nodes the rewrite added, each with (the name its source had before the rewrite, its dtype)."""
    found = []
    for graph in graphs_of(model):
        for node in graph:
            if node in before or node.op_type != "Cast":
                continue
            source = node.inputs[0]
            assert source is not None
            dtype = Dtype.of_data_type(node.attributes["to"].value)
            found.append((node, (names[source], str(dtype))))
    return found


def _on_edges(casts: list[tuple[ir.Node, CastKey]], group: set[ir.Node]) -> set[CastKey]:
    """The inserted casts whose source a member writes or whose output a member reads."""
    return {
        key
        for cast, key in casts
        if cast.inputs[0].producer() in group or any(use.node in group for use in cast.outputs[0].uses())
    }


def _groups(plan: Plan) -> list[tuple[frozenset[ir.Node], Dtype, bool]]:
    """The groups the cost report and the islands pass count, each with the dtype it computes in and whether the
    islands pass weighs it (soft float32 groups, lowered groups: those are flipped too)."""

    def neighbours(node: ir.Node) -> list[ir.Node]:
        found = [use.node for value in node.outputs for use in value.uses()]
        return found + [v.producer() for v in node.inputs if v is not None and v.producer() is not None]

    def float32(node: ir.Node, soft_only: bool) -> bool:
        verdict, facts = plan.verdicts[node], plan.facts_of[node]
        is_soft = verdict.rule in SOFT_RULES
        return (
            verdict.dtype is Dtype.FLOAT32 and facts.dtype is Dtype.FLOAT32 and node.op_type not in FLEXIBLE_OPS
        ) and (is_soft or not soft_only)

    families = [
        ([n for n in plan.verdicts if float32(n, soft_only=False)], Dtype.FLOAT32, False),
        ([n for n in plan.verdicts if float32(n, soft_only=True)], Dtype.FLOAT32, True),
        ([n for n in plan.verdicts if plan.verdicts[n].rule is Rule.CAST_AWARE_ISLAND], plan.ctx.low, True),
    ]
    groups = []
    for members, dtype, weighed in families:
        groups += [(group, dtype, weighed) for group in connected_groups(members, neighbours)]
    return groups


def _flipped_rewrite(
    proto_model: ir.Model, plan: Plan, group: frozenset[ir.Node], dtype: Dtype
) -> tuple[set[CastKey], int]:
    """Rewrite a copy of the model with ``group`` computing in ``dtype``: the Casts inserted on the group's edges,
    and the island count for that plan."""
    copy = ir.serde.deserialize_model(ir.serde.serialize_model(proto_model))
    originals = [node for graph in graphs_of(proto_model) for node in graph]
    copies = [node for graph in graphs_of(copy) for node in graph]
    assert [(n.op_type, n.name) for n in originals] == [(n.op_type, n.name) for n in copies]
    to_copy = dict(zip(originals, copies, strict=True))
    scopes = list(iter_scopes(copy, plan.ctx.low, plan.ctx.typing))
    facts_of = {facts.node: facts for scope in scopes for facts in scope.facts}
    verdicts = {to_copy[node]: verdict for node, verdict in plan.verdicts.items()}
    for node in group:
        verdicts[to_copy[node]] = replace(plan.verdicts[node], dtype=dtype)
    flipped = Plan(scopes, facts_of, verdicts, original_dtypes(copy), plan.keep_io_types, plan.ctx, {})
    copied_group = {to_copy[node] for node in group}
    counted = island_casts(flipped.needs, copied_group, dtype)
    names = _value_names(copy)
    before = set(copies)
    rewrite(copy, flipped)
    return _on_edges(_inserted(copy, before, names), copied_group), counted


def _value_names(model: ir.Model) -> dict[ir.Value, str]:
    names = {}
    for graph in graphs_of(model):
        for value in (*graph.inputs, *graph.initializers.values()):
            names[value] = value.name or ""
        for node in graph:
            names.update((value, value.name or "") for value in node.outputs)
    return names


@contextlib.contextmanager
def audit_casts(flip: bool = True) -> Iterator[CastAudit]:
    """Audit every plan applied inside the block; ``flip``: also rewrite each group with its dtype flipped."""
    audit = CastAudit()
    apply_plan = apply_step.apply_plan

    def audited(ir_model, plan, *args):  # type: ignore[no-untyped-def]
        where = ir_model.graph.name or "model"
        planned = {(value.name or "", str(dtype)) for value, dtype in plan.casts()}
        found = _groups(plan)
        groups = [(group, dtype, island_casts(plan.needs, group, dtype)) for group, dtype, _ in found]
        flipped = {
            group: _flipped_rewrite(ir_model, plan, group, Dtype.FLOAT32 if dtype.is_low else plan.ctx.low)
            for group, dtype, weighed in found
            if weighed and flip
        }
        names = _value_names(ir_model)
        before = {node for graph in graphs_of(ir_model) for node in graph}
        stats = apply_plan(ir_model, plan, *args)
        inserted = _inserted(ir_model, before, names)
        audit.plans += 1
        audit.casts += len(inserted)
        keys = [key for _, key in inserted]
        if sorted(keys) != sorted(planned) or stats.casts_inserted != len(planned):
            audit.mismatches.append(f"{where}: planned {sorted(planned)}, inserted {sorted(keys)}")
        for group, dtype, counted in groups:
            audit.groups += 1
            on_edges = _on_edges(inserted, set(group))
            label = f"{where}: {dtype} group {sorted(n.name or '' for n in group)}"
            if counted != len(on_edges):
                audit.mismatches.append(f"{label}: island count {counted}, inserted on its edges {sorted(on_edges)}")
            if group in flipped:
                flipped_edges, flipped_count = flipped[group]
                if flipped_count != len(flipped_edges):
                    audit.mismatches.append(
                        f"{label} flipped: island count {flipped_count}, inserted {sorted(flipped_edges)}"
                    )
        return stats

    apply_step.apply_plan = audited  # type: ignore[assignment]
    try:
        yield audit
    finally:
        apply_step.apply_plan = apply_plan  # type: ignore[assignment]
