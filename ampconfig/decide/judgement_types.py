"""The types of the user's judgements of an op type's nodes (the public hook, which
:mod:`ampconfig.decide.user_judgements` asks): the types only, light, since a
:class:`~ampconfig.decide.rewrite_options.RewriteOptions` carries the judges."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import onnx_ir as ir

from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.library import Colour


@dataclass(frozen=True)
class Judgement:
    colour: Colour | str
    reason: str
    kept_inputs: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "colour", Colour(self.colour))
        except ValueError:
            choices = ", ".join(c.value for c in Colour)
            raise AmpconfigError(f"a judgement's colour is {self.colour!r}", hint=f"use one of: {choices}") from None
        object.__setattr__(self, "kept_inputs", tuple(self.kept_inputs))


Judge = Callable[[ir.Node], Judgement | None]
#: Judges by op key (``Op`` or ``domain::Op``); a Judgement stands for a judge that answers it for every node.
Judges = Mapping[str, Judge | Judgement]
