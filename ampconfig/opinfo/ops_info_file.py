"""The op info file's format (``ops_info/<target>.json``, and the files ``ampconfig ops-info`` reads and writes):
its pydantic models, which check a user's file with located errors and give ``ampconfig schema ops-info`` its
schema. Imported where a file is validated or built; the built-in library is read without them
(:mod:`ampconfig.opinfo.library`), so that a rewrite loads no pydantic."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ampconfig.opinfo.list_colour import Colour
from ampconfig.opinfo.targets import TargetName


class PrecisionReduce(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid")
    flag: Literal["true", "false"] = Field(
        description='"true": white list (always computed in low precision); "false": black list (kept in fp32).'
    )


class AttributeVariant(BaseModel):
    """Nodes of an op whose attribute takes one of some values, and the float dtypes the target runs those in:
    ONNX Runtime's kernels can refuse a dtype for some attribute values only (ScatterND's ``reduction``)."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    attribute: str = Field(description="The node attribute (its schema default where the node leaves it out).")
    values: list[str | int] = Field(min_length=1, description="The attribute values this variant covers.")
    dtypes: list[Literal["float32", "float16", "bfloat16"]] = Field(
        description="Float dtypes the target runs such a node in: a subset of the op's `dtypes`. A dtype of the "
        "op's `dtypes` missing here has no kernel for these attribute values."
    )
    source: str = Field(
        description="Where this comes from: 'probe' (one-node probes of these attribute values), or 'refusal' "
        "(ONNX Runtime refused a real model's node with these values; the one-node probes did not)."
    )
    note: str = Field(default="", description="What was measured: the model, the message, the onnxruntime wheel.")


class OpInfoEntry(BaseModel):
    """One op type on one target."""

    model_config = ConfigDict(defer_build=True, extra="forbid", populate_by_name=True)

    precision_reduce: PrecisionReduce | None = Field(
        default=None,
        description="Ascend list flag. Absent means gray (the op follows its neighbours) unless `clear` is true.",
    )
    clear: bool = Field(
        default=False,
        description="Numerically neutral pass-through op (reshape, transpose, concat, relu...): it follows its "
        "neighbours and never forces a cast. Only valid without precision_reduce.",
    )
    dtypes: list[Literal["float32", "float16", "bfloat16"]] = Field(
        default_factory=list,
        description="Float dtypes the target runs the op in: every probe model of the op that loads and runs in "
        "float32 also loads and runs in this dtype. Empty with dtype_source 'not-probed' means unknown.",
    )
    native_dtypes: list[Literal["float32", "float16", "bfloat16"]] | None = Field(
        default=None,
        description="The subset of `dtypes` with a native kernel. A dtype in `dtypes` but not here runs through "
        "casts ONNX Runtime inserts around the node (the CPU provider does this for float16): it is valid and "
        "exact to float16 storage, but not faster. Absent when the source cannot tell (kernel table).",
    )
    dtype_source: str = Field(
        default="not-probed",
        description="Where `dtypes` comes from: 'probe' (measured by `ampconfig ops-info probe`), "
        "'kernel-table' (ONNX Runtime's docs/OperatorKernels.md), 'kernel-registry' (a dump of ORT's registered "
        "kernels, `ampconfig ops-info import-kernels`), or 'not-probed'.",
    )
    reference: str = Field(
        default="",
        description="Which reference the colour follows (TensorFlow AMP lists, PyTorch autocast lists, ...).",
    )
    accumulation: dict[Literal["float16", "bfloat16"], Literal["float32", "float16", "bfloat16"]] | None = Field(
        default=None,
        description="Per low dtype, the dtype the target's kernel sums in (norm statistics, softmax denominators), "
        "where known: the reason an op the reference lists keep in float32 can be gray on this target.",
    )
    accumulation_source: str | None = Field(
        default=None, description="Where `accumulation` is stated (ONNX Runtime source files), or why it holds."
    )
    colour_note: str | None = Field(
        default=None,
        description="Why this target's colour differs from the reference lists' (see `accumulation`).",
    )
    dtypes_by_opset: dict[str, list[Literal["float32", "float16", "bfloat16"]]] | None = Field(
        default=None,
        description="Per default-domain opset measured (13, 17, and the newest schema version with a kernel): the "
        "dtypes that opset's schema version runs in. `dtypes` is what holds at all of them. Absent: one opset "
        "only (contrib ops, kernel table).",
    )
    no_kernel_opsets: list[int] | None = Field(
        default=None,
        description="Opsets at which the target has no kernel for the op's schema version in any dtype (ONNX "
        "Runtime serves an open-ended kernel registration only for the schema version it starts at).",
    )
    note: str | None = Field(
        default=None,
        description="Why dtypes are unknown (dtype_source 'not-probed'), or what the measurement left out.",
    )
    variants: list[AttributeVariant] | None = Field(
        default=None,
        description="Attribute values for which the target runs fewer dtypes than `dtypes` (the first variant a "
        "node matches applies). Absent: every node of the op runs in `dtypes`.",
    )
    keeps_dtype: str | None = Field(
        default=None,
        description="Set for packed or quantized ops whose float tensors are tied to their packing or scales: the "
        "node keeps its dtypes whatever the mode, for the reason given.",
    )

    @model_validator(mode="after")
    def _clear_is_uncoloured(self) -> OpInfoEntry:
        if self.clear and self.precision_reduce is not None:
            raise ValueError("an op cannot be both clear and carry precision_reduce")
        return self

    @property
    def colour(self) -> Colour:
        if self.precision_reduce is not None:
            return Colour.WHITE if self.precision_reduce.flag == "true" else Colour.BLACK
        return Colour.CLEAR if self.clear else Colour.GRAY


class OpsInfoFile(BaseModel):
    """ampconfig op info library for one execution target."""

    model_config = ConfigDict(defer_build=True, extra="forbid", populate_by_name=True)

    schema_ref: str | None = Field(default=None, alias="$schema", description="JSON Schema of this file.")
    target: TargetName = Field(description="Execution target these kernels belong to.")
    provider: str = Field(description="ONNX Runtime execution provider name, e.g. CPUExecutionProvider.")
    onnxruntime_version: str = Field(description="ONNX Runtime version the dtypes were measured or read for.")
    generated_by: str = Field(default="", description="Command or process that wrote this file.")
    ops: dict[str, OpInfoEntry] = Field(
        description="Per op type (`Op`, or `domain::Op` outside the default ONNX domain)."
    )
