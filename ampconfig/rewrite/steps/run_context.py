"""What the rewrite's steps share: the options read once (:class:`RewriteSetup`), what the admission steps found
and did to the input (:class:`InputAdmission`, summed up for the rewrite as an :class:`Admission`), and one
attempt's findings (:class:`RewriteRun`), which each step fills in for the next."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import onnx

from ampconfig.decide.decisions import DecisionCost, NodeDecision
from ampconfig.decide.judgement_types import Judges
from ampconfig.decide.measured_facts import MeasuredFacts
from ampconfig.decide.plan import Plan
from ampconfig.decide.rewrite_options import Float16Encoder
from ampconfig.model_io.node_checks import NodePieces, OutputCheck
from ampconfig.model_io.repair import Repair
from ampconfig.model_io.skeleton import ModelSkeleton
from ampconfig.opinfo.library import OpInfoLibrary, OpLists
from ampconfig.opinfo.typing_source import TypingSource
from ampconfig.precision_modes import PrecisionMode
from ampconfig.rewrite.names import NameAllocator
from ampconfig.rewrite.results import RewriteStats
from ampconfig.rewrite.tensors import BoundedFloat16Reader, WeightReads

if TYPE_CHECKING:  # the file's pydantic models: imported when a customize_dtypes file is read
    from ampconfig.documents.customize_dtypes_file import CustomizeFile


@dataclass(frozen=True)
class RewriteSetup:
    """What the steps read, each field by itself: the choices with their files read (the op lists after the
    mixlist, the keep_dtype entries and their file, the customize_dtypes file), what measurements found
    (``facts``: value ranges, overflowing nodes, ONNX Runtime's refusals), how nodes are typed and float16
    weights encoded, and the switches (the judges, clamping, keep_io_types, the cost report, the decisions
    written into the model)."""

    mode: PrecisionMode
    library: OpInfoLibrary
    lists: OpLists
    keep_entries: Sequence[Any]
    keep_source: str | None
    customize: CustomizeFile | None
    facts: MeasuredFacts
    typing: TypingSource
    encode_float16: Float16Encoder
    #: the encoder's reader of a weight's bounds and float16 array in one pass (None: bounds, then the encoder)
    read_float16_within: BoundedFloat16Reader | None = None
    judges: Judges = field(default_factory=dict)
    clamp_values: bool = False
    keep_io_types: bool = True
    with_cost: bool = True
    decision_metadata: bool = True


@dataclass
class InputAdmission:
    """What the admission steps (admit, raise the opset) found and did, filled in as they run.

    ``light`` is the input's light proto (graphs, types and shapes without the large weights, positionally the
    model's graphs and nodes): the admission repairs it as it repairs the model, an opset raise replaces it by
    the converted model's. ``types`` are what ONNX inference found for it; ``repairs`` what the admission repaired
    (each a warning); ``checker_errors`` what the full checker still says (empty: the input passes);
    ``warnings`` what raising the opset said."""

    light: onnx.ModelProto
    types: Mapping[str, onnx.TypeProto] = field(default_factory=dict)
    repairs: tuple[Repair, ...] = ()
    checker_errors: tuple[str, ...] = ()
    opset_raised: int | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Admission:
    """What admitting the input found: the value types ONNX inference gave it, whether the full checker accepts it,
    and its nodes for tracing the output's complaints (built only when the output has one)."""

    types: Mapping[str, onnx.TypeProto]
    input_passes: bool
    input_pieces: Callable[[], NodePieces]


@dataclass
class RewriteRun:
    """One attempt at the rewrite: what it started from, and what each step found (None until it ran)."""

    setup: RewriteSetup
    admission: Admission
    rejected: Mapping[str, str]  # node names the checker rejected in an earlier attempt: they keep their dtype
    names: NameAllocator | None = None
    folded: list[str] = field(default_factory=list)
    values_typed: int = 0
    keep_warnings: list[str] = field(default_factory=list)
    weights: WeightReads | None = None  # the large weights read before the decision, for it and the conversion
    plan: Plan | None = None
    decisions: list[NodeDecision] = field(default_factory=list)
    cost: DecisionCost | None = None
    stats: RewriteStats | None = None
    metadata_note: str | None = None  # why the decisions are not in the model's node metadata (its IR version)
    skeleton: ModelSkeleton | None = None
    check: OutputCheck | None = None
