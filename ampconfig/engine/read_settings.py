"""The rewrite's options with the op info read: the mixlist (read at the edge) applied to the op info's lists, and
what the lists said (the mixlist's, keep_dtype's and customize_dtypes' notes and warnings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ampconfig.decide.chosen_lists import ChosenMixlist
from ampconfig.decide.measured_facts import MeasuredFacts
from ampconfig.decide.rewrite_options import RewriteOptions
from ampconfig.engine.typing_chain import TYPING
from ampconfig.errors import Severity
from ampconfig.opinfo.library import OpInfoLibrary, OpLists, load_ops_info
from ampconfig.rewrite.float_cast import float16_within_all, float32_to_float16
from ampconfig.rewrite.steps.run_context import RewriteSetup

if TYPE_CHECKING:  # the file formats (pydantic's models): imported when a list is given
    from ampconfig.documents.customize_dtypes_file import CustomizeFile
    from ampconfig.documents.keep_dtype_file import KeepDtypeEntry


def effective_lists(
    library: OpInfoLibrary, modify_mixlist: ChosenMixlist | None = None, op_names: str | None = None
) -> tuple[OpLists, list[str], list[str]]:
    """The op lists after the mixlist (read already, at the edge), the mixlist's warnings, and its notes (each
    TensorFlow/Ascend op name read as its ONNX op, with file and line) as text. ``op_names``: whose names the
    mixlist uses."""
    if modify_mixlist is None:  # the file formats (pydantic's models) are imported only with a mixlist
        return library.lists(), [], []
    from ampconfig.documents.mixlist_file import apply_mixlist

    lists, problems = apply_mixlist(library.lists(), modify_mixlist.mixlist, op_names)
    return (
        lists,
        [p.format() for p in problems if p.severity is Severity.WARNING],
        [p.format() for p in problems if p.severity is Severity.NOTE],
    )


@dataclass
class ReadOptions:
    """The options with the op info read (the mixlist applied to its lists), and what the lists said."""

    options: RewriteOptions
    library: OpInfoLibrary
    lists: OpLists
    keep_entries: list[KeepDtypeEntry]
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
            # One pass over a weight for its bounds and its float16 bits, where the encoder is ours.
            float16_within_all if options.float16_encoder is None else None,
            judges=options.judges,
            clamp_values=options.clamp_values,
            keep_io_types=options.keep_io_types,
            with_cost=options.with_cost,
            decision_metadata=options.decision_metadata,
        )


def read_options(options: RewriteOptions) -> ReadOptions:
    """``options`` with the op info read and the mixlist applied; what the lists said goes into the result's
    warnings and notes (the mixlist's, then customize_dtypes', then keep_dtype's)."""
    library = options.op_info if options.op_info is not None else load_ops_info(options.target)
    lists, warnings, notes = effective_lists(library, options.modify_mixlist, options.op_names)
    keep = options.keep_dtype
    entries, keep_source, keep_names = (list(keep.entries), keep.source, keep.problems) if keep else ([], None, ())
    customize = options.customize_dtypes
    if customize is not None:
        warnings.extend(p.format() for p in customize.notes if p.severity is Severity.WARNING)
        notes.extend(p.format() for p in customize.notes if p.severity is Severity.NOTE)
    warnings.extend(p.format() for p in keep_names if p.severity is Severity.WARNING)
    notes.extend(p.format() for p in keep_names if p.severity is Severity.NOTE)
    return ReadOptions(options, library, lists, entries, keep_source, customize, warnings, notes)
