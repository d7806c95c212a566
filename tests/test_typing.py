"""The Literal types that mypy checks name exactly the values the enums and tables hold at run time."""

from typing import get_args

from ampconfig.dtypes import Dtype, DtypeName
from ampconfig.precision_modes import V1_NAMES, V2_NAMES, V1Name, V2Name


def test_dtype_names_are_the_dtypes() -> None:
    assert get_args(DtypeName) == tuple(dtype.value for dtype in Dtype)


def test_mode_names_are_the_modes() -> None:
    assert get_args(V1Name) == V1_NAMES
    assert get_args(V2Name) == V2_NAMES


def test_lock_names_are_the_rules_colours_and_vocabularies() -> None:
    """A lock names only what ampconfig can write (issue 38): its Literals follow the enums and tables."""
    from ampconfig.decide.decisions import Rule
    from ampconfig.documents.lock_file import RuleName
    from ampconfig.opinfo.library import Colour, ColourName
    from ampconfig.opinfo.op_names import OP_NAME_CHOICES, VocabularyName

    assert get_args(RuleName) == tuple(rule.value for rule in Rule)
    assert get_args(ColourName) == tuple(colour.value for colour in Colour)
    assert get_args(VocabularyName) == OP_NAME_CHOICES
