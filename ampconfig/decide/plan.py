"""The plan: every node's verdict plus what each reader needs from each input. Pure data.

:func:`build_plan` runs the pipeline of the mode (:mod:`ampconfig.decide.pass_pipelines`: which passes, in which order,
scope by scope) over a :class:`~ampconfig.decide.decision_state.DecisionState`; the :class:`Plan` keeps the verdicts and
answers, through :mod:`ampconfig.decide.needs`, what each reader needs and which casts the plan implies.
:mod:`ampconfig.rewrite.apply` realises the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

import onnx_ir as ir

from ampconfig.decide.context import DecisionContext, Verdict
from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.decisions import NodeDecision
from ampconfig.decide.facts import CONSTANT_OPS, NodeFacts, Scope, graphs_of, is_onnx_op, iter_scopes
from ampconfig.decide.needs import Cast, Needs
from ampconfig.decide.pass_pipelines import Pipeline, pipeline_for
from ampconfig.decide.value_ranges import Bounds
from ampconfig.dtypes import Dtype
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.library import op_key


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
    #: the bounds of the large constants the values pass read (:attr:`DecisionState.constant_bounds`)
    constant_bounds: Mapping[ir.TensorProtocol, Bounds] = field(default_factory=dict)

    def new_dtypes(self) -> dict[ir.Node, Dtype]:
        """Nodes whose compute dtype changes (constants excluded: the rewrite converts them on demand)."""
        changed = {}
        for node, verdict in self.verdicts.items():
            # The dtype first: most verdicts keep the node's dtype (the step contracts call this on every attempt).
            dtype = verdict.dtype
            if dtype is None or dtype == self.facts_of[node].dtype or is_onnx_op(node, CONSTANT_OPS):
                continue
            changed[node] = dtype
        return changed

    @cached_property
    def needs(self) -> Needs:
        """What each reader needs, and the casts this plan implies, read against the dtypes before the rewrite."""
        return Needs.of(
            self.facts_of,
            self.verdicts,
            self.original_dtype.get,
            (scope.graph for scope in self.scopes),
            self.keep_io_types,
        )

    def casts(self) -> set[Cast]:
        """(value, dtype) for every Cast node the rewrite inserts for this plan (see :mod:`ampconfig.decide.needs`)."""
        return self.needs.casts(value for scope in self.scopes for value in values_of(scope.graph))

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


def original_dtypes(model: ir.Model) -> dict[ir.Value, Dtype | None]:
    return {value: Dtype.of_value(value) for graph in graphs_of(model) for value in values_of(graph)}


def match_keep_dtype(
    entries: Sequence[KeepDtypeLike], model: ir.Model, source: str | None = None
) -> tuple[set[ir.Node], list[str]]:
    """Nodes pinned by keep_dtype entries (a node name, or ``OpType::X`` for every X node), and warnings.

    A node name that matches nothing is an error (a typo would otherwise silently pin nothing); an ``OpType::``
    entry that matches nothing only warns, since one keep_dtype file often serves several models.
    """
    if not entries:
        return set(), []  # no keep_dtype file (most runs): no walk over the nodes
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


def build_plan(
    model: ir.Model,
    ctx: DecisionContext,
    keep_io_types: bool = True,
    pipeline: Pipeline | None = None,
    constant_bounds: Mapping[ir.TensorProtocol, Bounds] | None = None,
) -> Plan:
    """Decide every node of ``model`` with ``pipeline``, by default the one of ``ctx``'s mode
    (:mod:`ampconfig.decide.pass_pipelines`). ``constant_bounds``: the bounds of large constants read before (the
    values pass reads those within the low type's range no more)."""
    state = DecisionState.of(list(iter_scopes(model, ctx.low, ctx.typing)), ctx, keep_io_types)
    state.constant_bounds.update(constant_bounds or {})
    (pipeline or pipeline_for(ctx.mode)).run(state)
    colours = {node: colour.value for node, colour in state.colours.items()}
    return Plan(
        state.scopes,
        state.facts_of,
        state.verdicts,
        original_dtypes(model),
        keep_io_types,
        ctx,
        colours,
        state.constant_bounds,
    )
