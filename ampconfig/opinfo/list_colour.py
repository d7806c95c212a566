"""An op's list colour (white, black, gray, clear): the one word op info, mixlists and the decision share, below
both readers of op info (the library's dataclasses and the op info file's pydantic models)."""

from __future__ import annotations

from enum import Enum
from typing import Literal

#: The colour names as a type (the values of :class:`Colour`; tests/test_typing.py checks they stay equal).
ColourName = Literal["white", "black", "gray", "clear"]


class Colour(str, Enum):
    WHITE = "white"
    BLACK = "black"
    GRAY = "gray"
    CLEAR = "clear"
