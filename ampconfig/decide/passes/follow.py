"""Mixed modes: gray and clear nodes follow their neighbours.

Inputs first (Ascend): in graph order, a node goes low when every live float input arrives low (constants take
whatever dtype their consumer needs), float32 when any arrives in float32 (the higher precision wins). Nodes fed
only by constants wait. Then consumers (TensorFlow's clear rule), walking backwards: a clear node with at most one
live float input, or a waiting node, goes low when every consumer computes low, so the one cast sits before a
Reshape/Transpose chain rather than after it.

These verdicts are *soft*: they depend on other verdicts. The pass first forgets the soft verdicts it made before,
so running it again after a later pass forced a node (the LayerNorm fusion guard) recomputes them consistently.
"""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.decide.context import Verdict
from ampconfig.decide.decision_state import Arrival, DecisionState
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import NodeFacts, Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.dtypes import Dtype
from ampconfig.opinfo.library import Colour

SOFT_RULES = frozenset({Rule.FOLLOWS_INPUTS, Rule.FOLLOWS_CONSUMERS})
_CONSTANT, _PENDING = Arrival.CONSTANT, Arrival.PENDING


class FollowNeighbours(DecisionPass):
    """Ensures: every paintable node of the scope is decided, and every soft verdict agrees with the final dtypes
    of the neighbours it names (see :func:`soft_verdict_problem`)."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        colours, verdicts = state.colours, state.verdicts
        candidates = [f for f in scope.facts if f.node in colours]
        before = {f.node: verdicts.get(f.node) for f in candidates}
        for node, verdict in before.items():
            if verdict is not None and verdict.rule in SOFT_RULES:
                state.forget(node)
        if state.constant_fed:
            state.constant_fed.difference_update(before)
        waiting = self._follow_inputs(state, candidates)
        self._follow_consumers(state, scope, candidates, waiting)
        return any(state.verdicts.get(node) != verdict for node, verdict in before.items())

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            if facts.node in state.colours and facts.node not in state.verdicts:
                raise self.unkept(f"{facts.node.name} is undecided")

    @staticmethod
    def _follow_inputs(state: DecisionState, candidates: list[NodeFacts]) -> set[ir.Node]:
        waiting: set[ir.Node] = set()
        low = state.ctx.low
        verdicts, arrival = state.verdicts, state.arrival  # read once: this loop runs for most nodes
        for facts in candidates:
            node = facts.node
            if node in verdicts:
                continue
            inputs = node.inputs
            arrivals = [arrival(value) for i in facts.input_slots if (value := inputs[i]) is not None]
            live = [(kind, cause) for kind, cause in arrivals if kind is not _CONSTANT and kind is not _PENDING]
            if not live:
                if not any(kind is _PENDING for kind, _ in arrivals):
                    state.constant_fed.add(node)
                waiting.add(node)
                continue
            high = next((cause for kind, cause in live if kind is Arrival.FLOAT32), None)
            label = _label(state, node)
            if high is None:
                verdict = Verdict(
                    low, Rule.FOLLOWS_INPUTS, f"{label}: every float input is {low} or constant", live[0][1]
                )
            else:
                verdict = Verdict(
                    Dtype.FLOAT32, Rule.FOLLOWS_INPUTS, f"{label}: a float input comes from float32 {high}", high
                )
            state.decide(node, verdict)
        return waiting

    @staticmethod
    def _follow_consumers(
        state: DecisionState, scope: Scope, candidates: list[NodeFacts], waiting: set[ir.Node]
    ) -> None:
        low = state.ctx.low
        candidate_nodes = {f.node for f in candidates}
        outputs = set(scope.graph.outputs)
        for facts in reversed(scope.facts):
            node = facts.node
            if node not in candidate_nodes:
                continue
            verdict = state.verdicts.get(node)
            movable = node in waiting or (
                state.colour(node) is Colour.CLEAR
                and verdict is not None
                and verdict.rule is Rule.FOLLOWS_INPUTS
                and verdict.dtype is Dtype.FLOAT32
                and len(state.live_inputs(facts)) <= 1
            )
            if not movable:
                continue
            wanted = consumer_dtypes(state, facts, outputs)
            if wanted and all(dtype is low for dtype, _ in wanted):
                state.decide(
                    node, Verdict(low, Rule.FOLLOWS_CONSUMERS, f"every consumer computes in {low}", wanted[0][1])
                )
            elif node in waiting:
                cause = next((c for d, c in wanted if d is not low), None)
                inputs = _constant_inputs(facts)
                reason = f"{inputs}; a consumer needs float32" if cause else f"{inputs}, and nothing reads it in {low}"
                state.decide(node, Verdict(Dtype.FLOAT32, Rule.FOLLOWS_CONSUMERS, reason, cause))
            waiting.discard(node)


def _constant_inputs(facts: NodeFacts) -> str:
    """Why a waiting node had nothing to follow: its float inputs, named, are constants (its other inputs, such as
    an embedding Gather's token ids, carry no float dtype to follow), or it has no float input at all."""
    names = [value.name or "?" for i in facts.input_slots if (value := facts.node.inputs[i]) is not None]
    if not names:
        return "no float input to follow"
    if len(names) == 1:
        return f"its float input {names[0]} is a constant"
    return f"its float inputs ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}) are constants"


def _label(state: DecisionState, node: ir.Node) -> str:
    """The node's colour for reasons, with the per-node judgement behind it where there is one."""
    colour = state.colour(node).value
    why = state.colour_reasons.get(node)
    return f"{colour} ({why})" if why else colour


def consumer_dtypes(
    state: DecisionState, facts: NodeFacts, graph_outputs: set[ir.Value]
) -> list[tuple[Dtype | None, str]]:
    """What each consumer of the node's compute-dtype outputs computes in, as the rule "every consumer computes
    low" reads it: its own compute dtype where the value is its compute input (decided or not), else the value's
    present dtype (a Cast reading the value as its source is left out). What readers need after the rewrite is
    :mod:`ampconfig.decide.needs`; this is the painting rule's narrower question."""
    wanted: list[tuple[Dtype | None, str]] = []
    for index in facts.output_slots:
        value = facts.node.outputs[index]
        if value in graph_outputs:
            wanted.append((Dtype.of_value(value), f"output {value.name}"))
        for use in value.uses():
            consumer = use.node
            consumer_facts = state.facts_of.get(consumer)
            if consumer_facts is None or use.idx not in consumer_facts.input_slots:
                if consumer.op_type == "Cast":
                    continue
                wanted.append((Dtype.of_value(value), consumer.name or ""))
                continue
            verdict = state.verdicts.get(consumer)
            wanted.append((verdict.dtype if verdict else consumer_facts.dtype, consumer.name or ""))
    return wanted


def soft_verdict_problem(state: DecisionState, facts: NodeFacts, graph_outputs: set[ir.Value]) -> str | None:
    """Why the node's soft verdict disagrees with its neighbours' final dtypes, or None when it agrees."""
    verdict = state.verdicts[facts.node]
    node, low = facts.node, state.ctx.low
    if verdict.rule is Rule.FOLLOWS_INPUTS:
        kinds = [state.arrival(value)[0] for i in facts.input_slots if (value := node.inputs[i]) is not None]
        live = [kind for kind in kinds if kind is not Arrival.CONSTANT]
        if Arrival.PENDING in live:
            return "an input is still undecided"
        if verdict.is_low and Arrival.FLOAT32 in live:
            return "says every float input is low, but one arrives in float32"
        if verdict.dtype is Dtype.FLOAT32 and Arrival.FLOAT32 not in live and live:
            return "says a float input comes from float32, but every one arrives low"
    elif verdict.rule is Rule.FOLLOWS_CONSUMERS and verdict.is_low:
        wanted = consumer_dtypes(state, facts, graph_outputs)
        if not wanted or any(dtype is not low for dtype, _ in wanted):
            return "says every consumer computes low, but one does not"
    return None
