"""Quantized models (docs/design.md §5): which quantization a graph carries, and which nodes compute the float
values its quantizers round to integers.

A quantizer (QuantizeLinear, DynamicQuantizeLinear, ORT's DynamicQuantizeMatMul...) maps a float value to
integer steps: ``round(x / scale) + zero_point``, and DynamicQuantizeLinear takes its scale from the value's own
min and max. A float16 copy of ``x`` (relative error up to 2^-11) lands on the other side of a rounding boundary
for a share of its elements, each then one whole step (1/255 of the range) off, and every later quantizer
re-rounds values that already moved: a Flan-T5 whose int8 MatMuls read one activation rounded to float16 missed
rel-L2 0.01 by 18x. So the rule **quantizer_input** keeps every node whose float output reaches a quantizer's
float input (through any chain of float values: the whole backward cone up to the integer tensors, graph inputs
and constants where it stops) in the dtype it has: the quantizer then rounds the very values it was calibrated
and checked on. What the mode may still lower is what feeds no quantizer: the float math after the last one
(a dequantized head, a final norm), branches that are never re-quantized.

An **integer accumulator** (MatMulInteger, ConvInteger, ORT's MatMulInteger16) sums products of integers into
int32; quantize_dynamic follows each with a Cast to float and a Mul by the two scales. Its values are far beyond
float16's 65504 (127 * 127 * 5 already is; an LSTM diacritiser's reached 581k), and the bound is known without
data: the largest ``|operand - zero point|`` of each operand, from its type and zero point, times the reduction
length, from the weight's shape (:func:`accumulator_bound`). :func:`accumulator_values` carries that bound through
the integer and float values derived from the accumulator (layout ops, Max/Min, the Cast, sums) up to the scale
multiply, the first other op reading them, whose output the ordinary rules judge (rule
**integer_accumulator_bound**, ``decide/passes/accumulator_bounds.py``).

Pure: nodes in, node sets, bounds and counts out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
import onnx_ir as ir

from ampconfig.decide.decisions import NodeDecision, Rule
from ampconfig.decide.facts import constant_array
from ampconfig.dtypes import Dtype
from ampconfig.opinfo.library import op_key
from ampconfig.opinfo.quantized_ops import Signal, quantized_keys

#: Ops that round a float input to integers (their float inputs are the values quantized, or the scales that
#: decide the rounding): what enters them must be the original model's values.
QUANTIZERS = quantized_keys(rounds=True)


class QuantizationKind(str, Enum):
    """How a model is quantized, as ONNX Runtime's quantizer names its formats."""

    QDQ = "QDQ"  # QuantizeLinear/DequantizeLinear pairs around float ops (quantize_static's default)
    DYNAMIC = "dynamic"  # activations quantized at run time (DynamicQuantizeLinear + MatMulInteger/ConvInteger)
    QOPERATOR = "QOperator"  # integer ops with their scales (QLinearConv, QLinearMatMul, MatMulInteger...)
    WEIGHT_ONLY = "weight-only"  # integer weights dequantized for float math (DequantizeLinear alone, MatMulNBits)


_QDQ_OPS = quantized_keys(signal=Signal.QDQ)
_DYNAMIC_OPS = quantized_keys(signal=Signal.DYNAMIC)
_QOPERATOR_OPS = quantized_keys(signal=Signal.QOPERATOR)
_INTEGER_OPS = quantized_keys(signal=Signal.INTEGER)
_WEIGHT_ONLY_OPS = quantized_keys(signal=Signal.WEIGHT_ONLY)


def quantization_kinds(op_keys: Iterable[str]) -> tuple[QuantizationKind, ...]:
    """The kinds of quantization a graph with these op keys (``Op`` or ``domain::Op``) carries, in the enum's
    order; empty for a float model. Integer ops count as dynamic where a dynamic quantizer feeds them, else as
    QOperator; DequantizeLinear alone (no quantizer) is weight-only."""
    keys = set(op_keys)
    kinds = []
    if keys & _QDQ_OPS:
        kinds.append(QuantizationKind.QDQ)
    dynamic = bool(keys & _DYNAMIC_OPS)
    if dynamic:
        kinds.append(QuantizationKind.DYNAMIC)
    if keys & _QOPERATOR_OPS or (keys & _INTEGER_OPS and not dynamic):
        kinds.append(QuantizationKind.QOPERATOR)
    if not kinds and keys & _WEIGHT_ONLY_OPS:
        kinds.append(QuantizationKind.WEIGHT_ONLY)
    return tuple(kinds)


def is_quantizer(node: ir.Node) -> bool:
    return op_key(node.domain, node.op_type) in QUANTIZERS


def quantizer_inputs(nodes: Iterable[ir.Node]) -> dict[ir.Node, ir.Node]:
    """The quantizers among ``nodes`` (mapped to themselves) and each node whose float output reaches a float
    input of one of them (through float values, across subgraph boundaries), mapped to the quantizer it feeds (the
    nearest one found). The walk stops at integer values, graph inputs and initializers: a node producing only
    integers (MatMulInteger, a QuantizeLinear) ends it."""
    fed = {node: node for node in nodes if is_quantizer(node)}
    frontier = list(fed.items())
    while frontier:
        node, quantizer = frontier.pop()
        for value in node.inputs:
            if value is None or Dtype.of_value(value) is None:
                continue
            producer = value.producer()
            if producer is None or producer in fed:
                continue
            fed[producer] = quantizer
            frontier.append((producer, quantizer))
    return fed


#: Ops that sum products of integers into an int32 output: operands at inputs 0 and 1, their zero points (where the
#: op takes them) at 2 and 3. The contrib ops that read integers and write floats (DynamicQuantizeMatMul,
#: MatMulIntegerToFloat, QGemm without an output scale) scale inside and hand out no accumulator; the QLinear ops
#: requantize to 8 bits.
INTEGER_ACCUMULATORS = frozenset({"MatMulInteger", "ConvInteger", "com.microsoft::MatMulInteger16"})
#: The operand types of the accumulators, with their smallest and largest values.
_INTEGER_LIMITS = {
    ir.DataType.INT8: (-128, 127),
    ir.DataType.UINT8: (0, 255),
    ir.DataType.INT16: (-32768, 32767),
    ir.DataType.UINT16: (0, 65535),
}
#: No bound known but the int32 type's own.
INT32_BOUND = float(2**31)


@dataclass(frozen=True)
class OperandSpread:
    """The largest ``|x - zero_point|`` one operand of an accumulator can give, and what it follows from."""

    spread: int
    dtype: str
    zero_point: str  # "no zero point", "zero point 128", "a zero point known at run time"

    def describe(self) -> str:
        return f"{self.spread} ({self.dtype}, {self.zero_point})"


@dataclass(frozen=True)
class AccumulatorBound:
    """How large ``|x|`` an integer accumulator's output can be: ``spread(a) * spread(b) * K``, K the reduction
    length (the terms it sums per output); where an operand's type or K is not known, the int32 type's bound."""

    node: str
    op: str
    a: OperandSpread | None
    b: OperandSpread | None
    reduction: int | None

    @property
    def bound(self) -> float:
        if self.a is None or self.b is None or self.reduction is None:
            return INT32_BOUND
        return float(self.a.spread * self.b.spread * self.reduction)

    def describe(self) -> str:
        if self.a is None or self.b is None:
            return f"{self.op} {self.node!r} on operands of no 8- or 16-bit type: int32's own bound {self.bound:.6g}"
        if self.reduction is None:
            return f"{self.op} {self.node!r} with a reduction length the shapes do not give: int32's own bound"
        return (
            f"{self.op} {self.node!r}: |x| <= {self.a.describe()} x {self.b.describe()} x {self.reduction} "
            f"(reduction length) = {self.bound:.6g}"
        )


def _operand_spread(value: ir.Value | None, zero_point: ir.Value | None) -> OperandSpread | None:
    dtype = value.dtype if value is not None else None
    limits = _INTEGER_LIMITS.get(dtype) if dtype is not None else None
    if limits is None or dtype is None:
        return None
    low, high = limits
    name = dtype.name.lower()
    if zero_point is None:
        return OperandSpread(max(-low, high), name, "no zero point")
    points = constant_array(zero_point)
    if points is None or not points.size:
        return OperandSpread(high - low, name, "a zero point known at run time")
    points = points.astype(np.int64)
    spread = int(max(high - points.min(), points.max() - low))
    shown = str(int(points.flat[0])) if points.size == 1 else f"{int(points.min())}..{int(points.max())}"
    return OperandSpread(spread, name, f"zero point {shown}")


def _static_dims(value: ir.Value | None) -> list[int] | None:
    shape = value.shape if value is not None else None
    if shape is None:
        return None
    dims = [dim for dim in shape if isinstance(dim, int)]
    return dims if len(dims) == len(shape) else None


def reduction_length(node: ir.Node) -> int | None:
    """How many products an accumulator sums into each output: a MatMul's inner dimension (the weight's rows, else
    the activation's last dimension), a Conv's input channels per group times its kernel size (the weight's shape
    past its first dimension); None where the shapes do not say."""
    inputs = node.inputs
    weight = _static_dims(inputs[1] if len(inputs) > 1 else None)
    if node.op_type == "ConvInteger":
        return math.prod(weight[1:]) if weight is not None and len(weight) > 2 else None
    if weight is not None and weight:
        return weight[-2] if len(weight) > 1 else weight[0]
    activation = _static_dims(inputs[0] if inputs else None)
    return activation[-1] if activation else None


def accumulator_bound(node: ir.Node) -> AccumulatorBound:
    """The bound of an :data:`INTEGER_ACCUMULATORS` node's output (see :class:`AccumulatorBound`)."""
    inputs = [*node.inputs, None, None, None, None]
    return AccumulatorBound(
        node.name or "",
        node.op_type,
        _operand_spread(inputs[0], inputs[2]),
        _operand_spread(inputs[1], inputs[3]),
        reduction_length(node),
    )


@dataclass(frozen=True)
class DerivedBound:
    """A value derived from an accumulator: the bound of its ``|x|``, and the accumulator's."""

    bound: float
    accumulator: AccumulatorBound


#: Ops whose outputs take their magnitudes from the inputs at these slots (None: every input), moved, picked or the
#: larger kept; a derived value they read bounds their output as the largest of those inputs does.
CARRYING_OPS: dict[str, tuple[int, ...] | None] = {
    "Cast": (0,),
    "Identity": (0,),
    "Reshape": (0,),
    "Transpose": (0,),
    "Squeeze": (0,),
    "Unsqueeze": (0,),
    "Flatten": (0,),
    "Expand": (0,),
    "Tile": (0,),
    "Slice": (0,),
    "Gather": (0,),
    "GatherElements": (0,),
    "Split": (0,),
    "Pad": (0, 2),  # the data and the pad value
    "Concat": None,
    "Max": None,
    "Min": None,
    "Abs": (0,),
    "Neg": (0,),
    "Relu": (0,),
    "ReduceMax": (0,),
    "ReduceMin": (0,),
    "MaxPool": (0,),
}
#: Ops adding their inputs: the bound of their output is the sum of their inputs' bounds.
SUMMING_OPS = frozenset({"Add", "Sub"})


def _carrying_slots(key: str, count: int) -> Sequence[int]:
    """The input slots whose magnitudes an op carries to its outputs (none for any op that does not)."""
    if key in SUMMING_OPS:
        return range(count)
    slots = CARRYING_OPS.get(key, ())
    return range(count) if slots is None else [slot for slot in slots if slot < count]


def _input_bound(value: ir.Value | None, derived: dict[ir.Value, DerivedBound]) -> float:
    """What bounds an input of a carrying or summing op: a derived value's bound, a constant's largest |x|, else
    nothing (infinity)."""
    if value is None:
        return 0.0
    if value in derived:
        return derived[value].bound
    array = constant_array(value)
    if array is not None:
        return float(np.abs(array.astype(np.float64)).max()) if array.size else 0.0
    return math.inf


def accumulator_values(nodes: Iterable[ir.Node]) -> dict[ir.Value, DerivedBound]:
    """Every value derived from an accumulator among ``nodes`` (its output, and each output of a
    :data:`CARRYING_OPS` or :data:`SUMMING_OPS` node reading a derived value at a carrying slot, across subgraph
    boundaries), with its bound. The walk stops at any other reader: the scale multiply, whose output is the
    accumulator times the scales, or an op whose output is no magnitude of its input (an ArgMax, a Shape)."""
    derived: dict[ir.Value, DerivedBound] = {}
    pending: list[ir.Value] = []
    for node in nodes:
        if op_key(node.domain, node.op_type) in INTEGER_ACCUMULATORS and node.outputs:
            accumulator = accumulator_bound(node)
            derived[node.outputs[0]] = DerivedBound(accumulator.bound, accumulator)
            pending.append(node.outputs[0])
    while pending:
        value = pending.pop()
        for use in value.uses():
            reader = use.node
            key = op_key(reader.domain, reader.op_type)
            slots = _carrying_slots(key, len(reader.inputs))
            if use.idx not in slots:
                continue  # the scale multiply, or no magnitude of the value: the walk ends here
            bounds = [_input_bound(reader.inputs[i], derived) for i in slots if reader.inputs[i] is not None]
            bound = sum(bounds) if key in SUMMING_OPS else max(bounds)
            for output in reader.outputs:
                if output.dtype in (None, ir.DataType.BOOL) or (key == "MaxPool" and output.index()):
                    continue  # a mask, or MaxPool's indices
                known = derived.get(output)
                if known is None or known.bound < bound:
                    derived[output] = DerivedBound(bound, derived[value].accumulator)
                    pending.append(output)
    return derived


@dataclass(frozen=True)
class QuantizedModel:
    """What a report says about a quantized model: its kinds, its quantizers, the nodes the quantizer rule kept,
    and what the mode still lowered."""

    kinds: tuple[QuantizationKind, ...]
    quantizers: int
    kept: int  # nodes kept under rule quantizer_input
    lowered: int  # nodes the decision put in a low dtype
    nodes: int
    bounded: int = 0  # nodes kept under rule integer_accumulator_bound

    def describe(self, low_dtype: str) -> str:
        kinds = " + ".join(kind.value for kind in self.kinds)
        said = f"the model is quantized ({kinds}, {self.quantizers} quantizer(s))"
        if self.kept:
            said += (
                f": {self.kept} node(s) feeding them keep their dtype (rule {Rule.QUANTIZER_INPUT.value}) so each "
                f"quantizer rounds the values it was calibrated on"
            )
        if self.bounded:
            said += (
                f"; {self.bounded} node(s) holding integer accumulators' values compute in float32 up to the scale "
                f"multiply (rule {Rule.INTEGER_ACCUMULATOR_BOUND.value}: their bound passes {low_dtype}'s range)"
            )
        return f"{said}; {self.lowered} of {self.nodes} node(s) still compute in {low_dtype}"

    def to_dict(self) -> dict[str, object]:
        return {
            "kinds": [kind.value for kind in self.kinds],
            "quantizers": self.quantizers,
            "kept_for_quantizers": self.kept,
            "kept_for_accumulator_bounds": self.bounded,
            "low_precision_nodes": self.lowered,
            "nodes": self.nodes,
        }


def quantized_model(decisions: Sequence[NodeDecision]) -> QuantizedModel | None:
    """:class:`QuantizedModel` of a decided model, None when the model is not quantized."""
    keys = Counter(decision.op_type for decision in decisions)
    kinds = quantization_kinds(keys)
    if not kinds:
        return None
    return QuantizedModel(
        kinds=kinds,
        quantizers=sum(count for key, count in keys.items() if key in QUANTIZERS),
        kept=sum(1 for decision in decisions if decision.rule is Rule.QUANTIZER_INPUT),
        lowered=sum(1 for decision in decisions if decision.dtype in ("float16", "bfloat16")),
        nodes=len(decisions),
        bounded=sum(1 for decision in decisions if decision.rule is Rule.INTEGER_ACCUMULATOR_BOUND),
    )
