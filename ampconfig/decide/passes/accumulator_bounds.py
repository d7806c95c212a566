"""Values derived from an integer accumulator, up to its scale multiply (``ampconfig.decide.quantized``: rule
integer_accumulator_bound). A hard pass in every pipeline, after :class:`KeepValuesInRange` (a value measured beyond
the margin says so with its peak) and before :class:`KeepQuantizerInputs` (the bound is the more particular
reason); its float32 verdicts are hard, as those rules' are: neighbours follow them.

The bound is known without data (:func:`~ampconfig.decide.quantized.accumulator_bound`), so the rule holds in every
mode that lowers, force_fp16 included. Data only narrows it: with value ranges, a float value's bound is the smaller
of the bound and its measured peak (a value the ranges do not list was measured within the margin, as the range
rule reads them: a decision made from a lock's values equals one made from every peak). No value whose bound
passes the low type's range is cast to it: its producer (the Cast from int32, a layout op) and every reader up to
the scale multiply compute in float32; the Cast keeps this verdict when the Casts are settled. Only the nodes of the
accumulator's own scope are decided (a body reading an outer accumulator's values, which no exporter writes, is
left to its scope's rules: deciding it from outside would come before its own scope's pins)."""

from __future__ import annotations

import onnx_ir as ir

from ampconfig.decide.context import Verdict
from ampconfig.decide.decision_state import DecisionState, is_flexible
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import Scope
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.decide.passes.keep_in_range import ValueKeys, could_go_low
from ampconfig.decide.passes.mode_rules import ModeVerdicts
from ampconfig.decide.quantized import INTEGER_ACCUMULATORS, DerivedBound, accumulator_values
from ampconfig.decide.value_limits import low_max
from ampconfig.dtypes import Dtype
from ampconfig.precision_modes import PrecisionMode

#: Modes that never lower a float32 node: nothing to keep.
_KEEPING_MODES = frozenset({PrecisionMode.FORCE_FP32, PrecisionMode.MUST_KEEP_ORIGIN_DTYPE})


class BoundIntegerAccumulators(DecisionPass):
    """Ensures: a float32 node the mode could lower (a Cast: in any mode that lowers) that writes or reads a float
    value derived from an integer accumulator, before the scale multiply, whose bound (narrowed by data, where
    measured) passes the low type's largest value, is float32, with the accumulator and its bound named."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        ctx = state.ctx
        if ctx.mode in _KEEPING_MODES or not any(facts.key in INTEGER_ACCUMULATORS for facts in scope.facts):
            return False  # no accumulator here (most scopes of most models): no walk
        limit = low_max(ctx.low)
        keys = ValueKeys.of(state)
        verdict_of = ModeVerdicts(ctx)
        inside = {facts.node for facts in scope.facts}
        changed = False
        for value, derived in accumulator_values(inside).items():
            if Dtype.of_value(value) is not Dtype.FLOAT32:
                continue  # integers are never retyped; a value already low was the input model's own
            bound, measured = _narrowed(value, derived, state, keys)
            if bound <= limit:
                continue
            producer = value.producer()
            holders = [(producer, "writes")] if producer is not None else []
            for node, how in holders + [(use.node, "reads") for use in value.uses()]:
                # A node of another scope (a body reading an outer value) is left to the mode: deciding it here
                # would come before its own scope's pins.
                if node in inside and _may_go_low(node, state, verdict_of):
                    reason = _reason(how, value, derived, measured, bound, ctx.low, limit)
                    verdict = Verdict(Dtype.FLOAT32, Rule.INTEGER_ACCUMULATOR_BOUND, reason, derived.accumulator.node)
                    changed |= state.decide(node, verdict)
        return changed

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            verdict = state.verdicts.get(facts.node)
            if (
                verdict is not None
                and verdict.rule is Rule.INTEGER_ACCUMULATOR_BOUND
                and verdict.dtype is not Dtype.FLOAT32
            ):
                raise self.unkept(
                    f"{facts.node.name} holds an integer accumulator's values but computes in {verdict.dtype}"
                )


def _may_go_low(node: ir.Node, state: DecisionState, verdict_of: ModeVerdicts) -> bool:
    """An undecided float32 node the mode could lower; any float32 Cast (its dtype follows its readers)."""
    facts = state.facts_of.get(node)
    if facts is None or node in state.verdicts or facts.dtype is not Dtype.FLOAT32:
        return False
    return is_flexible(facts) or could_go_low(facts, state, verdict_of)


def _narrowed(
    value: ir.Value, derived: DerivedBound, state: DecisionState, keys: ValueKeys
) -> tuple[float, float | None]:
    """The value's bound, narrowed by its measured peak where value ranges are given, and that peak (None: no
    data; a value the ranges do not list counts as measured at the margin)."""
    ranges = state.ctx.value_ranges
    if ranges is None or not value.name:
        return derived.bound, None
    measured = ranges.peaks.get(keys.key(value))
    if measured is None:
        measured = ranges.margin_for(state.ctx.low)
    return min(derived.bound, measured), measured


def _reason(
    how: str, value: ir.Value, derived: DerivedBound, measured: float | None, bound: float, low: Dtype, limit: float
) -> str:
    said = f"{how} {value.name!r}, the values of integer accumulator {derived.accumulator.describe()}"
    if derived.bound != derived.accumulator.bound:
        said += f", {derived.bound:.6g} where they get here"
    if measured is not None:
        said += f"; at most {measured:.6g} on data, so |x| <= {bound:.6g}"
    return f"{said}: beyond {low}'s {limit:.6g}, so float32 up to the scale multiply"
