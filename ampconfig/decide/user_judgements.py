"""The user's judgements, asked of each node (:func:`judge_nodes`): what is known about a node of an op type beyond
its list colour. The public hook for op types ampconfig knows little about (custom and contrib ops); its types are
in :mod:`ampconfig.decide.judgement_types`. (The proof's pass or fail on accuracy is a verdict:
:mod:`ampconfig.prove.verdict`.)

A *judge* looks at one node and returns a :class:`Judgement`, or None to leave the node to the lists:

- ``colour``: the node's colour in the mixed modes. ``"white"`` says the op is safe in low precision (it still
  goes low only where the target has a low kernel, as every white op); ``"black"`` says it must stay float32
  (and denies its gray neighbours, as every black op); ``"gray"``/``"clear"`` let it follow its neighbours.
- ``kept_inputs``: inputs that keep their dtype when the node computes low (a float32 scale beside a float16
  input), in every mode. Only an input whose schema type variable is not the node's compute variable can keep
  it (else the model would not load); asking for another is an input error.
- ``reason``: what ``explain`` shows.

Hand judges to :func:`ampconfig.rewrite_model_detailed` or :class:`ampconfig.MixedPrecisionPass` as
``judges={"com.microsoft::GroupNorm": judge}`` (op keys as in mixlists); a :class:`Judgement` in place of a
function judges every node of the op alike. Precedence: keep_dtype > mixlist (an op type the mixlist names is not
re-judged) > these judgements > the built-in judgements of structure (:mod:`ampconfig.decide.hazards`) > op info.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import onnx_ir as ir

from ampconfig.decide.facts import NodeFacts, Scope
from ampconfig.decide.judgement_types import Judge as Judge
from ampconfig.decide.judgement_types import Judgement as Judgement
from ampconfig.decide.judgement_types import Judges as Judges
from ampconfig.errors import AmpconfigError


def judge_nodes(scopes: Sequence[Scope], judges: Judges) -> tuple[list[Scope], dict[ir.Node, Judgement]]:
    """Each judged node's judgement, and the scopes with the kept inputs of judged nodes taken out of their compute
    inputs (so every pass, the plan and the rewrite read them in the dtype they have)."""
    if not judges:
        return list(scopes), {}
    judged: dict[ir.Node, Judgement] = {}
    result = []
    for scope in scopes:
        facts = []
        for fact in scope.facts:
            judgement = _judge(judges, fact)
            if judgement is not None:
                judged[fact.node] = judgement
                fact = _keep_inputs(fact, judgement.kept_inputs)
            facts.append(fact)
        result.append(replace(scope, facts=tuple(facts)))
    return result, judged


def _judge(judges: Judges, facts: NodeFacts) -> Judgement | None:
    judge = judges.get(facts.key)
    if judge is None:
        return None
    judgement = judge if isinstance(judge, Judgement) else judge(facts.node)
    if judgement is not None and not isinstance(judgement, Judgement):
        raise AmpconfigError(
            f"the judge of {facts.key} returned {type(judgement).__name__} for node {facts.node.name}",
            hint="a judge returns ampconfig.Judgement(colour, reason, kept_inputs) or None",
        )
    return judgement


def _keep_inputs(facts: NodeFacts, kept: tuple[int, ...]) -> NodeFacts:
    node = facts.node
    for index in kept:
        if not 0 <= index < len(node.inputs) or node.inputs[index] is None:
            raise AmpconfigError(
                f"the judgement of {facts.key} keeps input {index} of node {node.name}, which has no such input",
                hint=f"inputs are numbered from 0; {node.name} has {len(node.inputs)}",
            )
        slots = facts.typing.inputs if facts.typing is not None else ()
        var = slots[index].type_var if index < len(slots) else None
        if index in facts.input_slots and var == facts.compute_var:
            raise AmpconfigError(
                f"the judgement of {facts.key} keeps input {index} of node {node.name} in its dtype, but the schema "
                f"types it {var}, as the node's output: the model would not load",
                hint="keep only inputs the schema types apart from the output (a scale or bias of its own type)",
            )
    return replace(facts, input_slots=tuple(i for i in facts.input_slots if i not in kept))
