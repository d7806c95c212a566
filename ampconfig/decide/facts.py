"""Read-only facts about each node of a model: which of its tensors follow its compute dtype, and what that
dtype is today. Painting, policies and the rewrite all start from these facts.

A node's *compute type variable* is the schema type variable of its first float output (else of its first
float input). Only the tensors bound to that variable move when the node changes dtype; tensors typed by other
variables (LayerNormalization's Mean/InvStdDev, Resize's roi/scales, Dropout's ratio) keep their types.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ampconfig.decide.decisions import Rule
from ampconfig.domains import DEFAULT_DOMAINS
from ampconfig.dtypes import MOVABLE_DTYPES, Dtype
from ampconfig.files.ir_bridge import StandIn, stand_in_kind
from ampconfig.opinfo.library import op_key
from ampconfig.opinfo.schema import ABSENT, NodeTyping, compute_variables, default_opset
from ampconfig.opinfo.typing_source import OnnxTyping, TypingSource

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
#: Nodes whose output values are constants: their consumers may take them in any float dtype.
CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})


def is_onnx_op(node: ir.Node, op_types: str | frozenset[str] | tuple[str, ...]) -> bool:
    """``node`` is one of ONNX's own ``op_types`` (default domain), not a custom op of the same name."""
    if node.domain not in DEFAULT_DOMAINS:
        return False
    return node.op_type == op_types if type(op_types) is str else node.op_type in op_types


@dataclass(frozen=True)
class NodeFacts:
    node: ir.Node
    key: str  # op key: `Op` or `domain::Op`
    scope: str
    compute_var: str | None
    input_slots: tuple[int, ...]  # inputs bound to the compute variable
    output_slots: tuple[int, ...]  # outputs bound to the compute variable
    dtype: Dtype | None  # today's dtype of those tensors (float32/float16/bfloat16), None if not float
    blocker: Rule | None  # why this node can never be retyped, if it cannot
    schema_allows: frozenset[Dtype]  # float dtypes the schema allows for the compute variable
    typing: NodeTyping | None = None  # how its schema types each input and output, where it has one

    @property
    def retypable(self) -> bool:
        return self.dtype is not None and self.blocker is None


def _is_absent(value: ir.Value | None) -> bool:
    """An optional input or output the node leaves out (ONNX writes ""; onnx-ir keeps an unnamed output)."""
    return value is None or not value.name


def _slot_dtypes(values: Sequence[ir.Value | None], dtypes: Sequence[Dtype | None]) -> list[Dtype | str | None]:
    return [ABSENT if _is_absent(v) else d for v, d in zip(values, dtypes)]


def _movable(data_type: ir.DataType) -> Dtype | None:
    dtype = Dtype.of_data_type(data_type)
    return dtype if dtype in MOVABLE_DTYPES else None


@dataclass
class _ValueKinds:
    """What a node's values are, collected in one pass (this runs for every node of the model)."""

    dtypes: list[Dtype | None]
    untyped: bool = False  # a present value with no type at all
    non_tensor: bool = False  # a sequence/optional/map value

    @classmethod
    def of(cls, values: Sequence[ir.Value | None]) -> _ValueKinds:
        kinds = cls([])
        for value in values:
            value_type = None if value is None else value.type
            if value_type is None:
                kinds.dtypes.append(None)
                kinds.untyped = kinds.untyped or not _is_absent(value)
            elif isinstance(value_type, ir.TensorType):
                kinds.dtypes.append(_movable(value_type.dtype))
            else:
                kinds.dtypes.append(None)
                kinds.non_tensor = True
        return kinds


def _fixed(node: ir.Node, key: str, scope: str, blocker: Rule | None, dtype: Dtype | None = None) -> NodeFacts:
    """Facts of a node whose dtype nothing here may change."""
    return NodeFacts(node, key, scope, None, (), (), dtype, blocker, frozenset())


@functools.cache
def _schema_allows(typing: NodeTyping, variables: frozenset[str]) -> frozenset[Dtype]:
    """The float dtypes every one of ``variables`` allows (cached: a model has few distinct node typings)."""
    return frozenset(d for d in MOVABLE_DTYPES if all(typing.var_allows(v, d) for v in variables))


#: The default typing: ONNX's own schemas. Contrib ops need ONNX Runtime's (see ampconfig.api).
ONNX_TYPING: TypingSource = OnnxTyping()


def node_facts(
    node: ir.Node,
    model: ir.Model,
    scope: str,
    low_dtype: Dtype = Dtype.FLOAT16,
    typing_source: TypingSource = ONNX_TYPING,
) -> NodeFacts:
    key = op_key(node.domain, node.op_type)
    inputs, outputs = node.inputs, node.outputs
    ins, outs = _ValueKinds.of(inputs), _ValueKinds.of(outputs)
    in_dtypes, out_dtypes = ins.dtypes, outs.dtypes
    first_float = next((d for d in (*in_dtypes, *out_dtypes) if d is not None), None)

    if _touches_sparse(node, model):
        # Sparse tensors stay exactly as they came: their nodes, and the nodes reading them, keep their dtype.
        return _fixed(node, key, scope, Rule.SPARSE_TENSOR, first_float)
    if first_float is None:
        # Unknown types also land here when nothing around the node is typed.
        return _fixed(node, key, scope, Rule.UNTYPED if ins.untyped or outs.untyped else Rule.NOT_FLOAT)
    if is_onnx_op(node, CONTROL_FLOW_OPS):
        return _fixed(node, key, scope, Rule.CONTROL_FLOW)
    if ins.non_tensor or outs.non_tensor or stand_in_kind(model, node) is StandIn.MAP:
        # A tensor put into (or taken from) a sequence must keep the sequence's element type.
        return _fixed(node, key, scope, Rule.NON_TENSOR, first_float)
    opset = default_opset(model.opset_imports, node.domain)
    typing = (
        None if opset is None else typing_source.typing(node.op_type, node.domain, opset, len(inputs), len(outputs))
    )
    if typing is None:
        return _fixed(node, key, scope, Rule.NO_SCHEMA)
    found = compute_variables(typing, _slot_dtypes(inputs, in_dtypes), _slot_dtypes(outputs, out_dtypes), low_dtype)
    if found is None:
        return _fixed(node, key, scope, Rule.NOT_FLOAT)
    var, variables = found
    input_slots = tuple(
        i for i, (v, s) in enumerate(zip(inputs, typing.inputs)) if v is not None and s.type_var in variables
    )
    output_slots = tuple(
        i for i, (v, s) in enumerate(zip(outputs, typing.outputs)) if not _is_absent(v) and s.type_var in variables
    )
    dtypes = {in_dtypes[i] for i in input_slots} | {out_dtypes[i] for i in output_slots}
    allows = _schema_allows(typing, variables)
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
    untyped = any((v := inputs[i]) is not None and v.type is None for i in input_slots) or any(
        outputs[i].type is None for i in output_slots
    )
    if untyped or dtype is None:
        return NodeFacts(node, key, scope, var, input_slots, output_slots, None, Rule.UNTYPED, allows, typing)
    if not input_slots and output_slots and node.op_type not in ("Cast", *CONSTANT_OPS):
        # The output type is chosen by an attribute (RandomNormal's dtype, EyeLike...): not ours to change.
        return NodeFacts(node, key, scope, var, (), output_slots, dtype, Rule.MODE_KEEPS, allows, typing)
    return NodeFacts(node, key, scope, var, input_slots, output_slots, dtype, None, allows, typing)


def _touches_sparse(node: ir.Node, model: ir.Model) -> bool:
    """Whether ``node`` stands in for a sparse tensor (files/ir_bridge.py) or reads the value of one."""
    if stand_in_kind(model, node) is StandIn.SPARSE:
        return True
    producers = (value.producer() for value in node.inputs if value is not None)
    return any(producer is not None and stand_in_kind(model, producer) is StandIn.SPARSE for producer in producers)


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


def iter_scopes(
    model: ir.Model, low_dtype: Dtype = Dtype.FLOAT16, typing_source: TypingSource = ONNX_TYPING
) -> Iterator[Scope]:
    """The main graph first, then every subgraph, outer before inner."""
    pending: list[tuple[ir.Graph, str]] = [(model.graph, "")]
    while pending:
        graph, path = pending.pop(0)
        facts = tuple(node_facts(node, model, path, low_dtype, typing_source) for node in graph)
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


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value of an initializer or of a Constant node's ``value``, else None."""
    if value is None:
        return None
    tensor = value.const_value
    if tensor is None:
        producer = value.producer()
        if producer is None or producer.op_type != "Constant" or "value" not in producer.attributes:
            return None
        tensor = producer.attributes["value"].value
    return np.asarray(tensor.numpy()) if tensor is not None else None


def constant_tensor(constant: ir.Node) -> ir.TensorProtocol | None:
    """The float value of a Constant node, whichever attribute holds it (``value``, ``value_float`` or
    ``value_floats``); None for other attributes (ints, strings, sparse)."""
    attributes = constant.attributes
    if "value" in attributes:
        return attributes["value"].value
    if "value_float" in attributes:
        return ir.tensor(np.array(attributes["value_float"].value, dtype=np.float32))
    if "value_floats" in attributes:
        return ir.tensor(np.array(attributes["value_floats"].value, dtype=np.float32))
    return None


def connected_groups(
    members: Iterable[ir.Node], neighbours: Callable[[ir.Node], Iterable[ir.Node]]
) -> list[frozenset[ir.Node]]:
    """The connected groups of ``members``, two members joined when one is among the other's ``neighbours``."""
    pool = list(members)
    inside = set(pool)
    seen: set[ir.Node] = set()
    groups: list[frozenset[ir.Node]] = []
    for start in pool:
        if start in seen:
            continue
        group, stack = set(), [start]
        while stack:
            node = stack.pop()
            if node in group:
                continue
            group.add(node)
            stack.extend(n for n in neighbours(node) if n in inside and n not in group)
        seen |= group
        groups.append(frozenset(group))
    return groups
