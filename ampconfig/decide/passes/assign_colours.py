"""Mixed modes: each node's effective colour. The op type's colour from the lists (op info after the mixlist),
except where a judgement says more and the user's mixlist has not moved the op: the user's own judges first
(:mod:`ampconfig.decide.user_judgements`), then the built-in judgements of structure
(:mod:`ampconfig.decide.hazards`)."""

from __future__ import annotations

from ampconfig.decide.decision_state import DecisionState, is_flexible
from ampconfig.decide.facts import Scope
from ampconfig.decide.hazards import judge
from ampconfig.decide.passes.base import DecisionPass
from ampconfig.opinfo.library import Colour


class AssignColours(DecisionPass):
    """Ensures: every undecided, paintable node of the scope has an effective colour."""

    def call(self, state: DecisionState, scope: Scope) -> bool:
        lists = state.ctx.lists
        coloured = dict(state.colours)
        for facts in scope.facts:
            if is_flexible(facts) or facts.node in state.verdicts:
                continue
            colour = lists.colour_of(facts.key)
            edited = facts.key in lists.edited
            judged = None if edited else state.judgements.get(facts.node) or judge(facts, colour)
            if judged is not None:
                colour = Colour(judged.colour)
                state.colour_reasons[facts.node] = judged.reason
            elif not edited and (note := state.ctx.library.colour_note(facts.key)):
                state.colour_reasons[facts.node] = note
            state.colours[facts.node] = colour
        return state.colours != coloured

    def ensures(self, state: DecisionState, scope: Scope) -> None:
        for facts in scope.facts:
            if not is_flexible(facts) and facts.node not in state.verdicts and facts.node not in state.colours:
                raise self.unkept(f"{facts.node.name} has no colour")
