"""What only the tests ask of the package's objects: kept here, not in the package, since no command or API uses
it (issue 37). Each reads public state only."""

from __future__ import annotations

import math
from collections.abc import Collection

from ampconfig.decide.pipeline import Pipeline
from ampconfig.opinfo.library import OpInfoLibrary


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
