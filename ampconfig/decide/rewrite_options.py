"""The user's choices for a rewrite, one frozen object: what the API's keywords, :class:`ampconfig.MixedPrecisionPass`'s
``**options`` and the resolved :class:`~ampconfig.settings.resolve.Settings` of every command all become, so the
one pipeline (:mod:`ampconfig.rewrite.pipeline`) reads them from one place. What measurements found (value
ranges, overflowing nodes, ONNX Runtime's refusals) travels apart, as
:class:`~ampconfig.decide.measured_facts.MeasuredFacts`; :func:`from_keywords` splits the API's keywords into both.

Building one checks the names (a keyword it has no field for is a TypeError), reads the precision mode and checks
every option's type and range (:func:`check_options`: one validation for the API, the pass and every command, an
:class:`~ampconfig.errors.AmpconfigError` naming the option, never a bare TypeError or ValueError from deep
inside), and normalises what it is given once, at the edge: the lists it is given (a mixlist file or mapping, a
keep_dtype file or node names, a customize_dtypes file) are read there into their one form each
(:mod:`ampconfig.decide.chosen_lists`: the content with the file it came from), each error at its file and line,
so nothing below reads a file or asks which form it holds. What a caller changes in its own dict or list
afterwards changes no options already made.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np

from ampconfig.decide.chosen_lists import (
    ChosenKeepDtype,
    ChosenMixlist,
    is_path,
    read_customize,
    read_keep_dtype,
    read_mixlist,
)
from ampconfig.decide.judgement_types import Judges
from ampconfig.decide.measured_facts import MeasuredFacts, check_option
from ampconfig.decide.value_limits import check_margin
from ampconfig.errors import AmpconfigError, Severity
from ampconfig.opinfo.library import OpInfoLibrary
from ampconfig.opinfo.op_names import OP_NAME_CHOICES
from ampconfig.opinfo.targets import DEFAULT_TARGET, TARGETS
from ampconfig.precision_modes import PrecisionMode, parse_mode

if TYPE_CHECKING:  # the file formats (pydantic's models) are imported when a file or a loaded one is given
    from ampconfig.documents.customize_dtypes_file import CustomizeFile
    from ampconfig.documents.mixlist_file import Mixlist

#: float32 array in, float16 array of the same shape out, bit-identical to ``array.astype(np.float16)``.
Float16Encoder = Callable[[np.ndarray], np.ndarray]

#: A mixlist file, a loaded :class:`~ampconfig.documents.mixlist_file.Mixlist`, or the mixlist as a mapping (what
#: the API takes; :class:`RewriteOptions` holds it read, a :class:`~ampconfig.decide.chosen_lists.ChosenMixlist`).
MixlistInput: TypeAlias = "str | Path | Mixlist | Mapping[str, Any] | None"
#: A keep_dtype file, or the node names (``OpType::name`` allowed; :class:`RewriteOptions` holds them read, a
#: :class:`~ampconfig.decide.chosen_lists.ChosenKeepDtype`).
KeepDtypeInput: TypeAlias = "str | Path | Sequence[str] | None"


@dataclass(frozen=True)
class RewriteOptions:
    """How to decide and rewrite a model (see :func:`ampconfig.rewrite_model_detailed` for each option).

    The user's choices: ``precision_mode`` (:meth:`of` reads a mode's name), ``modify_mixlist``, ``keep_dtype``,
    ``customize_dtypes``, ``op_names``, ``target``, ``keep_io_types``, ``clamp_values``, ``data_max`` (the range
    rule's margin) and ``judges`` (the caller's judgements of op types). How to work: ``op_info`` (in place of
    ``target``'s built-in op info), ``float16_encoder`` (None: the one every command uses) and ``with_cost``
    (False: no cost report). What the output carries: ``decision_metadata`` (False: no node gets its decision in
    its ``metadata_props``).

    Made from what the user gave (the lists as :data:`MixlistInput`, :data:`KeepDtypeInput`, a customize_dtypes
    path), it holds each list read: one type per field from here on."""

    precision_mode: PrecisionMode
    modify_mixlist: ChosenMixlist | None = None
    keep_dtype: ChosenKeepDtype | None = None
    target: str = DEFAULT_TARGET
    keep_io_types: bool = True
    float16_encoder: Float16Encoder | None = None
    op_names: str | None = None
    op_info: OpInfoLibrary | None = None
    customize_dtypes: CustomizeFile | None = None
    judges: Judges = field(default_factory=lambda: MappingProxyType({}))
    clamp_values: bool = False
    data_max: float | None = None
    with_cost: bool = True
    decision_metadata: bool = True

    def __post_init__(self) -> None:
        if self.judges is None:  # accepted, as the API's keywords have always accepted it
            object.__setattr__(self, "judges", MappingProxyType({}))
        check_options(self)  # on the values as given: an error names the type the caller handed in
        if self.data_max is not None:
            object.__setattr__(self, "data_max", check_margin(self.data_max, self.precision_mode.low_dtype, "data_max"))
        self._normalise()

    def _normalise(self) -> None:
        """Hold each choice in one form, copied: the judges read-only (a caller changing its dict or list afterwards
        changes nothing here), and each list read (a mixlist mapping as its Mixlist first); a list read already is
        kept as it is."""
        object.__setattr__(self, "judges", MappingProxyType(dict(self.judges)))
        given: Any = self.modify_mixlist
        if isinstance(given, Mapping):
            given = _inline_mixlist(self.precision_mode, given)
        if given is not None and not isinstance(given, ChosenMixlist):
            given = read_mixlist(self.precision_mode, Path(given) if is_path(given) else given, self.op_names)
        object.__setattr__(self, "modify_mixlist", given)
        keep: Any = self.keep_dtype
        if keep is not None and not isinstance(keep, ChosenKeepDtype):
            keep = read_keep_dtype(Path(keep) if is_path(keep) else tuple(cast("Sequence[str]", keep)), self.op_names)
        object.__setattr__(self, "keep_dtype", keep)
        customize: Any = self.customize_dtypes
        if is_path(customize):
            object.__setattr__(self, "customize_dtypes", read_customize(Path(customize), self.op_names))

    @classmethod
    def of(cls, precision_mode: str | PrecisionMode, **options: Any) -> RewriteOptions:
        """The options from a mode name and keywords (the pass's and the API's way of giving them)."""
        return cls(parse_mode(precision_mode), **options)

    def with_lists(
        self, modify_mixlist: MixlistInput, keep_dtype: KeepDtypeInput, op_names: str | None
    ) -> RewriteOptions:
        """These choices with other lists (tune's trials), given as the API takes them and read as its are (with
        ``op_names``); the customize_dtypes file stays as these choices read it."""
        lists: dict[str, Any] = {"modify_mixlist": modify_mixlist, "keep_dtype": keep_dtype}
        return replace(self, **lists, op_names=op_names)


#: Where the findings about a mixlist handed in as a mapping point.
INLINE_MIXLIST = "<inline mixlist>"


def _inline_mixlist(mode: PrecisionMode, data: Mapping[str, Any]) -> Mixlist:
    """The mixlist a mapping means, validated as a mixlist file is (a mode that takes none refused first)."""
    from ampconfig.documents.mixlist_file import mixlist_from_data
    from ampconfig.documents.parsing import SourceMap
    from ampconfig.documents.session_config import check_mode_accepts_mixlist

    check_mode_accepts_mixlist(mode, True, INLINE_MIXLIST)
    # One line, as the API's users have always read its findings: the mapping has no lines of its own.
    origin = SourceMap(INLINE_MIXLIST, {(): 1})
    mixlist, problems = mixlist_from_data(copy.deepcopy(dict(data)), origin)
    errors = [problem for problem in problems if problem.severity is Severity.ERROR]
    if mixlist is None or errors:
        raise AmpconfigError(errors[0].message, file=INLINE_MIXLIST, line=errors[0].line, problems=errors)
    return mixlist


def from_keywords(
    precision_mode: str | PrecisionMode, **keywords: Any
) -> tuple[RewriteOptions, MeasuredFacts, Path | None]:
    """The API's and the pass's keywords split: the user's choices, what measurements found
    (``value_ranges``, ``overflow_nodes``, ``runtime_refused``), and the ranges file to read against the model
    (``ranges``). A keyword that is neither is a TypeError."""
    found = {name: keywords.pop(name) for name in _FACTS if name in keywords}
    ranges = keywords.pop("ranges", None)
    options = RewriteOptions.of(precision_mode, **keywords)
    facts = MeasuredFacts(**found)
    check_option("ranges", ranges, lambda v: v is None or is_path(v), "a value ranges file's path, or None")
    return options, facts, Path(ranges) if ranges is not None else None


#: The API's keywords that are measured facts, not choices.
_FACTS = ("value_ranges", "overflow_nodes", "runtime_refused")


def _is_names(value: object) -> bool:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        return False
    return all(isinstance(each, str) for each in value)


def _is_mixlist(value: object) -> bool:
    from ampconfig.documents.mixlist_file import Mixlist

    return isinstance(value, (Mixlist, ChosenMixlist))


def _is_customize_file(value: object) -> bool:
    from ampconfig.documents.customize_dtypes_file import CustomizeFile

    return isinstance(value, CustomizeFile)


#: Each option's check and what it must be, in words (the API's keywords and the pass's options).
_EXPECTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "precision_mode": (lambda v: isinstance(v, PrecisionMode), "a precision mode"),
    "modify_mixlist": (
        lambda v: v is None or is_path(v) or isinstance(v, Mapping) or _is_mixlist(v),
        "a mixlist file's path, the mixlist as a mapping, or None",
    ),
    "keep_dtype": (
        lambda v: v is None or is_path(v) or _is_names(v) or isinstance(v, ChosenKeepDtype),
        "a keep_dtype file's path, node names, or None",
    ),
    "target": (lambda v: isinstance(v, str), "a target's name (" + ", ".join(TARGETS) + ")"),
    "keep_io_types": (lambda v: isinstance(v, bool), "true or false"),
    "float16_encoder": (lambda v: v is None or callable(v), "a function of a float32 array, or None"),
    "op_names": (lambda v: v is None or v in OP_NAME_CHOICES, "one of " + ", ".join(OP_NAME_CHOICES) + ", or None"),
    "op_info": (lambda v: v is None or isinstance(v, OpInfoLibrary), "an OpInfoLibrary, or None"),
    "customize_dtypes": (
        lambda v: v is None or is_path(v) or _is_customize_file(v),
        "a customize_dtypes file's path, or None",
    ),
    "judges": (lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v), "a mapping of op keys"),
    "clamp_values": (lambda v: isinstance(v, bool), "true or false"),
    "data_max": (
        lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
        "a positive number up to the low type's largest value, or None",
    ),
    "with_cost": (lambda v: isinstance(v, bool), "true or false"),
}


def check_options(options: RewriteOptions) -> None:
    """Refuse an option of the wrong type, naming it, what it must be and what it got (exit 2 in the CLI)."""
    for name, (accepts, expected) in _EXPECTED.items():
        check_option(name, getattr(options, name), accepts, expected)
