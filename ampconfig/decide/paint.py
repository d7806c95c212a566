"""Painting for the mixed modes (design section 5): white/black/gray/clear -> low precision or float32.

Passes, in order, over one scope (a graph or subgraph):
  1. white -> low (unless the target/schema cannot run it low: rule 5);
  2. deny propagation (TensorFlow): gray nodes downstream of a black node, and clear nodes that lead through
     clear nodes into gray/black ones, become black;
  3. gray and clear follow their inputs (Ascend): low when every float input is low or constant, float32 when
     any comes from a float32 node or a graph input;
  4. clear nodes (and nodes fed only by constants) whose float consumers are all low become low, walking
     backwards, so the one cast sits before a Reshape/Transpose chain instead of after it.
Each verdict names the rule and the neighbour that caused it. Pure: nothing here mutates the graph.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx_ir as ir

from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import CONSTANT_OPS, NodeFacts, Scope
from ampconfig.decide.policy import DecisionContext, Verdict, fixed_verdict, is_flexible, requires_fp32_for_black
from ampconfig.dtypes import LOW_DTYPES, Dtype
from ampconfig.opinfo.library import Colour

CONST, LOW, FP32, PENDING = "const", "low", "fp32", "pending"


def paint_scope(
    scope: Scope,
    ctx: DecisionContext,
    decided: dict[ir.Node, Verdict],
    facts_of: Mapping[ir.Node, NodeFacts],
) -> None:
    """Decide every paintable node of ``scope`` into ``decided`` (which also holds outer scopes' verdicts)."""
    candidates: list[NodeFacts] = []
    for facts in scope.facts:
        if is_flexible(facts):
            continue
        verdict = fixed_verdict(facts, ctx)
        if verdict is None and facts.dtype != Dtype.FLOAT32:
            verdict = requires_fp32_for_black(facts, ctx) or Verdict(
                facts.dtype, Rule.ALREADY_LOW, f"already {facts.dtype}; the mixed mode keeps it"
            )
        if verdict is None:
            verdict = ctx.low_blocker(facts, ctx.low) if ctx.colour(facts) is not Colour.BLACK else None
        if verdict is not None:
            decided[facts.node] = verdict
        else:
            candidates.append(facts)

    colour = {f.node: ctx.colour(f) for f in candidates}
    for facts in candidates:
        if colour[facts.node] is Colour.WHITE:
            decided[facts.node] = Verdict(ctx.low, Rule.WHITE_LIST, f"{facts.key} is on the white list")
        elif colour[facts.node] is Colour.BLACK:
            decided[facts.node] = Verdict(Dtype.FLOAT32, Rule.BLACK_LIST, f"{facts.key} is on the black list")

    _propagate_deny(scope, candidates, colour, decided, facts_of)
    pending = _follow_inputs(candidates, colour, ctx, decided, facts_of)
    _follow_consumers(scope, candidates, colour, pending, ctx, decided, facts_of)
    _guard_layer_norm_fusion(scope, candidates, colour, decided, facts_of)


def float_consumers(node: ir.Node, facts_of: Mapping[ir.Node, NodeFacts]) -> Iterator[tuple[ir.Node, ir.Value]]:
    """(consumer, value) for every use of the node's float outputs in a consumer's compute-dtype input."""
    for value in node.outputs:
        if Dtype.of_value(value) is None:
            continue
        for use in value.uses():
            consumer_facts = facts_of.get(use.node)
            if consumer_facts is not None and use.idx in consumer_facts.input_slots:
                yield use.node, value


def _propagate_deny(
    scope: Scope,
    candidates: list[NodeFacts],
    colour: Mapping[ir.Node, Colour],
    decided: dict[ir.Node, Verdict],
    facts_of: Mapping[ir.Node, NodeFacts],
) -> None:
    open_nodes = {f.node for f in candidates if f.node not in decided}
    # Clear nodes that lead, through clear nodes only, into a gray or black node (TensorFlow's rule).
    leads_to_deny_or_infer: set[ir.Node] = set()
    for facts in reversed(scope.facts):
        node = facts.node
        if node not in open_nodes or colour[node] is not Colour.CLEAR:
            continue
        for consumer, _ in float_consumers(node, facts_of):
            if consumer.graph is not scope.graph:
                continue
            consumer_colour = colour.get(consumer)
            if consumer_colour in (Colour.GRAY, Colour.BLACK) or consumer in leads_to_deny_or_infer:
                leads_to_deny_or_infer.add(node)
                break

    black_sources = [f.node for f in candidates if colour[f.node] is Colour.BLACK]
    for source in black_sources:
        stack = [source]
        while stack:
            node = stack.pop()
            for consumer, _ in float_consumers(node, facts_of):
                if consumer not in open_nodes or consumer in decided:
                    continue
                consumer_colour = colour[consumer]
                if consumer_colour is Colour.GRAY or (
                    consumer_colour is Colour.CLEAR and consumer in leads_to_deny_or_infer
                ):
                    decided[consumer] = Verdict(
                        Dtype.FLOAT32,
                        Rule.DENY_PROPAGATION,
                        f"downstream of black-list node {source.name} ({source.op_type}); kept float32",
                        cause=node.name,
                    )
                    stack.append(consumer)


def source_kind(
    value: ir.Value,
    decided: Mapping[ir.Node, Verdict],
    facts_of: Mapping[ir.Node, NodeFacts],
    pending: set[ir.Node],
) -> tuple[str, str]:
    """How a float input arrives: constant, low, float32 or pending, with the name of what decides it."""
    if value.const_value is not None and not value.is_graph_input():
        return CONST, value.name or ""
    producer = value.producer()
    if producer is None:
        kind = LOW if Dtype.of_value(value) in LOW_DTYPES else FP32
        return kind, f"input {value.name}"
    if producer.op_type in CONSTANT_OPS:
        return CONST, producer.name or ""
    if producer.op_type == "Cast":
        source = producer.inputs[0]
        if source is None or Dtype.of_value(source) is None:
            return CONST, producer.name or ""  # a Cast from a non-float source can be retargeted freely
        return source_kind(source, decided, facts_of, pending)
    if producer in pending:
        return PENDING, producer.name or ""
    facts = facts_of.get(producer)
    verdict = decided.get(producer)
    dtype = Dtype.of_value(value)
    if verdict is not None and facts is not None and value.index() in facts.output_slots:
        dtype = verdict.dtype
    return (LOW if dtype in LOW_DTYPES else FP32), producer.name or ""


def _follow_inputs(
    candidates: list[NodeFacts],
    colour: Mapping[ir.Node, Colour],
    ctx: DecisionContext,
    decided: dict[ir.Node, Verdict],
    facts_of: Mapping[ir.Node, NodeFacts],
) -> set[ir.Node]:
    pending: set[ir.Node] = set()
    for facts in candidates:
        node = facts.node
        if node in decided:
            continue
        kinds = [source_kind(node.inputs[i], decided, facts_of, pending) for i in facts.input_slots]
        live = [(kind, cause) for kind, cause in kinds if kind not in (CONST, PENDING)]
        if not live:
            pending.add(node)
            continue
        high = next((cause for kind, cause in live if kind == FP32), None)
        name = colour[node].value
        if high is None:
            decided[node] = Verdict(
                ctx.low,
                Rule.FOLLOWS_INPUTS,
                f"{name}: every float input is {ctx.low} or constant",
                cause=live[0][1],
            )
        else:
            decided[node] = Verdict(
                Dtype.FLOAT32, Rule.FOLLOWS_INPUTS, f"{name}: a float input comes from float32 {high}", cause=high
            )
    return pending


def _follow_consumers(
    scope: Scope,
    candidates: list[NodeFacts],
    colour: Mapping[ir.Node, Colour],
    pending: set[ir.Node],
    ctx: DecisionContext,
    decided: dict[ir.Node, Verdict],
    facts_of: Mapping[ir.Node, NodeFacts],
) -> None:
    candidate_facts = {f.node: f for f in candidates}
    outputs = set(scope.graph.outputs)
    for facts in reversed(scope.facts):
        node = facts.node
        if node not in candidate_facts:
            continue
        verdict = decided.get(node)
        movable = node in pending or (
            colour[node] is Colour.CLEAR
            and verdict is not None
            and verdict.rule is Rule.FOLLOWS_INPUTS
            and verdict.dtype == Dtype.FLOAT32
            and _live_float_inputs(facts) <= 1
        )
        if not movable:
            continue
        wanted = _consumer_dtypes(facts, outputs, decided, facts_of)
        if wanted and all(dtype == ctx.low for dtype, _ in wanted):
            decided[node] = Verdict(
                ctx.low, Rule.FOLLOWS_CONSUMERS, f"every consumer computes in {ctx.low}", cause=wanted[0][1]
            )
            pending.discard(node)
        elif node in pending:
            cause = next((c for d, c in wanted if d != ctx.low), None)
            decided[node] = Verdict(
                Dtype.FLOAT32,
                Rule.FOLLOWS_CONSUMERS,
                "fed only by constants; a consumer needs float32" if cause else "fed only by constants",
                cause=cause,
            )
            pending.discard(node)


def _guard_layer_norm_fusion(
    scope: Scope,
    candidates: list[NodeFacts],
    colour: Mapping[ir.Node, Colour],
    decided: dict[ir.Node, Verdict],
    facts_of: Mapping[ir.Node, NodeFacts],
) -> None:
    """Keep a gray/clear node float32 when its low output would be cast up straight into a decomposed
    LayerNorm (ReduceMean + Sub of the same tensor, as exports below opset 17 write it). ONNX Runtime's
    LayerNormFusion absorbs such a Cast into the fused LayerNormalization, which then binds its type T to both
    float16 and float32 and fails to load. With the producer in float32 the cast sits upstream instead."""
    for facts in reversed(candidates):
        node = facts.node
        verdict = decided.get(node)
        if verdict is None or verdict.dtype not in LOW_DTYPES or colour[node] not in (Colour.GRAY, Colour.CLEAR):
            continue
        for index in facts.output_slots:
            head = _layer_norm_head(node.outputs[index], decided)
            if head is not None:
                decided[node] = Verdict(
                    Dtype.FLOAT32,
                    Rule.FUSION_GUARD,
                    "feeds a decomposed LayerNorm kept in float32; a cast between them would be absorbed by "
                    "ONNX Runtime's LayerNorm fusion and break the model, so this node stays float32",
                    cause=head,
                )
                break


def _layer_norm_head(value: ir.Value, decided: Mapping[ir.Node, Verdict]) -> str | None:
    """The ReduceMean starting a float32 decomposed LayerNorm on ``value``, if one does."""
    consumers = {use.node for use in value.uses()}
    for reduce_mean in consumers:
        verdict = decided.get(reduce_mean)
        if reduce_mean.op_type != "ReduceMean" or verdict is None or verdict.dtype != Dtype.FLOAT32:
            continue
        mean_users = {use.node for use in reduce_mean.outputs[0].uses()}
        if any(node.op_type == "Sub" and node in mean_users for node in consumers):
            return reduce_mean.name
    return None


def _live_float_inputs(facts: NodeFacts) -> int:
    node = facts.node
    return sum(
        1
        for i in facts.input_slots
        if not (node.inputs[i].const_value is not None and not node.inputs[i].is_graph_input())
        and not (node.inputs[i].producer() is not None and node.inputs[i].producer().op_type in CONSTANT_OPS)
    )


def _consumer_dtypes(
    facts: NodeFacts,
    graph_outputs: set[ir.Value],
    decided: Mapping[ir.Node, Verdict],
    facts_of: Mapping[ir.Node, NodeFacts],
) -> list[tuple[str | None, str]]:
    wanted: list[tuple[str | None, str]] = []
    for i in facts.output_slots:
        value = facts.node.outputs[i]
        if value in graph_outputs:
            wanted.append((Dtype.of_value(value), f"output {value.name}"))
        for use in value.uses():
            consumer = use.node
            consumer_facts = facts_of.get(consumer)
            if consumer_facts is None or use.idx not in consumer_facts.input_slots:
                if consumer.op_type == "Cast":
                    continue  # a Cast takes any dtype
                wanted.append((Dtype.of_value(value), consumer.name or ""))
                continue
            verdict = decided.get(consumer)
            wanted.append((verdict.dtype if verdict else consumer_facts.dtype, consumer.name or ""))
    return wanted
