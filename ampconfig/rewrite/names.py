"""Unique node and value names across every scope of a model: reports and keep_dtype refer to nodes by name, and
every value the rewrite adds needs a name nothing else has."""

from __future__ import annotations

import onnx
import onnx_ir as ir

from ampconfig.decide.facts import graphs_of
from ampconfig.model_io.ir_bridge import to_ir, to_proto


class NameAllocator:
    """Unique node and value names across every scope of the model."""

    def __init__(self, model: ir.Model) -> None:
        self.renamed = 0  # nodes :func:`name_unnamed_nodes` named or renamed
        self.node_names: set[str] = set()
        self.value_names: set[str] = set()
        for graph in graphs_of(model):
            for value in (*graph.inputs, *graph.outputs, *graph.initializers.values()):
                if value.name:
                    self.value_names.add(value.name)
            # One flat list per graph, not a generator per node: graphs have tens of thousands of nodes.
            nodes = list(graph)
            self.node_names.update([node.name for node in nodes if node.name])
            self.value_names.update([value.name for node in nodes for value in node.outputs if value.name])

    def node(self, base: str) -> str:
        return fresh_name(base, self.node_names)

    def value(self, base: str) -> str:
        return fresh_name(base, self.value_names)


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``... : the first not in ``taken``, which it is added to."""
    name, counter = base, 1
    while name in taken:
        name = f"{base}_{counter}"
        counter += 1
    taken.add(name)
    return name


def name_unnamed_nodes(model: ir.Model) -> NameAllocator:
    """Give every node a unique name (reports and keep_dtype refer to nodes by name); duplicates are renamed.
    Returns the names now taken, for :func:`apply_plan` to allocate new ones from without another walk."""
    names = NameAllocator(model)
    seen: set[str] = set()
    for graph in graphs_of(model):
        for node in graph:
            if not node.name or node.name in seen:
                node.name = names.node(node.name or node.op_type)
                names.renamed += 1
            seen.add(node.name)
    return names


def with_node_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its nodes named as the rewrite names them (:func:`name_unnamed_nodes`): ``model`` itself when
    every node (subgraphs included) already has a name no other node has, which is the common case and costs one
    walk over the nodes; else a copy through the IR whose unnamed (or duplicate-named) nodes got their names.

    The rewrite names nodes before deciding, so the fp32 model must be named the same way for its nodes to line
    up with the decisions (the debugging runs, keep_dtype files tune writes); value names, and so the numbers,
    are unchanged. ``model`` is never modified (a caller hashes its structure, node names included)."""
    if _uniquely_named(model):
        return model
    ir_model = to_ir(model)
    name_unnamed_nodes(ir_model)
    return to_proto(ir_model)


def _uniquely_named(model: onnx.ModelProto) -> bool:
    seen: set[str] = set()
    pending = [model.graph]
    while pending:
        graph = pending.pop()
        for node in graph.node:
            if not node.name or node.name in seen:
                return False
            seen.add(node.name)
            for attribute in node.attribute:
                pending.extend([attribute.g] if attribute.HasField("g") else [])
                pending.extend(attribute.graphs)
    return True
