"""The value ranges file: what the float32 model's values were on data, made once (``ampconfig calibrate``, or
``run --ranges-out``) and read by every deciding command (``--ranges``, config ``ranges:``), as TensorRT keeps a
calibration cache.

Ranges are an input of the decision like the mixlist: the same model, settings and ranges give the same decisions
in every command (docs/design.md §5). The file records which model they were measured on, its structure and its
weights (a ranges file of another model is refused, both hashes named), and which data (a digest of the arrays as
fed), so that a lock can record it and ``lock --check`` can name it as the cause of what it changes.

Version 2 records, per float value beside its range, how its elements spread: zeros, NaN and infinities, and a
histogram of the binary exponents of its finite non-zero magnitudes (what the underflow rule reads), and the
model's weights digest. Version 3 adds each value's element count, which its zeros, non-finite elements and
histogram add up to, and its sentinel count (magnitudes of 1e38 or more, a mask's fill: the histogram counts them,
``max_abs`` leaves them out, so they are the only elements it may hold above ``max_abs``). Version 1 and 2 files
still read; the reader says what cannot be judged from a version 1 file. A file made by ``calibrate --shard K/N``
says which shard it holds; ``ranges merge`` joins the shards of one split exactly (:func:`merge_ranges`).

A file is checked as a whole, as SQLite's ``PRAGMA integrity_check`` checks a database and not only each field's
type: what the schema cannot say (a histogram bin above ``max_abs``, counts that do not add up to the elements,
a shard whose number contradicts its data source) is refused at the JSON path of one field, naming the other.

This module is the file format only (pure data): the pydantic models its JSON Schema is generated from,
:func:`parse_ranges` (bounded and located, as every user document is read) and :func:`ranges_text`, which writes
it deterministically, one value per line in graph order. Floats are written as Python's shortest repr, which reads
back as the same float64: a decision made from the file equals one made from the run that wrote it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ampconfig.documents.format_tags import RANGES_FORMAT
from ampconfig.documents.parsing import decode_utf8, parse_document, require_format, validation_problems
from ampconfig.errors import AmpconfigError, printable
from ampconfig.files.bounded import read_bounded
from ampconfig.files.paths import require_file
from ampconfig.value_counts import EXPONENT_MAX as EXPONENT_MAX
from ampconfig.value_counts import EXPONENT_MIN as EXPONENT_MIN

#: Magnitudes from 2^126 up may be sentinels (|x| >= 1e38, a mask's fill), which the histogram counts and
#: ``max_abs``, ``min`` and ``max`` leave out: only these bins may lie above ``max_abs``'s.
SENTINEL_EXPONENT = 126
#: Counts are made in 64-bit integers (NumPy's): a larger count was never measured.
MAX_COUNT = 2**63 - 1

#: The version this ampconfig writes, and every version it reads.
RANGES_FORMAT_VERSION: Literal[3] = 3
RANGES_READ_VERSIONS = (1, 2, 3)
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

    index: int = Field(ge=1, le=MAX_COUNT, strict=True, description="This shard, from 1.")
    count: int = Field(ge=1, le=MAX_COUNT, strict=True, description="How many shards the data set was split into.")
    files: int = Field(
        ge=1, le=MAX_COUNT, strict=True, description="How many data files (samples) the whole data set holds."
    )


class ShardDigest(_Record):
    """One shard a merged file joins."""

    index: int = Field(ge=1, le=MAX_COUNT, strict=True, description="The shard, from 1.")
    samples: int = Field(ge=1, le=MAX_COUNT, strict=True, description="How many samples it ran.")
    sha256: Sha256 = Field(description="Its samples' digest.")


class RangesData(_Record):
    """The data the float32 model ran on."""

    source: str = Field(min_length=1, description="Where the samples came from, in words.")
    samples: int = Field(ge=1, le=MAX_COUNT, strict=True, description="How many samples ran.")
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
    nonfinite: int = Field(ge=0, le=MAX_COUNT, strict=True, description="How many values were inf or NaN.")
    zeros: int | None = Field(
        default=None, ge=0, le=MAX_COUNT, strict=True, description="How many values were zero. Required from version 2."
    )
    exponents: dict[ExponentKey, Annotated[int, Field(ge=1, le=MAX_COUNT, strict=True)]] | None = Field(
        default=None,
        description="Per binary exponent e (a decimal integer from -149 to 127, float32's range; 2^e <= |x| < "
        "2^(e+1)), how many finite non-zero values had it; exponents that did not occur are left out. Required "
        "from version 2.",
    )
    elements: int | None = Field(
        default=None,
        ge=0,
        le=MAX_COUNT,
        strict=True,
        description="How many elements the value held over every sample: its zeros, its non-finite elements and "
        "its histogram's counts add up to it. Required from version 3.",
    )
    sentinels: int | None = Field(
        default=None,
        ge=0,
        le=MAX_COUNT,
        strict=True,
        description="How many of the histogram's elements were sentinels (|value| >= 1e38, a mask's fill): the "
        "only elements it may count above max_abs. Required from version 3.",
    )


class RangesFile(_Record):
    """ampconfig value ranges: every float value's range on data, measured on the float32 model."""

    model_config = ConfigDict(defer_build=True, extra="forbid", populate_by_name=True, title="ampconfig value ranges")

    schema_ref: str | None = Field(default=None, alias="$schema", description="JSON Schema of this file.")
    format: Literal["ampconfig-value-ranges"] = Field(description="What the file is.")
    format_version: Literal[1, 2, 3] = Field(
        description="Version of this format (3; version 1 and 2 files still read)."
    )
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
    problem = _whole_file_problem(ranges)
    if problem is not None:
        message, path = problem
        located = document.source.problem(message, path, hint=_HINT)
        raise AmpconfigError(located.message, file=source, problems=[located])
    return ranges


#: What each version records of every value beside its range.
_REQUIRED = {1: (), 2: ("zeros", "exponents"), 3: ("zeros", "exponents", "elements", "sentinels")}
#: What a check of the file as a whole finds: the message (naming both fields) and the JSON path of one of them.
_Contradiction = tuple[str, tuple[str, ...]]


def _whole_file_problem(ranges: RangesFile) -> _Contradiction | None:
    """What a file whose every field is valid holds wrong as a whole: what its version requires and lacks, a
    shard that contradicts its own data source or size, a value whose fields contradict each other."""
    if ranges.format_version >= 2 and ranges.model.weights_sha256 is None:
        return (
            f"a version {ranges.format_version} value ranges file records the weights digest: model.weights_sha256 "
            "is missing",
            ("model",),
        )
    problem = _shard_problem(ranges.data)
    if problem is not None:
        return problem
    required = _REQUIRED[ranges.format_version]
    for key, value in ranges.values.items():
        at = ("values", key)
        for name in required:
            if getattr(value, name) is None:
                return (
                    f"a version {ranges.format_version} value ranges file records every value's {name}: "
                    f"{printable(repr(key))} has none",
                    at,
                )
        problem = _value_problem(value, at)
        if problem is not None:
            return problem
    return None


def _shard_problem(data: RangesData) -> _Contradiction | None:
    """A shard's number, count and size against each other and against the data source calibrate wrote with
    them (``... (shard K of N)``): a relabelled shard contradicts one of them."""
    shard = data.shard
    if shard is None:
        return None
    at = ("data", "shard")
    if shard.index > shard.count:
        return f"data.shard.index {shard.index} lies beyond data.shard.count {shard.count}", (*at, "index")
    if shard.count > shard.files:
        return (
            f"data.shard.count {shard.count} is more than data.shard.files {shard.files}: a shard holds a sample at "
            "least",
            (*at, "count"),
        )
    recorded = _SHARD_IN_SOURCE.findall(data.source)
    if recorded and recorded[-1] != (str(shard.index), str(shard.count)):
        index, count = recorded[-1]
        return (
            f"data.shard says shard {shard.index} of {shard.count}, data.source says shard {index} of {count} "
            f"({printable(data.source)})",
            (*at, "index"),
        )
    expected = len(range(shard.index - 1, shard.files, shard.count))
    if data.samples != expected:
        return (
            f"data.samples is {data.samples}, but shard {shard.index} of {shard.count} of {shard.files} files holds "
            f"{expected} (file i is in shard i mod {shard.count} + 1)",
            ("data", "samples"),
        )
    return None


#: How calibrate names a shard in the data source (:func:`ampconfig.inputs.datasets.read_data_set`).
_SHARD_IN_SOURCE = re.compile(r" \(shard ([0-9]+) of ([0-9]+)\)")


def _exponent(magnitude: float) -> int:
    """The histogram bin of a finite non-zero magnitude: e with 2^e <= magnitude < 2^(e+1), at the nearest end of
    float32's exponents beyond them (as calibrate counts a float64 value)."""
    return min(EXPONENT_MAX, max(EXPONENT_MIN, math.frexp(magnitude)[1] - 1))


def _value_problem(value: ValueRange, at: tuple[str, ...]) -> _Contradiction | None:
    """One value's fields against each other: min, max and max_abs agree; zeros lie within [min, max]; the
    histogram has a bin at max_abs's exponent and none above it (but the sentinels' bins), a bin at the smallest
    magnitude min and max show and none below it; the counts add up to the elements."""
    low, high = value.min, value.max
    if (low is None) != (high is None):
        present = "min" if low is not None else "max"
        return f"{present} is a number but {'max' if present == 'min' else 'min'} is null", (*at, present)
    if low is not None and high is not None and low > high:
        return f"min {low!r} is above max {high!r}", (*at, "min")
    peak = max(abs(low), abs(high)) if low is not None and high is not None else 0.0
    if value.max_abs != peak:
        return f"max_abs {value.max_abs!r} is not the larger magnitude of min and max ({peak!r})", (*at, "max_abs")
    if value.zeros and not (low is not None and high is not None and low <= 0 <= high):
        return f"zeros {value.zeros} counts zeros, but min {low!r} and max {high!r} leave out 0", (*at, "zeros")
    if value.exponents is not None:
        problem = _histogram_problem(value, value.exponents, at)
        if problem is not None:
            return problem
    if value.elements is not None and value.exponents is not None:
        counted = (value.zeros or 0) + value.nonfinite + sum((value.exponents or {}).values())
        if counted != value.elements:
            return (
                f"elements is {value.elements}, but zeros, nonfinite and the exponents' counts add up to {counted}",
                (*at, "elements"),
            )
    return None


def _histogram_problem(value: ValueRange, exponents: dict[str, int], at: tuple[str, ...]) -> _Contradiction | None:
    for exponent in exponents:
        if not EXPONENT_MIN <= int(exponent) <= EXPONENT_MAX:
            return (
                f"exponent {exponent} lies outside float32's exponents ({EXPONENT_MIN} to {EXPONENT_MAX})",
                (*at, "exponents", exponent),
            )
    bins = sorted(int(exponent) for exponent in exponents)
    top = _exponent(value.max_abs) if value.max_abs > 0 else None
    above = [e for e in bins if (top is None or e > top) and e < SENTINEL_EXPONENT]
    if above:
        return (
            f"exponents[{above[0]}] counts magnitudes of 2^{above[0]} or more, above max_abs {value.max_abs!r}"
            + (f" (2^{top})" if top is not None else ""),
            (*at, "exponents", str(above[0])),
        )
    # a sentinel's bins (2^126, 2^127) above max_abs hold sentinels only: as many as the file says it had
    beyond = [e for e in bins if (top is None or e > top) and e >= SENTINEL_EXPONENT]
    counted_beyond = sum(exponents[str(e)] for e in beyond)
    if value.sentinels is not None and counted_beyond > value.sentinels:
        return (
            f"exponents[{beyond[0]}] counts {counted_beyond} magnitude(s) of 2^{beyond[0]} or more above max_abs "
            f"{value.max_abs!r}, but sentinels says {value.sentinels} value(s) were sentinels (1e38 or more)",
            (*at, "exponents", str(beyond[0])),
        )
    if top is not None and top not in bins:
        return (
            f"max_abs {value.max_abs!r} is a magnitude of 2^{top}, but exponents holds no bin {top}",
            (*at, "exponents"),
        )
    low, high = value.min, value.max
    if low is None or high is None or low <= 0 <= high:
        return None  # the smallest non-zero magnitude is not recorded
    # every element lies on one side of 0: the bound nearer 0 is the smallest magnitude
    field, nearest = ("min", low) if low > 0 else ("max", high)
    bottom = _exponent(abs(nearest))
    if bins[0] < bottom:
        return (
            f"exponents[{bins[0]}] counts magnitudes below 2^{bins[0] + 1}, below {field} {nearest!r} (2^{bottom}), "
            "the smallest magnitude",
            (*at, "exponents", str(bins[0])),
        )
    if bottom not in bins:
        return (
            f"{field} {nearest!r} is a magnitude of 2^{bottom}, but exponents holds no bin {bottom}",
            (*at, "exponents"),
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
    digests in shard order. Refused (a located AmpconfigError naming the files): a file that is not a version 2 or 3
    shard, files of another model (structure or weights), format version, device, ampconfig or split, a shard
    given twice or missing, more or fewer files than the split's shard count, two shards with one data digest (one
    shard's file relabelled as another: the other's data was never measured)."""
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
            ("format version", "$.format_version", ranges.format_version, first.format_version),
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
    count = first.data.shard.count
    by_index: dict[int, tuple[RangesFile, str]] = {}
    by_digest: dict[str, str] = {}
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
        if ranges.data.sha256 in by_digest:
            raise AmpconfigError(
                f"{by_digest[ranges.data.sha256]} and {source} measured the same data (one data.sha256): one shard's "
                "file given as two shards, the other shard's data never measured",
                file=source,
                json_path="$.data.sha256",
                hint="give each shard's own file, as calibrate --shard K/N wrote it",
            )
        by_digest[ranges.data.sha256] = source
    if len(shards) != count:
        raise AmpconfigError(
            f"the split has {count} shards (data.shard.count), but {len(shards)} "
            f"{'file is' if len(shards) == 1 else 'files are'} given",
            file=first_source,
            json_path="$.data.shard.count",
            hint=f"give all {count} shard files, each once",
        )
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
    if ranges.format_version < 2:
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
        elements=None if first.elements is None or second.elements is None else first.elements + second.elements,
        sentinels=None if first.sentinels is None or second.sentinels is None else first.sentinels + second.sentinels,
    )
