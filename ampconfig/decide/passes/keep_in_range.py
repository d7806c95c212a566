"""Nodes that the low type cannot hold the values of (``ampconfig.decide.value_ranges``: rules value_out_of_range,
range_exceeds, range_underflows and log_domain_precision). A hard pass, after :class:`FixedVerdicts` in every
pipeline (keep_dtype pins come first), in the modes that lower; like a keep_dtype pin its float32 verdicts are hard:
neighbours follow them.

Why float32 and not a typed form: BatchNormalization from opset 15 lets its scale, bias, mean and variance have
types of their own (``Verdict.input_dtypes`` could keep them float32 beside a float16 input), but ONNX Runtime's
CUDA kernel binds both of those type variables to the input's (``cuda/nn/batch_norm.cc``, opset 15: ``T1`` and
``T2`` are ``T``), so such a node would leave the GPU; a float32 BatchNormalization between casts stays on it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx_ir as ir

from ampconfig.decide.context import Verdict
from ampconfig.decide.decision_state import DecisionState, is_constant, is_flexible
from ampconfig.decide.decisions import Rule
from ampconfig.decide.facts import NodeFacts, Scope, constant_source
from ampconfig.decide.log_domain import LogDomainRead, log_domain_reads, upstream
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.decide.passes.mode_rules import ModeVerdicts
from ampconfig.decide.value_limits import LOG_DOMAIN_ERROR, UNDERFLOW_SHARE
from ampconfig.decide.value_ranges import (
    JOINED_ELEMENTS,
    Bounds,
    OutOfRange,
    bounds,
    low_max,
    out_of_range,
    out_of_range_each,
    value_key,
)
from ampconfig.dtypes import Dtype
from ampconfig.model_io.ir_bridge import release_mapped
from ampconfig.opinfo.library import Colour
from ampconfig.precision_modes import PrecisionMode

#: Modes that never lower a float32 node: nothing for the values to keep.
_KEEPING_MODES = frozenset({PrecisionMode.FORCE_FP32, PrecisionMode.MUST_KEEP_ORIGIN_DTYPE})
_VALUE_RULES = frozenset(
    {Rule.VALUE_OUT_OF_RANGE, Rule.RANGE_EXCEEDS, Rule.RANGE_UNDERFLOWS, Rule.LOG_DOMAIN_PRECISION}
)


class KeepValuesInRange(DecisionPass):
    """Ensures: a float32 node the mode could lower that reads a constant beyond the low type's range (not
    clamped, not a sentinel), whose float values on data passed the margin, or which reads or writes a value whose
    magnitudes mostly lie below the low type's normal range, is float32, with its rule and the value named; so are
    a Log, Reciprocal, divisor, negative Pow, Sqrt or Rsqrt whose input the low type would round to zero where
    float32 had no zero, and that input's producer; and so are the producer and the path's readers of a value on a
    path into a log-domain reader whose typical element would err by more than the log-domain threshold."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        ctx = state.ctx
        if ctx.mode in _KEEPING_MODES:
            return False
        paths = ValueKeys.of(state)
        asked: list[tuple[NodeFacts, list[ir.Value]]] = []
        verdict_of = ModeVerdicts(ctx)
        for facts in scope.facts:
            if facts.dtype is not Dtype.FLOAT32 or facts.node in state.verdicts or is_flexible(facts):
                continue
            constants = [] if ctx.clamp_values else _constant_inputs(facts)
            if not constants and ctx.value_ranges is None:
                continue  # neither rule can keep it: the mode is not asked (most nodes of most models)
            if could_go_low(facts, state, verdict_of):
                asked.append((facts, constants))
        beyond = _beyond(
            dict.fromkeys(value for _, constants in asked for value in constants), ctx.low, state.constant_bounds
        )
        changed = False
        for facts, constants in asked:
            verdict = (
                _constant_verdict(constants, state, beyond)
                or _range_verdict(facts, state, paths)
                or _underflow_verdict(facts, state, paths)
            )
            if verdict is not None:
                changed |= state.decide(facts.node, verdict)
        if ctx.value_ranges is not None:
            for facts in scope.facts:
                changed |= _keep_scaled_norms(facts, state, paths, verdict_of)
                changed |= _keep_flush_sensitive(facts, state, paths, verdict_of)
            for read in log_domain_reads(facts.node for facts in scope.facts).values():
                changed |= _keep_log_domain(read, state, paths, verdict_of)
        return changed

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            verdict = state.verdicts.get(facts.node)
            if verdict is not None and verdict.rule in _VALUE_RULES and verdict.dtype is not Dtype.FLOAT32:
                raise self.unkept(f"{facts.node.name} was kept for its values but computes in {verdict.dtype}")


def could_go_low(facts: NodeFacts, state: DecisionState, verdict_of: ModeVerdicts) -> bool:
    """Whether the mode might put the node in the low type (what the values rule guards against): the modes that
    paint nothing say now; in the mixed modes any node but a black one may end low."""
    ctx = state.ctx
    if ctx.low_blocker(facts, ctx.low) is not None:
        return False
    if ctx.mode.is_mixed:
        return ctx.colour(facts) is not Colour.BLACK
    verdict = verdict_of(facts)
    return verdict.dtype is not None and verdict.dtype.is_low


def _constant_inputs(facts: NodeFacts) -> list[ir.Value]:
    """The node's compute-dtype inputs that are constants, in slot order."""
    inputs = facts.node.inputs
    return [value for slot in facts.input_slots if (value := inputs[slot]) is not None and is_constant(value)]


def _beyond(
    constants: Iterable[ir.Value], low: Dtype, kept: dict[ir.TensorProtocol, Bounds]
) -> dict[ir.Value, OutOfRange | None]:
    """What of each constant lies beyond the low type's range: one look per constant, however many read it, and
    one look at all those in memory where all fit (a graph's thousands of small weights). The bounds of each
    constant looked at alone (a large one) go into ``kept``: its conversion reads them instead of its values. A
    constant whose bounds ``kept`` holds already (the rewrite read it before the decision) and that lies within the
    low type's range is not read."""
    found: dict[ir.Value, OutOfRange | None] = {}
    in_memory: list[tuple[ir.Value, np.ndarray]] = []
    limit = low_max(low)
    for value in constants:
        tensor = constant_source(value)
        if tensor is None or ((read := kept.get(tensor)) is not None and read.within(limit)):
            found[value] = None
            continue
        array = np.asarray(tensor.numpy())
        external = isinstance(tensor, ir.ExternalTensor)
        if not external and array.size <= JOINED_ELEMENTS:
            in_memory.append((value, array))
            continue
        known = bounds(array)
        if known is not None:
            kept[tensor] = known
        found[value] = out_of_range(array, low, known)
        del array
        if external:
            # A weight left in the model file was mapped to be read: unmapped again at once, or every weight of
            # the model would sit in the process until the rewrite converts it (twice a ResNet50's peak memory).
            release_mapped(tensor)
    found.update(zip([value for value, _ in in_memory], out_of_range_each([a for _, a in in_memory], low)))
    return found


def _constant_verdict(
    constants: list[ir.Value], state: DecisionState, beyond: Mapping[ir.Value, OutOfRange | None]
) -> Verdict | None:
    """``constants``: the node's compute-dtype constant inputs (none when the user asked for clamping)."""
    ctx = state.ctx
    found = [(value, out) for value in constants if (out := beyond[value]) is not None and not out.sentinel]
    if not found:
        return None
    value, out = max(found, key=lambda item: item[1].largest)
    reason = (
        f"reads {value.name!r}, {out.count} of whose values lie beyond {ctx.low}'s range (largest |x| = "
        f"{out.largest:.6g} > {low_max(ctx.low):.6g}): float32 keeps them (--clamp-values clamps them instead)"
    )
    return Verdict(Dtype.FLOAT32, Rule.VALUE_OUT_OF_RANGE, reason, cause=value.name)


class ValueKeys:
    """The key of each value of the state's model (:func:`~ampconfig.decide.value_ranges.value_key`): its scope's key
    path, and the main graph's names that a body's key must differ from."""

    def __init__(self, key_paths: dict[int, str], main_names: frozenset[str]) -> None:
        self.key_paths, self.main_names = key_paths, main_names

    @classmethod
    def of(cls, state: DecisionState) -> ValueKeys:
        key_paths = {id(each.graph): each.key_path for each in state.scopes}
        if len(state.scopes) == 1:
            return cls(key_paths, frozenset())  # no body: no key to tell apart from the main graph's names
        main = state.scopes[0].graph
        names = {value.name for value in main.inputs} | set(main.initializers)
        names |= {value.name for node in main for value in node.outputs if value.name}
        return cls(key_paths, frozenset(name for name in names if name))

    def key(self, value: ir.Value) -> str:
        producer = value.producer()
        graph = producer.graph if producer is not None else value.graph
        return value_key(self.key_paths.get(id(graph), ""), value.name or "", self.main_names)


def _range_verdict(facts: NodeFacts, state: DecisionState, paths: ValueKeys) -> Verdict | None:
    ranges = state.ctx.value_ranges
    if ranges is None:
        return None
    low = state.ctx.low
    node = facts.node
    for kind, values in (("input", node.inputs), ("output", node.outputs)):
        for value in values:
            if value is None or not value.name or Dtype.of_value(value) is None or is_constant(value):
                continue
            found = ranges.exceeding(paths.key(value), low)
            if found is not None:
                return Verdict(
                    Dtype.FLOAT32,
                    Rule.RANGE_EXCEEDS,
                    f"its {kind} {value.name!r} reached |x| = {found:.6g} on {ranges.source} "
                    f"({ranges.describe_margin(low)})",
                    cause=value.name,
                )
    return None


def _keyed_values(facts: NodeFacts, paths: ValueKeys) -> list[tuple[str, ir.Value, str]]:
    """The node's float values that are not constants, as (input or output, value, key)."""
    found = []
    node = facts.node
    for kind, values in (("input", node.inputs), ("output", node.outputs)):
        for value in values:
            if value is None or not value.name or Dtype.of_value(value) is None or is_constant(value):
                continue
            found.append((kind, value, paths.key(value)))
    return found


def _underflow_verdict(facts: NodeFacts, state: DecisionState, paths: ValueKeys) -> Verdict | None:
    """Rule range_underflows: the node reads or writes a value whose finite non-zero magnitudes lie below the low
    type's normal range in more than the underflow share (its producer and its consumers compute in float32, so no
    cast rounds it)."""
    ranges = state.ctx.value_ranges
    if ranges is None:
        return None
    low = state.ctx.low
    for kind, value, key in _keyed_values(facts, paths):
        found = ranges.underflowing(key, low)
        if found is not None:
            return Verdict(
                Dtype.FLOAT32,
                Rule.RANGE_UNDERFLOWS,
                f"its {kind} {value.name!r} lies below {low}'s normal range in {found.share:.1%} of its non-zero "
                f"values ({found.flushed_share:.1%} would round to zero) on {ranges.source} (more than "
                f"{UNDERFLOW_SHARE:.0%} keeps it float32 on every edge)",
                cause=value.name,
            )
    return None


#: Ops that turn a zero into something far from what a tiny value gives, and the input slot that matters:
#: log(0) = -inf, 1/0 = inf, 0^-p = inf, sqrt(0) = 0 where the root of a tiny value is a thousand times larger.
FLUSH_SENSITIVE = {"Log": 0, "Reciprocal": 0, "Sqrt": 0, "Div": 1, "Pow": 0}
_FLUSH_RESULT = {"Log": "-inf", "Reciprocal": "inf", "Div": "inf", "Pow": "inf", "Sqrt": "0", "Rsqrt": "inf"}


def _flush_slot(facts: NodeFacts) -> int | None:
    """The input slot of a flush-sensitive node whose zeros matter (Pow: only with a negative constant exponent);
    None for any other node."""
    op = facts.key.rsplit("::", 1)[-1]
    if op == "Rsqrt":  # no ONNX op; contrib and custom domains have it
        return 0
    slot = FLUSH_SENSITIVE.get(facts.key)
    if slot is None or op != "Pow":
        return slot
    exponent = facts.node.inputs[1] if len(facts.node.inputs) > 1 else None
    tensor = constant_source(exponent) if exponent is not None else None
    if tensor is None:
        return None  # an exponent known only at run time: not judged
    values = np.asarray(tensor.numpy())
    return slot if values.size and bool((values < 0).any()) else None


def _keep_flush_sensitive(facts: NodeFacts, state: DecisionState, paths: ValueKeys, verdict_of: ModeVerdicts) -> bool:
    """Rule range_underflows: a Log, Reciprocal, divisor, negative Pow, Sqrt or Rsqrt whose input the low type would
    round to zero where float32 had no zero stays float32, and so does that input's producer (a float32 node
    reading a value stored in the low type would still read its zeros)."""
    slot = _flush_slot(facts)
    node = facts.node
    ranges, low = state.ctx.value_ranges, state.ctx.low
    if slot is None or ranges is None or slot >= len(node.inputs) or facts.dtype is not Dtype.FLOAT32:
        return False
    value = node.inputs[slot]
    if value is None or not value.name or is_constant(value) or Dtype.of_value(value) is None:
        return False
    producer = value.producer()
    found = ranges.underflow(paths.key(value), low)
    if found is None or not found.flushed or found.zeros:
        return False
    op = facts.key.rsplit("::", 1)[-1]
    reason = (
        f"{value.name!r} would round to zero in {found.flushed} of its values ({found.flushed_share:.2%}) in {low} on "
        f"{ranges.source}, where float32 had no zero, and {op} of zero is {_FLUSH_RESULT[op]}"
    )
    changed = False
    for kept, why in ((node, f"reads {reason}"), (producer, f"computes {reason} in {node.name!r}")):
        kept_facts = state.facts_of.get(kept) if kept is not None else None
        if kept is None or kept_facts is None or kept in state.verdicts or kept_facts.dtype is not Dtype.FLOAT32:
            continue
        if is_flexible(kept_facts) or not could_go_low(kept_facts, state, verdict_of):
            continue
        cause = value.name if kept is node else node.name
        changed |= state.decide(kept, Verdict(Dtype.FLOAT32, Rule.RANGE_UNDERFLOWS, why, cause=cause))
    return changed


def _keep_log_domain(read: LogDomainRead, state: DecisionState, paths: ValueKeys, verdict_of: ModeVerdicts) -> bool:
    """Rule log_domain_precision, for a value on a path into a log-domain reader: when its typical element would
    err by more than :data:`LOG_DOMAIN_ERROR` stored in the low type, its producer and the path's nodes that read
    it stay float32; when it is a sum forming a magnitude (:func:`~ampconfig.decide.log_domain.sum_root`) whose
    typical element would carry more than that from a low-type computation of its parts, so does the path that
    computed them, back to and including the filters or products that start it. Its readers off the path weigh it
    as any value: they may still read it in the low type."""
    ranges, low, value = state.ctx.value_ranges, state.ctx.low, read.value
    if ranges is None or not value.name or Dtype.of_value(value) is not Dtype.FLOAT32:
        return False
    key = paths.key(value)
    reader = f"{read.reader.op_type} {read.reader.name!r}"
    underflow = ranges.underflow(key, low)
    below = f"; {underflow.share:.1%} of it below {low}'s normal range" if underflow is not None else ""
    judged = f"on {ranges.source} (more than {LOG_DOMAIN_ERROR:g} keeps it float32{below})"
    kept: list[tuple[ir.Node, str]] = []
    stored = ranges.log_domain_error(key, low)
    if stored is not None:
        reason = (
            f"{value.name!r}, which {reader} reads in the log domain (every element weighed alike): stored in {low}, "
            f"its typical element would err by {stored:.2g} {judged}"
        )
        producer = value.producer()
        kept += [(producer, f"computes {reason}")] if producer is not None else []
        kept += [(consumer, f"reads {reason}") for consumer in read.consumers]
    carried = ranges.log_domain_error(key, low, read.root) if read.root is not None else None
    if carried is not None:
        reason = (
            f"{value.name!r}, which {reader} reads in the log domain (every element weighed alike): computed in {low} "
            f"before it, its typical element would carry an error of {carried:.2g} {judged}"
        )
        kept += [(node, f"computes the parts of {reason}") for node in upstream(value)]
        kept += [(consumer, f"reads {reason}") for consumer in read.consumers]
    changed = False
    for node, why in kept:
        verdict = Verdict(Dtype.FLOAT32, Rule.LOG_DOMAIN_PRECISION, why, cause=value.name)
        changed |= _keep(node, verdict, state, verdict_of)
    return changed


def _keep(node: ir.Node, verdict: Verdict, state: DecisionState, verdict_of: ModeVerdicts) -> bool:
    """Decides ``verdict`` for a float32 node not decided yet that the mode might lower (else nothing)."""
    facts = state.facts_of.get(node)
    if facts is None or node in state.verdicts or facts.dtype is not Dtype.FLOAT32:
        return False
    if is_flexible(facts) or not could_go_low(facts, state, verdict_of):
        return False
    return state.decide(node, verdict)


#: Normalisations: they divide by a deviation, so an error in what they read grows by |x| / deviation.
NORM_OPS = frozenset(
    {
        "InstanceNormalization",
        "LayerNormalization",
        "GroupNormalization",
        "BatchNormalization",
        "MeanVarianceNormalization",
        "RMSNormalization",
        "com.microsoft::SkipLayerNormalization",
        "com.microsoft::SimplifiedLayerNormalization",
        "com.microsoft::SkipSimplifiedLayerNormalization",
        "com.microsoft::GroupNorm",
    }
)
#: Ops between a normalisation and the product it feeds that carry its values (and errors) unchanged in scale: the
#: shape ops, and the norm's own affine (a Mul/Add/Sub/Div whose other inputs are constants).
_SHAPE_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"})
_AFFINE_OPS = frozenset({"Mul", "Add", "Sub", "Div"})
_PRODUCTS = frozenset({"Mul", "Div"})
#: How many shape or affine ops the walk from a product back to its normalisation crosses at most.
_NORM_DISTANCE = 6


def _keep_scaled_norms(facts: NodeFacts, state: DecisionState, paths: ValueKeys, verdict_of: ModeVerdicts) -> bool:
    """A Mul/Div kept float32 because its output passed the margin (a FiLM scale times a normalised value, before a
    Sigmoid) judges its small factor with it: the normalisation feeding it (through shape ops and its own affine),
    those ops, and the producer of what the normalisation reads keep float32 too. Float16 storage of the norm's
    input errs by 2^-11 of |x|, mean included; the norm divides that by the deviation and the product multiplies it
    by the scale, so a saturating op after it flips (benchmarks: tests' film_block misses rel-L2 0.01 by 1.7x; the
    norm's producer float32 brings it to 2e-4)."""
    verdict = state.verdicts.get(facts.node)
    if verdict is None or verdict.rule is not Rule.RANGE_EXCEEDS or facts.key not in _PRODUCTS:
        return False
    ranges, low, node = state.ctx.value_ranges, state.ctx.low, facts.node
    output = node.outputs[0]
    if ranges is None or not output.name:
        return False
    peak = ranges.exceeding(paths.key(output), low)
    if peak is None:
        return False
    changed = False
    for value in state.live_inputs(facts):
        chain = _norm_chain(value, state)
        if not chain:
            continue
        norm = chain[-1]
        reason = (
            f"feeds {node.name!r}, whose product reached |x| = {peak:.6g} ({ranges.describe_margin(low)}), through "
            f"normalisation {norm.name!r}: {low} rounding before the norm, divided by its deviation and multiplied "
            "by the scale, would move that product"
        )
        verdict = Verdict(Dtype.FLOAT32, Rule.RANGE_EXCEEDS, reason, cause=node.name)
        for kept in chain + _norm_source(norm):
            changed |= _keep(kept, verdict, state, verdict_of)
    return changed


def _norm_chain(value: ir.Value, state: DecisionState) -> list[ir.Node]:
    """The nodes from ``value``'s producer back to a normalisation (last), through shape ops and affine ops with
    constant operands; empty when none is within :data:`_NORM_DISTANCE`."""
    chain: list[ir.Node] = []
    current: ir.Value | None = value
    for _ in range(_NORM_DISTANCE + 1):
        producer = current.producer() if current is not None else None
        facts = state.facts_of.get(producer) if producer is not None else None
        if producer is None or facts is None:
            return []
        chain.append(producer)
        if facts.key in NORM_OPS:
            return chain
        if facts.key in _SHAPE_OPS:
            current = producer.inputs[0]
        elif facts.key in _AFFINE_OPS and len(live := state.live_inputs(facts)) == 1:
            current = live[0]
        else:
            return []
    return []


def _norm_source(norm: ir.Node) -> list[ir.Node]:
    """The node producing what ``norm`` normalises (its first input), where a node does."""
    data = norm.inputs[0] if norm.inputs else None
    producer = data.producer() if data is not None and not is_constant(data) else None
    return [producer] if producer is not None else []
