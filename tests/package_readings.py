"""What only the tests ask of the package's objects, kept here rather than in the package since no command or API
uses it (issue 37), and the packaged files the tests read. Each reads public state only."""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path

from ampconfig.decide.pass_pipelines import Pipeline
from ampconfig.opinfo.library import OpInfoLibrary, ops_info_path


def estimated_error(contributions: Collection[float]) -> float:
    """The output error that independent contributions add up to (in quadrature)."""
    return math.sqrt(sum(value * value for value in contributions))


def is_emulated(library: OpInfoLibrary, key: str, dtype: str) -> bool:
    """True when the target runs ``dtype`` only through casts ONNX Runtime inserts (no native kernel)."""
    entry = library.entries.get(key)
    return bool(
        entry and entry.native_dtypes is not None and dtype in entry.dtypes and dtype not in entry.native_dtypes
    )


def pass_names(pipeline: Pipeline) -> list[str]:
    """The pipeline's steps by name, in order (settle steps last)."""
    return [step.name for step in (*pipeline.steps, *pipeline.settle)]


def packaged_ops_info(target: str) -> Path:
    """The op info file ampconfig ships for ``target``, which must be there: ``ops_info/*.json`` is committed and
    packaged, so a missing one is a packaging break, and the test reading it fails saying so (never skips)."""
    path = ops_info_path(target)
    assert path.is_file(), (
        f"op info for {target} is missing at {path}: ops_info/{target}.json is committed and packaged"
    )
    return path
