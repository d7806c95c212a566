"""The user's list files read once, at the edge: a mixlist, keep_dtype entries and a customize_dtypes file, each in
the one form the rewrite reads, with the file it came from beside it (the lock records the path; findings name it).

:class:`~ampconfig.decide.rewrite_options.RewriteOptions` reads what it is given through these when it is made (the
API's keywords, the pass's options, a command's settings), so below it each list has one type and nothing reads a
file again. Each reader raises as the rewrite always has, in the same order: the mixlist (its mode first, then its
file, then its entries), the keep_dtype entries, the customize_dtypes file, each error at its file and line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ampconfig.errors import AmpconfigError, Problem, Severity
from ampconfig.precision_modes import PrecisionMode

if TYPE_CHECKING:  # the file formats (pydantic's models) are imported when a list is given
    from ampconfig.documents.customize_dtypes_file import CustomizeFile
    from ampconfig.documents.keep_dtype_file import KeepDtypeEntry
    from ampconfig.documents.mixlist_file import Mixlist


@dataclass(frozen=True)
class ChosenMixlist:
    """A mixlist, read: its entries' format and names checked, and the file it came from (None: given in memory,
    as a mapping or a config's inline mixlist)."""

    mixlist: Mixlist
    path: Path | None = None


@dataclass(frozen=True)
class ChosenKeepDtype:
    """keep_dtype entries, read: their op names read as ONNX ops (what reading them found, notes and warnings, in
    ``problems``), and the file they came from (None: node names given as a list)."""

    entries: tuple[KeepDtypeEntry, ...]
    source: str | None
    problems: tuple[Problem, ...] = ()


def read_mixlist(mode: PrecisionMode, given: Path | Mixlist, op_names: str | None) -> ChosenMixlist:
    """The mixlist ``given`` (a file, read now, or one read already) for ``mode``: a mode that takes none is refused
    before the file is read, and an entry that cannot apply (an invalid combination, an ambiguous op name) raises."""
    from ampconfig.documents.mixlist_file import load_mixlist, mixlist_problems
    from ampconfig.documents.session_config import check_mode_accepts_mixlist

    check_mode_accepts_mixlist(mode, True, str(given))
    mixlist = load_mixlist(given) if isinstance(given, Path) else given
    # What applying it to any op lists would refuse: its errors do not depend on the lists (only its warnings do).
    errors = [p for p in mixlist_problems(mixlist, op_names=op_names) if p.severity is Severity.ERROR]
    if errors:
        raise AmpconfigError(
            f"{len(errors)} invalid entr{'y' if len(errors) == 1 else 'ies'} in the mixlist",
            file=mixlist.origin.file,
            problems=errors,
        )
    return ChosenMixlist(mixlist, given if isinstance(given, Path) else None)


def read_keep_dtype(given: Path | Sequence[str], op_names: str | None) -> ChosenKeepDtype:
    """The keep_dtype entries of a file (read now) or of node names, their op names read; an invalid entry or an
    ambiguous op name raises."""
    from ampconfig.documents.keep_dtype_file import keep_dtype_from_config, read_keep_dtype_names
    from ampconfig.documents.parsing import SourceMap

    source = str(given) if isinstance(given, Path) else None
    entries, problems = read_keep_dtype_names(list(keep_dtype_from_config(given)), op_names, SourceMap(source))
    errors = [problem for problem in problems if problem.severity is Severity.ERROR]
    if errors:
        raise AmpconfigError(errors[0].message, file=source, line=errors[0].line, hint=errors[0].hint, problems=errors)
    return ChosenKeepDtype(tuple(entries), source, tuple(problems))


def read_customize(given: Path | CustomizeFile, op_names: str | None) -> CustomizeFile:
    """The customize_dtypes file read, its format checked (errors raise, each at its line); one read already (with
    the op names it was written in) is taken as it is."""
    from ampconfig.documents.customize_dtypes_file import CustomizeFile, load_customize_dtypes

    return given if isinstance(given, CustomizeFile) else load_customize_dtypes(given, op_names)


def is_path(value: object) -> bool:
    return isinstance(value, (str, os.PathLike))
