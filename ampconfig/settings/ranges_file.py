"""The value ranges file: what the float32 model's values were on data, made once (``ampconfig calibrate``, or
``run --ranges-out``) and read by every deciding command (``--ranges``, config ``ranges:``), as TensorRT keeps a
calibration cache.

Ranges are an input of the decision like the mixlist: the same model, settings and ranges give the same decisions
in every command (docs/design.md §5). The file records which model structure they were measured on (a ranges file
of another structure is refused, both hashes named) and which data (a digest of the arrays as fed), so that a lock
can record it and ``lock --check`` can name it as the cause of what it changes.

This module is the file format only (pure data): the pydantic models its JSON Schema is generated from,
:func:`parse_ranges` (bounded and located, as every user document is read) and :func:`ranges_text`, which writes
it deterministically, one value per line in graph order. Floats are written as Python's shortest repr, which reads
back as the same float64: a decision made from the file equals one made from the run that wrote it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ampconfig.errors import AmpconfigError
from ampconfig.files.bounded import MAX_LOCK_BYTES, MAX_LOCK_VALUES, read_bounded
from ampconfig.files.paths import require_file
from ampconfig.settings.documents import decode_utf8, parse_document, require_format, validation_problems
from ampconfig.settings.limits import RANGES_FORMAT as RANGES_FORMAT

RANGES_FORMAT_VERSION: Literal[1] = 1
#: The schema's file name (``ampconfig schema ranges``).
RANGES_SCHEMA_FILE = "value-ranges.schema.json"

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256, lowercase hex.")]


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


class RangesData(_Record):
    """The data the float32 model ran on."""

    source: str = Field(min_length=1, description="Where the samples came from, in words.")
    samples: int = Field(ge=1, strict=True, description="How many samples ran.")
    sha256: Sha256 = Field(description="Digest of every sample's arrays as fed: names, dtypes, shapes and bytes.")


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


class RangesFile(_Record):
    """ampconfig value ranges: every float value's range on data, measured on the float32 model."""

    model_config = ConfigDict(defer_build=True, extra="forbid", populate_by_name=True, title="ampconfig value ranges")

    schema_ref: str | None = Field(default=None, alias="$schema", description="JSON Schema of this file.")
    format: Literal["ampconfig-value-ranges"] = Field(description="What the file is.")
    format_version: Literal[1] = Field(description="Version of this format (1).")
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
    document = parse_document(text, source, "json", max_json_values=MAX_LOCK_VALUES)
    if document.problems:  # repeated keys
        raise AmpconfigError(document.problems[0].message, file=source, problems=list(document.problems))
    require_format(
        document,
        source,
        what="value ranges file",
        versioned="value ranges",
        fmt=RANGES_FORMAT,
        version=RANGES_FORMAT_VERSION,
        hint=_HINT,
    )
    try:
        # strict, as JSON: a boolean is no count and no number
        return RangesFile.model_validate_json(json.dumps(document.data), strict=True)
    except ValidationError as exc:
        problems = validation_problems(exc, document.source, RangesFile)
        raise AmpconfigError(problems[0].message, file=source, problems=problems) from None


def load_ranges(path: Path) -> tuple[RangesFile, str]:
    """Read a ranges file (bounded as a lock is), see :func:`parse_ranges`, with the SHA-256 of the very bytes
    parsed: one read, so what a lock records is what was decided from even if the file changes meanwhile."""
    require_file(path, "value ranges file", hint="check the path of the ranges file")
    raw = read_bounded(path, "value ranges file", MAX_LOCK_BYTES)
    return parse_ranges(decode_utf8(raw, str(path)), str(path)), hashlib.sha256(raw).hexdigest()
