"""How far a user document may go: nesting depth and value count, each refused with a located error (exit 2)
before the expensive step.

:mod:`ampconfig.documents.parsing` scans JSON and TOML against these limits before parsing them, and
:mod:`ampconfig.documents.bounded_yaml` composes YAML within them (an alias counted as the values it stands for).
"""

from __future__ import annotations

from ampconfig.errors import AmpconfigError
from ampconfig.files.bounded import SPLIT_HINT

#: Most arrays/objects inside each other. Session configs nest 4 deep.
MAX_NESTING_DEPTH = 64
#: Most keys + values + array items in one document, YAML aliases counted where they are used.
MAX_DOCUMENT_VALUES = 100_000
#: Precision lock files hold about 17 values a node (:data:`~ampconfig.files.bounded.MAX_LOCK_BYTES`).
MAX_LOCK_VALUES = 2_000_000


def too_deep(source: str | None, line: int | None) -> AmpconfigError:
    return AmpconfigError(
        f"nesting too deep: more than {MAX_NESTING_DEPTH} arrays/objects inside each other",
        file=source,
        line=line,
        hint="ampconfig's files nest a few levels; is it the right file?",
    )


def too_many(
    source: str | None, line: int | None, through_alias: str | None = None, max_values: int = MAX_DOCUMENT_VALUES
) -> AmpconfigError:
    limit = f"{max_values:,}"
    if through_alias is not None:
        return AmpconfigError(
            f"YAML alias *{through_alias} expands the document beyond {limit} values (keys, values and items): "
            "refused before expanding it",
            file=source,
            line=line,
            hint="an alias repeats its anchor's whole value wherever it is used; write the values out instead "
            "of nesting aliases",
        )
    return AmpconfigError(
        f"too many values: more than {limit} keys, values and items", file=source, line=line, hint=SPLIT_HINT
    )
