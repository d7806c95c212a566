"""The value ranges file: what the float32 model's values were on data, made once (``ampconfig calibrate``, or
``run --ranges-out``) and read by every deciding command (``--ranges``, config ``ranges:``), as TensorRT keeps a
calibration cache.

Ranges are an input of the decision like the mixlist: the same model, settings and ranges give the same decisions
in every command (docs/design.md §5). The file records which model they were measured on, its structure and its
weights (a ranges file of another model is refused, both hashes named), and which data (a digest of the arrays as
fed), so that a lock can record it and ``lock --check`` can name it as the cause of what it changes.

Version 2 records, per float value beside its range, how its elements spread: zeros, NaN and infinities, and a
histogram of the binary exponents of its finite non-zero magnitudes (what the underflow rule reads), and the
model's weights digest. Version 1 files (ranges only, structure only) still read; the reader says what cannot be
judged from them. A file made by ``calibrate --shard K/N`` says which shard it holds; ``ranges merge`` joins the
shards of one split exactly (:func:`merge_ranges`).

This module is the file format only (pure data): the pydantic models its JSON Schema is generated from,
:func:`parse_ranges` (bounded and located, as every user document is read) and :func:`ranges_text`, which writes
it deterministically, one value per line in graph order. Floats are written as Python's shortest repr, which reads
back as the same float64: a decision made from the file equals one made from the run that wrote it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ampconfig.errors import AmpconfigError
from ampconfig.files.bounded import read_bounded
from ampconfig.files.paths import require_file
from ampconfig.formats.documents import decode_utf8, parse_document, require_format, validation_problems
from ampconfig.formats.format_tags import RANGES_FORMAT

#: float32's binary exponents: its smallest subnormal is 2^-149, its largest finite value lies below 2^128. An
#: exponent histogram has one bin per exponent between them (a float64 value beyond them counts at the nearest end).
EXPONENT_MIN, EXPONENT_MAX = -149, 127

#: The version this ampconfig writes, and every version it reads.
RANGES_FORMAT_VERSION: Literal[2] = 2
RANGES_READ_VERSIONS = (1, 2)
#: A ranges file holds one line per float value; with its exponent histogram a line is about five times what a
#: version 1 line was (a few dozen exponents), so these are five to eight times the lock's limits: about 100,000
#: values with wide histograms. Still bounded: a file beyond them is refused before it is parsed.
MAX_RANGES_BYTES = 128 * 1024 * 1024
MAX_RANGES_VALUES = 16_000_000
#: The schema's file name (``ampconfig schema ranges``).
RANGES_SCHEMA_FILE = "value-ranges.schema.json"

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256, lowercase hex.")]
#: An exponent as a JSON object key: a decimal integer, checked against float32's range when read.
ExponentKey = Annotated[str, Field(pattern=r"^(0|-?[1-9][0-9]{0,2})$")]


class _Record(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", populate_by_name=True)


class RangesModel(_Record):
    """The model the ranges were measured on."""

    path: str | None = Field(description="The model's path when the file was written (informative only).")
    structure_sha256: Sha256 = Field(
        description="The model's structure hash: nodes, graph inputs and outputs, initializers by name, type and "
        "shape, opsets (a precision lock's structure hash without the declared types of intermediate values). "
        "Ranges are refused for a model of another structure."
    )
    weights_sha256: Sha256 | None = Field(
        default=None,
        description="The model's weights hash (a precision lock's): every tensor's values. Ranges are refused for "
        "a model with other weights. Required from version 2; version 1 files have none.",
    )


class RangesShard(_Record):
    """Which part of a data set a shard file measured (``calibrate --shard INDEX/COUNT``): the data files in sorted
    order, file i (from 0) in shard i mod COUNT + 1."""

    index: int = Field(ge=1, strict=True, description="This shard, from 1.")
    count: int = Field(ge=1, strict=True, description="How many shards the data set was split into.")
    files: int = Field(ge=1, strict=True, description="How many data files (samples) the whole data set holds.")


class ShardDigest(_Record):
    """One shard a merged file joins."""

    index: int = Field(ge=1, strict=True, description="The shard, from 1.")
    samples: int = Field(ge=1, strict=True, description="How many samples it ran.")
    sha256: Sha256 = Field(description="Its samples' digest.")


class RangesData(_Record):
    """The data the float32 model ran on."""

    source: str = Field(min_length=1, description="Where the samples came from, in words.")
    samples: int = Field(ge=1, strict=True, description="How many samples ran.")
    sha256: Sha256 = Field(
        description="Digest of every sample's arrays as fed: names, dtypes, shapes and bytes; for a merged file, "
        "the digest of its shards' digests in shard order."
    )
    shard: RangesShard | None = Field(default=None, description="Present in a shard file: which part it measured.")
    shards: list[ShardDigest] | None = Field(default=None, description="Present in a merged file: its shards.")


class ValueRange(_Record):
    """One float value's range over every sample."""

    min: float | None = Field(
        description="Smallest finite value (float32's extremes, sentinels, left out); null when it had none."
    )
    max: float | None = Field(description="Largest finite value (sentinels left out); null when it had none.")
    max_abs: float = Field(
        ge=0,
        description="Largest finite |value| below 1e38 (float32's extremes are sentinels, a mask's fill): what the "
        "range rule reads.",
    )
    nonfinite: int = Field(ge=0, strict=True, description="How many values were inf or NaN.")
    zeros: int | None = Field(
        default=None, ge=0, strict=True, description="How many values were zero. Required from version 2."
    )
    exponents: dict[ExponentKey, Annotated[int, Field(ge=1, strict=True)]] | None = Field(
        default=None,
        description="Per binary exponent e (a decimal integer from -149 to 127, float32's range; 2^e <= |x| < "
        "2^(e+1)), how many finite non-zero values had it; exponents that did not occur are left out. Required "
        "from version 2.",
    )


class RangesFile(_Record):
    """ampconfig value ranges: every float value's range on data, measured on the float32 model."""

    model_config = ConfigDict(defer_build=True, extra="forbid", populate_by_name=True, title="ampconfig value ranges")

    schema_ref: str | None = Field(default=None, alias="$schema", description="JSON Schema of this file.")
    format: Literal["ampconfig-value-ranges"] = Field(description="What the file is.")
    format_version: Literal[1, 2] = Field(description="Version of this format (2; version 1 files still read).")
    ampconfig: str = Field(description="The ampconfig version that wrote it.")
    device: str = Field(description="Where the float32 model ran.")
    model: RangesModel
    data: RangesData
    values: dict[str, ValueRange] = Field(
        description="By value key: its name in the main graph, `<subgraph path>/<name>` inside a body."
    )


# --------------------------------------------------------------------------------------------------- writing
def ranges_text(ranges: RangesFile) -> str:
    """The file's text: the header keys one per line, then one value per line (graph order), a trailing newline."""
    data = ranges.model_dump(mode="json", by_alias=True)
    if data.get("$schema") is None:
        data.pop("$schema", None)
    values = data.pop("values")
    lines = [f"  {json.dumps(key)}: {json.dumps(value, separators=(', ', ': '))}" for key, value in data.items()]
    entries = [
        f"    {json.dumps(key, ensure_ascii=False)}: {json.dumps(value, separators=(', ', ': '))}"
        for key, value in values.items()
    ]
    body = "{\n" + ",\n".join(entries) + "\n  }" if entries else "{}"
    return "{\n" + ",\n".join([*lines, f'  "values": {body}']) + "\n}\n"


# --------------------------------------------------------------------------------------------------- reading
_HINT = "make it again: ampconfig calibrate MODEL --data DIR -o ranges.json"


def parse_ranges(text: str, source: str | None) -> RangesFile:
    """A ranges file from its text; anything else raises a located AmpconfigError (exit 2)."""
    document = parse_document(text, source, "json", max_json_values=MAX_RANGES_VALUES)
    if document.problems:  # repeated keys
        raise AmpconfigError(document.problems[0].message, file=source, problems=list(document.problems))
    require_format(
        document,
        source,
        what="value ranges file",
        versioned="value ranges",
        fmt=RANGES_FORMAT,
        version=RANGES_READ_VERSIONS,
        hint=_HINT,
    )
    try:
        # strict, as JSON: a boolean is no count and no number
        ranges = RangesFile.model_validate_json(json.dumps(document.data), strict=True)
    except ValidationError as exc:
        problems = validation_problems(exc, document.source, RangesFile)
        raise AmpconfigError(problems[0].message, file=source, problems=problems) from None
    problem = _version_problem(ranges)
    if problem is not None:
        message, path = problem
        located = document.source.problem(message, path, hint=_HINT)
        raise AmpconfigError(located.message, file=source, problems=[located])
    return ranges


def _version_problem(ranges: RangesFile) -> tuple[str, tuple[str, ...]] | None:
    """What a valid-looking file lacks or holds wrong for its version: a version 2 file needs the weights digest
    and every value's zeros and exponents; exponents lie within float32's."""
    if ranges.format_version >= 2 and ranges.model.weights_sha256 is None:
        return "a version 2 value ranges file records the weights digest: model.weights_sha256 is missing", ("model",)
    for key, value in ranges.values.items():
        if ranges.format_version >= 2:
            for name in ("zeros", "exponents"):
                if getattr(value, name) is None:
                    return f"a version 2 value ranges file records every value's {name}: {key!r} has none", (
                        "values",
                        key,
                    )
        for exponent in value.exponents or {}:
            if not EXPONENT_MIN <= int(exponent) <= EXPONENT_MAX:
                return (
                    f"exponent {exponent} of {key!r} lies outside float32's exponents ({EXPONENT_MIN} to "
                    f"{EXPONENT_MAX})",
                    ("values", key, "exponents", exponent),
                )
    return None


def load_ranges(path: Path) -> tuple[RangesFile, str]:
    """Read a ranges file (bounded as a lock is), see :func:`parse_ranges`, with the SHA-256 of the very bytes
    parsed: one read, so what a lock records is what was decided from even if the file changes meanwhile."""
    require_file(path, "value ranges file", hint="check the path of the ranges file")
    raw = read_bounded(path, "value ranges file", MAX_RANGES_BYTES)
    return parse_ranges(decode_utf8(raw, str(path)), str(path)), hashlib.sha256(raw).hexdigest()


# --------------------------------------------------------------------------------------------------- merging
def merge_ranges(shards: Sequence[tuple[RangesFile, str]]) -> RangesFile:
    """The shard files of one split (``calibrate --shard K/N``, each with where it was read from) joined exactly:
    per value the lowest minimum, the highest maximum, and the zeros, non-finite counts and exponent histograms
    added, so the values equal one calibration over all the data. The data digest is the digest of the shards'
    digests in shard order. Refused (a located AmpconfigError naming the files): a file that is not a version 2
    shard, files of another model (structure or weights), device, ampconfig or split, a shard given twice or
    missing."""
    if not shards:
        raise AmpconfigError("no ranges file to merge", hint="ampconfig ranges merge ranges-1.json ... -o ranges.json")
    for ranges, source in shards:
        _require_shard(ranges, source)
    first, first_source = shards[0]
    assert first.data.shard is not None  # _require_shard
    for ranges, source in shards[1:]:
        assert ranges.data.shard is not None
        model, first_model = ranges.model, first.model
        for what, json_path, mine, theirs in (
            ("model structure", "$.model.structure_sha256", model.structure_sha256, first_model.structure_sha256),
            ("model weights", "$.model.weights_sha256", model.weights_sha256, first_model.weights_sha256),
            ("device", "$.device", ranges.device, first.device),
            ("ampconfig", "$.ampconfig", ranges.ampconfig, first.ampconfig),
            ("shard count", "$.data.shard.count", ranges.data.shard.count, first.data.shard.count),
            ("data set size", "$.data.shard.files", ranges.data.shard.files, first.data.shard.files),
        ):
            if mine != theirs:
                raise AmpconfigError(
                    f"the shards differ in {what}: {source} has {mine}, {first_source} has {theirs}; only shards of "
                    "one split of one data set, measured the same way on one model, merge",
                    file=source,
                    json_path=json_path,
                    hint="make every shard again with the same model, ampconfig and device",
                )
    by_index: dict[int, tuple[RangesFile, str]] = {}
    for ranges, source in shards:
        assert ranges.data.shard is not None
        index = ranges.data.shard.index
        if index in by_index:
            raise AmpconfigError(
                f"shard {index} is given twice: {by_index[index][1]} and {source}",
                file=source,
                json_path="$.data.shard.index",
                hint="give each shard once",
            )
        by_index[index] = (ranges, source)
    count = first.data.shard.count
    missing = [index for index in range(1, count + 1) if index not in by_index]
    if missing:
        raise AmpconfigError(
            f"the split has {count} shards; missing: {', '.join(map(str, missing))} (merged shards must cover the "
            "whole data set)",
            file=first_source,
            json_path="$.data.shard.count",
            hint=f"give all {count} shard files",
        )
    ordered = [by_index[index][0] for index in range(1, count + 1)]
    values: dict[str, ValueRange] = {}
    for ranges in ordered:
        for key, value in ranges.values.items():
            values[key] = _joined(values[key], value) if key in values else value
    digest = hashlib.sha256("".join(f"{index} {r.data.sha256}\n" for index, r in enumerate(ordered, 1)).encode())
    base = first.data.source.rsplit(" (shard ", 1)[0]
    return first.model_copy(
        update={
            "data": RangesData(
                source=f"{base} ({count} shards merged)",
                samples=sum(ranges.data.samples for ranges in ordered),
                sha256=digest.hexdigest(),
                shards=[
                    ShardDigest(index=index, samples=ranges.data.samples, sha256=ranges.data.sha256)
                    for index, ranges in enumerate(ordered, 1)
                ],
            ),
            "values": values,
        }
    )


def _require_shard(ranges: RangesFile, source: str) -> None:
    if ranges.format_version != RANGES_FORMAT_VERSION:
        raise AmpconfigError(
            f"a version {ranges.format_version} ranges file holds no exponent histograms: it cannot be merged exactly",
            file=source,
            json_path="$.format_version",
            hint="make the shards again: ampconfig calibrate MODEL --calibration-data DIR --shard K/N -o FILE",
        )
    if ranges.data.shard is None:
        raise AmpconfigError(
            "not a shard: the file measured a whole data set (data.shard is absent); merging joins the shards of "
            "one split",
            file=source,
            json_path="$.data",
            hint="make the shards with ampconfig calibrate MODEL --calibration-data DIR --shard K/N -o FILE",
        )


def _joined(first: ValueRange, second: ValueRange) -> ValueRange:
    """One value's lines of two shards as one: exact in any order."""
    lows = [bound for bound in (first.min, second.min) if bound is not None]
    highs = [bound for bound in (first.max, second.max) if bound is not None]
    exponents: dict[int, int] = {}
    for histogram in (first.exponents or {}, second.exponents or {}):
        for exponent, count in histogram.items():
            exponents[int(exponent)] = exponents.get(int(exponent), 0) + count
    return ValueRange(
        min=min(lows) if lows else None,
        max=max(highs) if highs else None,
        max_abs=max(first.max_abs, second.max_abs),
        nonfinite=first.nonfinite + second.nonfinite,
        zeros=(first.zeros or 0) + (second.zeros or 0),
        exponents={str(exponent): count for exponent, count in sorted(exponents.items())},
    )
