"""What a rewrite made: the rewritten model with the decisions behind it, and what the rewrite did to the graph
(casts, converted and clamped constants). The decisions themselves are :mod:`ampconfig.decide.decisions`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from ampconfig.decide.decisions import DecisionCost, NodeDecision
from ampconfig.decide.facts import is_onnx_op
from ampconfig.decide.value_limits import ValueRanges
from ampconfig.model_io.ir_bridge import model_graphs, to_proto
from ampconfig.model_io.skeleton import ModelSkeleton


@dataclass(frozen=True)
class ClampedTensor:
    """A constant converted to a low dtype whose finite values beyond that type's range were set to its largest
    finite value (with the user's consent, or a mask's sentinel; see ampconfig.decide.value_ranges)."""

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
    metadata_note: str | None = None  # why the model carries no decisions in its node metadata (its IR version)

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

    def casts_around(self) -> dict[str, tuple[int, int]]:
        """Per decided node (by name), the Casts the rewrite added on its inputs and on its outputs: where a value
        crosses between dtypes, which the reports draw. A Cast the input had is a decided node, not counted."""
        decided = {decision.name for decision in self.decisions}
        counts = dict.fromkeys(decided, (0, 0))
        for graph in model_graphs(self.ir_model):
            for node in graph:
                if not is_onnx_op(node, "Cast") or node.name in decided:
                    continue
                source = node.inputs[0] if node.inputs else None
                producer = source.producer() if source is not None else None
                if producer is not None and producer.name is not None and producer.name in decided:
                    before, after = counts[producer.name]
                    counts[producer.name] = (before, after + 1)
                readers = {use.node.name or "" for output in node.outputs for use in output.uses()}
                for reader in readers & decided:
                    before, after = counts[reader]
                    counts[reader] = (before + 1, after)
        return counts

    def count_by_dtype(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for decision in self.decisions:
            if decision.dtype is not None:
                counts[decision.dtype] = counts.get(decision.dtype, 0) + 1
        return counts

    @property
    def low_precision_nodes(self) -> int:
        return sum(1 for d in self.decisions if d.dtype in ("float16", "bfloat16"))
