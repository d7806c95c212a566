"""Per-node dtype decisions shared by every mode, and the policies of the modes that paint nothing.

Everything here is pure: facts and op lists in, :class:`Verdict` values out. The mixed modes add the painting
passes of :mod:`ampconfig.decide.paint` on top of :func:`fixed_verdict`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import onnx_ir as ir

from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import CONSTANT_OPS, NodeFacts
from ampconfig.dtypes import LOW_DTYPES, Dtype
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.library import Colour, OpInfoLibrary, OpLists
from ampconfig.settings.modes import PrecisionMode

#: Matrix ops that allow_fp32_to_fp16 lowers (design section 3).
MATRIX_OPS = frozenset(
    {
        "MatMul",
        "Gemm",
        "Conv",
        "ConvTranspose",
        "Einsum",
        "Attention",
        "com.microsoft::Attention",
        "com.microsoft::MultiHeadAttention",
        "com.microsoft::GroupQueryAttention",
        "com.microsoft::PackedAttention",
        "com.microsoft::FusedMatMul",
        "com.microsoft::FusedConv",
        "com.microsoft::GemmFastGelu",
        "com.microsoft::NhwcConv",
    }
)


@dataclass(frozen=True)
class Verdict:
    dtype: str | None
    rule: Rule
    reason: str
    cause: str | None = None


@dataclass
class DecisionContext:
    mode: PrecisionMode
    lists: OpLists
    library: OpInfoLibrary
    pinned: set[ir.Node] = field(default_factory=set)
    #: nodes the ONNX checker rejected in a first attempt, with its message (see api.rewrite_model_detailed)
    rejected: dict[str, str] = field(default_factory=dict)
    #: nodes kept in float32 by range analysis (calibration saw values beyond the low type), with the reason
    overflow: Mapping[str, str] = field(default_factory=dict)

    @property
    def low(self) -> str:
        return self.mode.low_dtype

    def colour(self, facts: NodeFacts) -> Colour:
        return self.lists.colour_of(facts.key)

    def low_blocker(self, facts: NodeFacts, dtype: str) -> Verdict | None:
        """Why ``facts``' node cannot run in ``dtype`` (rule 5 of the painting), or None if it can."""
        if dtype not in facts.schema_allows:
            return Verdict(
                facts.dtype,
                Rule.SCHEMA_FORBIDS,
                f"the {facts.key} schema at this opset does not allow {dtype} for type {facts.compute_var}",
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

    def can_run(self, facts: NodeFacts, dtype: str) -> bool:
        if dtype not in facts.schema_allows and dtype != facts.dtype:
            return False
        # Unknown op info does not stop fp32: fp32 is what the model already asked for.
        verdict = self.library.has_kernel(facts.key, dtype)
        return verdict is True or (verdict is None and dtype == Dtype.FLOAT32)


def is_flexible(facts: NodeFacts) -> bool:
    """Casts and constants: their dtype follows their consumers and is settled by the plan, not painted."""
    return facts.node.op_type in ("Cast", *CONSTANT_OPS) and facts.node.domain in ("", "ai.onnx")


def fixed_verdict(facts: NodeFacts, ctx: DecisionContext) -> Verdict | None:
    """The verdict for nodes no mode may retype, or None when the mode decides."""
    if facts.dtype is None:
        rule = facts.blocker or Rule.NOT_FLOAT
        reason = {
            Rule.UNTYPED: "tensor types could not be inferred; left exactly as it was",
            Rule.NO_SCHEMA: "ONNX has no schema for this op (custom op); never retyped",
            Rule.CONTROL_FLOW: "control flow; its body is decided in its own scope",
        }.get(rule, "computes on no float32/float16/bfloat16 tensor")
        return Verdict(None, rule, reason)
    if facts.blocker is not None:
        reasons = {
            Rule.NO_SCHEMA: "ONNX has no schema for this op (custom op); never retyped",
            Rule.CONTROL_FLOW: "control flow; its body is decided in its own scope",
            Rule.MODE_KEEPS: "its output dtype is set by an attribute; kept",
            Rule.NON_TENSOR: "reads or writes sequences/optionals, whose element type stays as it is",
        }
        return Verdict(facts.dtype, facts.blocker, reasons.get(facts.blocker, "kept as it was"))
    if facts.node in ctx.pinned:
        return Verdict(facts.dtype, Rule.KEEP_DTYPE, "pinned to its original dtype by keep_dtype")
    if facts.node.name in ctx.overflow and facts.dtype == Dtype.FLOAT32:
        return Verdict(facts.dtype, Rule.RANGE_OVERFLOW, ctx.overflow[facts.node.name])
    if facts.node.name in ctx.rejected:
        return Verdict(
            facts.dtype,
            Rule.CHECKER_REJECTS,
            f"the ONNX checker rejects it in another dtype, kept: {ctx.rejected[facts.node.name]}",
        )
    return None


def simple_mode_verdict(facts: NodeFacts, ctx: DecisionContext) -> Verdict:
    """Policies of the modes that do not paint (design section 3)."""
    mode, dtype = ctx.mode, facts.dtype
    assert dtype is not None
    if mode is PrecisionMode.FORCE_FP32:
        if dtype in LOW_DTYPES and ctx.can_run(facts, Dtype.FLOAT32):
            return Verdict(Dtype.FLOAT32, Rule.MODE_RAISES, "force_fp32 raises low-precision ops to float32")
        if dtype in LOW_DTYPES:
            return Verdict(dtype, Rule.NO_ORIGIN_KERNEL, f"no float32 kernel for {facts.key}; kept {dtype}")
        return Verdict(dtype, Rule.MODE_KEEPS, "force_fp32 keeps float32")
    if mode is PrecisionMode.FORCE_FP16:
        if dtype != Dtype.FLOAT32:
            return Verdict(dtype, Rule.ALREADY_LOW, f"already {dtype}; force_fp16 keeps it")
        return ctx.low_blocker(facts, Dtype.FLOAT16) or Verdict(
            Dtype.FLOAT16, Rule.MODE_LOWERS, "force_fp16 lowers every op with a float16 kernel"
        )
    if mode in (PrecisionMode.ALLOW_FP32_TO_FP16, PrecisionMode.ALLOW_FP32_TO_BF16):
        return _allow_fp32_to_low(facts, ctx)
    if mode is PrecisionMode.MUST_KEEP_ORIGIN_DTYPE:
        return Verdict(dtype, Rule.MODE_KEEPS, "must_keep_origin_dtype keeps every dtype")
    raise AssertionError(f"{mode} is a painted mode")


def _allow_fp32_to_low(facts: NodeFacts, ctx: DecisionContext) -> Verdict:
    dtype, low = facts.dtype, ctx.low
    if dtype != Dtype.FLOAT32:
        return Verdict(dtype, Rule.ALREADY_LOW, f"already {dtype}; kept")
    lowers_matrix = ctx.mode is PrecisionMode.ALLOW_FP32_TO_FP16 and facts.key in MATRIX_OPS
    if lowers_matrix:
        return ctx.low_blocker(facts, low) or Verdict(
            low, Rule.MODE_LOWERS, f"{ctx.mode.value} lowers matrix ops to {low}"
        )
    if not ctx.can_run(facts, Dtype.FLOAT32) and ctx.low_blocker(facts, low) is None:
        return Verdict(low, Rule.MODE_LOWERS, f"no float32 kernel for {facts.key} on the target; runs in {low}")
    return Verdict(Dtype.FLOAT32, Rule.MODE_KEEPS, f"{ctx.mode.value} keeps non-matrix ops in float32")


def missing_origin_kernels(facts_list: list[NodeFacts], ctx: DecisionContext) -> list[str]:
    """must_keep_origin_dtype: every node whose original dtype has no kernel on the target."""
    missing = []
    for facts in facts_list:
        if facts.dtype is None or facts.blocker is not None or is_flexible(facts):
            continue
        if ctx.library.has_kernel(facts.key, facts.dtype) is False:
            missing.append(f"{facts.node.name} ({facts.key}, {facts.dtype})")
    return missing


def raise_for_missing_origin_kernels(missing: list[str], target: str) -> None:
    if missing:
        raise AmpconfigError(
            f"must_keep_origin_dtype: target {target!r} cannot run {len(missing)} node(s) in their original "
            "dtype: " + "; ".join(missing),
            hint="pick a mode that may change dtypes (e.g. allow_fp32_to_fp16) or run on another target",
        )


def requires_fp32_for_black(facts: NodeFacts, ctx: DecisionContext) -> Verdict | None:
    """Mixed modes: an already-low node on the black list goes to float32 when the target can run it."""
    if facts.dtype in LOW_DTYPES and ctx.colour(facts) is Colour.BLACK and ctx.can_run(facts, Dtype.FLOAT32):
        return Verdict(Dtype.FLOAT32, Rule.BLACK_LIST, f"{facts.key} is on the black list: raised to float32")
    return None
