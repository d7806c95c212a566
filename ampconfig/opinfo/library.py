"""The built-in op info library (``ops_info/<target>.json``) and the op lists it defines.

The file follows Ascend's ops-info convention: ``"precision_reduce": {"flag": "true"}`` is white (always low
precision), ``"false"`` is black (keep fp32), absent is gray (follow the neighbours). ampconfig adds ``"clear":
true`` for numerically neutral pass-through ops (TensorFlow's clear list). Each entry also lists the float dtypes
the target has kernels for, which source that came from, and which reference the colour follows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ampconfig.domains import DEFAULT_DOMAINS
from ampconfig.errors import AmpconfigError, Problem
from ampconfig.files.data_dirs import OPS_INFO, data_dir, source_data_dir

# Re-exported (``as``): the one table of targets and providers lives in opinfo/targets.py.
from ampconfig.opinfo.targets import CPU_PROVIDER as CPU_PROVIDER
from ampconfig.opinfo.targets import CUDA_PROVIDER as CUDA_PROVIDER
from ampconfig.opinfo.targets import DEFAULT_TARGET as DEFAULT_TARGET
from ampconfig.opinfo.targets import PROVIDERS as PROVIDERS
from ampconfig.opinfo.targets import TARGETS as TARGETS
from ampconfig.opinfo.targets import TargetName

#: A node's attribute value by name (its schema default where it leaves the attribute out), None when neither.
AttributeReader = Callable[[str], "str | int | None"]


#: The colour names as a type (the values of :class:`Colour`; tests/test_typing.py checks they stay equal).
ColourName = Literal["white", "black", "gray", "clear"]


class Colour(str, Enum):
    WHITE = "white"
    BLACK = "black"
    GRAY = "gray"
    CLEAR = "clear"


def op_key(domain: str, op_type: str) -> str:
    """The name an op type has in op info and mixlists: ``Op`` or ``domain::Op`` outside the default domain."""
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}::{op_type}"


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


@dataclass(frozen=True)
class OpLists:
    """Effective white/black/gray/clear lists: the op info, possibly modified by a mixlist."""

    colours: Mapping[str, Colour]
    #: op keys a mixlist moved: the user's word, which the per-node judgements of the built-in colours respect
    edited: frozenset[str] = frozenset()

    def colour_of(self, key: str) -> Colour:
        # Ascend: an op without precision_reduce is gray; an op nobody knows is gray too.
        return self.colours.get(key, Colour.GRAY)

    def members(self, colour: Colour) -> list[str]:
        return sorted(key for key, value in self.colours.items() if value is colour)

    def as_dict(self) -> dict[str, list[str]]:
        return {colour.value: self.members(colour) for colour in Colour}

    def with_colours(self, changes: Mapping[str, Colour]) -> OpLists:
        merged = dict(self.colours)
        merged.update(changes)
        return OpLists(merged, self.edited | frozenset(changes))


@dataclass(frozen=True)
class OpInfoLibrary:
    """The loaded op info of one target."""

    target: str
    provider: str
    onnxruntime_version: str
    entries: Mapping[str, OpInfoEntry]
    source: str = field(default="")

    def knows(self, key: str) -> bool:
        return key in self.entries

    def lists(self) -> OpLists:
        return OpLists({key: entry.colour for key, entry in self.entries.items()})

    def kernel_dtypes(self, key: str) -> frozenset[str] | None:
        """Float dtypes with a kernel on this target; None when unknown (op absent or never probed)."""
        entry = self.entries.get(key)
        if entry is None or (entry.dtype_source == "not-probed" and not entry.dtypes):
            return None
        return frozenset(entry.dtypes)

    def is_native(self, key: str, dtype: str) -> bool:
        """True when the target has a kernel of its own for ``dtype`` (known, and not emulated through casts)."""
        entry = self.entries.get(key)
        if entry is None or dtype not in entry.dtypes:
            return False
        return entry.native_dtypes is None or dtype in entry.native_dtypes

    def keeps_dtype(self, key: str) -> str | None:
        """Why a packed or quantized op keeps its dtypes whatever the mode, or None for other ops."""
        entry = self.entries.get(key)
        return entry.keeps_dtype if entry is not None else None

    def colour_note(self, key: str) -> str | None:
        """Why the op's colour on this target differs from the reference lists', if it does."""
        entry = self.entries.get(key)
        return entry.colour_note if entry is not None else None

    def has_kernel(self, key: str, dtype: str, attribute_of: AttributeReader | None = None) -> bool | None:
        """Whether the target has a ``dtype`` kernel for the op; None when unknown (as :meth:`kernel_dtypes`).
        With ``attribute_of`` (a node's attribute values), a variant the node matches narrows the answer.
        Asked for every node, several times: it reads the entry without building :meth:`kernel_dtypes`' set."""
        entry = self.entries.get(key)
        if entry is None or (entry.dtype_source == "not-probed" and not entry.dtypes):
            return None
        if dtype not in entry.dtypes:
            return False
        variant = self.variant_for(key, attribute_of) if attribute_of is not None else None
        return variant is None or dtype in variant.dtypes

    def has_variants(self, key: str) -> bool:
        """Whether the op's answers depend on a node's attributes (its entry has variants)."""
        entry = self.entries.get(key)
        return entry is not None and bool(entry.variants)

    def variant_for(self, key: str, attribute_of: AttributeReader) -> AttributeVariant | None:
        """The first variant of the op whose attribute value the node has (``attribute_of(name)``: the node's
        value, or its schema default; None when neither)."""
        entry = self.entries.get(key)
        for variant in (entry.variants or []) if entry is not None else []:
            if attribute_of(variant.attribute) in variant.values:
                return variant
        return None


def ops_info_path(target: str) -> Path:
    """The built-in op info file of a target: ``ops_info/<target>.json`` of the checkout, or of the installed
    package (:mod:`ampconfig.files.data_dirs`)."""
    return data_dir(OPS_INFO) / f"{target}.json"


def source_ops_info_path(target: str) -> Path | None:
    """``ops_info/<target>.json`` of the source checkout ampconfig runs from; None when it runs from an installed
    package, which commands never write into."""
    folder = source_data_dir(OPS_INFO)
    return folder / f"{target}.json" if folder is not None else None


def parse_ops_info(text: str, source: str) -> OpsInfoFile:
    """The op info file in ``text``. A file a user names is scanned for its limits first (nesting, value count:
    :func:`ampconfig.cli.ops_info_cmd.read_ops_info`); the installation's own files are ampconfig's, and a nesting
    deeper than the parser's recursion is still an error here, never a traceback."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AmpconfigError(f"not valid JSON: {exc.msg}", file=source, line=exc.lineno) from None
    except RecursionError:
        raise AmpconfigError("nesting too deep for an op info file", file=source) from None
    try:
        return OpsInfoFile.model_validate(data)
    except ValidationError as exc:
        problems = [
            Problem(err["msg"], file=source, json_path="$." + ".".join(str(p) for p in err["loc"]))
            for err in exc.errors()
        ]
        raise AmpconfigError(problems[0].message, file=source, problems=problems) from None


def library_from_file(model: OpsInfoFile, source: str) -> OpInfoLibrary:
    return OpInfoLibrary(
        target=model.target,
        provider=model.provider,
        onnxruntime_version=model.onnxruntime_version,
        entries=dict(model.ops),
        source=source,
    )


def load_ops_info(target: str) -> OpInfoLibrary:
    """The built-in op info library of a target ("cpu" or "cuda"), read once per version of its file
    (:func:`ops_info_library`)."""
    if target not in TARGETS:
        raise AmpconfigError(f"unknown target {target!r}", hint="valid targets: " + ", ".join(TARGETS))
    path = ops_info_path(target)
    if not path.is_file():
        raise AmpconfigError(
            f"op info for target {target!r} is missing from the installation",
            file=str(path),
            hint="reinstall ampconfig or run `ampconfig ops-info probe --target " + target + "`",
        )
    return ops_info_library(path)


def ops_info_library(path: Path) -> OpInfoLibrary:
    """The op info library in the file at ``path``, the same object while the file stays the same: a file written
    since it was read (``ampconfig ops-info probe`` in this process or another, replaced or rewritten in place) is
    read again. The file's identity (device, inode, modification time, size) keys the cache."""
    stat = os.stat(path)
    return _read_library(str(path), (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=8)  # a few versions of the two targets' files
def _read_library(path: str, identity: tuple[int, int, int, int]) -> OpInfoLibrary:
    del identity  # the cache's key only
    model = parse_ops_info(Path(path).read_text(encoding="utf-8"), path)
    return library_from_file(model, path)
