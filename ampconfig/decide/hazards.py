"""Overflow hazards judged from the graph's structure, node by node, instead of by op name alone.

TensorFlow and PyTorch put Pow and Exp on their float32 lists because they can leave the float16 range. Whether a
given node can is often plain from its neighbours: ``Pow(x, 0.5)`` cannot overflow; ``exp(x - max(x))`` is at most
1; the cube in the tanh form of GELU overflows only where Tanh saturates anyway, so an infinity there still gives
the exact result. Each judgement returns the node's colour and the reason ``explain`` shows; calibration data,
where given, is judged separately by range analysis (``overflow_nodes``).
"""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir

from ampconfig.decide.facts import NodeFacts, constant_array, is_onnx_op
from ampconfig.decide.user_judgements import Judgement
from ampconfig.opinfo.library import Colour

#: Functions that saturate: an infinite input gives a finite, exact output (tanh(inf) = 1, sigmoid(inf) = 1).
_SATURATING = frozenset({"Tanh", "Sigmoid", "Erf"})
#: Elementwise steps between a Pow and the saturating function it feeds in the tanh/sigmoid forms of GELU:
#: x + 0.044715 * x**3, times sqrt(2/pi). An infinity passes through them unchanged in sign.
_AFFINE = frozenset({"Mul", "Add", "Sub", "Div"})
_MAX_AFFINE_STEPS = 4


def judge(facts: NodeFacts, colour: Colour) -> Judgement | None:
    """A per-node colour for ``facts``' node where its structure says more than its op type, else None (only a black
    op's hazard is judged: these judgements only ever clear a node of one)."""
    judge_op = _JUDGES.get(facts.key)
    return judge_op(facts.node) if judge_op is not None and colour is Colour.BLACK else None


def _pow(node: ir.Node) -> Judgement | None:
    exponent = _scalar(node.inputs[1] if len(node.inputs) > 1 else None)
    if exponent is None:
        return None
    if 0 < exponent <= 1:
        return Judgement(Colour.GRAY, f"Pow(x, {exponent:g}) cannot leave the range of x: no overflow hazard")
    if exponent >= 2 and _only_feeds_saturating(node.outputs[0], _MAX_AFFINE_STEPS):
        return Judgement(
            Colour.GRAY,
            f"Pow(x, {exponent:g}) feeds Tanh/Sigmoid/Erf only through Mul/Add (the tanh form of GELU): where it "
            "would overflow the function saturates, so an infinity still gives the exact result",
        )
    return None


def _exp(node: ir.Node) -> Judgement | None:
    source = node.inputs[0]
    producer = source.producer() if source is not None else None
    if producer is None or producer.op_type != "Sub" or len(producer.inputs) < 2:
        return None
    minuend, subtrahend = producer.inputs[0], producer.inputs[1]
    maximum = subtrahend.producer() if subtrahend is not None else None
    if maximum is not None and maximum.op_type == "ReduceMax" and maximum.inputs and maximum.inputs[0] is minuend:
        return Judgement(Colour.GRAY, "exp(x - max(x)) is at most 1 (a softmax written out): no overflow hazard")
    return None


_JUDGES: dict[str, Callable[[ir.Node], Judgement | None]] = {"Pow": _pow, "Exp": _exp}


def _only_feeds_saturating(value: ir.Value, steps: int) -> bool:
    """Every use of ``value`` reaches a saturating function through at most ``steps`` elementwise affine nodes."""
    uses = list(value.uses())
    if not uses or value.is_graph_output():
        return False
    for use in uses:
        consumer = use.node
        if is_onnx_op(consumer, _SATURATING):
            continue
        if steps == 0 or not is_onnx_op(consumer, _AFFINE):
            return False
        if not _only_feeds_saturating(consumer.outputs[0], steps - 1):
            return False
    return True


def _scalar(value: ir.Value | None) -> float | None:
    """The value of a constant with a single element, else None."""
    array = constant_array(value)
    return float(array.reshape(-1)[0]) if array is not None and array.size == 1 else None
