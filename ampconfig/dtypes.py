"""The float dtypes ampconfig decides between, and every spelling of each one (onnx-ir, ONNX protobuf, numpy).

:class:`Dtype` is a ``str`` enum: its value is the name reports and JSON use ("float16"), so a ``Dtype`` compares
equal to that string and serialises as it. Everything else about a dtype hangs off the member, so no module keeps
its own table.
"""

from __future__ import annotations

from enum import Enum
from functools import cache
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # imported on first use: settings and the command line name dtypes without loading onnx-ir
    import numpy as np
    import onnx_ir as ir


#: The dtype names as a type (the values of :class:`Dtype`; tests/test_typing.py checks they stay equal).
DtypeName = Literal["float32", "float16", "bfloat16", "float64"]


class Dtype(str, Enum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT64 = "float64"

    def __str__(self) -> str:  # "float16", not "Dtype.FLOAT16", in messages
        return self.value

    @property
    def data_type(self) -> ir.DataType:
        return _data_types()[self]

    @property
    def elem_type(self) -> int:
        """The ``onnx.TensorProto`` element type."""
        return _ELEM_TYPE[self]

    @property
    def type_str(self) -> str:
        """How ONNX op schemas spell a tensor of this dtype in type constraints."""
        return _TYPE_STR[self]

    @property
    def numpy(self) -> np.dtype:
        return _numpy_dtypes()[self]

    @property
    def short(self) -> str:
        """The short form used in the names of inserted values and casts (``fp16``)."""
        return _SHORT[self]

    @property
    def is_low(self) -> bool:
        """float16 or bfloat16: the reduced types the precision modes introduce."""
        return self in LOW_DTYPES

    @classmethod
    def of_data_type(cls, data_type: ir.DataType | int | None) -> Dtype | None:
        """The dtype of an onnx-ir data type or ONNX element type; None for anything but a float dtype."""
        return _BY_ELEM.get(int(data_type)) if data_type is not None else None

    @classmethod
    def of_value(cls, value: ir.Value | None) -> Dtype | None:
        """float32/float16/bfloat16 for a tensor value of that type; None for anything else, or unknown."""
        if value is None:
            return None
        value_type = value.type  # asked for most values of a model, several times: one read, one lookup
        if not isinstance(value_type, _tensor_type()):
            return None
        return MOVABLE_BY_ELEM_TYPE.get(value_type.dtype)


#: ``onnx.TensorProto.DataType`` numbers (fixed by the ONNX standard).
_ELEM_TYPE = {Dtype.FLOAT32: 1, Dtype.FLOAT16: 10, Dtype.BFLOAT16: 16, Dtype.FLOAT64: 11}
_BY_ELEM = {elem_type: dtype for dtype, elem_type in _ELEM_TYPE.items()}
_TYPE_STR = {
    Dtype.FLOAT32: "tensor(float)",
    Dtype.FLOAT16: "tensor(float16)",
    Dtype.BFLOAT16: "tensor(bfloat16)",
    Dtype.FLOAT64: "tensor(double)",
}


@cache
def _tensor_type() -> type[ir.TensorType]:
    import onnx_ir as ir

    return ir.TensorType


@cache
def _data_types() -> dict[Dtype, ir.DataType]:
    import onnx_ir as ir

    return {dtype: ir.DataType(elem_type) for dtype, elem_type in _ELEM_TYPE.items()}


@cache
def _numpy_dtypes() -> dict[Dtype, np.dtype]:
    import ml_dtypes
    import numpy as np

    return {
        Dtype.FLOAT32: np.dtype(np.float32),
        Dtype.FLOAT16: np.dtype(np.float16),
        Dtype.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
        Dtype.FLOAT64: np.dtype(np.float64),
    }


_SHORT = {Dtype.FLOAT32: "fp32", Dtype.FLOAT16: "fp16", Dtype.BFLOAT16: "bf16", Dtype.FLOAT64: "fp64"}

#: The reduced float types.
LOW_DTYPES = frozenset({Dtype.FLOAT16, Dtype.BFLOAT16})
#: Float types ampconfig moves between. float64 is left alone: nobody asks for double -> half.
MOVABLE_DTYPES = frozenset({Dtype.FLOAT32, Dtype.FLOAT16, Dtype.BFLOAT16})
#: The movable dtype of each ONNX element type number; ``ir.DataType`` is an int enum, so its members find these
#: keys too (one lookup for the question asked of most values of a model).
MOVABLE_BY_ELEM_TYPE: dict[int, Dtype] = {_ELEM_TYPE[dtype]: dtype for dtype in MOVABLE_DTYPES}
#: The order dtypes are listed in (op info files, reports).
FLOAT_DTYPES: tuple[Dtype, ...] = (Dtype.FLOAT32, Dtype.FLOAT16, Dtype.BFLOAT16)
