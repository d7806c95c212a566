"""Read-only facts about each node of a model: which of its tensors follow its compute dtype, and what that
dtype is today. Painting, policies and the rewrite all start from these facts.

A node's *compute type variable* is the schema type variable of its first float output (else of its first
float input). Only the tensors bound to that variable move when the node changes dtype; tensors typed by other
variables (LayerNormalization's Mean/InvStdDev, Resize's roi/scales, Dropout's ratio) keep their types.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ampconfig.decide.decisions import Rule
from ampconfig.decide.value_ranges import subgraph_key_path
from ampconfig.domains import DEFAULT_DOMAINS
from ampconfig.dtypes import MOVABLE_BY_ELEM_TYPE, MOVABLE_DTYPES, Dtype
from ampconfig.model_io.ir_bridge import StandIn, model_graphs, stand_in_nodes
from ampconfig.opinfo.library import op_key
from ampconfig.opinfo.schema import ABSENT, NodeTyping, compute_variables, default_opset
from ampconfig.opinfo.typing_source import OnnxTyping, TypingSource

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
#: Nodes whose output values are constants: their consumers may take them in any float dtype.
CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})


def is_onnx_op(node: ir.Node, op_types: str | frozenset[str] | tuple[str, ...]) -> bool:
    """``node`` is one of ONNX's own ``op_types`` (default domain), not a custom op of the same name."""
    # The op type first: it rules out most nodes (this runs several times per node), the domain only the rest.
    op_type = node.op_type
    if op_type != op_types if type(op_types) is str else op_type not in op_types:
        return False
    return node.domain in DEFAULT_DOMAINS


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


#: How one input or output of a node looks to its schema (a :data:`_Code`): its movable float dtype, else one of
#: these; ``(NAMELESS, code)`` for a value onnx-ir holds without a name (an output the node leaves out).
NOT_FLOAT = "not float"  # a tensor of another element type (int64, float64, bool...)
UNTYPED = "untyped"  # no type at all
NON_TENSOR = "non-tensor"  # a sequence, optional or map value
NAMELESS = "nameless"
_Code = Dtype | str | None | tuple[str, Dtype | str]  # None: an input the node leaves out


def _code(value: ir.Value | None) -> _Code:
    # Asked for every input and output of every node: one dictionary lookup for the dtype.
    if value is None:
        return None
    value_type = value.type
    if value_type is None:
        code: Dtype | str = UNTYPED
    elif isinstance(value_type, ir.TensorType):
        code = MOVABLE_BY_ELEM_TYPE.get(value_type.dtype, NOT_FLOAT)
    else:
        code = NON_TENSOR
    return code if value.name else (NAMELESS, code)


def _named(code: _Code) -> tuple[bool, Dtype | str | None]:
    """Whether the value is there with a name, and its code without the name mark."""
    if isinstance(code, tuple):
        return False, code[1]
    return code is not None, code


def _float(code: Dtype | str | None) -> Dtype | None:
    return code if type(code) is Dtype else None


@dataclass(frozen=True)
class _Kinds:
    """What a node's values are, by their codes: the first float dtype among them, and whether a named value has
    no type or any value is no tensor."""

    first_float: Dtype | None
    untyped: bool
    non_tensor: bool


@functools.lru_cache(maxsize=4096)
def _kinds(codes: tuple[_Code, ...]) -> _Kinds:
    """(Cached: nodes share a handful of code tuples.)"""
    first_float, untyped, non_tensor = None, False, False
    for code in codes:
        named, bare = _named(code)
        if first_float is None:
            first_float = _float(bare)
        untyped = untyped or (named and bare == UNTYPED)
        non_tensor = non_tensor or bare == NON_TENSOR
    return _Kinds(first_float, untyped, non_tensor)


@dataclass(frozen=True)
class _Typed:
    """What a node's schema typing makes of its values' codes (the part of :class:`NodeFacts` they decide)."""

    var: str
    input_slots: tuple[int, ...]
    output_slots: tuple[int, ...]
    dtype: Dtype | None  # the one dtype of the slots' tensors, None when they differ or none is float
    untyped: bool  # a slot's value has no type
    schema_allows: frozenset[Dtype]


@functools.lru_cache(maxsize=4096)
def _typed(
    typing: NodeTyping, inputs: tuple[_Code, ...], outputs: tuple[_Code, ...], low_dtype: Dtype
) -> _Typed | None:
    """The compute variable and its slots, from the schema and the codes alone (cached: a node's facts depend on
    nothing else here, and a model has few distinct node typings)."""
    ins, outs = [_named(code) for code in inputs], [_named(code) for code in outputs]
    slot_dtypes = [[_float(bare) if named else ABSENT for named, bare in codes] for codes in (ins, outs)]
    found = compute_variables(typing, slot_dtypes[0], slot_dtypes[1], low_dtype)
    if found is None:
        return None
    var, variables = found
    input_slots = tuple(
        i for i, (code, s) in enumerate(zip(inputs, typing.inputs)) if code is not None and s.type_var in variables
    )
    output_slots = tuple(
        i for i, ((named, _), s) in enumerate(zip(outs, typing.outputs)) if named and s.type_var in variables
    )
    bares = [ins[i][1] for i in input_slots] + [outs[i][1] for i in output_slots]
    dtypes = {_float(bare) for bare in bares}
    dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
    untyped = any(bare == UNTYPED for bare in bares)
    return _Typed(var, input_slots, output_slots, dtype, untyped, _schema_allows(typing, variables))


def _fixed(node: ir.Node, key: str, scope: str, blocker: Rule | None, dtype: Dtype | None = None) -> NodeFacts:
    """Facts of a node whose dtype nothing here may change."""
    return NodeFacts(node, key, scope, None, (), (), dtype, blocker, frozenset())


@functools.cache
def _schema_allows(typing: NodeTyping, variables: frozenset[str]) -> frozenset[Dtype]:
    """The float dtypes every one of ``variables`` allows (cached: a model has few distinct node typings)."""
    return frozenset(d for d in MOVABLE_DTYPES if all(typing.var_allows(v, d) for v in variables))


#: The default typing: ONNX's own schemas. Contrib ops need ONNX Runtime's (see ampconfig.engine.typing_chain).
ONNX_TYPING: TypingSource = OnnxTyping()


def node_facts(
    node: ir.Node,
    model: ir.Model,
    scope: str,
    low_dtype: Dtype = Dtype.FLOAT16,
    typing_source: TypingSource = ONNX_TYPING,
    stand_ins: Mapping[ir.Node, StandIn] | None = None,
) -> NodeFacts:
    """``stand_ins``: the model's stand-in nodes (:func:`~ampconfig.model_io.ir_bridge.stand_in_nodes`), looked up
    here when not given; a caller asking for many nodes looks them up once."""
    if stand_ins is None:
        stand_ins = stand_in_nodes(model)
    key = op_key(node.domain, node.op_type)
    inputs, outputs = node.inputs, node.outputs
    in_codes, out_codes = tuple(map(_code, inputs)), tuple(map(_code, outputs))
    kinds = _kinds(in_codes + out_codes)
    first_float = kinds.first_float

    if stand_ins and _touches_sparse(node, stand_ins):
        # Sparse tensors stay exactly as they came: their nodes, and the nodes reading them, keep their dtype.
        return _fixed(node, key, scope, Rule.SPARSE_TENSOR, first_float)
    if first_float is None:
        # Unknown types also land here when nothing around the node is typed.
        return _fixed(node, key, scope, Rule.UNTYPED if kinds.untyped else Rule.NOT_FLOAT)
    if is_onnx_op(node, CONTROL_FLOW_OPS):
        return _fixed(node, key, scope, Rule.CONTROL_FLOW)
    if kinds.non_tensor or (stand_ins and stand_ins.get(node) is StandIn.MAP):
        # A tensor put into (or taken from) a sequence must keep the sequence's element type.
        return _fixed(node, key, scope, Rule.NON_TENSOR, first_float)
    opset = default_opset(model.opset_imports, node.domain)
    typing = (
        None if opset is None else typing_source.typing(node.op_type, node.domain, opset, len(inputs), len(outputs))
    )
    if typing is None:
        return _fixed(node, key, scope, Rule.NO_SCHEMA)
    typed = _typed(typing, in_codes, out_codes, low_dtype)
    if typed is None:
        return _fixed(node, key, scope, Rule.NOT_FLOAT)
    var, input_slots, output_slots, dtype = typed.var, typed.input_slots, typed.output_slots, typed.dtype
    allows = typed.schema_allows
    if typed.untyped or dtype is None:
        return NodeFacts(node, key, scope, var, input_slots, output_slots, None, Rule.UNTYPED, allows, typing)
    if not input_slots and output_slots and node.op_type not in ("Cast", *CONSTANT_OPS):
        # The output type is chosen by an attribute (RandomNormal's dtype, EyeLike...): not ours to change.
        return NodeFacts(node, key, scope, var, (), output_slots, dtype, Rule.MODE_KEEPS, allows, typing)
    return NodeFacts(node, key, scope, var, input_slots, output_slots, dtype, None, allows, typing)


def _touches_sparse(node: ir.Node, stand_ins: Mapping[ir.Node, StandIn]) -> bool:
    """Whether ``node`` stands in for a sparse tensor (model_io/ir_bridge.py) or reads the value of one."""
    if stand_ins.get(node) is StandIn.SPARSE:
        return True
    producers = (value.producer() for value in node.inputs if value is not None)
    return any(producer is not None and stand_ins.get(producer) is StandIn.SPARSE for producer in producers)


def graphs_of(model: ir.Model) -> list[ir.Graph]:
    """The main graph and every subgraph (:func:`ampconfig.model_io.ir_bridge.model_graphs`: walked once per
    model)."""
    return model_graphs(model)


@dataclass(frozen=True)
class Scope:
    """One graph (the main graph or a subgraph) with the facts of its nodes in graph order."""

    graph: ir.Graph
    path: str
    facts: tuple[NodeFacts, ...]
    #: the path as value keys spell it (:func:`ampconfig.decide.value_ranges.subgraph_key_path`)
    key_path: str = ""


def iter_scopes(
    model: ir.Model, low_dtype: Dtype = Dtype.FLOAT16, typing_source: TypingSource = ONNX_TYPING
) -> Iterator[Scope]:
    """The main graph first, then every subgraph, outer before inner."""
    pending: list[tuple[ir.Graph, str, str]] = [(model.graph, "", "")]
    stand_ins = stand_in_nodes(model)
    has_subgraphs = len(graphs_of(model)) > 1
    made: dict[tuple[object, ...], NodeFacts] = {}
    while pending:
        graph, path, key_path = pending.pop(0)
        facts = tuple(_facts_by_kind(node, model, path, low_dtype, typing_source, stand_ins, made) for node in graph)
        yield Scope(graph, path, facts, key_path)
        if not has_subgraphs:
            continue  # no node to look into for them (most models)
        for node in graph:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    part = f"{node.name}.{attr.name}"
                    pending.append((attr.value, _join(path, part), subgraph_key_path(key_path, part)))
                elif attr.type == ir.AttributeType.GRAPHS:
                    for i, sub in enumerate(attr.value):
                        part = f"{node.name}.{attr.name}[{i}]"
                        pending.append((sub, _join(path, part), subgraph_key_path(key_path, part)))


def _facts_by_kind(
    node: ir.Node,
    model: ir.Model,
    scope: str,
    low_dtype: Dtype,
    typing_source: TypingSource,
    stand_ins: Mapping[ir.Node, StandIn],
    made: dict[tuple[object, ...], NodeFacts],
) -> NodeFacts:
    """:func:`node_facts`, worked out once per kind of node: without stand-ins a node's facts follow from its op
    type, domain and its values' codes alone, and a model has few distinct ones (25k nodes: a dozen)."""
    if stand_ins:
        return node_facts(node, model, scope, low_dtype, typing_source, stand_ins)
    kind = (node.op_type, node.domain, tuple(map(_code, node.inputs)), tuple(map(_code, node.outputs)))
    like = made.get(kind)
    if like is None:
        like = made[kind] = node_facts(node, model, scope, low_dtype, typing_source, stand_ins)
        return like
    return NodeFacts(
        node,
        like.key,
        scope,
        like.compute_var,
        like.input_slots,
        like.output_slots,
        like.dtype,
        like.blocker,
        like.schema_allows,
        like.typing,
    )


def _join(path: str, part: str) -> str:
    return f"{path}/{part}" if path else part


def constant_source(value: ir.Value | None) -> ir.TensorProtocol | None:
    """The tensor of an initializer or of a Constant node's ``value``, else None."""
    if value is None:
        return None
    tensor = value.const_value
    if tensor is None:
        producer = value.producer()
        if producer is None or producer.op_type != "Constant" or "value" not in producer.attributes:
            return None
        tensor = producer.attributes["value"].value
    return tensor


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value of an initializer or of a Constant node's ``value``, else None."""
    tensor = constant_source(value)
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
