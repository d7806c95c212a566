"""The plan: every node's verdict plus the dtype each consumer needs from each input. Pure data.

:func:`build_plan` runs the decision passes over every scope, outer before inner (a subgraph reads its outer
scope's final dtypes):

- every mode: :class:`CustomizedDtypes` (customize_dtypes entries), then :class:`FixedVerdicts` (nodes nothing may
  retype, keep_dtype pins, range overflow, checker rejects);
- modes that do not paint: :class:`ModePolicy`;
- mixed modes: :class:`AssignColours` -> :class:`PaintListed` -> :class:`PropagateDeny` -> (:class:`FollowNeighbours`
  -> :class:`GuardLayerNormFusion`, until the guard forces nothing) -> :class:`LowerCastBoundIslands` -> (follow and
  guard again if an island went low) -> :class:`CheckReasons`;
- every mode, last, innermost scope first: :class:`SettleFlexible` (Casts and constants follow their consumers).

:mod:`ampconfig.rewrite.apply` realises the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import onnx_ir as ir

from ampconfig.decide.context import DecisionContext, Verdict, verdict_dtype
from ampconfig.decide.decisions import NodeDecision
from ampconfig.decide.facts import CONSTANT_OPS, NodeFacts, Scope, graphs_of, iter_scopes
from ampconfig.decide.passes.colours import AssignColours
from ampconfig.decide.passes.customized import CustomizedDtypes
from ampconfig.decide.passes.deny import PropagateDeny
from ampconfig.decide.passes.fixed import FixedVerdicts
from ampconfig.decide.passes.flexible import SettleFlexible
from ampconfig.decide.passes.follow import FollowNeighbours
from ampconfig.decide.passes.fusion_guard import GuardLayerNormFusion
from ampconfig.decide.passes.islands import LowerCastBoundIslands
from ampconfig.decide.passes.listed import PaintListed
from ampconfig.decide.passes.modes import ModePolicy, refuse_missing_origin_kernels
from ampconfig.decide.passes.reasons import CheckReasons
from ampconfig.decide.state import DecisionState, is_constant
from ampconfig.dtypes import Dtype
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
    original_dtype: dict[ir.Value, Dtype | None]  # every value's dtype before the rewrite
    keep_io_types: bool
    ctx: DecisionContext
    colours: dict[ir.Node, str]  # effective colour of painted nodes (mixed modes)

    def new_dtypes(self) -> dict[ir.Node, Dtype]:
        """Nodes whose compute dtype changes (constants excluded: the rewrite converts them on demand)."""
        changed = {}
        for node, verdict in self.verdicts.items():
            facts = self.facts_of[node]
            if node.op_type in CONSTANT_OPS or verdict.dtype is None or verdict.dtype == facts.dtype:
                continue
            changed[node] = verdict.dtype
        return changed

    def required(self, node: ir.Node, index: int) -> Dtype | None:
        """The dtype ``node`` needs on input ``index`` after the rewrite; None = whatever arrives (Cast)."""
        value = node.inputs[index]
        if value is None or (node.op_type == "Cast" and node.domain in ("", "ai.onnx")):
            return None
        facts = self.facts_of.get(node)
        verdict = self.verdicts.get(node)
        if facts is not None and verdict is not None and verdict.dtype and index in facts.input_slots:
            return verdict.dtype
        return self.original_dtype.get(value)

    def wanted_dtypes(self, value: ir.Value) -> set[Dtype]:
        """The dtypes ``value``'s consumers need (Casts need none), plus its own where it must stay a graph
        output of that dtype (always in a subgraph; in the main graph with keep_io_types)."""
        wanted = {self.required(use.node, use.idx) for use in value.uses()}
        if value.is_graph_output() and (self.keep_io_types or value.graph is not self.scopes[0].graph):
            wanted.add(self.original_dtype.get(value))
        wanted.discard(None)
        return wanted  # type: ignore[return-value]

    def produced_dtype(self, value: ir.Value) -> Dtype | None:
        """The dtype ``value`` has after the rewrite, before any cast of it (a constant's: as it is today, since the
        rewrite converts constants on demand)."""
        producer = value.producer()
        if producer is not None and producer.op_type in CONSTANT_OPS:
            return self.original_dtype.get(value)
        return verdict_dtype(value, self.facts_of, self.verdicts) or self.original_dtype.get(value)

    def casts(self) -> set[tuple[ir.Value, Dtype]]:
        """(value, dtype) for every Cast node the rewrite inserts for this plan: one per value and dtype some
        consumer (or a kept graph output) needs and the value does not have, except where a constant is converted
        instead or an existing Cast's source already has that dtype (no round trips)."""
        found: set[tuple[ir.Value, Dtype]] = set()
        for scope in self.scopes:
            for value in values_of(scope.graph):
                if is_constant(value):
                    continue
                have = self.produced_dtype(value)
                if have is None:
                    continue
                producer = value.producer()
                source = producer.inputs[0] if producer is not None and producer.op_type == "Cast" else None
                for dtype in self.wanted_dtypes(value) - {have}:
                    if source is None or self.original_dtype.get(source) is not dtype:
                        found.add((value, dtype))
        return found

    def casts_needed(self) -> int:
        """How many Cast nodes the rewrite inserts for this plan (see :meth:`casts`)."""
        return len(self.casts())

    def decisions(self) -> list[NodeDecision]:
        result = []
        for scope in self.scopes:
            for facts in scope.facts:
                verdict = self.verdicts[facts.node]
                colour = self.colours.get(facts.node) or self.ctx.colour(facts).value if facts.dtype else None
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


def values_of(graph: ir.Graph) -> list[ir.Value]:
    """Every value a graph owns: its inputs, initializers and node outputs."""
    return [*graph.inputs, *graph.initializers.values(), *(v for node in graph for v in node.outputs if v.name)]


def _original_dtypes(model: ir.Model) -> dict[ir.Value, Dtype | None]:
    return {value: Dtype.of_value(value) for graph in graphs_of(model) for value in values_of(graph)}


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


def _paint(state: DecisionState, scope: Scope) -> None:
    """The mixed modes' passes over one scope."""
    for step in (AssignColours(), PaintListed(), PropagateDeny()):
        step(state, scope)
    follow_until_stable(state, scope)
    islands = LowerCastBoundIslands()
    islands(state, scope)
    if islands.lowered:
        follow_until_stable(state, scope)  # soft verdicts next to a lowered island now see it low
    CheckReasons()(state, scope)


def follow_until_stable(state: DecisionState, scope: Scope) -> None:
    """Follow neighbours, then guard the LayerNorm fusion; the guard forces nodes to float32, whose consumers then
    follow again, until the guard forces nothing (it only ever adds float32 verdicts, so this ends)."""
    follow, guard = FollowNeighbours(), GuardLayerNormFusion()
    while True:
        follow(state, scope)
        guard(state, scope)
        if not guard.changed:
            return


def build_plan(model: ir.Model, ctx: DecisionContext, keep_io_types: bool = True) -> Plan:
    scopes = list(iter_scopes(model, ctx.low, ctx.typing))
    state = DecisionState.of(scopes, ctx)
    if ctx.mode is PrecisionMode.MUST_KEEP_ORIGIN_DTYPE:
        refuse_missing_origin_kernels(state)
    customized, fixed = CustomizedDtypes(), FixedVerdicts()
    for scope in scopes:
        customized(state, scope)  # Ascend's precedence: customize_dtypes before keep_dtype and the mode
        fixed(state, scope)
        if ctx.mode.is_mixed:
            _paint(state, scope)
        else:
            ModePolicy()(state, scope)
    settle = SettleFlexible(keep_io_types, model.graph)
    for scope in reversed(scopes):
        settle(state, scope)
    colours = {node: colour.value for node, colour in state.colours.items()}
    return Plan(scopes, state.facts_of, state.verdicts, _original_dtypes(model), keep_io_types, ctx, colours)
