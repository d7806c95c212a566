"""The float dtypes ampconfig decides between, and every spelling of each one (onnx-ir, ONNX protobuf, numpy).

:class:`Dtype` is a ``str`` enum: its value is the name reports and JSON use ("float16"), so a ``Dtype`` compares
equal to that string and serialises as it. Everything else about a dtype hangs off the member, so no module keeps
its own table.
"""

from __future__ import annotations

from enum import Enum

import ml_dtypes
import numpy as np
import onnx_ir as ir


class Dtype(str, Enum):
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT64 = "float64"

    def __str__(self) -> str:  # "float16", not "Dtype.FLOAT16", in messages
        return self.value

    @property
    def data_type(self) -> ir.DataType:
        return _DATA_TYPE[self]

    @property
    def elem_type(self) -> int:
        """The ``onnx.TensorProto`` element type."""
        return int(self.data_type)

    @property
    def type_str(self) -> str:
        """How ONNX op schemas spell a tensor of this dtype in type constraints."""
        return _TYPE_STR[self]

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self]

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
        if value is None or not isinstance(value.type, ir.TensorType):
            return None
        dtype = _BY_ELEM.get(int(value.type.dtype))
        return dtype if dtype in MOVABLE_DTYPES else None


_DATA_TYPE = {
    Dtype.FLOAT32: ir.DataType.FLOAT,
    Dtype.FLOAT16: ir.DataType.FLOAT16,
    Dtype.BFLOAT16: ir.DataType.BFLOAT16,
    Dtype.FLOAT64: ir.DataType.DOUBLE,
}
_BY_ELEM = {int(data_type): dtype for dtype, data_type in _DATA_TYPE.items()}
_TYPE_STR = {
    Dtype.FLOAT32: "tensor(float)",
    Dtype.FLOAT16: "tensor(float16)",
    Dtype.BFLOAT16: "tensor(bfloat16)",
    Dtype.FLOAT64: "tensor(double)",
}
_NUMPY = {
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
#: The order dtypes are listed in (op info files, reports).
FLOAT_DTYPES: tuple[Dtype, ...] = (Dtype.FLOAT32, Dtype.FLOAT16, Dtype.BFLOAT16)
