"""The precision lock file: a reviewable record of every decision ampconfig made for one model, and of what it
was made from. ``ampconfig lock`` writes it; ``lock --check`` and ``validate`` read it back.

This module is the file format only (pure data, no model and no decision): the pydantic models its JSON Schema is
generated from, :func:`parse_lock` (bounded and located, as every user document is read) and :func:`lock_text`,
which writes it deterministically and shaped for small git diffs: sections one key per line, one node per line, in
graph order. :mod:`ampconfig.lock` fills it and compares two of them.

Paths in a lock are relative to the lock's own folder, with ``/`` separators, so the same tree gives the same lock
on any machine and in any working directory.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from ampconfig.documents.document_limits import MAX_LOCK_VALUES
from ampconfig.documents.format_tags import LOCK_FORMAT
from ampconfig.documents.parsing import (
    SourceMap,
    json_source_map,
    parse_document,
    read_text,
    require_format,
    scan_json,
    validation_problems,
)
from ampconfig.documents.tolerance import Tolerance
from ampconfig.dtypes import DtypeName
from ampconfig.errors import AmpconfigError
from ampconfig.files.bounded import MAX_LOCK_BYTES
from ampconfig.opinfo.library import ColourName
from ampconfig.opinfo.op_names import VocabularyName
from ampconfig.opinfo.targets import TargetName
from ampconfig.precision_modes import V1Name
from ampconfig.value_counts import EXPONENT_MAX, EXPONENT_MIN

#: The value of every lock's ``format`` key: what tells a lock from any other JSON file.
#: The version of the format this ampconfig writes, and every version it reads. A lock of a newer version is
#: refused (exit 2) as written by a newer ampconfig. Version 2 records the spreads of the values that decided by
#: underflow (``values.below_normal``); a version 1 lock reads as one whose values decided by overflow only.
LOCK_FORMAT_VERSION = 2
LOCK_READ_VERSIONS = (1, 2)
#: The lock's schema file (``ampconfig schema lock``); a lock written into a repository that keeps ampconfig's
#: schemas refers to it by relative path (:func:`ampconfig.settings.json_schemas.schema_reference`).
LOCK_SCHEMA_FILE = "precision-lock.schema.json"

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the content, lowercase hex.")]
#: Where a setting came from when the lock was made: a command-line flag, the session config, or the default.
SettingSource = Literal["command line", "config", "default"]
FileSource = Literal["command line", "config"]
#: The rules' ids as a type (the values of ``ampconfig.decide.decisions.Rule``, which sits above this package;
#: tests/test_typing.py checks they stay equal).
RuleName = Literal[
    "not_float",
    "untyped",
    "control_flow",
    "non_tensor",
    "sparse_tensor",
    "customized",
    "keep_dtype",
    "no_low_kernel",
    "no_schema",
    "op_keeps_dtype",
    "schema_forbids",
    "no_origin_kernel",
    "mode_keeps",
    "mode_lowers",
    "mode_raises",
    "white_list",
    "black_list",
    "deny_propagation",
    "follows_inputs",
    "follows_consumers",
    "already_low",
    "fusion_guard",
    "cast_aware_island",
    "cast_retargeted",
    "checker_rejects",
    "runtime_refuses",
    "value_out_of_range",
    "range_exceeds",
    "range_underflows",
    "log_domain_precision",
    "quantizer_input",
    "integer_accumulator_bound",
]
#: The numbers ampconfig measures: finite (JSON has no NaN or Infinity; Python's reader takes them all the same).
PositiveNumber = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]
FiniteNumber = Annotated[float, Field(allow_inf_nan=False)]

#: What a file that is not a lock of a format this reads is told.
_LOCK_HINT = "regenerate it: ampconfig lock MODEL [settings] -o FILE"
#: What a lock that cannot have come from ampconfig is told (a hand edit, or a merge that mixed two locks).
_EDITED_HINT = (
    "ampconfig never writes this: restore the lock from version control, or write it again: "
    "ampconfig lock MODEL [settings] -o FILE"
)


def located_error(message: str, at: tuple[str | int, ...], hint: str = _EDITED_HINT) -> PydanticCustomError:
    """What a record's own rule refuses (fields that contradict each other, a value out of its range), located at
    ``at`` below the record (the located reader appends it to the record's path:
    :func:`~ampconfig.documents.parsing.validation_problems`)."""
    return PydanticCustomError("lock_record", "{message}", {"message": message, "at": at, "hint": hint})


def _null_means_default(record: dict[str, Any]) -> None:
    """A null value is a setting nobody gave: its source is the default, and a given one has a value."""
    schema = record.setdefault("allOf", [])
    schema.append(
        {
            "if": {"properties": {"value": {"type": "null"}}},
            "then": {"properties": {"source": {"const": "default"}}},
            "else": {"properties": {"source": {"not": {"const": "default"}}}},
        }
    )


class _Record(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", populate_by_name=True)


class _NullableSetting(_Record):
    """A setting whose null value means "not given": what it was when none was (ampconfig's default)."""

    model_config = ConfigDict(json_schema_extra=_null_means_default)

    value: Any
    source: SettingSource

    @model_validator(mode="after")
    def _given_has_a_value(self) -> _NullableSetting:
        if self.value is None and self.source != "default":
            raise located_error(
                f'a null value is one nobody gave, but "source" says it came from the {self.source}', ("source",)
            )
        if self.value is not None and self.source == "default":
            raise located_error(
                f'"source": "default" means nobody gave it, and then the value is null, not {json.dumps(self.value)}',
                ("value",),
            )
        return self


class ModeSetting(_Record):
    value: V1Name = Field(description="The precision mode (v1 name).")
    source: SettingSource = Field(description="Where it came from when the lock was made.")


class TargetSetting(_Record):
    value: TargetName = Field(description="The decision target: whose op info decided.")
    source: SettingSource = Field(description="Where it came from when the lock was made.")


class FlagSetting(_Record):
    value: bool = Field(strict=True, description="The setting's value.")
    source: SettingSource = Field(description="Where it came from when the lock was made.")


class OpNamesSetting(_NullableSetting):
    value: VocabularyName | None = Field(
        description="Whose op names the settings files use; null: each name by the table."
    )
    source: SettingSource = Field(description="Where it came from when the lock was made (null value: the default).")


class MarginSetting(_NullableSetting):
    value: PositiveNumber | None = Field(
        description="The range rule's margin (data_max); null: the low type's default."
    )
    source: SettingSource = Field(description="Where it came from when the lock was made (null value: the default).")


class ConfigFile(_Record):
    """The session config the settings were read from."""

    path: str = Field(min_length=1, description="Path relative to the lock's folder, with / separators.")
    sha256: Sha256


class SettingsFile(_Record):
    """A mixlist, keep_dtype or customize_dtypes file, or a mixlist or keep_dtype list written inline in the
    config (``path`` null)."""

    path: str | None = Field(
        min_length=1,
        description="Path relative to the lock's folder, with / separators; null when written inline in the config.",
    )
    sha256: Sha256
    source: FileSource = Field(description="The flag or the config that named it when the lock was made.")

    @model_validator(mode="after")
    def _inline_lists_are_the_configs(self) -> SettingsFile:
        if self.path is None and self.source != "config":
            raise located_error(
                'a list written inline ("path": null) is one the config holds, but "source" says the command line',
                ("source",),
            )
        return self


class LockSettings(_Record):
    """The settings the decisions were made with; ``lock --check`` decides again with them."""

    precision_mode: ModeSetting
    target: TargetSetting
    keep_io_types: FlagSetting
    op_names: OpNamesSetting
    config: ConfigFile | None = Field(description="The session config, when one was given.")
    modify_mixlist: SettingsFile | None = Field(description="The modify_mixlist, when one was given.")
    keep_dtype: SettingsFile | None = Field(description="The keep_dtype pins, when given.")
    customize_dtypes: SettingsFile | None = Field(description="The customize_dtypes file, when given.")
    clamp_values: FlagSetting | None = Field(
        default=None, description="Whether constants beyond the low type's range were clamped (absent: off)."
    )
    data_max: MarginSetting | None = Field(default=None, description="The range rule's margin (absent: default).")

    @model_validator(mode="after")
    def _customize_dtypes_is_a_file(self) -> LockSettings:
        if self.customize_dtypes is not None and self.customize_dtypes.path is None:
            raise located_error(
                "customize_dtypes is always a file (a config names it, never holds it): its path cannot be null",
                ("customize_dtypes", "path"),
            )
        return self


class OpInfoVersion(_Record):
    """The op info library that decided: its target, the ONNX Runtime release it describes, its content."""

    target: TargetName = Field(description="The op info's target (the decision target).")
    onnxruntime: str = Field(description="The ONNX Runtime release the op info was measured or read for.")
    sha256: Sha256


class LockVersions(_Record):
    """The versions that decide: a change here changes decisions only through the rules and tables they carry."""

    ampconfig: str
    onnx: str
    onnxruntime: str | None = Field(description="Installed ONNX Runtime (it types contrib ops); null when absent.")
    op_info: OpInfoVersion


def _model_named_once(record: dict[str, Any]) -> None:
    record["oneOf"] = [
        {
            "properties": {
                "path": {"type": "string"},
                "example": {"type": "null"},
                "source": {"not": {"const": "default"}},
            }
        },
        {"properties": {"path": {"type": "null"}, "example": {"type": "string"}, "source": {"const": "default"}}},
    ]


class ModelIdentity(_Record):
    """Which model was decided. The graph and the weights are hashed apart: retrained weights change
    ``weights_sha256`` only, a re-export that changes the graph changes ``structure_sha256``."""

    model_config = ConfigDict(json_schema_extra=_model_named_once)

    path: str | None = Field(
        min_length=1, description="Path relative to the lock's folder; null for the bundled example."
    )
    example: str | None = Field(min_length=1, description="The bundled example's name when no model was given.")
    source: SettingSource = Field(description="MODEL on the command line, `model` in the config, or the default.")
    structure_sha256: Sha256 = Field(
        description="Nodes (op types, names, attributes, inputs, outputs), value types, opsets, subgraphs and "
        "functions; tensors by name, type and shape only."
    )
    weights_sha256: Sha256 = Field(description="The values of every tensor: initializers and constants.")
    nodes: int = Field(ge=0, description="Nodes in the model, subgraphs included.")
    opsets: dict[str, int] = Field(description='Opset imports; the default domain is ``""``.')

    @model_validator(mode="after")
    def _one_model(self) -> ModelIdentity:
        if self.path is None and self.example is None:
            raise located_error(
                "the lock names no model: a model path, or the bundled example when none was given", ("path",)
            )
        if self.path is not None and self.example is not None:
            raise located_error(
                f"the lock names both the model {self.path!r} and the bundled example {self.example!r}: the example "
                "is decided only when no model was given",
                ("example",),
            )
        if self.example is not None and self.source != "default":
            raise located_error(
                "the bundled example is decided when no model was given "
                f'("source": "default"), not from the {self.source}',
                ("source",),
            )
        if self.path is not None and self.source == "default":
            raise located_error(
                f'a named model ({self.path!r}) came from the command line or the config, not "default"', ("source",)
            )
        return self


class LockedSpread(_Record):
    """What the underflow rule reads of a value: its zeros and its binary-exponent histogram (a ranges file's)."""

    zeros: int = Field(ge=0, strict=True, description="How many elements were zero.")
    exponents: dict[
        Annotated[str, Field(pattern=r"^(0|-?[1-9][0-9]{0,2})$")], Annotated[int, Field(ge=1, strict=True)]
    ] = Field(description="Per binary exponent (-149 to 127), how many finite non-zero elements had it.")

    @model_validator(mode="after")
    def _float32_exponents(self) -> LockedSpread:
        for exponent in self.exponents:
            if not EXPONENT_MIN <= int(exponent) <= EXPONENT_MAX:
                raise located_error(
                    f"exponent {exponent} lies outside float32's exponents ({EXPONENT_MIN} to {EXPONENT_MAX})",
                    ("exponents", exponent),
                )
        return self


def _values_as_checked(record: dict[str, Any]) -> None:
    empty = {"type": "object", "maxProperties": 0}
    record["if"] = {"properties": {"checked": {"const": False}}}
    record["then"] = {
        "properties": {
            "source": {"type": "null"},
            "ranges": {"type": "null"},
            "data_sha256": {"type": "null"},
            "beyond_margin": empty,
            "below_normal": {"anyOf": [empty, {"type": "null"}]},
        }
    }
    # checked: the values came from a ranges file or from data named in words, one of the two
    record["else"] = {
        "oneOf": [{"properties": {"ranges": {"type": "null"}}}, {"properties": {"source": {"type": "null"}}}]
    }


class LockValues(_Record):
    """The float32 model's value ranges the decisions read (docs/design.md §5): where they came from, and every value
    whose largest magnitude passed the margin, which is all the range rule reads. ``lock --check`` decides again
    with the ranges file when one was given, else with these values: it never runs the model."""

    model_config = ConfigDict(json_schema_extra=_values_as_checked)

    checked: bool = Field(
        strict=True, description="false: activations were not checked (no ranges and no data; constants were)."
    )
    source: str | None = Field(
        description="The data the values were measured on, in words (null when a ranges file was read, or nothing)."
    )
    ranges: SettingsFile | None = Field(description="The value ranges file, when one was given (--ranges, config).")
    data_sha256: Sha256 | None = Field(description="Digest of the samples the values were measured on.")
    beyond_margin: dict[str, PositiveNumber] = Field(
        description="By value key (a value of the model), each largest |value| beyond the margin (finite, > 0): the "
        "values that kept nodes float32."
    )
    below_normal: dict[str, LockedSpread] | None = Field(
        default=None,
        description="By value key, how each value that can decide by underflow spread (rule range_underflows): "
        "mostly below the low type's normal range, or with elements the low type rounds to zero where float32 had "
        "none. With beyond_margin, all the value rules read. Absent in version 1 locks.",
    )

    @model_validator(mode="after")
    def _as_checked(self) -> LockValues:
        if self.ranges is not None and self.ranges.path is None:
            raise located_error("a value ranges file is a file: its path cannot be null", ("ranges", "path"))
        if not self.checked:
            recorded = [
                (key, what)
                for key, what, present in (
                    ("ranges", "a value ranges file", self.ranges is not None),
                    ("source", "the data the values were measured on", self.source is not None),
                    ("data_sha256", "a digest of that data", self.data_sha256 is not None),
                    ("beyond_margin", "values beyond the margin", bool(self.beyond_margin)),
                    ("below_normal", "values below the normal range", bool(self.below_normal)),
                )
                if present
            ]
            if recorded:
                key, what = recorded[0]
                raise located_error(
                    f'"checked": false says no value was checked, but the lock records {what} at $.values.{key}',
                    ("checked",),
                )
            return self
        if self.ranges is None and self.source is None:
            raise located_error(
                '"checked": true, but the lock names neither the value ranges file nor the data the values came from',
                ("source",),
            )
        if self.ranges is not None and self.source is not None:
            raise located_error(
                "the values came from the value ranges file at $.values.ranges: no data is named beside it",
                ("source",),
            )
        return self


class LockSummary(_Record):
    nodes: int = Field(ge=0, description="Decided nodes (after written-out LayerNorms are folded).")
    low_precision_nodes: int = Field(ge=0, description="Nodes computing in the low type.")
    low_dtype: Literal["float16", "bfloat16"]
    casts: int = Field(ge=0, description="Casts the decisions need.")
    estimated_us: Amount = Field(description="Estimated time of kernels and casts, microseconds.")
    estimated_float32_us: Amount = Field(description="Estimated time with every node in float32.")


def _colour_with_a_float(record: dict[str, Any]) -> None:
    record["if"] = {"properties": {"from": {"type": "null"}}}
    record["then"] = {"properties": {"colour": {"type": "null"}}}
    record["else"] = {"properties": {"colour": {"type": "string"}}}


class LockedNode(_Record):
    """One node's decision."""

    model_config = ConfigDict(json_schema_extra=_colour_with_a_float)

    scope: str = Field(description='"" for the main graph, else the subgraph\'s path.')
    name: str = Field(description="The node's name (unnamed nodes get the name ampconfig gives them).")
    op: str = Field(min_length=1, description="Op type: `Op`, or `domain::Op` outside the default ONNX domain.")
    colour: ColourName | None = Field(description="Effective list colour; null where lists do not apply (no float).")
    from_dtype: DtypeName | None = Field(alias="from", description="Dtype the node computed in before.")
    dtype: DtypeName | None = Field(description="Dtype it computes in after the rewrite.")
    rule: RuleName = Field(description="The rule that decided (ampconfig explain lists them).")
    cause: str | None = Field(description="The neighbour (node or value) that caused the decision, if any.")

    @model_validator(mode="after")
    def _coloured_when_float(self) -> LockedNode:
        # The lists colour every node that computes in a float type, and no other.
        if self.from_dtype is None and self.colour is not None:
            raise located_error(
                f'a node that computed in no float type ("from": null) has no list colour, not "{self.colour}"',
                ("colour",),
            )
        if self.from_dtype is not None and self.colour is None:
            raise located_error(
                f"a node that computed in {self.from_dtype} has a list colour; this one has none", ("colour",)
            )
        return self


class FileDigest(_Record):
    path: str = Field(min_length=1, description="Path relative to the lock's folder.")
    sha256: Sha256


class ProofData(_Record):
    """The inputs the proof ran on."""

    npz: FileDigest | None = Field(description="The .npz of inputs, when one was given.")
    arrays: dict[str, FileDigest] = Field(description="Inputs read from .npy files, by input name.")
    shapes: dict[str, list[int]] = Field(description="Shapes of generated inputs, by input name.")
    seed: int = Field(ge=0, description="Seed of generated inputs.")
    inputs: list[dict[str, Any]] = Field(description="Each input as fed: name, dtype, shape, source.")


class ProofOutput(_Record):
    name: str
    rel_l2: Amount | None
    max_abs: Amount | None
    cosine: FiniteNumber | None
    nonfinite: int = Field(ge=0)
    passed: bool


class LockProof(_Record):
    """What ``ampconfig run --lock-out`` proved: the rewritten model against the float32 one."""

    device: str = Field(description="Where both models ran.")
    providers: list[str] = Field(description="The providers the rewritten model's session got.")
    tolerance: Tolerance
    data: ProofData
    outputs: list[ProofOutput]
    passed: bool


class PrecisionLock(_Record):
    """ampconfig precision lock: every node's decision for one model, and the settings, versions and model
    identity it was made from. Written by `ampconfig lock`, checked by `ampconfig lock --check`."""

    model_config = ConfigDict(defer_build=True, extra="forbid", populate_by_name=True, title="ampconfig precision lock")

    schema_ref: str | None = Field(default=None, alias="$schema", description="JSON Schema of this file.")
    format: Literal["ampconfig-precision-lock"] = Field(description="What the file is.")
    format_version: Literal[1, 2] = Field(description="Version of this format (2; version 1 locks still read).")
    settings: LockSettings
    versions: LockVersions
    model: ModelIdentity
    values: LockValues | None = Field(default=None, description="The value ranges the decisions read.")
    summary: LockSummary
    nodes: list[LockedNode]
    proof: LockProof | None = Field(default=None, description="Present when `run --lock-out` wrote the lock.")

    @model_validator(mode="after")
    def _consistent(self) -> PrecisionLock:
        """What the sections say of each other (each section's own rules are its model's)."""
        _require_the_format_version_keys(self)
        _require_a_config_where_one_is_named(self)
        settings = self.settings
        if self.versions.op_info.target != settings.target.value:
            raise located_error(
                f"the op info that decided is the target's: {settings.target.value!r} at $.settings.target, not "
                f"{self.versions.op_info.target!r}",
                ("versions", "op_info", "target"),
            )
        # The summary is not checked against the nodes: it is compared with today's (a node edited by hand, or two
        # locks merged line by line, is drift that --update settles).
        seen: set[tuple[str, str]] = set()
        for index, node in enumerate(self.nodes):
            key = (node.scope, node.name)
            if key in seen:
                where = f" in {node.scope!r}" if node.scope else ""
                raise located_error(
                    f"a second node named {node.name!r}{where}: node names are unique", ("nodes", index, "name")
                )
            seen.add(key)
        return self


def _require_the_format_version_keys(lock: PrecisionLock) -> None:
    """Format 2 writes the values with their spreads and both value settings; format 1 never wrote spreads."""
    values = lock.values
    if lock.format_version == 1:
        if values is not None and values.below_normal is not None:
            raise located_error(
                "below_normal came with lock format 2, and this lock says format 1", ("values", "below_normal")
            )
        return
    for at, present in (
        (("values",), values is not None),
        (("values", "below_normal"), values is None or values.below_normal is not None),
        (("settings", "clamp_values"), lock.settings.clamp_values is not None),
        (("settings", "data_max"), lock.settings.data_max is not None),
    ):
        if not present:
            raise located_error(f"lock format 2 always records {at[-1]}; this lock has none", at)


def _require_a_config_where_one_is_named(lock: PrecisionLock) -> None:
    """A setting, file or model that came from the config needs the config the lock records."""
    if lock.settings.config is not None:
        return
    settings = lock.settings
    sources: list[tuple[tuple[str, ...], str | None]] = [
        (("settings", name, "source"), getattr(record, "source", None))
        for name in LockSettings.model_fields
        if (record := getattr(settings, name)) is not None
    ]
    sources.append((("model", "source"), lock.model.source))
    if lock.values is not None and lock.values.ranges is not None:
        sources.append((("values", "ranges", "source"), lock.values.ranges.source))
    for at, source in sources:
        if source == "config":
            raise located_error('"source": "config", but the lock records no config ($.settings.config is null)', at)


# --------------------------------------------------------------------------------------------------- writing
#: Lists written one item per line (every other list of objects is indented): one changed node, one changed
#: output, one changed input is one changed line of a diff.
_ONE_PER_LINE: frozenset[tuple[str, ...]] = frozenset({("nodes",), ("proof", "outputs"), ("proof", "data", "inputs")})


def _one_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _is_flat(value: Any) -> bool:
    return isinstance(value, dict) and not any(isinstance(item, (dict, list)) for item in value.values())


def _render(value: Any, path: tuple[str, ...], indent: int) -> str:
    pad = " " * indent
    if len(path) >= 2 and _is_flat(value):  # a setting, a file record, the op info: one line each
        return _one_line(value)
    if isinstance(value, dict) and value:
        items = [
            f"{pad}  {json.dumps(key, ensure_ascii=False)}: {_render(item, (*path, key), indent + 2)}"
            for key, item in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list) and value and (path in _ONE_PER_LINE or any(isinstance(v, (dict, list)) for v in value)):
        if path in _ONE_PER_LINE:
            items = [f"{pad}  {_one_line(item)}" for item in value]
        else:
            items = [f"{pad}  {_render(item, path, indent + 2)}" for item in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return _one_line(value)  # scalars, empty containers, lists of scalars (a shape) on one line


def lock_data(lock: PrecisionLock) -> dict[str, Any]:
    """The lock as JSON data, keys in the order the file has them (no ``$schema`` key without a schema)."""
    data = lock.model_dump(mode="json", by_alias=True)
    if data.get("$schema") is None:
        data.pop("$schema", None)
    return data


def lock_text(lock: PrecisionLock) -> str:
    """The lock as its file holds it: deterministic (declared key order; nothing from set or hash order), one
    key per line in the sections, one node and one proof output per line, a trailing newline."""
    return _render(lock_data(lock), (), 0) + "\n"


# --------------------------------------------------------------------------------------------------- reading


class LockDocument:
    """A parsed lock's text and data; its source map (the line of each key and node), which takes a Python walk of
    the whole text, is made only when something is located in it (an error, an annotation)."""

    def __init__(self, text: str, file: str | None, data: Any) -> None:
        self.text = text
        self.file = file
        self.data = data

    @cached_property
    def source(self) -> SourceMap:
        return json_source_map(self.text, self.file)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise _DuplicateKey
    return dict(pairs)


class _DuplicateKey(Exception):
    """A key given twice in one object: the full parser says where."""


def _parsed(text: str, source: str | None) -> LockDocument:
    """The lock's JSON within the lock limits. The common case (no comment, no repeated key, valid JSON) takes
    the fast path; anything else goes through the located parser, which says what and where."""
    if text.strip() and not scan_json(text, source, MAX_LOCK_VALUES).comments:
        try:
            return LockDocument(text, source, json.loads(text, object_pairs_hook=_unique_keys))
        except (json.JSONDecodeError, _DuplicateKey):
            pass
    document = parse_document(text, source, "json", max_json_values=MAX_LOCK_VALUES)
    if document.problems:  # repeated keys
        raise AmpconfigError(document.problems[0].message, file=source, problems=list(document.problems))
    return LockDocument(text, source, document.data)  # pragma: no cover - the fast path takes what parses


def parse_lock(text: str, source: str | None) -> tuple[PrecisionLock, LockDocument]:
    """A lock from its text, and the parsed document (its source map gives each node's line). Anything that is
    not a lock of this format version raises a located AmpconfigError (exit 2)."""
    document = _parsed(text, source)
    require_format(
        document,
        source,
        what="precision lock",
        versioned="lock",
        fmt=LOCK_FORMAT,
        version=LOCK_READ_VERSIONS,
        hint=_LOCK_HINT,
    )
    data = document.data
    try:
        # strict, as JSON: a boolean or a string is no count (true == 1 in Python); an integer is still a number
        lock = PrecisionLock.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        problems = [
            replace(problem, hint=problem.hint or _EDITED_HINT)
            for problem in validation_problems(exc, document.source, PrecisionLock)
        ]
        raise AmpconfigError(problems[0].message, file=source, problems=problems) from None
    return lock, document


def load_lock(path: Path) -> tuple[PrecisionLock, LockDocument]:
    """Read a lock file (at most :data:`~ampconfig.files.bounded.MAX_LOCK_BYTES`), see :func:`parse_lock`."""
    text = read_text(path, "precision lock", hint="check the path of the lock file", max_bytes=MAX_LOCK_BYTES)
    return parse_lock(text, str(path))
