"""The built-in op info library (``ops_info/<target>.json``) and the op lists it defines.

The file follows Ascend's ops-info convention: ``"precision_reduce": {"flag": "true"}`` is white (always low
precision), ``"false"`` is black (keep fp32), absent is gray (follow the neighbours). ampconfig adds ``"clear":
true`` for numerically neutral pass-through ops (TensorFlow's clear list). Each entry also lists the float dtypes
the target has kernels for, which source that came from, and which reference the colour follows.

The library holds each op as an :class:`OpInfo`, read without pydantic from a file as ``ampconfig ops-info`` writes
it (the packaged ones): a rewrite loads no pydantic. Any other file goes through the file's pydantic models
(:mod:`ampconfig.opinfo.ops_info_file`), which check what a user gives, with located errors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from ampconfig.domains import DEFAULT_DOMAINS
from ampconfig.errors import AmpconfigError, Problem
from ampconfig.files.data_dirs import OPS_INFO, data_dir, source_data_dir
from ampconfig.opinfo.list_colour import Colour as Colour  # re-exported: the colours the library holds
from ampconfig.opinfo.list_colour import ColourName as ColourName

# Re-exported (``as``): the one table of targets and providers lives in opinfo/targets.py.
from ampconfig.opinfo.targets import CPU_PROVIDER as CPU_PROVIDER
from ampconfig.opinfo.targets import CUDA_PROVIDER as CUDA_PROVIDER
from ampconfig.opinfo.targets import DEFAULT_TARGET as DEFAULT_TARGET
from ampconfig.opinfo.targets import PROVIDERS as PROVIDERS
from ampconfig.opinfo.targets import TARGETS as TARGETS

if TYPE_CHECKING:  # the file's pydantic models: imported where a file is validated (parse_ops_info)
    from ampconfig.opinfo.ops_info_file import OpsInfoFile

#: A node's attribute value by name (its schema default where it leaves the attribute out), None when neither.
AttributeReader = Callable[[str], "str | int | None"]


#: The float dtypes an op info file names, and the low ones a kernel may sum in.
FloatDtype = Literal["float32", "float16", "bfloat16"]
LowDtype = Literal["float16", "bfloat16"]


def op_key(domain: str, op_type: str) -> str:
    """The name an op type has in op info and mixlists: ``Op`` or ``domain::Op`` outside the default domain."""
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}::{op_type}"


@dataclass(frozen=True, slots=True)
class ReduceFlag:
    """Ascend's list flag (the file's ``precision_reduce``): "true" white, "false" black."""

    flag: Literal["true", "false"]


@dataclass(frozen=True, slots=True)
class OpInfoVariant:
    """Nodes of an op whose attribute takes one of some values, and the float dtypes the target runs those in (the
    file's ``variants``: :class:`~ampconfig.opinfo.ops_info_file.AttributeVariant` says what each field means)."""

    attribute: str
    values: list[str | int]
    dtypes: list[FloatDtype]
    source: str
    note: str = ""


@dataclass(frozen=True, slots=True)
class OpInfo:
    """One op type on one target, as the library holds it: the fields of the file's entry
    (:class:`~ampconfig.opinfo.ops_info_file.OpInfoEntry`, which says what each means), in its order, with its
    defaults, and without pydantic."""

    precision_reduce: ReduceFlag | None = None
    clear: bool = False
    dtypes: list[FloatDtype] = field(default_factory=list)
    native_dtypes: list[FloatDtype] | None = None
    dtype_source: str = "not-probed"
    reference: str = ""
    accumulation: dict[LowDtype, FloatDtype] | None = None
    accumulation_source: str | None = None
    colour_note: str | None = None
    dtypes_by_opset: dict[str, list[FloatDtype]] | None = None
    no_kernel_opsets: list[int] | None = None
    note: str | None = None
    variants: list[OpInfoVariant] | None = None
    keeps_dtype: str | None = None

    @property
    def colour(self) -> Colour:
        if self.precision_reduce is not None:
            return Colour.WHITE if self.precision_reduce.flag == "true" else Colour.BLACK
        return Colour.CLEAR if self.clear else Colour.GRAY

    def as_json(self, *, exclude_none: bool = False) -> dict[str, Any]:
        """The entry as the file's model dumps it (``model_dump(mode="json")``), without its None fields when
        ``exclude_none`` (none of a variant's fields can be None)."""
        dumped = asdict(self)
        return {k: v for k, v in dumped.items() if v is not None} if exclude_none else dumped


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
    entries: Mapping[str, OpInfo]
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

    def variant_for(self, key: str, attribute_of: AttributeReader) -> OpInfoVariant | None:
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
    """The op info file in ``text``, checked by its pydantic models. A file a user names is scanned for its limits
    first (nesting, value count: :func:`ampconfig.cli.ops_info_cmd.read_ops_info`); the installation's own files are
    ampconfig's, and a nesting deeper than the parser's recursion is still an error here, never a traceback."""
    from pydantic import ValidationError

    from ampconfig.opinfo.ops_info_file import OpsInfoFile

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
    """The library of a file its pydantic models checked."""
    return OpInfoLibrary(
        target=model.target,
        provider=model.provider,
        onnxruntime_version=model.onnxruntime_version,
        entries={key: _op_info(entry.model_dump(mode="json")) for key, entry in model.ops.items()},
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
    """The library in the file. A file as ``ampconfig ops-info`` writes it (every value of the type its field
    names, nothing unknown: :func:`canonical_library`) is read without pydantic; anything else goes through the
    file's pydantic models, which give it their values, or their located errors."""
    del identity  # the cache's key only
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None  # parse_ops_info says where
    library = canonical_library(data, path)
    return library if library is not None else library_from_file(parse_ops_info(text, path), path)


# ------------------------------------------------------------------------------------ reading without pydantic
# What the file's pydantic models accept without converting anything: a value of exactly the type each field
# names. A file of such values reads the same through them or through canonical_library (tests/opinfo checks it
# on the packaged files); any other value (a number for a string, an unknown key...) goes to the models.
_FLOAT_DTYPES: frozenset[object] = frozenset(get_args(FloatDtype))
_LOW_DTYPES: frozenset[object] = frozenset(get_args(LowDtype))


def _is_str(value: object) -> bool:
    return type(value) is str


def _is_optional_str(value: object) -> bool:
    return value is None or type(value) is str


def _are_dtypes(value: object) -> bool:
    return type(value) is list and all(type(d) is str and d in _FLOAT_DTYPES for d in value)


def _is_flag(value: object) -> bool:
    return value is None or (type(value) is dict and value.keys() == {"flag"} and value["flag"] in ("true", "false"))


def _is_accumulation(value: object) -> bool:
    return value is None or (
        type(value) is dict
        and all(type(k) is str and k in _LOW_DTYPES and type(v) is str and v in _FLOAT_DTYPES for k, v in value.items())
    )


def _are_dtypes_by_opset(value: object) -> bool:
    return value is None or (type(value) is dict and all(type(k) is str and _are_dtypes(v) for k, v in value.items()))


def _are_opsets(value: object) -> bool:
    return value is None or (type(value) is list and all(type(opset) is int for opset in value))


def _is_variant(value: object) -> bool:
    return (
        type(value) is dict
        and _VARIANT_REQUIRED <= value.keys() <= _VARIANT_FIELDS.keys()
        and all(_VARIANT_FIELDS[key](item) for key, item in value.items())
    )


def _are_variants(value: object) -> bool:
    return value is None or (type(value) is list and all(_is_variant(variant) for variant in value))


def _are_values(value: object) -> bool:
    return type(value) is list and bool(value) and all(type(item) in (str, int) for item in value)


_VARIANT_FIELDS: dict[str, Callable[[object], bool]] = {
    "attribute": _is_str,
    "values": _are_values,
    "dtypes": _are_dtypes,
    "source": _is_str,
    "note": _is_str,
}
_VARIANT_REQUIRED = frozenset(("attribute", "values", "dtypes", "source"))
_ENTRY_FIELDS: dict[str, Callable[[object], bool]] = {
    "precision_reduce": _is_flag,
    "clear": lambda value: type(value) is bool,
    "dtypes": _are_dtypes,
    "native_dtypes": lambda value: value is None or _are_dtypes(value),
    "dtype_source": _is_str,
    "reference": _is_str,
    "accumulation": _is_accumulation,
    "accumulation_source": _is_optional_str,
    "colour_note": _is_optional_str,
    "dtypes_by_opset": _are_dtypes_by_opset,
    "no_kernel_opsets": _are_opsets,
    "note": _is_optional_str,
    "variants": _are_variants,
    "keeps_dtype": _is_optional_str,
}
_FILE_FIELDS: dict[str, Callable[[object], bool]] = {
    "$schema": _is_optional_str,
    "target": lambda value: value in TARGETS and type(value) is str,
    "provider": _is_str,
    "onnxruntime_version": _is_str,
    "generated_by": _is_str,
    "ops": lambda value: type(value) is dict and all(_is_entry(entry) for entry in value.values()),
}
_FILE_REQUIRED = frozenset(("target", "provider", "onnxruntime_version", "ops"))


def _is_entry(value: object) -> bool:
    return (
        type(value) is dict
        and value.keys() <= _ENTRY_FIELDS.keys()
        and all(_ENTRY_FIELDS[key](item) for key, item in value.items())
        and not (value.get("clear") and value.get("precision_reduce") is not None)  # OpInfoEntry's own check
    )


def canonical_library(data: object, source: str) -> OpInfoLibrary | None:
    """The library of a parsed op info file whose every value has exactly its field's type (what ``ampconfig
    ops-info`` writes), read without pydantic; None for any other data, which :func:`parse_ops_info` checks."""
    if not (
        type(data) is dict
        and _FILE_REQUIRED <= data.keys() <= _FILE_FIELDS.keys()
        and all(_FILE_FIELDS[key](value) for key, value in data.items())
    ):
        return None
    return OpInfoLibrary(
        target=data["target"],
        provider=data["provider"],
        onnxruntime_version=data["onnxruntime_version"],
        entries={key: _op_info(entry) for key, entry in data["ops"].items()},
        source=source,
    )


def _op_info(entry: dict[str, Any]) -> OpInfo:
    """An entry of checked data (:func:`canonical_library`, or a pydantic entry's dump) as the library's."""
    flag, variants = entry.get("precision_reduce"), entry.get("variants")
    return OpInfo(
        **{key: value for key, value in entry.items() if key not in ("precision_reduce", "variants")},
        precision_reduce=ReduceFlag(flag["flag"]) if flag is not None else None,
        variants=[OpInfoVariant(**variant) for variant in variants] if variants is not None else None,
    )
