"""Read-only facts about each node of a model: which of its tensors follow its compute dtype, and what that
dtype is today. Painting, policies and the rewrite all start from these facts.

A node's *compute type variable* is the schema type variable of its first float output (else of its first
float input). Only the tensors bound to that variable move when the node changes dtype; tensors typed by other
variables (LayerNormalization's Mean/InvStdDev, Resize's roi/scales, Dropout's ratio) keep their types.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import onnx_ir as ir

from ampconfig.decisions import Rule
from ampconfig.op_schema import ABSENT, MOVABLE_DTYPES, compute_variables, default_opset, node_typing
from ampconfig.opsinfo import op_key

DATA_TYPE_TO_DTYPE: dict[ir.DataType, str] = {
    ir.DataType.FLOAT: "float32",
    ir.DataType.FLOAT16: "float16",
    ir.DataType.BFLOAT16: "bfloat16",
}
DTYPE_TO_DATA_TYPE: dict[str, ir.DataType] = {name: dt for dt, name in DATA_TYPE_TO_DTYPE.items()}
LOW_DTYPES = frozenset({"float16", "bfloat16"})

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
#: Nodes whose output values are constants: their consumers may take them in any float dtype.
CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})


def value_dtype(value: ir.Value | None) -> str | None:
    """float32/float16/bfloat16 for a tensor of that type, None for anything else or unknown."""
    if value is None or not isinstance(value.type, ir.TensorType):
        return None
    return DATA_TYPE_TO_DTYPE.get(value.type.dtype)


def is_tensor_typed(value: ir.Value) -> bool:
    return isinstance(value.type, ir.TensorType)


@dataclass(frozen=True)
class NodeFacts:
    node: ir.Node
    key: str  # op key: `Op` or `domain::Op`
    scope: str
    compute_var: str | None
    input_slots: tuple[int, ...]  # inputs bound to the compute variable
    output_slots: tuple[int, ...]  # outputs bound to the compute variable
    dtype: str | None  # today's dtype of those tensors (float32/float16/bfloat16), None if not float
    blocker: Rule | None  # why this node can never be retyped, if it cannot
    schema_allows: frozenset[str]  # float dtypes the schema allows for the compute variable

    @property
    def retypable(self) -> bool:
        return self.dtype is not None and self.blocker is None


def _is_absent(value: ir.Value | None) -> bool:
    """An optional input or output the node leaves out (ONNX writes ""; onnx-ir keeps an unnamed output)."""
    return value is None or not value.name


def _slot_dtypes(values: Sequence[ir.Value | None]) -> list[str | None]:
    return [ABSENT if _is_absent(v) else value_dtype(v) for v in values]


def _first_float_dtype(node: ir.Node) -> str | None:
    return next((d for d in map(value_dtype, (*node.inputs, *node.outputs)) if d is not None), None)


def node_facts(node: ir.Node, model: ir.Model, scope: str, low_dtype: str = "float16") -> NodeFacts:
    key = op_key(node.domain, node.op_type)
    touches_float = any(value_dtype(v) is not None for v in (*node.inputs, *node.outputs))

    def fixed(blocker: Rule | None, dtype: str | None = None) -> NodeFacts:
        return NodeFacts(node, key, scope, None, (), (), dtype, blocker, frozenset())

    if not touches_float:
        # Unknown types also land here when nothing around the node is typed.
        untyped = any(not _is_absent(v) and v.type is None for v in (*node.inputs, *node.outputs))
        return fixed(Rule.UNTYPED if untyped else Rule.NOT_FLOAT)
    if node.op_type in CONTROL_FLOW_OPS and node.domain in ("", "ai.onnx"):
        return fixed(Rule.CONTROL_FLOW)
    if any(v is not None and v.type is not None and not is_tensor_typed(v) for v in (*node.inputs, *node.outputs)):
        # A tensor put into (or taken from) a sequence must keep the sequence's element type.
        return fixed(Rule.NON_TENSOR, _first_float_dtype(node))
    opset = default_opset(model.opset_imports, node.domain)
    typing = (
        None if opset is None else node_typing(node.op_type, node.domain, opset, len(node.inputs), len(node.outputs))
    )
    if typing is None:
        return fixed(Rule.NO_SCHEMA)
    found = compute_variables(typing, _slot_dtypes(node.inputs), _slot_dtypes(node.outputs), low_dtype)
    if found is None:
        return fixed(Rule.NOT_FLOAT)
    var, variables = found
    input_slots = tuple(
        i for i, (v, s) in enumerate(zip(node.inputs, typing.inputs)) if v is not None and s.type_var in variables
    )
    output_slots = tuple(
        i for i, (v, s) in enumerate(zip(node.outputs, typing.outputs)) if not _is_absent(v) and s.type_var in variables
    )
    bound = [node.inputs[i] for i in input_slots] + [node.outputs[i] for i in output_slots]
    dtypes = {value_dtype(v) for v in bound}
    allows = frozenset(d for d in MOVABLE_DTYPES if all(typing.var_allows(v, d) for v in variables))
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
    if any(v.type is None for v in bound) or dtype is None:
        return NodeFacts(node, key, scope, var, input_slots, output_slots, None, Rule.UNTYPED, allows)
    if not input_slots and output_slots and node.op_type not in ("Cast", *CONSTANT_OPS):
        # The output type is chosen by an attribute (RandomNormal's dtype, EyeLike...): not ours to change.
        return NodeFacts(node, key, scope, var, (), output_slots, dtype, Rule.MODE_KEEPS, allows)
    return NodeFacts(node, key, scope, var, input_slots, output_slots, dtype, None, allows)


_GRAPHS_KEY = "ampconfig.graphs"


def graphs_of(model: ir.Model) -> list[ir.Graph]:
    """The main graph and every subgraph. onnx-ir's ``Model.graphs()`` walks every node each time; a rewrite
    never adds subgraphs, so the walk is done once per model and kept in its (unserialised) ``meta``."""
    cached = model.meta.get(_GRAPHS_KEY)
    if cached is None:
        cached = list(model.graphs())
        model.meta[_GRAPHS_KEY] = cached
    return cached


@dataclass(frozen=True)
class Scope:
    """One graph (the main graph or a subgraph) with the facts of its nodes in graph order."""

    graph: ir.Graph
    path: str
    facts: tuple[NodeFacts, ...]


def iter_scopes(model: ir.Model, low_dtype: str = "float16") -> Iterator[Scope]:
    """The main graph first, then every subgraph, outer before inner."""
    pending: list[tuple[ir.Graph, str]] = [(model.graph, "")]
    while pending:
        graph, path = pending.pop(0)
        facts = tuple(node_facts(node, model, path, low_dtype) for node in graph)
        yield Scope(graph, path, facts)
        for node in graph:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    pending.append((attr.value, _join(path, f"{node.name}.{attr.name}")))
                elif attr.type == ir.AttributeType.GRAPHS:
                    for i, sub in enumerate(attr.value):
                        pending.append((sub, _join(path, f"{node.name}.{attr.name}[{i}]")))


def _join(path: str, part: str) -> str:
    return f"{path}/{part}" if path else part
