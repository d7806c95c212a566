"""What a decision starts from (:class:`DecisionContext`: mode, lists, op info, pins) and what it produces per
node (:class:`Verdict`: dtype, rule, reason, the neighbour that caused it). Pure data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

import onnx
import onnx.defs
import onnx_ir as ir

from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import ONNX_TYPING, NodeFacts
from ampconfig.decide.user_judgements import Judges
from ampconfig.decide.value_limits import ValueRanges
from ampconfig.dtypes import LOW_DTYPES, Dtype
from ampconfig.opinfo.library import AttributeReader, Colour, OpInfoLibrary, OpLists
from ampconfig.opinfo.typing_source import TypingSource
from ampconfig.precision_modes import PrecisionMode


@dataclass(frozen=True)
class Verdict:
    """The dtype a node computes in after the rewrite, and why. ``dtype`` None: the node has no float dtype.

    ``input_dtypes`` pins single inputs to a dtype of their own, as ``(index, dtype)`` pairs (a typed form that
    reads float32 parameters beside a low input, a user's per-input setting); every other input is read as
    :mod:`ampconfig.decide.needs` says."""

    dtype: Dtype | None
    rule: Rule
    reason: str
    cause: str | None = None  # the neighbour (node or value name) that decided it
    input_dtypes: tuple[tuple[int, Dtype], ...] = ()

    @property
    def is_low(self) -> bool:
        return self.dtype in LOW_DTYPES  # Dtype.is_low without a second property call: asked for most verdicts

    def input_dtype(self, index: int) -> Dtype | None:
        """The dtype input ``index`` is pinned to, or None where it is not pinned."""
        return next((dtype for pinned, dtype in self.input_dtypes if pinned == index), None)


@dataclass
class DecisionContext:
    """Everything a decision may consult besides the graph itself."""

    mode: PrecisionMode
    lists: OpLists
    library: OpInfoLibrary
    pinned: set[ir.Node] = field(default_factory=set)
    #: nodes the ONNX checker rejected in an earlier attempt, with its message: the rewrite runs again keeping them
    #: (the checker loop of :func:`ampconfig.rewrite.pipeline.run_pipeline`)
    rejected: dict[str, str] = field(default_factory=dict)
    #: nodes kept in float32 by range analysis (calibration saw values beyond the low type), with the reason
    overflow: Mapping[str, str] = field(default_factory=dict)
    #: where node type constraints come from: ONNX's schemas, and ONNX Runtime's for contrib ops where handed in
    typing: TypingSource = ONNX_TYPING
    #: nodes a customize_dtypes entry sets, with the dtype they compute in and the entry (checked already)
    customized: Mapping[ir.Node, tuple[Dtype, str]] = field(default_factory=dict)
    #: the user's judges by op key (:mod:`ampconfig.decide.user_judgements`)
    judges: Judges = field(default_factory=dict)
    #: the float32 model's value ranges on data (rule range_exceeds); None: no data ran
    value_ranges: ValueRanges | None = None
    #: the user asked for constants beyond the low type's range to be clamped (rule value_out_of_range off)
    clamp_values: bool = False
    #: nodes ONNX Runtime refused or crashed on in another dtype (``run``'s safety net), with what it did
    runtime_refused: Mapping[str, str] = field(default_factory=dict)
    #: :meth:`low_blocker` and :meth:`can_run` answers for ops whose op info has no attribute variants: they
    #: follow from the facts' op key, types and schema alone, and several passes ask for every node
    _answers: dict[tuple[object, ...], object] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def low(self) -> Dtype:
        return self.mode.low_dtype

    def colour(self, facts: NodeFacts) -> Colour:
        return self.lists.colour_of(facts.key)

    def low_blocker(self, facts: NodeFacts, dtype: Dtype) -> Verdict | None:
        """Why ``facts``' node cannot run in ``dtype`` (rule 5 of the painting), or None if it can."""
        if self.library.has_variants(facts.key):
            return self._low_blocker(facts, dtype)  # the node's attributes may decide
        key = ("low_blocker", facts.key, facts.compute_var, facts.dtype, dtype, dtype in facts.schema_allows)
        if key not in self._answers:
            self._answers[key] = self._low_blocker(facts, dtype)
        return self._answers[key]  # type: ignore[return-value]

    def _low_blocker(self, facts: NodeFacts, dtype: Dtype) -> Verdict | None:
        if dtype not in facts.schema_allows:
            return Verdict(
                facts.dtype,
                Rule.SCHEMA_FORBIDS,
                f"the {facts.key} schema at this opset does not allow {dtype} for type {facts.compute_var}",
            )
        attribute_of = attribute_reader(facts.node)
        variant = self.library.variant_for(facts.key, attribute_of)
        if self.library.has_kernel(facts.key, dtype) is True and variant is not None and dtype not in variant.dtypes:
            value = attribute_of(variant.attribute)
            return Verdict(
                facts.dtype,
                Rule.NO_LOW_KERNEL,
                f"target {self.library.target!r} has no {dtype} kernel for {facts.key} with "
                f"{variant.attribute}={value!r} (op info variant, source {variant.source}: runs in "
                f"{', '.join(variant.dtypes) or 'no float dtype'})",
            )
        if self.library.has_kernel(facts.key, dtype) is not True:
            known = self.library.kernel_dtypes(facts.key)
            detail = "has no op info" if known is None else f"has kernels for {', '.join(sorted(known)) or 'none'}"
            return Verdict(
                facts.dtype,
                Rule.NO_LOW_KERNEL,
                f"target {self.library.target!r} has no {dtype} kernel for {facts.key} ({detail})",
            )
        return None

    def can_run(self, facts: NodeFacts, dtype: Dtype) -> bool:
        if dtype not in facts.schema_allows and dtype != facts.dtype:
            return False
        if not self.library.has_variants(facts.key):
            key = ("can_run", facts.key, dtype)
            if key not in self._answers:
                verdict = self.library.has_kernel(facts.key, dtype)
                self._answers[key] = verdict is True or (verdict is None and dtype is Dtype.FLOAT32)
            return self._answers[key] is True
        # Unknown op info does not stop fp32: fp32 is what the model already asked for.
        verdict = self.library.has_kernel(facts.key, dtype, attribute_reader(facts.node))
        return verdict is True or (verdict is None and dtype is Dtype.FLOAT32)


def attribute_reader(node: ir.Node) -> AttributeReader:
    """The node's string or int attribute values by name, its schema's default where the node leaves one out."""

    def attribute_of(name: str) -> str | int | None:
        attr = node.attributes.get(name)
        if attr is not None:
            value = attr.value
            return value if isinstance(value, (str, int)) else None
        return schema_default(node.domain, node.op_type, node.version, name)

    return attribute_of


@cache
def schema_default(domain: str, op_type: str, version: int | None, name: str) -> str | int | None:
    """The default of attribute ``name`` in ``op_type``'s ONNX schema in force at ``version``, if it has one."""
    try:
        schema = onnx.defs.get_schema(op_type, version or onnx.defs.onnx_opset_version(), domain)
    except onnx.defs.SchemaError:
        return None
    attr = schema.attributes.get(name)
    if attr is None or not attr.default_value.name:
        return None
    value = onnx.helper.get_attribute_value(attr.default_value)
    if isinstance(value, bytes):
        return value.decode()
    return value if isinstance(value, int) else None


def verdict_dtype(
    value: ir.Value, facts_of: Mapping[ir.Node, NodeFacts], verdicts: Mapping[ir.Node, Verdict]
) -> Dtype | None:
    """The dtype its producer's verdict gives ``value``, where the value follows the producer's compute dtype;
    None where no verdict decides it (a graph input, an initializer, an output of another type variable)."""
    producer = value.producer()
    if producer is None:
        return None
    facts, verdict = facts_of.get(producer), verdicts.get(producer)
    if facts is None or verdict is None or verdict.dtype is None or value.index() not in facts.output_slots:
        return None
    return verdict.dtype
