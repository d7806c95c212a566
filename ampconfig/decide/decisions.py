"""What the engine decided, as plain data: one :class:`NodeDecision` per node, plus rewrite statistics.

``explain`` prints these, ``run`` summarises them, the JSON report serialises them. Nothing here mutates a graph.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx
import onnx_ir as ir

from ampconfig.files.ir_bridge import to_proto
from ampconfig.files.skeleton import ModelSkeleton

if TYPE_CHECKING:
    from ampconfig.decide.values import ValueRanges


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
    QUANTIZER_INPUT = "quantizer_input"  # computes a value a quantizer rounds to integers: kept as the original


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


@dataclass(frozen=True)
class ClampedTensor:
    """A constant converted to a low dtype whose finite values beyond that type's range were set to its largest
    finite value (with the user's consent, or a mask's sentinel; see ampconfig.decide.values)."""

    tensor: str  # the initializer's name, or the name of the value a Constant or ConstantOfShape produces
    dtype: str
    count: int  # elements clamped
    largest: float  # the largest |value| among them

    sentinel: bool = False  # every clamped value was at float32's own extreme (a stand-in for infinity)

    def warning(self) -> str:
        name = repr(self.tensor) if self.tensor else "an unnamed constant"
        if self.sentinel:
            return (
                f"{self.count} value(s) of {name} at float32's extreme (|x| = {self.largest:.6g}, a stand-in for "
                f"infinity such as a mask's fill) saturated to {self.dtype}'s largest finite value"
            )
        return (
            f"{self.count} value(s) of {name} beyond {self.dtype}'s range (largest |x| = {self.largest:.6g}) "
            f"clamped to {self.dtype}'s largest finite value"
        )


@dataclass
class RewriteStats:
    casts_inserted: int = 0
    casts_retargeted: int = 0
    casts_removed: int = 0  # existing Casts this rewrite made no-ops (their input already has their dtype)
    initializers_converted: int = 0
    constants_converted: int = 0
    values_clamped: int = 0  # constant elements outside the low type's range, clamped to its max
    clamped: list[ClampedTensor] = field(default_factory=list)  # which tensors, one entry per converted tensor
    layer_norms_folded: int = 0  # written-out LayerNorms folded into LayerNormalization (rewrite/fold.py)
    opset_raised_to: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


@dataclass
class RewriteResult:
    ir_model: ir.Model
    decisions: list[NodeDecision]
    stats: RewriteStats
    precision_mode: str
    target: str
    low_dtype: str
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how the settings were read (op names mapped to ONNX)
    input_files: frozenset[Path] = frozenset()  # the input's external data files (never overwritten)
    cost: DecisionCost | None = None  # casts, estimated time, float32 islands (see ampconfig.decide.cost)
    skeleton: ModelSkeleton | None = None  # the output as checked, serialised once without its large weights
    value_ranges: ValueRanges | None = None  # the float32 model's value ranges the decision read (None: none)

    @cached_property
    def model(self) -> onnx.ModelProto:
        """The rewritten model as a proto (for models under 2 GiB; larger ones are saved from ``ir_model``)."""
        if self.skeleton is not None:
            return self.skeleton.full_proto()
        return to_proto(self.ir_model)

    @property
    def savable(self) -> ModelSkeleton | ir.Model:
        """What to write to disk: ``ir_model`` when the input's weights are in external data files (the output's
        go to one too, tensor by tensor), else the skeleton the check serialised, written in one pass with each
        weight converted as it is written."""
        if self.input_files or self.skeleton is None:
            return self.ir_model
        return self.skeleton

    def count_by_dtype(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for decision in self.decisions:
            if decision.dtype is not None:
                counts[decision.dtype] = counts.get(decision.dtype, 0) + 1
        return counts

    @property
    def low_precision_nodes(self) -> int:
        return sum(1 for d in self.decisions if d.dtype in ("float16", "bfloat16"))
