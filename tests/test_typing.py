"""The Literal types that mypy checks name exactly the values the enums and tables hold at run time."""

from typing import get_args

from ampconfig.dtypes import Dtype, DtypeName
from ampconfig.settings.modes import V1_NAMES, V2_NAMES, V1Name, V2Name


def test_dtype_names_are_the_dtypes() -> None:
    assert get_args(DtypeName) == tuple(dtype.value for dtype in Dtype)


def test_mode_names_are_the_modes() -> None:
    assert get_args(V1Name) == V1_NAMES
    assert get_args(V2Name) == V2_NAMES
