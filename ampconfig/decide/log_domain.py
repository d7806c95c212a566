"""Which values a log-domain reader reads (rule log_domain_precision, :mod:`ampconfig.decide.passes.keep_in_range`).

A **reader** gives every element of its input equal weight: a ``Log``, a ``Reciprocal``, a ``Div``'s divisor, a
``Pow`` with a negative constant exponent, an ``Rsqrt`` (any domain). Such a reader turns each element's relative
error into an error of its own output, so a small element's error counts as much as a large one's. The **path**
between a value and a reader passes magnitudes through: ``Mul``, ``Pow`` with a positive constant exponent (a
square), ``ReduceSum``/``ReduceMean``/``ReduceSumSquare``/``ReduceL2``, ``Sqrt``, ``Abs``, an ``Add`` of a constant
(an epsilon) or of squares (a power), a ``Max`` with a constant (a floor), and the layout ops and Casts; a ``Sqrt``
feeding a reader is on its path.

Pure: a graph in, the values on paths into readers out.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ampconfig.decide.decision_state import is_constant
from ampconfig.decide.facts import constant_source
from ampconfig.domains import is_default_domain

#: ONNX readers and the input slot they read in the log domain (Pow: only with a negative constant exponent; an
#: ``Rsqrt`` of any domain reads its input too).
READER_SLOTS = {"Log": 0, "Reciprocal": 0, "Div": 1, "Pow": 0}
#: Ops that pass magnitudes through, each input that carries them on (Pow and Add are judged by their operands).
_MAGNITUDE_OPS = frozenset(
    {"Mul", "ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL2", "Sqrt", "Abs", "Pow", "Add", "Max"}
)
_LAYOUT_OPS = frozenset(
    {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Concat", "Slice", "Split", "Expand"}
    | {"Tile", "Gather", "Cast"}
)
#: How many values a walk back from one reader visits at most (a front end's paths hold a few dozen).
MAX_PATH = 1024


@dataclass(frozen=True)
class LogDomainRead:
    """A value on a path into a log-domain reader: the reader, the nodes on the path that read the value (the
    path's next op, or the reader itself), and where the value is a sum that forms a magnitude from parts computed
    before it (:func:`sum_root`), the root that reads it as that magnitude (None otherwise)."""

    value: ir.Value
    reader: ir.Node
    consumers: tuple[ir.Node, ...]
    root: int | None = None


def _exponent(node: ir.Node) -> np.ndarray | None:
    tensor = constant_source(node.inputs[1]) if len(node.inputs) > 1 else None
    return None if tensor is None else np.asarray(tensor.numpy())


def reader_slot(node: ir.Node) -> int | None:
    """The input slot a log-domain reader reads, None for any other node."""
    op = node.op_type
    if op == "Rsqrt":  # no ONNX op; contrib and custom domains have it
        return 0
    if not is_default_domain(node.domain) or op not in READER_SLOTS:
        return None
    if op == "Pow":
        exponent = _exponent(node)
        return 0 if exponent is not None and exponent.size and bool((exponent < 0).all()) else None
    return READER_SLOTS[op]


def _is_square(value: ir.Value) -> bool:
    producer = value.producer()
    if producer is None:
        return False
    if producer.op_type == "Mul" and len(producer.inputs) == 2:
        return producer.inputs[0] is producer.inputs[1]
    if producer.op_type == "Pow":
        exponent = _exponent(producer)
        return exponent is not None and exponent.size == 1 and float(exponent.reshape(-1)[0]) == 2.0
    return False


def carried_inputs(node: ir.Node) -> list[ir.Value]:
    """The inputs whose magnitudes ``node`` passes on to its output, when it is a path op (else none)."""
    if not is_default_domain(node.domain):
        return []
    op = node.op_type
    live = [value for value in node.inputs if value is not None and not is_constant(value)]
    if op in _LAYOUT_OPS:
        return live[:1] if op != "Concat" else live
    if op not in _MAGNITUDE_OPS:
        return []
    if op == "Pow":
        exponent = _exponent(node)
        positive = exponent is not None and exponent.size and bool((exponent > 0).all())
        return live[:1] if positive and node.inputs[0] in live else []
    if op in ("Add", "Max"):  # an epsilon floor (a constant operand), or a power: squares added
        constant = len(live) < len([value for value in node.inputs if value is not None])
        return live if constant or (live and all(_is_square(value) for value in live)) else []
    return live


def sum_root(node: ir.Node) -> int | None:
    """For a sum that forms a magnitude on a path (squares added: a power; ``ReduceL2``: the magnitude itself), the
    root that reads its output as the magnitude (2 for a power, 1 for ``ReduceL2``); None for any other node. The
    error such a sum carries comes from what computed its parts: it decides the path before it."""
    if not is_default_domain(node.domain):
        return None
    if node.op_type == "ReduceSumSquare":
        return 2
    if node.op_type == "ReduceL2":
        return 1
    if node.op_type in ("ReduceSum", "ReduceMean"):
        parts = node.inputs[:1]  # the second input is the axes
    elif node.op_type == "Add":
        parts = node.inputs
    else:
        return None
    squares = [value for value in parts if value is not None and _is_square(value)]
    return 2 if squares and len(squares) == len(parts) else None


def upstream(value: ir.Value) -> list[ir.Node]:
    """The nodes that computed ``value`` along its path: back through the path ops that carry magnitudes to it,
    and the first node that is none (the filter, the product) on each branch, in the order met."""
    found: list[ir.Node] = []
    queue = [value]
    while queue and len(found) < MAX_PATH:
        producer = queue.pop().producer()
        if producer is None or producer in found:
            continue
        found.append(producer)
        queue.extend(carried_inputs(producer))
    return found


def log_domain_reads(nodes: Iterable[ir.Node]) -> dict[ir.Value, LogDomainRead]:
    """Every value on a path into a log-domain reader among ``nodes`` (one graph's), with the first reader found
    and the path's nodes that read it. A value produced by a path op brings that op's carried inputs in."""
    found: dict[ir.Value, LogDomainRead] = {}
    for reader in nodes:
        slot = reader_slot(reader)
        if slot is None or slot >= len(reader.inputs) or reader.inputs[slot] is None:
            continue
        start = reader.inputs[slot]
        assert start is not None
        queue: list[tuple[ir.Value, ir.Node]] = [(start, reader)]
        visited = 0
        while queue and visited < MAX_PATH:
            visited += 1
            value, consumer = queue.pop()
            if is_constant(value):
                continue
            known = found.get(value)
            if known is not None:
                if consumer not in known.consumers:
                    found[value] = LogDomainRead(value, known.reader, (*known.consumers, consumer), known.root)
                continue
            producer = value.producer()
            found[value] = LogDomainRead(value, reader, (consumer,), sum_root(producer) if producer else None)
            if producer is not None:
                queue.extend((carried, producer) for carried in carried_inputs(producer))
    return found


@dataclass(frozen=True)
class UnmeasuredRead:
    """A value computed in the low type on a path into a log-domain reader, decided without data: the rule
    log_domain_precision could not judge it."""

    value: str
    producer: str
    reader: str

    def to_dict(self) -> dict[str, str]:
        return {"value": self.value, "producer": self.producer, "reader": self.reader}


def unmeasured_reads(nodes: Iterable[ir.Node], low_nodes: Container[str]) -> list[UnmeasuredRead]:
    """The values on paths into log-domain readers among ``nodes`` whose producer is one of ``low_nodes`` (by
    name: the nodes decided into the low type), in graph order of their producers."""
    listed = list(nodes)
    reads = log_domain_reads(listed)
    order = {node: index for index, node in enumerate(listed)}
    found = []
    for value, read in reads.items():
        producer = value.producer()
        if producer is not None and producer.name and producer.name in low_nodes and value.name:
            read_there = UnmeasuredRead(value.name, producer.name, read.reader.name or "")
            found.append((order.get(producer, 0), read_there))
    return [read for _, read in sorted(found, key=lambda item: item[0])]
