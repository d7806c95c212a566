"""What the debugging verbs (compare, range analysis, tune) need to know about a model's main graph: its nodes in
topological order with their value names, the element type of every value, and its float constants.

Pure reads of an ``onnx.ModelProto``; nothing here changes a graph except :func:`with_node_names`, which
delegates to :mod:`ampconfig.rewrite.names` so node names match the names the rewrite's decisions use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir
from onnx import numpy_helper

from ampconfig.opinfo.library import op_key
from ampconfig.rewrite.expose import FLOAT_TYPES
from ampconfig.rewrite.names import name_unnamed_nodes


@dataclass(frozen=True)
class GraphNode:
    """One main-graph node: ``op_type`` is the op key (``Op`` or ``domain::Op``); empty value names dropped."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def with_node_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose unnamed (or duplicate-named) nodes get the names the rewrite gives them.

    The rewrite names nodes before deciding, so the fp32 model must be named the same way for its nodes to line
    up with the decisions; value names, and so the numbers, are unchanged.
    """
    ir_model = ir.serde.deserialize_model(model)
    name_unnamed_nodes(ir_model)
    return ir.serde.serialize_model(ir_model)


def graph_nodes(model: onnx.ModelProto) -> list[GraphNode]:
    """Main-graph nodes in the model's order (ONNX requires it to be topological)."""
    return [
        GraphNode(
            node.name,
            op_key(node.domain, node.op_type),
            tuple(name for name in node.input if name),
            tuple(name for name in node.output if name),
        )
        for node in model.graph.node
    ]


def float_constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Float initializers and ``Constant`` node values of the main graph (the values the rewrite converts)."""
    constants: dict[str, np.ndarray] = {}
    for init in model.graph.initializer:
        if init.data_type in FLOAT_TYPES:
            constants[init.name] = numpy_helper.to_array(init)
    for node in model.graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            continue
        for attr in node.attribute:
            if attr.name == "value" and attr.t.data_type in FLOAT_TYPES:
                constants[node.output[0]] = numpy_helper.to_array(attr.t)
    return constants
