"""Each node's decision written into the model it is about: ``metadata_props`` entries (``ampconfig.rule``,
``ampconfig.cause``, ``ampconfig.precision_mode``), which Netron shows beside the node, so whoever opens the
rewritten model sees why a node has its dtype without ampconfig's reports.

The entries are explain's fields (``explain --json``: ``rule``, ``cause``) and the mode. Not the reason: it names
where the values the decision read came from (``range_exceeds``: "on the inputs in frames.npz (ranges file r.json)"),
and ``rewrite --ranges R`` and the ``run`` that measured ``R`` write the same bytes (docs/design.md §7). A node the
rewrite added (a Cast, a constant's copy in another dtype) says so (rule ``inserted``; a Cast's cause is the value it
converts). Node metadata exists from IR version 10 (``NodeProto.metadata_props``): a model kept below it gets none,
and the caller says so.

Rewriting a rewritten model is idempotent (docs/design.md §6), and so are the entries: in a second rewrite in the
same mode, a node the first one lowered is "already low" and a Cast the first one inserted is "kept"; the entries
of the rewrite that made the node what it is stay (they say why it is low), every other node's are replaced, and
no entry of an earlier rewrite is left beside new ones (a node's entries are one mapping, one value per key).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import onnx_ir as ir

from ampconfig.decide.decisions import NodeDecision, Rule
from ampconfig.decide.facts import graphs_of

#: What every key ampconfig writes starts with; an entry of another tool is never touched.
PREFIX = "ampconfig."
RULE = PREFIX + "rule"
CAUSE = PREFIX + "cause"
PRECISION_MODE = PREFIX + "precision_mode"
#: The rule written on a node the rewrite added: it was not decided, it realises decisions.
INSERTED = "inserted"
#: The first IR version with node metadata (onnx.proto: ``NodeProto.metadata_props``, IR 10).
FIRST_IR_VERSION = 10
#: The rules a rewrite gives a node it finds as an earlier rewrite in the same mode left it.
_FOUND_AS_LEFT = frozenset({Rule.ALREADY_LOW, Rule.MODE_KEEPS})


def no_metadata_note(ir_version: int) -> str:
    return (
        f"the model keeps IR version {ir_version}, which has no node metadata (IR {FIRST_IR_VERSION}): each node's "
        "decision is not written into it (ampconfig explain lists them)"
    )


def decision_entries(decision: NodeDecision, precision_mode: str) -> dict[str, str]:
    """The entries of one decided node: explain's rule and cause (when there is one), and the mode."""
    entries = {RULE: decision.rule.value, PRECISION_MODE: precision_mode}
    if decision.cause:
        entries[CAUSE] = decision.cause
    return entries


def record_decisions(
    model: ir.Model, decisions: Iterable[NodeDecision], decided: Iterable[ir.Node], precision_mode: str
) -> bool:
    """Write each node's entries (the module's docstring); ``decided`` are the nodes the plan decided, every other
    node of the model's graphs was added by this rewrite. Returns whether any node's entries changed."""
    by_name = {decision.name: decision for decision in decisions}
    decided_nodes = {id(node) for node in decided}
    changed = False
    for graph in graphs_of(model):
        for node in graph:
            if id(node) in decided_nodes:
                decision = by_name.get(node.name or "")
                if decision is None:  # a function's node, or one the plan could not name: nothing to say
                    continue
                if _left_by_an_earlier_rewrite(node.metadata_props, decision, precision_mode):
                    continue
                entries = decision_entries(decision, precision_mode)
            else:
                entries = _inserted_entries(node, precision_mode)
            changed = _replace(node, entries) or changed
    return changed


def remove_decisions(model: ir.Model) -> bool:
    """Take every ampconfig entry out of the model's nodes (the user asked for none: an earlier rewrite's would
    be stale). Returns whether there was any."""
    changed = False
    for graph in graphs_of(model):
        for node in graph:
            changed = _replace(node, {}) or changed
    return changed


def _left_by_an_earlier_rewrite(props: Mapping[str, str], decision: NodeDecision, precision_mode: str) -> bool:
    """Whether the node is as an earlier rewrite in this mode left it, with that rewrite's entries: they say why
    it is so, where this rewrite only says "already low" or "kept"."""
    return (
        decision.rule in _FOUND_AS_LEFT
        and not decision.changed
        and props.get(PRECISION_MODE) == precision_mode
        and RULE in props
    )


def _inserted_entries(node: ir.Node, precision_mode: str) -> dict[str, str]:
    """A node the rewrite added: rule ``inserted``, and for a Cast the value it converts as the cause."""
    entries = {RULE: INSERTED, PRECISION_MODE: precision_mode}
    source = node.inputs[0] if node.op_type == "Cast" and node.inputs else None
    if source is not None and source.name:
        entries[CAUSE] = source.name
    return entries


def _replace(node: ir.Node, entries: Mapping[str, str]) -> bool:
    """The node's ampconfig entries become ``entries`` (others' entries kept); whether anything changed."""
    props = node.metadata_props
    ours = {key: value for key, value in props.items() if key.startswith(PREFIX)}
    if ours == dict(entries):
        return False
    for key in ours:
        del props[key]
    props.update(entries)
    return True
