"""The rewrite's options with their files read: the mixlist applied to the op info's lists, the keep_dtype pins and
the customize_dtypes file read, and what reading them said."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ampconfig.decide.measured_facts import MeasuredFacts
from ampconfig.decide.rewrite_options import RewriteOptions
from ampconfig.engine.typing_chain import TYPING
from ampconfig.errors import AmpconfigError, Problem, Severity
from ampconfig.opinfo.library import OpInfoLibrary, OpLists, load_ops_info
from ampconfig.precision_modes import PrecisionMode
from ampconfig.rewrite.float_cast import float32_to_float16
from ampconfig.rewrite.steps.run_context import RewriteSetup

if TYPE_CHECKING:  # the file formats (pydantic's models): imported when a file is given
    from ampconfig.formats.customize_dtypes_file import CustomizeFile
    from ampconfig.formats.mixlist_file import Mixlist


def effective_lists(
    mode: PrecisionMode,
    library: OpInfoLibrary,
    modify_mixlist: Path | Mixlist | None = None,
    op_names: str | None = None,
) -> tuple[OpLists, list[str], list[str]]:
    """The op lists after the mixlist (if any: its file, or one read already), the mixlist's warnings, and its
    notes (each TensorFlow/Ascend op name read as its ONNX op, with file and line) as text. ``op_names``: whose
    names the mixlist uses."""
    if modify_mixlist is None:  # the file formats (pydantic's models) are imported only with a mixlist
        return library.lists(), [], []
    from ampconfig.formats.mixlist_file import apply_mixlist, load_mixlist
    from ampconfig.formats.session_config import check_mode_accepts_mixlist

    check_mode_accepts_mixlist(mode, True, str(modify_mixlist))
    mixlist = load_mixlist(modify_mixlist) if isinstance(modify_mixlist, Path) else modify_mixlist
    lists, problems = apply_mixlist(library.lists(), mixlist, op_names)
    return (
        lists,
        [p.format() for p in problems if p.severity is Severity.WARNING],
        [p.format() for p in problems if p.severity is Severity.NOTE],
    )


def _keep_dtype_entries(
    keep_dtype: Path | tuple[str, ...] | None, op_names: str | None = None
) -> tuple[list[Any], str | None, list[Problem]]:
    """The entries, the file they came from, and what reading their op names found (notes, warnings); an
    ambiguous op name raises."""
    if keep_dtype is None:  # the file formats (pydantic's models) are imported only with keep_dtype
        return [], None, []
    from ampconfig.formats.documents import SourceMap
    from ampconfig.formats.keep_dtype_file import keep_dtype_from_config, read_keep_dtype_names

    source = str(keep_dtype) if isinstance(keep_dtype, Path) else None
    entries, problems = read_keep_dtype_names(list(keep_dtype_from_config(keep_dtype)), op_names, SourceMap(source))
    errors = [problem for problem in problems if problem.severity is Severity.ERROR]
    if errors:
        raise AmpconfigError(errors[0].message, file=source, line=errors[0].line, hint=errors[0].hint, problems=errors)
    return entries, source, problems


def _customize_file(customize_dtypes: Path | CustomizeFile | None, op_names: str | None) -> CustomizeFile | None:
    """The customize_dtypes file read and its format checked (errors raise, each at its line); None without one.
    A file already read (with the op names it was written in) is taken as it is."""
    if customize_dtypes is None:
        return None
    from ampconfig.formats.customize_dtypes_file import CustomizeFile, load_customize_dtypes

    if isinstance(customize_dtypes, CustomizeFile):
        return customize_dtypes
    return load_customize_dtypes(customize_dtypes, op_names)


@dataclass
class ReadOptions:
    """The options with their files read (the mixlist applied to the op lists, keep_dtype and customize_dtypes
    read), and what reading them said."""

    options: RewriteOptions
    library: OpInfoLibrary
    lists: OpLists
    keep_entries: list[Any]
    keep_source: str | None
    customize: CustomizeFile | None
    warnings: list[str]
    notes: list[str]

    def setup(self, facts: MeasuredFacts) -> RewriteSetup:
        """What the rewrite's steps read: these choices, read, and ``facts`` (its value ranges read already)."""
        options = self.options
        return RewriteSetup(
            options.precision_mode,
            self.library,
            self.lists,
            self.keep_entries,
            self.keep_source,
            self.customize,
            facts,
            TYPING,
            options.float16_encoder or float32_to_float16,
            judges=options.judges,
            clamp_values=options.clamp_values,
            keep_io_types=options.keep_io_types,
            with_cost=options.with_cost,
            decision_metadata=options.decision_metadata,
        )


def read_options(options: RewriteOptions) -> ReadOptions:
    """``options`` with their files read; what reading them said goes into the result's warnings and notes."""
    mode = options.precision_mode
    library = options.op_info if options.op_info is not None else load_ops_info(options.target)
    lists, warnings, notes = effective_lists(mode, library, options.modify_mixlist, options.op_names)
    entries, keep_source, keep_names = _keep_dtype_entries(options.keep_dtype, options.op_names)
    customize = _customize_file(options.customize_dtypes, options.op_names)
    if customize is not None:
        warnings.extend(p.format() for p in customize.notes if p.severity is Severity.WARNING)
        notes.extend(p.format() for p in customize.notes if p.severity is Severity.NOTE)
    warnings.extend(p.format() for p in keep_names if p.severity is Severity.WARNING)
    notes.extend(p.format() for p in keep_names if p.severity is Severity.NOTE)
    return ReadOptions(options, library, lists, entries, keep_source, customize, warnings, notes)
