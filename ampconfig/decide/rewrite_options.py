"""The rewrite's options, one frozen object: what the API's keywords, :class:`ampconfig.MixedPrecisionPass`'s
``**options`` and the resolved :class:`~ampconfig.settings.resolve.Settings` of every command all become, so the
one pipeline (:mod:`ampconfig.rewrite.pipeline`) reads them from one place.

Building one checks the names (a keyword it has no field for is a TypeError), reads the precision mode and checks
every option's type and range (:func:`check_options`: one validation for the API, the pass and every command, an
:class:`~ampconfig.errors.AmpconfigError` naming the option, never a bare TypeError or ValueError from deep
inside); the files it names (mixlist, keep_dtype, customize_dtypes, ranges) are read when the rewrite runs, each
error at its file and line. It holds read-only copies of the mappings and node lists it is given, so what a caller
changes in its own dict or list afterwards changes no options already made.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import numpy as np

from ampconfig.decide.judgement_types import Judges
from ampconfig.decide.value_limits import ValueRanges, check_margin
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.library import OpInfoLibrary
from ampconfig.opinfo.op_names import OP_NAME_CHOICES
from ampconfig.opinfo.targets import DEFAULT_TARGET, TARGETS
from ampconfig.precision_modes import PrecisionMode, parse_mode

if TYPE_CHECKING:  # the file formats (pydantic's models) are imported when a file or a loaded one is given
    from ampconfig.formats.customize_dtypes_file import CustomizeFile
    from ampconfig.formats.mixlist_file import Mixlist

#: float32 array in, float16 array of the same shape out, bit-identical to ``array.astype(np.float16)``.
Float16Encoder = Callable[[np.ndarray], np.ndarray]

#: A mixlist file, a loaded :class:`~ampconfig.formats.mixlist_file.Mixlist`, or the mixlist as a mapping.
MixlistInput: TypeAlias = "str | Path | Mixlist | Mapping[str, Any] | None"
#: A keep_dtype file, or the node names (``OpType::name`` allowed).
KeepDtypeInput: TypeAlias = "str | Path | Sequence[str] | None"


@dataclass(frozen=True)
class RewriteOptions:
    """How to decide and rewrite a model (see :func:`ampconfig.rewrite_model_detailed` for each option).

    The user's choices: ``precision_mode`` (:meth:`of` reads a mode's name),
    ``modify_mixlist``, ``keep_dtype``, ``customize_dtypes``, ``op_names``, ``target``, ``keep_io_types``,
    ``clamp_values``, ``ranges`` and ``data_max``. What other steps found: ``overflow_nodes``, ``value_ranges``,
    ``runtime_refused`` (node names kept at their dtype, each with its reason) and ``judges`` (the caller's
    judgements of op types). How to work: ``op_info`` (in place of ``target``'s built-in op info),
    ``float16_encoder`` (None: the one every command uses) and ``with_cost`` (False: no cost report). What the
    output carries: ``decision_metadata`` (False: no node gets its decision in its ``metadata_props``)."""

    precision_mode: PrecisionMode
    modify_mixlist: MixlistInput = None
    keep_dtype: KeepDtypeInput = None
    target: str = DEFAULT_TARGET
    keep_io_types: bool = True
    overflow_nodes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    float16_encoder: Float16Encoder | None = None
    op_names: str | None = None
    op_info: OpInfoLibrary | None = None
    customize_dtypes: str | Path | CustomizeFile | None = None
    judges: Judges = field(default_factory=lambda: MappingProxyType({}))
    value_ranges: ValueRanges | None = None
    clamp_values: bool = False
    ranges: str | Path | None = None
    data_max: float | None = None
    with_cost: bool = True
    runtime_refused: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    decision_metadata: bool = True

    def __post_init__(self) -> None:
        # None is accepted for the mappings, as the API's keywords have always accepted it.
        for name in _MAPPINGS:
            if getattr(self, name) is None:
                object.__setattr__(self, name, MappingProxyType({}))
        check_options(self)  # on the values as given: an error names the type the caller handed in
        if self.data_max is not None:
            object.__setattr__(self, "data_max", check_margin(self.data_max, self.precision_mode.low_dtype, "data_max"))
        self._keep_copies()

    def _keep_copies(self) -> None:
        """Hold copies of what the caller handed in, read-only: a caller changing its dict or list afterwards
        changes nothing here (nor in a rewrite these options run later)."""
        for name in _MAPPINGS:
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        if isinstance(self.modify_mixlist, Mapping):  # nested lists and dicts: a deep copy
            object.__setattr__(self, "modify_mixlist", MappingProxyType(copy.deepcopy(dict(self.modify_mixlist))))
        if _is_names(self.keep_dtype):
            object.__setattr__(self, "keep_dtype", tuple(cast("Sequence[str]", self.keep_dtype)))

    @classmethod
    def of(cls, precision_mode: str | PrecisionMode, **options: Any) -> RewriteOptions:
        """The options from a mode name and keywords (the pass's and the API's way of giving them)."""
        return cls(parse_mode(precision_mode), **options)


#: The options that are mappings: each held as a read-only copy.
_MAPPINGS = ("overflow_nodes", "judges", "runtime_refused")


def _is_path(value: object) -> bool:
    return isinstance(value, (str, os.PathLike))


def _is_names(value: object) -> bool:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        return False
    return all(isinstance(each, str) for each in value)


def _is_mixlist(value: object) -> bool:
    from ampconfig.formats.mixlist_file import Mixlist

    return isinstance(value, Mixlist)


def _is_customize_file(value: object) -> bool:
    from ampconfig.formats.customize_dtypes_file import CustomizeFile

    return isinstance(value, CustomizeFile)


def _is_text_mapping(value: object) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


#: Each option's check and what it must be, in words (the API's keywords and the pass's options).
_EXPECTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "precision_mode": (lambda v: isinstance(v, PrecisionMode), "a precision mode"),
    "modify_mixlist": (
        lambda v: v is None or _is_path(v) or isinstance(v, Mapping) or _is_mixlist(v),
        "a mixlist file's path, the mixlist as a mapping, or None",
    ),
    "keep_dtype": (lambda v: v is None or _is_path(v) or _is_names(v), "a keep_dtype file's path, node names, or None"),
    "target": (lambda v: isinstance(v, str), "a target's name (" + ", ".join(TARGETS) + ")"),
    "keep_io_types": (lambda v: isinstance(v, bool), "true or false"),
    "overflow_nodes": (_is_text_mapping, "a mapping of node names to reasons"),
    "float16_encoder": (lambda v: v is None or callable(v), "a function of a float32 array, or None"),
    "op_names": (lambda v: v is None or v in OP_NAME_CHOICES, "one of " + ", ".join(OP_NAME_CHOICES) + ", or None"),
    "op_info": (lambda v: v is None or isinstance(v, OpInfoLibrary), "an OpInfoLibrary, or None"),
    "customize_dtypes": (
        lambda v: v is None or _is_path(v) or _is_customize_file(v),
        "a customize_dtypes file's path, or None",
    ),
    "judges": (lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v), "a mapping of op keys"),
    "value_ranges": (lambda v: v is None or isinstance(v, ValueRanges), "a ValueRanges, or None"),
    "clamp_values": (lambda v: isinstance(v, bool), "true or false"),
    "ranges": (lambda v: v is None or _is_path(v), "a value ranges file's path, or None"),
    "data_max": (
        lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
        "a positive number up to the low type's largest value, or None",
    ),
    "with_cost": (lambda v: isinstance(v, bool), "true or false"),
    "runtime_refused": (_is_text_mapping, "a mapping of node names to reasons"),
}


def check_options(options: RewriteOptions) -> None:
    """Refuse an option of the wrong type, naming it, what it must be and what it got (exit 2 in the CLI)."""
    for name, (accepts, expected) in _EXPECTED.items():
        value = getattr(options, name)
        if not accepts(value):
            from ampconfig.formats.documents import describe_value

            raise AmpconfigError(
                f"{name} must be {expected}, got {describe_value(value)}",
                hint=f"see ampconfig.rewrite_model_detailed's {name}",
            )
