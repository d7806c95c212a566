"""What the engine decided, as plain data: one :class:`NodeDecision` per node, and what the decision costs.

``explain`` prints these, ``run`` summarises them, the JSON report serialises them. Nothing here mutates a graph;
what the rewrite made of a decision is :mod:`ampconfig.rewrite.results`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Rule(str, Enum):
    """Why a node got its dtype. The value is the stable id shown in reports."""

    NOT_FLOAT = "not_float"  # the node computes on no float32/16 tensor: nothing to decide
    UNTYPED = "untyped"  # tensor types could not be inferred: the node is left exactly as it was
    CONTROL_FLOW = "control_flow"  # If/Loop/Scan: the body is decided in its own scope
    NON_TENSOR = "non_tensor"  # reads or writes sequences/maps/optionals, whose element type is not retyped
    SPARSE_TENSOR = "sparse_tensor"  # holds or reads a sparse tensor (sparse_value, sparse initializer): kept
    CUSTOMIZED = "customized"  # set by a customize_dtypes entry (Ascend's precedence: over keep_dtype and the mode)
    KEEP_DTYPE = "keep_dtype"  # pinned by a keep_dtype entry
    NO_LOW_KERNEL = "no_low_kernel"  # the target has no low-precision kernel for the op
    NO_SCHEMA = "no_schema"  # neither ONNX nor ONNX Runtime has a schema for the op (custom op): never retyped
    OP_KEEPS_DTYPE = "op_keeps_dtype"  # a packed or quantized op whose float tensors are tied to its packing
    SCHEMA_FORBIDS = "schema_forbids"  # the op schema does not allow the low type
    NO_ORIGIN_KERNEL = "no_origin_kernel"  # the target lacks a kernel for the original dtype
    MODE_KEEPS = "mode_keeps"  # the precision mode keeps this dtype
    MODE_LOWERS = "mode_lowers"  # the precision mode lowers this op (force_fp16, allow_fp32_to_fp16 matrix ops)
    MODE_RAISES = "mode_raises"  # force_fp32 raises low-precision ops
    WHITE_LIST = "white_list"
    BLACK_LIST = "black_list"
    DENY_PROPAGATION = "deny_propagation"  # gray/clear downstream of a black node (TensorFlow)
    FOLLOWS_INPUTS = "follows_inputs"  # gray/clear: every float input low -> low, else fp32 (Ascend)
    FOLLOWS_CONSUMERS = "follows_consumers"  # clear (or constant-fed) node whose consumers are all low
    ALREADY_LOW = "already_low"  # the node already ran in low precision and the mode keeps it
    FUSION_GUARD = "fusion_guard"  # kept fp32 so ONNX Runtime's LayerNorm fusion cannot absorb a cast
    CAST_AWARE_ISLAND = "cast_aware_island"  # a float32 island whose boundary casts outnumbered its nodes: lowered
    CAST_RETARGETED = "cast_retargeted"  # an existing Cast now produces the dtype its consumers need
    CHECKER_REJECTS = "checker_rejects"  # the ONNX checker rejected the op in low precision: kept
    RUNTIME_REFUSES = "runtime_refuses"  # ONNX Runtime refused or crashed on the rewrite with the node lowered: kept
    VALUE_OUT_OF_RANGE = "value_out_of_range"  # reads a constant with values beyond the low type's range
    RANGE_EXCEEDS = "range_exceeds"  # the float32 model's values on data passed the margin below the low type's limit
    RANGE_UNDERFLOWS = "range_underflows"  # the float32 model's values on data lie below the low type's normal range
    LOG_DOMAIN_PRECISION = "log_domain_precision"  # on a path into a Log or divisor, its typical element errs too much
    QUANTIZER_INPUT = "quantizer_input"  # computes a value a quantizer rounds to integers: kept as the original
    #: reads or writes a value derived from an integer accumulator (MatMulInteger...) whose bound passes the low
    #: type's range, before the scale multiply: float32
    INTEGER_ACCUMULATOR_BOUND = "integer_accumulator_bound"


@dataclass(frozen=True)
class NodeDecision:
    name: str
    op_type: str  # `Op` or `domain::Op`
    scope: str  # "" for the main graph, else the path of the subgraph ("loop_body/If_3.then_branch")
    colour: str | None  # effective list colour, None where lists do not apply
    original_dtype: str | None
    dtype: str | None
    rule: Rule
    reason: str
    cause: str | None = None  # the neighbour (node or value name) that caused the decision

    @property
    def changed(self) -> bool:
        return self.original_dtype != self.dtype

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rule"] = self.rule.value
        return data


def nothing_lowered(decisions: Sequence[NodeDecision], low_dtype: str) -> str | None:
    """For a mode that lowers nodes: a warning naming why, rule by rule, when float32 nodes were decided and not
    one computes in ``low_dtype`` (an all-float32 output is rarely what such a mode was chosen for, and nothing
    else would say so); None otherwise."""
    floats = [decision for decision in decisions if decision.original_dtype == "float32"]
    if not floats or any(decision.dtype == low_dtype for decision in decisions):
        return None
    rules = Counter(decision.rule.value for decision in floats)
    why = ", ".join(f"{rule} {count}" for rule, count in rules.most_common())
    return (
        f"no node computes in {low_dtype}: all {len(floats)} float32 nodes kept float32 ({why}); "
        "ampconfig explain gives each node's reason"
    )


#: How many float32 islands a report lists.
TOP_ISLANDS = 5


@dataclass(frozen=True)
class Float32Island:
    nodes: tuple[str, ...]  # in graph order
    casts: int  # casts on its boundary (one per value and direction, as the rewrite shares them)
    cast_us: float  # their estimated time
    rules: dict[str, int]  # why its nodes are float32: rule -> count
    anchor: str  # the node whose rule is not "follows a neighbour", where there is one (what to change)

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": list(self.nodes),
            "casts": self.casts,
            "cast_us": round(self.cast_us, 2),
            "rules": self.rules,
            "anchor": self.anchor,
        }


@dataclass(frozen=True)
class DecisionCost:
    casts: int
    cast_us: float
    kernel_us: float  # every node at its decided dtype
    float32_kernel_us: float  # every node in float32: the model as it came
    islands: list[Float32Island] = field(default_factory=list)  # most casts first

    def to_dict(self) -> dict[str, Any]:
        return {
            "casts": self.casts,
            "estimated_us": round(self.kernel_us + self.cast_us, 1),
            "estimated_cast_us": round(self.cast_us, 1),
            "estimated_float32_us": round(self.float32_kernel_us, 1),
            "float32_islands": len(self.islands),
            "costliest_islands": [island.to_dict() for island in self.islands[:TOP_ISLANDS]],
            "basis": "H100 kernel cost table (ORT 1.31.1 CUDA), at the model's stated sizes; symbolic dims as 1",
        }
