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

Pure: nodes in, node sets and counts out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

import onnx_ir as ir

from ampconfig.decide.decisions import NodeDecision, Rule
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


@dataclass(frozen=True)
class QuantizedModel:
    """What a report says about a quantized model: its kinds, its quantizers, the nodes the quantizer rule kept,
    and what the mode still lowered."""

    kinds: tuple[QuantizationKind, ...]
    quantizers: int
    kept: int  # nodes kept under rule quantizer_input
    lowered: int  # nodes the decision put in a low dtype
    nodes: int

    def describe(self, low_dtype: str) -> str:
        kinds = " + ".join(kind.value for kind in self.kinds)
        said = f"the model is quantized ({kinds}, {self.quantizers} quantizer(s))"
        if self.kept:
            said += (
                f": {self.kept} node(s) feeding them keep their dtype (rule {Rule.QUANTIZER_INPUT.value}) so each "
                f"quantizer rounds the values it was calibrated on"
            )
        return f"{said}; {self.lowered} of {self.nodes} node(s) still compute in {low_dtype}"

    def to_dict(self) -> dict[str, object]:
        return {
            "kinds": [kind.value for kind in self.kinds],
            "quantizers": self.quantizers,
            "kept_for_quantizers": self.kept,
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
    )
