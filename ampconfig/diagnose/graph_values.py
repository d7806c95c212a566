"""What the debugging verbs (compare, range analysis, tune) need to know about a model: its nodes, those inside
If, Loop and Scan bodies included, in an order where every value is produced before it is read, with the keys of
the values they read and write (:mod:`ampconfig.instrument.scopes`), and its float constants.

Pure reads of an ``onnx.ModelProto`` whose nodes carry the rewrite's names
(:func:`ampconfig.rewrite.names.with_node_names`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ampconfig.domains import is_default_domain
from ampconfig.instrument.expose import FLOAT_TYPES
from ampconfig.instrument.scopes import ProtoScope, proto_scopes
from ampconfig.opinfo.library import op_key


@dataclass(frozen=True)
class GraphNode:
    """One node: ``op_type`` is the op key (``Op`` or ``domain::Op``); ``inputs``/``outputs`` are value keys (empty
    names dropped); ``scope`` the path of its graph ("" for the main graph)."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    scope: str = ""


def graph_nodes(model: onnx.ModelProto) -> list[GraphNode]:
    """Every node of every scope: each graph's nodes in the model's order (ONNX requires it to be topological),
    the nodes of a body right before the node that owns it. That owner reads, besides its own inputs, the body's
    outputs, so errors and ranges flow from a body to the values its owner returns."""
    scopes = proto_scopes(model)
    children: dict[tuple[str, int], list[ProtoScope]] = {}
    for scope in scopes:
        if scope.parent is not None:
            children.setdefault((scope.parent.path, scope.owner_index), []).append(scope)
    nodes: list[GraphNode] = []

    def visit(scope: ProtoScope) -> None:
        for index, node in enumerate(scope.graph.node):
            bodies = children.get((scope.path, index), [])
            for body in bodies:
                visit(body)
            inputs = [scope.resolve(name) for name in node.input if name]
            inputs += [body.resolve(value.name) for body in bodies for value in body.graph.output if value.name]
            nodes.append(
                GraphNode(
                    node.name,
                    op_key(node.domain, node.op_type),
                    tuple(dict.fromkeys(key for key in inputs if key is not None)),
                    tuple(scope.key(name) for name in node.output if name),
                    scope.path,
                )
            )

    visit(scopes[0])
    return nodes


def float_constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Float initializers and ``Constant`` node values of every scope, by key (the values the rewrite converts)."""
    constants: dict[str, np.ndarray] = {}
    for scope in proto_scopes(model):
        for init in scope.graph.initializer:
            if init.data_type in FLOAT_TYPES:
                constants[scope.key(init.name)] = numpy_helper.to_array(init)
        for node in scope.graph.node:
            if node.op_type != "Constant" or not is_default_domain(node.domain):
                continue
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type in FLOAT_TYPES:
                    constants[scope.key(node.output[0])] = numpy_helper.to_array(attr.t)
    return constants
