"""The decision state the passes read and write: one typed object instead of dicts handed around.

:class:`DecisionState` holds the model's scopes and node facts (read-only), the context (mode, lists, op info,
pins), each painted node's effective colour, and the verdicts decided so far. Helpers here answer the questions
every pass asks about a node's neighbours: how does this float input arrive, who consumes this output.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

import onnx_ir as ir

from ampconfig.decide.context import DecisionContext, Verdict
from ampconfig.decide.facts import CONSTANT_OPS, NodeFacts, Scope
from ampconfig.decide.needs import Needs
from ampconfig.decide.user_judgements import Judgement, judge_nodes
from ampconfig.decide.value_ranges import Bounds
from ampconfig.domains import DEFAULT_DOMAINS
from ampconfig.dtypes import LOW_DTYPES, Dtype
from ampconfig.opinfo.library import Colour


class Arrival(Enum):
    """How a float input reaches a node."""

    CONSTANT = "constant"  # an initializer, a Constant/ConstantOfShape, or a node fed only by those
    LOW = "low"
    FLOAT32 = "float32"
    PENDING = "pending"  # from a node not decided yet


class LoweredIsland(NamedTuple):
    nodes: frozenset[ir.Node]
    casts_before: int
    casts_after: int


@dataclass
class DecisionState:
    ctx: DecisionContext
    scopes: list[Scope]
    facts_of: dict[ir.Node, NodeFacts]
    verdicts: dict[ir.Node, Verdict] = field(default_factory=dict)
    #: the effective colour of each painted node (mixed modes), after the per-node judgements
    colours: dict[ir.Node, Colour] = field(default_factory=dict)
    #: why a node's effective colour differs from its op type's colour in the lists
    colour_reasons: dict[ir.Node, str] = field(default_factory=dict)
    #: nodes whose float inputs are all constants (or come from such nodes): their outputs count as constants
    constant_fed: set[ir.Node] = field(default_factory=set)
    #: graph inputs and outputs keep their dtypes (subgraph boundaries always do)
    keep_io_types: bool = True
    #: the float32 islands the islands pass lowered, with their boundary casts before and after
    lowered_islands: list[LoweredIsland] = field(default_factory=list)
    #: the user's judgement of each node a judge answered for (:mod:`ampconfig.decide.user_judgements`)
    judgements: dict[ir.Node, Judgement] = field(default_factory=dict)
    #: the bounds of each large constant the values pass read, by tensor: the rewrite's conversion reads them
    constant_bounds: dict[ir.TensorProtocol, Bounds] = field(default_factory=dict)

    def __post_init__(self) -> None:
        #: what each reader needs and which casts the verdicts so far imply (reads ``verdicts`` live)
        self.needs = Needs.of(
            self.facts_of, self.verdicts, Dtype.of_value, (scope.graph for scope in self.scopes), self.keep_io_types
        )

    @classmethod
    def of(cls, scopes: list[Scope], ctx: DecisionContext, keep_io_types: bool = True) -> DecisionState:
        """The state before any decision; the user's judges (``ctx.judges``) have judged the nodes."""
        scopes, judged = judge_nodes(scopes, ctx.judges)
        facts_of = {facts.node: facts for scope in scopes for facts in scope.facts}
        return cls(ctx, scopes, facts_of, keep_io_types=keep_io_types, judgements=judged)

    # -- verdicts: these two methods are the only writers -------------------------------------------------------
    def decide(self, node: ir.Node, verdict: Verdict) -> bool:
        """Give ``node`` its verdict; returns whether that changed it."""
        changed = self.verdicts.get(node) != verdict
        self.verdicts[node] = verdict
        return changed

    def forget(self, node: ir.Node) -> bool:
        """Drop ``node``'s verdict (a soft verdict about to be recomputed); returns whether it had one."""
        return self.verdicts.pop(node, None) is not None

    def dtype_of(self, node: ir.Node) -> Dtype | None:
        verdict = self.verdicts.get(node)
        return verdict.dtype if verdict is not None else None

    def colour(self, node: ir.Node) -> Colour:
        colour = self.colours.get(node)
        return colour if colour is not None else self.ctx.colour(self.facts_of[node])

    # -- neighbours --------------------------------------------------------------------------------------------
    def arrival(self, value: ir.Value) -> tuple[Arrival, str]:
        """How the float input ``value`` arrives, and the name of what decides that."""
        # Asked for every float input of every painted node, twice (the painting and its check): the producer
        # is read once and its op type tested once for constants and Casts (is_constant's two tests, inlined).
        producer = value.producer()
        if value.const_value is not None and not value.is_graph_input():
            return Arrival.CONSTANT, (producer.name if producer is not None else value.name) or ""
        if producer is None:
            kind = Arrival.LOW if Dtype.of_value(value) in (Dtype.FLOAT16, Dtype.BFLOAT16) else Arrival.FLOAT32
            return kind, f"input {value.name}"
        op_type = producer.op_type
        onnx_op = op_type in _CONSTANT_OR_CAST and producer.domain in DEFAULT_DOMAINS
        if onnx_op and op_type != "Cast":
            return Arrival.CONSTANT, producer.name or ""
        if onnx_op:
            source = producer.inputs[0]
            if source is None or Dtype.of_value(source) is None:
                return Arrival.CONSTANT, producer.name or ""  # a Cast from a non-float source can be retargeted
            return self.arrival(source)
        if producer in self.constant_fed:
            return Arrival.CONSTANT, producer.name or ""
        # The dtype the value has after the decisions so far, with the producer's facts and verdict read once for
        # both questions (is it decided yet, and in what).
        facts = self.facts_of.get(producer)
        dtype = None
        if facts is not None and value.index() in facts.output_slots:
            verdict = self.verdicts.get(producer)
            if verdict is not None:
                dtype = verdict.dtype
            elif facts.dtype is not None:
                return Arrival.PENDING, producer.name or ""
        if dtype is None:
            dtype = Dtype.of_value(value)
        return (Arrival.LOW if dtype in LOW_DTYPES else Arrival.FLOAT32), producer.name or ""

    def float_consumers(self, node: ir.Node) -> Iterator[tuple[ir.Node, ir.Value]]:
        """(consumer, value) for each use of the node's float outputs as a consumer's compute-dtype input."""
        for value in node.outputs:
            if Dtype.of_value(value) is None:
                continue
            for use in value.uses():
                consumer_facts = self.facts_of.get(use.node)
                if consumer_facts is not None and use.idx in consumer_facts.input_slots:
                    yield use.node, value

    def live_inputs(self, facts: NodeFacts) -> list[ir.Value]:
        """The node's compute-dtype inputs that are not constants."""
        values = (facts.node.inputs[i] for i in facts.input_slots)
        return [value for value in values if value is not None and not is_constant(value)]


_CONSTANT_OR_CAST = CONSTANT_OPS | {"Cast"}


def is_constant(value: ir.Value) -> bool:
    """An initializer (not also a graph input) or the output of a Constant/ConstantOfShape node."""
    if value.const_value is not None and not value.is_graph_input():
        return True
    producer = value.producer()
    # is_onnx_op, inlined: this is asked for most inputs of most nodes, by several passes
    return producer is not None and producer.op_type in CONSTANT_OPS and producer.domain in DEFAULT_DOMAINS


def is_flexible(facts: NodeFacts) -> bool:
    """Casts and constants: their dtype follows their consumers and is settled last, not painted (unless nothing
    may retype them: a sparse constant, an untyped Cast)."""
    # The op key is the bare op type only in ONNX's own domain (``domain::Op`` elsewhere): is_onnx_op, read from
    # the facts (this is asked several times per node).
    return facts.blocker is None and facts.key in FLEXIBLE_OPS


#: Casts and constants: their dtype follows their readers.
FLEXIBLE_OPS = frozenset({"Cast", *CONSTANT_OPS})
