"""What the rewrite's steps are and what their contracts check: each step is a :class:`RewriteStep`, an onnx-ir
in-place pass whose ``requires`` and ``ensures`` raise :class:`~ampconfig.contracts.ContractBroken` (as a decision
pass's do), and states its conditions about the model or the plan it reads, with the properties below. Each is
one walk over the nodes at most (the steps run on graphs of tens of thousands of nodes) and returns what does not
hold, or None."""

from __future__ import annotations

from collections.abc import Iterable

import onnx_ir as ir

from ampconfig.contracts import Contracted
from ampconfig.decide.facts import graphs_of
from ampconfig.decide.plan import Plan
from ampconfig.domains import is_default_domain
from ampconfig.dtypes import Dtype
from ampconfig.rewrite.names import NameAllocator


class RewriteStep(ir.passes.InPlacePass, Contracted):
    """One step of the rewrite: an onnx-ir in-place pass with a contract (``self.unmet``/``self.unkept``)."""


def misnamed_node(model: ir.Model) -> str | None:
    """A node (any scope) without a name, or with a name another node has."""
    return _naming_problem(model, None)


def misnamed_or_untaken(model: ir.Model, names: NameAllocator | None) -> str | None:
    """As :func:`misnamed_node`, or the names taken are not the model's: none were collected, or a node's name is
    not among them (a new name could then repeat it). One walk for both."""
    if names is None:
        return "no names were collected from the model"
    return _naming_problem(model, names.node_names)


def _naming_problem(model: ir.Model, taken: set[str] | None) -> str | None:
    seen: set[str] = set()
    for graph in graphs_of(model):
        for node in graph:
            name = node.name
            if not name or name in seen:
                return f"node {name!r} ({node.op_type}) is not uniquely named"
            if taken is not None and name not in taken:
                return f"node {name!r} ({node.op_type}) is not among the names taken"
            seen.add(name)
    return None


def read_before_made(graphs: Iterable[ir.Graph]) -> str | None:
    """A node that reads a value its own graph makes later (a graph out of topological order). ``graphs``: the
    model's (:func:`~ampconfig.decide.facts.graphs_of`, which keeps the list in the model's ``meta``; the
    admission walks them without keeping it, as a restart copies that ``meta``)."""
    for graph in graphs:
        seen: set[ir.Node] = set()
        for node in graph:
            for value in node.inputs:
                producer = None if value is None else value.producer()
                # Tested cheapest first: nearly every producer was seen already.
                if producer is not None and producer not in seen and producer.graph is graph:
                    return f"node {node.name!r} reads {value.name!r} before {producer.name!r} makes it"  # type: ignore[union-attr]
            seen.add(node)
    return None


def plan_not_of(plan: Plan | None, model: ir.Model) -> str | None:
    """The plan does not decide each node of the model and no other: none was made, a node has no verdict, or
    the plan decides nodes the model no longer has (a plan of an earlier attempt)."""
    if plan is None:
        return "no plan was made"
    count = 0
    for graph in graphs_of(model):
        for node in graph:
            if node not in plan.verdicts:
                return f"node {node.name!r} ({node.op_type}) has no decision in the plan"
            count += 1
    if count != len(plan.verdicts):
        return f"the plan decides {len(plan.verdicts)} nodes, the model has {count}"
    return None


def plan_unapplied(plan: Plan | None, model: ir.Model) -> str | None:
    """A node the plan retypes (still in the model) whose outputs bound to its compute dtype are not of that
    dtype: the plan was not applied."""
    if plan is None:
        return "no plan was made"
    for node, dtype in plan.new_dtypes().items():
        if node.graph is None:
            continue  # taken out by the rewrite (a Cast made a no-op)
        for index in plan.facts_of[node].output_slots:
            value = node.outputs[index]
            if Dtype.of_value(value) is not dtype:
                return f"node {node.name!r} computes in {dtype} by the plan, but its output {value.name!r} does not"
    return None


def onnx_opset_of(model: ir.Model) -> int | None:
    """The version the model imports ONNX's own domain at, however spelled; None when it imports none."""
    return next((version for domain, version in model.opset_imports.items() if is_default_domain(domain)), None)
