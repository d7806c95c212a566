"""What pinning one node costs: the nodes it takes back to float32, and their estimated latency.

In the mixed modes a pinned node does not go back alone: a gray or clear node that followed its inputs into low
precision follows the pinned node back to float32 (Ascend's rule), and a clear node that went low because all its
consumers were low (TensorFlow's rule) goes back when one of them does. Counting them from the decisions needs no
rewrite; the search still counts every candidate's low nodes exactly from its own rewrite. The count is an upper
bound: the cast-aware island pass may give some of those nodes back to low precision.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ampconfig.decide.decisions import NodeDecision, Rule
from ampconfig.diagnose.graph_values import GraphNode
from ampconfig.opinfo.costs import cast_us, kernel_us

#: Floor of a pin's cost (microseconds) for the latency objective: a pin is never free.
MIN_COST_US = 0.01
#: A lowered consumer that multiplies its inputs' relative error by at least this much (its transmission: a
#: subtraction that cancels, a softmax over large logits) reads a pinned node's output in the low type and amplifies
#: that rounding: pinning the node alone gains nothing, so its pin takes such consumers along.
AMPLIFYING = 10.0


def _wiring(nodes: Sequence[GraphNode]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Each value's producing node, and each node's consumers (by node name)."""
    producers = {output: node.name for node in nodes for output in node.outputs}
    consumers: dict[str, list[str]] = {}
    for node in nodes:
        for name in node.inputs:
            if name in producers:
                consumers.setdefault(producers[name], []).append(node.name)
    return producers, consumers


def amplifying_consumers(
    nodes: Sequence[GraphNode], lowered: Collection[str], transmission: Mapping[str, float]
) -> dict[str, frozenset[str]]:
    """For each node of ``lowered``, the lowered nodes downstream of it through consumers whose transmission is at
    least :data:`AMPLIFYING` (a chain of such consumers is taken whole): what its pin must keep in float32 with it
    for its output to reach them unrounded. Empty for most nodes."""
    low = set(lowered)
    _, consumers = _wiring(nodes)
    result: dict[str, frozenset[str]] = {}
    for start in low:
        taken: set[str] = set()
        frontier = [start]
        while frontier:
            for consumer in consumers.get(frontier.pop(), ()):
                if consumer in low and consumer not in taken and transmission.get(consumer, 1.0) >= AMPLIFYING:
                    taken.add(consumer)
                    frontier.append(consumer)
        result[start] = frozenset(taken - {start})
    return result


def pin_followers(
    nodes: Sequence[GraphNode], decisions: Sequence[NodeDecision], lowered: Collection[str]
) -> dict[str, frozenset[str]]:
    """For each node of ``lowered``, the lowered nodes its pin takes back to float32 (itself included)."""
    rules = {d.name: d.rule for d in decisions}  # node names are unique across scopes
    clear = {d.name for d in decisions if d.colour == "clear"}
    low = set(lowered)
    producers, consumers = _wiring(nodes)
    inputs_of = {node.name: [producers[name] for name in node.inputs if name in producers] for node in nodes}
    result: dict[str, frozenset[str]] = {}
    for start in low:
        taken = {start}
        frontier = [start]
        while frontier:
            name = frontier.pop()
            neighbours = [
                c
                for c in consumers.get(name, ())
                if rules.get(c) is Rule.FOLLOWS_INPUTS and not _stays_low(c, clear, consumers, low, taken, rules)
            ]
            neighbours += [p for p in inputs_of.get(name, ()) if rules.get(p) is Rule.FOLLOWS_CONSUMERS]
            for other in neighbours:
                if other in low and other not in taken:
                    taken.add(other)
                    frontier.append(other)
        result[start] = frozenset(taken)
    return result


def _stays_low(
    name: str,
    clear: Collection[str],
    consumers: Mapping[str, list[str]],
    low: Collection[str],
    taken: Collection[str],
    rules: Mapping[str, Rule],
) -> bool:
    """A clear node whose consumers all stay low stays low too (it follows its consumers, TensorFlow's rule). A
    consumer that followed its inputs follows this node back to float32, unless it is itself a clear node that
    stays low the same way (a Reshape -> Transpose chain in front of a white MatMul)."""
    users = consumers.get(name, [])
    return (
        name in clear
        and bool(users)
        and all(
            user in low
            and user not in taken
            and (rules.get(user) is not Rule.FOLLOWS_INPUTS or _stays_low(user, clear, consumers, low, taken, rules))
            for user in users
        )
    )


def node_costs(followers: Mapping[str, frozenset[str]]) -> dict[str, float]:
    """The nodes objective: a pin costs the nodes it takes back to float32."""
    return {name: float(len(taken)) for name, taken in followers.items()}


def latency_costs(
    followers: Mapping[str, frozenset[str]],
    op_types: Mapping[str, str],
    low_dtype: str,
    elements: Mapping[str, int],
    flops: Mapping[str, float],
) -> dict[str, float]:
    """The latency objective: a pin costs the estimated microseconds its nodes lose by running in float32, plus
    a Cast on each side of it (``elements``: each node's largest output)."""
    costs = {}
    for name, taken in followers.items():
        slower = sum(
            kernel_us(op_types[node], "float32", elements.get(node, 1), flops.get(node))
            - kernel_us(op_types[node], low_dtype, elements.get(node, 1), flops.get(node))
            for node in taken
        )
        costs[name] = max(slower + 2 * cast_us(elements.get(name, 1)), MIN_COST_US)
    return costs
