"""Mixed modes: TensorFlow's deny propagation. Walking forward from each black node, gray nodes become black, and
so do clear nodes that lead, through clear nodes only, into a gray or black node."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.decide.context import Verdict
from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.dtypes import Dtype
from ampconfig.opinfo.library import Colour


class PropagateDeny(DecisionPass):
    """Ensures: every node denied by propagation is float32 and names a float32 neighbour as its cause."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        changed = False
        open_nodes = {f.node for f in scope.facts if f.node in state.colours and f.node not in state.verdicts}
        leads_to_deny = _clear_nodes_leading_to_deny(state, scope, open_nodes)
        sources = [
            f.node
            for f in scope.facts
            if state.colours.get(f.node) is Colour.BLACK
            and (verdict := state.verdicts.get(f.node)) is not None
            and verdict.rule is Rule.BLACK_LIST
        ]
        for source in sources:
            stack = [source]
            while stack:
                node = stack.pop()
                for consumer, _ in state.float_consumers(node):
                    if consumer not in open_nodes or consumer in state.verdicts:
                        continue
                    colour = state.colours[consumer]
                    if colour is Colour.GRAY or (colour is Colour.CLEAR and consumer in leads_to_deny):
                        changed |= state.decide(
                            consumer,
                            Verdict(
                                Dtype.FLOAT32,
                                Rule.DENY_PROPAGATION,
                                f"downstream of black-list node {source.name} ({source.op_type}); kept float32",
                                cause=node.name,
                            ),
                        )
                        stack.append(consumer)
        return changed

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        names = {f.node.name: f.node for f in scope.facts}
        for facts in scope.facts:
            verdict = state.verdicts.get(facts.node)
            if verdict is None or verdict.rule is not Rule.DENY_PROPAGATION:
                continue
            cause = names.get(verdict.cause or "")
            if verdict.dtype is not Dtype.FLOAT32 or cause is None or state.dtype_of(cause) is not Dtype.FLOAT32:
                raise self.unkept(f"{facts.node.name} is denied by {verdict.cause}, which is not float32")


def _clear_nodes_leading_to_deny(state: DecisionState, scope: Scope, open_nodes: set[ir.Node]) -> set[ir.Node]:
    """Clear nodes that lead, through clear nodes only, into a gray or black node (TensorFlow's rule)."""
    leads: set[ir.Node] = set()
    for facts in reversed(scope.facts):
        node = facts.node
        if node not in open_nodes or state.colours[node] is not Colour.CLEAR:
            continue
        for consumer, _ in state.float_consumers(node):
            if consumer.graph is not scope.graph:
                continue
            if state.colours.get(consumer) in (Colour.GRAY, Colour.BLACK) or consumer in leads:
                leads.add(node)
                break
    return leads
