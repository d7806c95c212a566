"""JSON Schemas (draft 2020-12) for the files users write, generated from the pydantic models.

The generated files are checked in under ``schemas/`` at the repository root (so editors and CI can use them without
running ampconfig); a test fails when they drift from the models (regenerate from a checkout:
``ampconfig schema --write``; an installed package is never written to).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ampconfig.documents.lock_file import LOCK_SCHEMA_FILE, PrecisionLock
from ampconfig.documents.mixlist_file import Mixlist
from ampconfig.documents.ranges_file import RANGES_SCHEMA_FILE, RangesFile
from ampconfig.documents.session_config import SessionConfig
from ampconfig.errors import AmpconfigError
from ampconfig.files.data_dirs import PACKAGE_DIR, SCHEMAS, data_dir, source_data_dir
from ampconfig.files.guard import OutputGuard
from ampconfig.opinfo.ops_info_file import OpsInfoFile

JSON_SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE_URL = "https://ampconfig.dev/schemas/"


@dataclass(frozen=True)
class SchemaKind:
    """One published schema: its name on the command line, its file, the model it comes from."""

    name: str
    filename: str
    model: type[BaseModel]
    title: str
    description: str

    @property
    def schema_id(self) -> str:
        return SCHEMA_BASE_URL + self.filename


SCHEMA_KINDS: dict[str, SchemaKind] = {
    kind.name: kind
    for kind in (
        SchemaKind(
            "session-config",
            "session-config.schema.json",
            SessionConfig,
            "ampconfig session config",
            "Precision mode, target, modify_mixlist, keep_dtype, tolerance and run options of an ampconfig "
            "session (YAML, JSON or TOML).",
        ),
        SchemaKind(
            "mixlist",
            "mixlist.schema.json",
            Mixlist,
            "ampconfig modify_mixlist",
            "Ascend modify_mixlist: per-op edits of the black/white/gray lists. Only the mixed precision "
            "modes accept it; per op, entries must form one of the eleven valid combinations (`ampconfig "
            "validate` checks them).",
        ),
        SchemaKind(
            "ops-info",
            "ops-info.schema.json",
            OpsInfoFile,
            "ampconfig op info",
            "Built-in op info of one execution target: per ONNX op type, its list colour (Ascend "
            "precision_reduce flag, or clear) and the float dtypes the target has kernels for.",
        ),
        SchemaKind(
            "lock",
            LOCK_SCHEMA_FILE,
            PrecisionLock,
            "ampconfig precision lock",
            "Every node's precision decision for one model (scope, name, op type, dtype, rule, cause), with the "
            "settings, versions and model identity it was made from. Written by `ampconfig lock`, checked by "
            "`ampconfig lock --check`; paths are relative to the lock's folder.",
        ),
        SchemaKind(
            "ranges",
            RANGES_SCHEMA_FILE,
            RangesFile,
            "ampconfig value ranges",
            "Every float value's range (min, max, largest magnitude, non-finite count) measured on the float32 "
            "model on data, with the model structure and the data digest. Written by `ampconfig calibrate` or "
            "`ampconfig run --ranges-out`, read by every deciding command through `--ranges` (config `ranges:`).",
        ),
    )
}

#: Other names accepted on the command line.
KIND_ALIASES: dict[str, str] = {
    "config": "session-config",
    "ops_info": "ops-info",
    "opsinfo": "ops-info",
    "precision-lock": "lock",
    "value-ranges": "ranges",
}


def schema_kind(name: str) -> SchemaKind:
    key = KIND_ALIASES.get(name, name)
    if key not in SCHEMA_KINDS:
        raise AmpconfigError(f"unknown schema kind {name!r}", hint="kinds: " + ", ".join(SCHEMA_KINDS))
    return SCHEMA_KINDS[key]


#: Folders (below the written file's folder or one above it) where a repository keeps ampconfig's schemas, written
#: there by ``ampconfig schema --write DIR``.
LOCAL_SCHEMA_DIRS = ("schemas", ".ampconfig/schemas")


def schema_reference(kind: str, written_to: Path) -> str | None:
    """What a file ampconfig writes at ``written_to`` carries as its ``$schema``: the relative path of its schema
    in the repository it is written into, which an editor resolves offline (``schemas/`` or ``.ampconfig/schemas/``
    in its folder or a folder above it, up to the repository's root; ``ampconfig schema --write DIR`` puts the
    files there); None (no ``$schema`` key) when the repository keeps none. The schemas' ``$id`` is an identifier,
    not an address: nothing is published there, so pointing editors at it made them fetch a page that does not
    exist. The same tree gives the same reference on every machine."""
    filename = schema_kind(kind).filename
    folder = Path(os.path.abspath(written_to)).parent
    for candidate in (folder, *folder.parents):
        for local in LOCAL_SCHEMA_DIRS:
            schema = candidate / local / filename
            if schema.is_file():
                return Path(os.path.relpath(schema, folder)).as_posix()
        if (candidate / ".git").exists():
            break  # the repository's root: a schema above it belongs to another project
    return None


def generate_schema(kind: str | SchemaKind) -> dict[str, Any]:
    """The JSON Schema of one kind, with `$schema`, `$id`, title and description first."""
    spec = kind if isinstance(kind, SchemaKind) else schema_kind(kind)
    body = spec.model.model_json_schema(by_alias=True, mode="validation")
    body.pop("title", None)
    body.pop("description", None)
    return {
        "$schema": JSON_SCHEMA_DRAFT,
        "$id": spec.schema_id,
        "title": spec.title,
        "description": spec.description,
        **body,
    }


def schema_text(kind: str | SchemaKind) -> str:
    """The schema as the checked-in file holds it (stable key order, trailing newline)."""
    return json.dumps(generate_schema(kind), indent=2, ensure_ascii=False) + "\n"


def packaged_schema_dir() -> Path:
    """The schemas ampconfig ships: ``schemas/`` of the checkout, or of the installed package."""
    return data_dir(SCHEMAS, PACKAGE_DIR)


def source_schema_dir(package_dir: Path | None = None) -> Path | None:
    """``schemas/`` of the source checkout ampconfig runs from (an editable install, or the source tree on
    ``sys.path``), or None when it runs from an installed package (:mod:`ampconfig.files.data_dirs`)."""
    return source_data_dir(SCHEMAS, package_dir if package_dir is not None else PACKAGE_DIR)


def default_schema_dir() -> Path:
    """Where ``schema --write`` writes without a folder: the checkout's ``schemas/``. An installed package is
    never written to: that is an error asking for a folder."""
    folder = source_schema_dir()
    if folder is None:
        raise AmpconfigError(
            f"no folder given, and ampconfig runs from an installed package ({PACKAGE_DIR}), which is never written to",
            hint="pass the folder to write to: ampconfig schema --write DIR",
        )
    return folder


def write_schemas(directory: Path | None = None, kinds: list[str] | None = None) -> list[Path]:
    """Write the schema files into ``directory`` (an existing folder; default :func:`default_schema_dir`) through
    one output guard: every file is checked before the first is written, and a failure leaves none behind.
    Returns the paths written."""
    folder = directory if directory is not None else default_schema_dir()
    if not folder.is_dir():
        problem = "is not a directory" if folder.exists() else "does not exist"
        raise AmpconfigError(f"the schema output folder {problem}", file=str(folder), hint="create the folder first")
    specs = [schema_kind(name) for name in kinds or list(SCHEMA_KINDS)]
    with OutputGuard() as guard:
        destinations = [(guard.output(f"{spec.name} schema", folder / spec.filename), spec) for spec in specs]
        return [guard.write_text(destination, schema_text(spec)) for destination, spec in destinations]
