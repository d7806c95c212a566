"""The plan: every node's verdict plus the dtype each consumer needs from each input. Pure data.

:func:`build_plan` runs the mode's policy (or the painting of the mixed modes) over every scope, then settles
the flexible nodes: constants follow their consumers and existing Casts are retargeted to the one dtype all
their consumers need. :mod:`ampconfig.rewrite.apply` realises the plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import onnx_ir as ir

from ampconfig.decide.decisions import NodeDecision, Rule
from ampconfig.decide.facts import CONSTANT_OPS, NodeFacts, Scope, graphs_of, iter_scopes
from ampconfig.decide.paint import paint_scope
from ampconfig.decide.policy import (
    DecisionContext,
    Verdict,
    fixed_verdict,
    is_flexible,
    missing_origin_kernels,
    raise_for_missing_origin_kernels,
    simple_mode_verdict,
)
from ampconfig.dtypes import MOVABLE_DTYPES, Dtype
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.library import op_key
from ampconfig.settings.modes import PrecisionMode


class KeepDtypeLike(Protocol):
    line: int | None

    def matches(self, node_name: str, op_key: str) -> bool: ...


@dataclass
class Plan:
    scopes: list[Scope]
    facts_of: dict[ir.Node, NodeFacts]
    verdicts: dict[ir.Node, Verdict]
    original_dtype: dict[ir.Value, str | None]
    keep_io_types: bool
    ctx: DecisionContext

    def new_dtypes(self) -> dict[ir.Node, str]:
        """Nodes whose compute dtype changes (constants excluded: the rewrite converts them on demand)."""
        changed = {}
        for node, verdict in self.verdicts.items():
            facts = self.facts_of[node]
            if node.op_type in CONSTANT_OPS or verdict.dtype is None or verdict.dtype == facts.dtype:
                continue
            changed[node] = verdict.dtype
        return changed

    def required(self, node: ir.Node, index: int) -> str | None:
        """The dtype ``node`` needs on input ``index`` after the rewrite; None = whatever arrives (Cast)."""
        value = node.inputs[index]
        if value is None or (node.op_type == "Cast" and node.domain in ("", "ai.onnx")):
            return None
        facts = self.facts_of.get(node)
        verdict = self.verdicts.get(node)
        if facts is not None and verdict is not None and verdict.dtype and index in facts.input_slots:
            return verdict.dtype
        return self.original_dtype.get(value)

    def wanted_dtypes(self, value: ir.Value) -> set[str]:
        """The dtypes ``value``'s consumers need (Casts need none), plus its own where it must stay a graph
        output of that dtype (always in a subgraph; in the main graph with keep_io_types)."""
        wanted = {self.required(use.node, use.idx) for use in value.uses()}
        if value.is_graph_output() and (self.keep_io_types or value.graph is not self.scopes[0].graph):
            wanted.add(self.original_dtype.get(value))
        wanted.discard(None)
        return wanted  # type: ignore[return-value]

    def decisions(self) -> list[NodeDecision]:
        result = []
        for scope in self.scopes:
            for facts in scope.facts:
                verdict = self.verdicts[facts.node]
                colour = self.ctx.colour(facts).value if facts.dtype is not None else None
                result.append(
                    NodeDecision(
                        name=facts.node.name or "",
                        op_type=facts.key,
                        scope=scope.path,
                        colour=colour,
                        original_dtype=facts.dtype,
                        dtype=verdict.dtype,
                        rule=verdict.rule,
                        reason=verdict.reason,
                        cause=verdict.cause,
                    )
                )
        return result


def _original_dtypes(model: ir.Model) -> dict[ir.Value, str | None]:
    dtypes: dict[ir.Value, str | None] = {}
    for graph in graphs_of(model):
        for value in (*graph.inputs, *graph.initializers.values()):
            dtypes[value] = Dtype.of_value(value)
        for node in graph:
            for value in node.outputs:
                dtypes[value] = Dtype.of_value(value)
    return dtypes


def match_keep_dtype(
    entries: Sequence[KeepDtypeLike], model: ir.Model, source: str | None = None
) -> tuple[set[ir.Node], list[str]]:
    """Nodes pinned by keep_dtype entries (a node name, or ``OpType::X`` for every X node), and warnings.

    A node name that matches nothing is an error (a typo would otherwise silently pin nothing); an ``OpType::``
    entry that matches nothing only warns, since one keep_dtype file often serves several models.
    """
    nodes = [(node, node.name or "", op_key(node.domain, node.op_type)) for graph in graphs_of(model) for node in graph]
    pinned: set[ir.Node] = set()
    unmatched, warnings = [], []
    for entry in entries:
        matched = {node for node, name, key in nodes if entry.matches(name, key)}
        if not matched and getattr(entry, "op_type", None) is not None:
            warnings.append(f"keep_dtype entry {entry} matches no node in this model")
        elif not matched:
            unmatched.append(entry)
        pinned |= matched
    if unmatched:
        raise AmpconfigError(
            "keep_dtype entries match no node in the model: " + ", ".join(str(e) for e in unmatched),
            file=source,
            line=unmatched[0].line,
            hint="use node names as the model has them (`ampconfig rewrite --json` lists decisions), "
            "or OpType::<op type>",
        )
    return pinned, warnings


def _decide_scope(scope: Scope, ctx: DecisionContext, verdicts: dict[ir.Node, Verdict], facts_of: dict) -> None:
    if ctx.mode.is_mixed:
        paint_scope(scope, ctx, verdicts, facts_of)
        return
    for facts in scope.facts:
        if not is_flexible(facts):
            verdicts[facts.node] = fixed_verdict(facts, ctx) or simple_mode_verdict(facts, ctx)


def _settle_flexible(plan: Plan, facts_list: Iterable[NodeFacts]) -> None:
    """Constants follow their consumers; existing float Casts produce the one dtype their consumers need."""
    for facts in facts_list:
        node = facts.node
        if facts.dtype is None:
            plan.verdicts[node] = Verdict(None, Rule.NOT_FLOAT, "computes on no float32/float16/bfloat16 tensor")
            continue
        if node in plan.ctx.pinned:
            plan.verdicts[node] = Verdict(facts.dtype, Rule.KEEP_DTYPE, "pinned to its original dtype by keep_dtype")
            continue
        wanted = plan.wanted_dtypes(node.outputs[0])
        kind = "Cast" if node.op_type == "Cast" else "constant"
        if len(wanted) == 1 and (dtype := next(iter(wanted))) != facts.dtype and dtype in MOVABLE_DTYPES:
            rule = Rule.CAST_RETARGETED if node.op_type == "Cast" else Rule.FOLLOWS_CONSUMERS
            plan.verdicts[node] = Verdict(dtype, rule, f"{kind} now produces {dtype}, as every consumer needs")
        else:
            detail = "consumers need several dtypes" if len(wanted) > 1 else "consumers need its dtype"
            plan.verdicts[node] = Verdict(facts.dtype, Rule.MODE_KEEPS, f"{kind} kept: {detail}")


def build_plan(model: ir.Model, ctx: DecisionContext, keep_io_types: bool = True) -> Plan:
    scopes = list(iter_scopes(model, ctx.low))
    facts_of = {facts.node: facts for scope in scopes for facts in scope.facts}
    if ctx.mode is PrecisionMode.MUST_KEEP_ORIGIN_DTYPE:
        missing = missing_origin_kernels(list(facts_of.values()), ctx)
        raise_for_missing_origin_kernels(missing, ctx.library.target)
    verdicts: dict[ir.Node, Verdict] = {}
    for scope in scopes:
        _decide_scope(scope, ctx, verdicts, facts_of)
    plan = Plan(scopes, facts_of, verdicts, _original_dtypes(model), keep_io_types, ctx)
    # Consumers are all decided now; flexible nodes are settled in reverse order so a Cast feeding a constant
    # chain sees its consumers' final dtypes.
    flexible = [facts for scope in scopes for facts in scope.facts if is_flexible(facts)]
    _settle_flexible(plan, reversed(flexible))
    return plan
