"""The modes that paint nothing: force_fp32, force_fp16, allow_fp32_to_fp16/bf16, must_keep_origin_dtype."""

from __future__ import annotations

from ampconfig.decide.context import DecisionContext, Verdict
from ampconfig.decide.decision_state import DecisionState, is_flexible
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import NodeFacts, Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.dtypes import Dtype
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.colours import MATRIX_OPS
from ampconfig.precision_modes import PrecisionMode


def mode_verdict(facts: NodeFacts, ctx: DecisionContext) -> Verdict:
    """A retypable node's verdict under a mode that does not paint (docs/design.md §3)."""
    mode, dtype = ctx.mode, facts.dtype
    assert dtype is not None
    if mode is PrecisionMode.FORCE_FP32:
        if dtype.is_low and ctx.can_run(facts, Dtype.FLOAT32):
            return Verdict(Dtype.FLOAT32, Rule.MODE_RAISES, "force_fp32 raises low-precision ops to float32")
        if dtype.is_low:
            return Verdict(dtype, Rule.NO_ORIGIN_KERNEL, f"no float32 kernel for {facts.key}; kept {dtype}")
        return Verdict(dtype, Rule.MODE_KEEPS, "force_fp32 keeps float32")
    if mode is PrecisionMode.FORCE_FP16:
        if dtype is not Dtype.FLOAT32:
            return Verdict(dtype, Rule.ALREADY_LOW, f"already {dtype}; force_fp16 keeps it")
        return ctx.low_blocker(facts, Dtype.FLOAT16) or Verdict(
            Dtype.FLOAT16, Rule.MODE_LOWERS, "force_fp16 lowers every op with a float16 kernel"
        )
    if mode in (PrecisionMode.ALLOW_FP32_TO_FP16, PrecisionMode.ALLOW_FP32_TO_BF16):
        return _allow_fp32_to_low(facts, ctx)
    if mode is PrecisionMode.MUST_KEEP_ORIGIN_DTYPE:
        return Verdict(dtype, Rule.MODE_KEEPS, "must_keep_origin_dtype keeps every dtype")
    raise AssertionError(f"{mode} is a painted mode")


class ModeVerdicts:
    """:func:`mode_verdict` of one context, made once per kind of node: a verdict reads only the node's op key,
    dtype, compute variable and what its schema allows, and a model has few distinct ones (verdicts are frozen,
    so nodes share them)."""

    def __init__(self, ctx: DecisionContext) -> None:
        self.ctx = ctx
        self._made: dict[tuple[object, ...], Verdict] = {}

    def __call__(self, facts: NodeFacts) -> Verdict:
        key = (facts.key, facts.dtype, facts.compute_var, facts.schema_allows)
        verdict = self._made.get(key)
        if verdict is None:
            verdict = self._made[key] = mode_verdict(facts, self.ctx)
        return verdict


def _allow_fp32_to_low(facts: NodeFacts, ctx: DecisionContext) -> Verdict:
    dtype, low = facts.dtype, ctx.low
    if dtype is not Dtype.FLOAT32:
        return Verdict(dtype, Rule.ALREADY_LOW, f"already {dtype}; kept")
    if ctx.mode is PrecisionMode.ALLOW_FP32_TO_FP16 and facts.key in MATRIX_OPS:
        return ctx.low_blocker(facts, low) or Verdict(
            low, Rule.MODE_LOWERS, f"{ctx.mode.value} lowers matrix ops to {low}"
        )
    if not ctx.can_run(facts, Dtype.FLOAT32) and ctx.low_blocker(facts, low) is None:
        return Verdict(low, Rule.MODE_LOWERS, f"no float32 kernel for {facts.key} on the target; runs in {low}")
    return Verdict(Dtype.FLOAT32, Rule.MODE_KEEPS, f"{ctx.mode.value} keeps non-matrix ops in float32")


class ModePolicy(DecisionPass):
    """Requires: a mode that does not paint. Ensures: every node but Casts and constants has a verdict."""

    def requires(self, state: DecisionState, scope: Scope) -> None:
        if state.ctx.mode.is_mixed:
            raise self.unmet(f"{state.ctx.mode.value} is painted, not decided by mode policy")

    def call(self, state: DecisionState, scope: Scope) -> bool:
        changed = False
        verdict_of = ModeVerdicts(state.ctx)
        for facts in scope.facts:
            if not is_flexible(facts) and facts.node not in state.verdicts:
                changed |= state.decide(facts.node, verdict_of(facts))
        return changed

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            if not is_flexible(facts) and facts.node not in state.verdicts:
                raise self.unkept(f"{facts.node.name} has no verdict")


def refuse_missing_origin_kernels(state: DecisionState) -> None:
    """must_keep_origin_dtype: a node whose original dtype has no kernel on the target is an input error (every
    scope is checked before anything is decided, so the message lists them all)."""
    ctx = state.ctx
    missing = [
        f"{facts.node.name} ({facts.key}, {facts.dtype})"
        for facts in state.facts_of.values()
        if facts.retypable
        and not is_flexible(facts)
        and facts.dtype is not None
        and ctx.library.has_kernel(facts.key, facts.dtype) is False
    ]
    if missing:
        raise AmpconfigError(
            f"must_keep_origin_dtype: target {ctx.library.target!r} cannot run {len(missing)} node(s) in their "
            "original dtype: " + "; ".join(missing),
            hint="pick a mode that may change dtypes (e.g. allow_fp32_to_fp16) or run on another target",
        )
