"""Type constraints of ONNX op schemas, read from ``onnx.defs``: which inputs/outputs share a type variable and
which types that variable allows. Both the painting (may this node run in float16?) and the rewrite (which inputs
follow the compute dtype, which are pinned, as Resize's scales are) derive their answers from here, not from hand
lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import onnx
import onnx.defs

from ampconfig.domains import ONNX_DOMAIN, canonical_domain
from ampconfig.dtypes import MOVABLE_DTYPES, Dtype


@dataclass(frozen=True)
class Slot:
    """How one actual input or output of a node is typed by its schema."""

    type_var: str | None  # the shared type variable, None when the parameter has its own fixed type set
    allowed: frozenset[str]  # ONNX type strings the parameter accepts ("tensor(float16)", ...)
    homogeneous: bool = True  # False for heterogeneous variadics (Loop/Scan state): each actual is independent


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: node_typing hands out one object per key
class NodeTyping:
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    since_version: int

    def var_allows(self, type_var: str, dtype: Dtype | str) -> bool:
        type_str = Dtype(dtype).type_str
        for slot in self.inputs + self.outputs:
            if slot.type_var == type_var:
                return type_str in slot.allowed
        return False


@cache
def get_schema(op_type: str, domain: str, opset: int) -> onnx.defs.OpSchema | None:
    """The schema in force at ``opset`` for the op, or None when ONNX does not know it (custom/contrib ops)."""
    try:
        return onnx.defs.get_schema(op_type, opset, canonical_domain(domain))
    except onnx.defs.SchemaError:
        return None


def _slots(
    params: list[onnx.defs.OpSchema.FormalParameter], count: int, allowed_by_var: Mapping[str, frozenset[str]]
) -> tuple[Slot, ...]:
    slots: list[Slot] = []
    for index in range(count):
        if not params:
            break
        param = params[min(index, len(params) - 1)]
        if index >= len(params) and param.option != onnx.defs.OpSchema.FormalParameterOption.Variadic:
            break
        var = param.type_str if param.type_str in allowed_by_var else None
        allowed = allowed_by_var[var] if var is not None else frozenset({param.type_str})
        variadic = param.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
        homogeneous = not variadic or param.is_homogeneous
        slots.append(Slot(var if homogeneous else None, allowed, homogeneous))
    return tuple(slots)


@cache
def node_typing(op_type: str, domain: str, opset: int, n_inputs: int, n_outputs: int) -> NodeTyping | None:
    """Typing of a node with ``n_inputs``/``n_outputs`` actual (positional) inputs/outputs; None if unknown op."""
    schema = get_schema(op_type, domain, opset)
    if schema is None:
        return None
    allowed_by_var = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    return NodeTyping(
        inputs=_slots(list(schema.inputs), n_inputs, allowed_by_var),
        outputs=_slots(list(schema.outputs), n_outputs, allowed_by_var),
        since_version=schema.since_version,
    )


def default_opset(opset_imports: Mapping[str, int], domain: str) -> int | None:
    key = canonical_domain(domain)
    if key in opset_imports:
        return opset_imports[key]
    if key == "" and ONNX_DOMAIN in opset_imports:
        return opset_imports[ONNX_DOMAIN]
    return None


#: Marks an optional input/output a node leaves out (its type variable binds nothing there).
ABSENT = ""


def compute_variables(
    typing: NodeTyping,
    input_dtypes: Sequence[str | None],
    output_dtypes: Sequence[str | None],
    low_dtype: str,
) -> tuple[str, frozenset[str]] | None:
    """The node's primary float type variable and every variable that moves with it, or None if it has none.

    ``input_dtypes``/``output_dtypes`` give, per actual input/output, its movable float dtype, None for a present
    non-float or untyped tensor, and :data:`ABSENT` for an optional input/output the node leaves out. The primary
    variable is that of the first float output, else of the first float input. Another variable moves with it
    when every tensor it binds has the primary's dtype and both variables allow ``low_dtype``: Attention's V (T2)
    and RMSNormalization's X (T) move with the data, while LayerNormalization's Mean (U, no float16) and Resize's
    scales (a fixed float type) stay. The kernel probe retypes by this same rule, so what the op info claims is
    what the rewrite produces.
    """
    outputs = [(d, s) for d, s in zip(output_dtypes, typing.outputs) if d != ABSENT]
    inputs = [(d, s) for d, s in zip(input_dtypes, typing.inputs) if d != ABSENT]
    slots = inputs + outputs
    primary = next((s.type_var for d, s in outputs + inputs if s.type_var is not None and d in MOVABLE_DTYPES), None)
    if primary is None:
        return None
    primary_dtypes = {d for d, s in slots if s.type_var == primary and d is not None}
    variables = {primary}
    others = {s.type_var for d, s in slots if d is not None and s.type_var not in (None, primary)}
    for candidate in others:
        bound = {d for d, s in slots if s.type_var == candidate}
        if (
            bound == primary_dtypes
            and typing.var_allows(candidate, low_dtype)
            and typing.var_allows(primary, low_dtype)
        ):
            variables.add(candidate)
    return primary, frozenset(variables)
