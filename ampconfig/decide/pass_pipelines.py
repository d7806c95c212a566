"""Each mode's decision pipeline, as data: the passes in the order they run, with an explicit until-stable step.

A :class:`Pipeline` runs its whole-model checks first, then its steps on every scope, outer scope first (a subgraph
reads its outer scope's final dtypes), then its settle steps on every scope, innermost first (a Cast feeding a
subgraph sees what the subgraph needs). A step is a :class:`~ampconfig.decide.passes.base.DecisionPass` or an
:class:`UntilStable` group of passes.

- **A pass returns whether it changed the state.** The pipeline needs nothing else from it: no attributes to read.
- **Until stable.** :class:`UntilStable` runs its passes in order and runs a pass again whenever another pass of
  the group changed something since it last ran, until none is left to run (each pass must be idempotent: run again
  on a state nobody changed, it changes nothing). Placed twice in one pipeline, the second time it runs only if a
  step between them changed something.
- **Failures are located.** A pass's broken pre- or postcondition (:class:`~ampconfig.contracts.ContractBroken`,
  as a rewrite step's) names the pass, the scope and the passes that had already run there.

To add a pass: write it in ``decide/passes/<name>.py`` (``requires``/``call``/``ensures``, its conditions about the
state it reads; change verdicts only through ``state.decide``/``state.forget``; return whether anything changed)
and put it in the tuple below where it belongs. A rule that keeps nodes in the dtype they have and needs no pass of
its own is one function in :data:`~ampconfig.decide.passes.fixed.KEEPING_RULES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ampconfig.contracts import ContractBroken
from ampconfig.decide.decision_state import DecisionState
from ampconfig.decide.facts import Scope
from ampconfig.decide.passes.accumulator_bounds import BoundIntegerAccumulators
from ampconfig.decide.passes.assign_colours import AssignColours
from ampconfig.decide.passes.base import DecisionPass, scope_name
from ampconfig.decide.passes.customized_dtypes import CustomizedDtypes
from ampconfig.decide.passes.deny import PropagateDeny
from ampconfig.decide.passes.fixed import FixedVerdicts
from ampconfig.decide.passes.flexible import SettleFlexible
from ampconfig.decide.passes.follow import FollowNeighbours
from ampconfig.decide.passes.fusion_guard import GuardLayerNormFusion
from ampconfig.decide.passes.islands import LowerCastBoundIslands
from ampconfig.decide.passes.keep_in_range import KeepValuesInRange
from ampconfig.decide.passes.listed import PaintListed
from ampconfig.decide.passes.mode_rules import ModePolicy, refuse_missing_origin_kernels
from ampconfig.decide.passes.quantizer_inputs import KeepQuantizerInputs
from ampconfig.decide.passes.reasons import CheckReasons
from ampconfig.precision_modes import PrecisionMode


@dataclass
class _ScopeRun:
    """What the pipeline knows while it runs on one scope."""

    ran: list[str] = field(default_factory=list)  # the passes run on the scope so far, in order
    changes: int = 0  # how many pass runs changed the state
    settled: dict[int, int] = field(default_factory=dict)  # id of an UntilStable -> ``changes`` when it settled

    def run(self, step: DecisionPass, state: DecisionState, scope: Scope) -> bool:
        try:
            changed = step(state, scope)
        except ContractBroken as failure:
            raise failure.located(scope_name(scope), self.ran) from failure
        self.ran.append(step.name)
        self.changes += changed
        return changed


class UntilStable:
    """Passes run again until none of them changes anything (see the module's docstring)."""

    def __init__(self, *passes: DecisionPass) -> None:
        self.passes = passes

    @property
    def name(self) -> str:
        return f"UntilStable({', '.join(p.name for p in self.passes)})"

    def __call__(self, state: DecisionState, scope: Scope, run: _ScopeRun | None = None) -> bool:
        run = run if run is not None else _ScopeRun()
        if run.settled.get(id(self)) == run.changes:
            return False  # nothing changed since this group last settled on the scope
        changed = False
        stale = list(self.passes)
        while stale:
            step = stale.pop(0)
            if run.run(step, state, scope):
                changed = True
                stale += [other for other in self.passes if other is not step and other not in stale]
                stale.sort(key=self.passes.index)
        run.settled[id(self)] = run.changes
        return changed


Step = DecisionPass | UntilStable
#: A check over the whole model before any scope is decided (it raises an AmpconfigError for bad input).
ModelCheck = Callable[[DecisionState], None]


@dataclass(frozen=True)
class Pipeline:
    """One mode's passes (see the module's docstring)."""

    name: str
    steps: tuple[Step, ...]
    settle: tuple[Step, ...] = (SettleFlexible(),)
    checks: tuple[ModelCheck, ...] = ()

    def run(self, state: DecisionState) -> None:
        for check in self.checks:
            check(state)
        runs = {id(scope): _ScopeRun() for scope in state.scopes}
        for scope in state.scopes:
            self._run(self.steps, state, scope, runs[id(scope)])
        for scope in reversed(state.scopes):
            self._run(self.settle, state, scope, runs[id(scope)])

    @staticmethod
    def _run(steps: tuple[Step, ...], state: DecisionState, scope: Scope, run: _ScopeRun) -> None:
        for step in steps:
            if isinstance(step, UntilStable):
                step(state, scope, run)
            else:
                run.run(step, state, scope)


#: Hard verdicts, every mode, first, in precedence order: a node keeps the first hard verdict it gets (a hard pass
#: skips nodes already decided). customize_dtypes first (Ascend's precedence: over keep_dtype and the mode; its
#: entries were checked against the nodes' facts, unretypable ones refused), then the rules that keep a dtype: the
#: fixed ones, the values, the integer accumulators' values, the quantizers' inputs.
HARD: tuple[Step, ...] = (
    CustomizedDtypes(),
    FixedVerdicts(),
    KeepValuesInRange(),
    BoundIntegerAccumulators(),
    KeepQuantizerInputs(),
)

#: Gray and clear nodes follow their neighbours; the fusion guard then forces producers to float32, whose
#: consumers follow again.
FOLLOW_UNTIL_STABLE = UntilStable(FollowNeighbours(), GuardLayerNormFusion())

#: The mixed modes (allow_mix_precision*): the lists, deny propagation, following, cast-aware islands.
MIXED = Pipeline(
    "mixed precision",
    (
        *HARD,
        AssignColours(),
        PaintListed(),
        PropagateDeny(),
        FOLLOW_UNTIL_STABLE,
        LowerCastBoundIslands(),
        FOLLOW_UNTIL_STABLE,  # again only if an island went low: its neighbours now see it low
        CheckReasons(),
    ),
)
#: The modes that paint nothing (force_fp32, force_fp16, allow_fp32_to_fp16/bf16): the mode decides each node.
POLICY = Pipeline("mode policy", (*HARD, ModePolicy()))
#: must_keep_origin_dtype: as POLICY, after refusing a model the target cannot run as it is.
ORIGIN = Pipeline("must_keep_origin_dtype", (*HARD, ModePolicy()), checks=(refuse_missing_origin_kernels,))


def pipeline_for(mode: PrecisionMode) -> Pipeline:
    if mode.is_mixed:
        return MIXED
    return ORIGIN if mode is PrecisionMode.MUST_KEEP_ORIGIN_DTYPE else POLICY
