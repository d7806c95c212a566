"""Mixed modes: keep ONNX Runtime's LayerNorm fusion from breaking the model.

Exports below opset 17 write LayerNorm out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div). When such a
decomposed LayerNorm stays float32 and its input comes from a low node, the rewrite puts a Cast between them, and
ONNX Runtime's LayerNormFusion absorbs that Cast into the fused LayerNormalization, which then binds its type T to
float16 and float32 at once and fails to load. Keeping the producer float32 puts the cast upstream instead.
The producer's consumers may then need to change too: the pipeline runs this pass and :class:`FollowNeighbours` in
one until-stable step.
"""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.decide.context import Verdict
from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import NodeFacts, Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.decide.passes.follow import SOFT_RULES
from ampconfig.dtypes import Dtype
from ampconfig.opinfo.library import Colour


class GuardLayerNormFusion(DecisionPass):
    """Ensures: no low gray/clear node's output feeds the head of a float32 decomposed LayerNorm. Returns whether
    it forced a node (its consumers then follow it again)."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        changed = False
        for facts in reversed(scope.facts):
            if not _guardable(state, facts):
                continue
            head = feeds_float32_layer_norm(state, facts)
            if head is not None:
                changed |= state.decide(
                    facts.node,
                    Verdict(
                        Dtype.FLOAT32,
                        Rule.FUSION_GUARD,
                        "feeds a decomposed LayerNorm kept in float32; a cast between them would be absorbed by "
                        "ONNX Runtime's LayerNorm fusion and break the model, so this node stays float32",
                        cause=head,
                    ),
                )
        return changed

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            if _guardable(state, facts) and feeds_float32_layer_norm(state, facts) is not None:
                raise self.unkept(f"{facts.node.name} is low and feeds a float32 decomposed LayerNorm")


def _guardable(state: DecisionState, facts: NodeFacts) -> bool:
    verdict = state.verdicts.get(facts.node)
    return (
        verdict is not None
        and verdict.is_low
        and verdict.rule in SOFT_RULES
        and state.colours.get(facts.node) in (Colour.GRAY, Colour.CLEAR)
    )


def feeds_float32_layer_norm(state: DecisionState, facts: NodeFacts) -> str | None:
    """The ReduceMean heading a float32 decomposed LayerNorm on one of the node's outputs, if there is one."""
    for index in facts.output_slots:
        head = _layer_norm_head(state, facts.node.outputs[index])
        if head is not None:
            return head
    return None


def _layer_norm_head(state: DecisionState, value: ir.Value) -> str | None:
    uses = value.uses()
    for use in uses:  # most values feed no ReduceMean: one look at each reader first
        if use.node.op_type == "ReduceMean":
            break
    else:
        return None
    consumers = {use.node for use in uses}
    for reduce_mean in consumers:
        if reduce_mean.op_type != "ReduceMean" or state.dtype_of(reduce_mean) is not Dtype.FLOAT32:
            continue
        mean_users = {use.node for use in reduce_mean.outputs[0].uses()}
        if any(node.op_type == "Sub" and node in mean_users for node in consumers):
            return reduce_mean.name
    return None
