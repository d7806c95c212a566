"""The rewrite's options, one frozen object: what the API's keywords, :class:`ampconfig.MixedPrecisionPass`'s
``**options`` and the resolved :class:`~ampconfig.settings.resolve.Settings` of every command all become, so the
one pipeline (:mod:`ampconfig.rewrite.pipeline`) reads them from one place.

Building one checks the names (a keyword it has no field for is a TypeError) and reads the precision mode (an
unknown mode is an :class:`~ampconfig.errors.AmpconfigError`); the files it names (mixlist, keep_dtype,
customize_dtypes, ranges) are read when the rewrite runs, each error at its file and line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeAlias

import numpy as np

from ampconfig.opinfo.library import OpInfoLibrary
from ampconfig.opinfo.targets import DEFAULT_TARGET
from ampconfig.settings.customize_dtypes import CustomizeFile
from ampconfig.settings.judgements import Judges
from ampconfig.settings.limits import ValueRanges
from ampconfig.settings.mixlist import Mixlist
from ampconfig.settings.modes import PrecisionMode, parse_mode

#: float32 array in, float16 array of the same shape out, bit-identical to ``array.astype(np.float16)``.
Float16Encoder = Callable[[np.ndarray], np.ndarray]

#: A mixlist file, a loaded :class:`~ampconfig.settings.mixlist.Mixlist`, or the mixlist as a mapping.
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
        for name in ("overflow_nodes", "judges", "runtime_refused"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, MappingProxyType({}))

    @classmethod
    def of(cls, precision_mode: str | PrecisionMode, **options: Any) -> RewriteOptions:
        """The options from a mode name and keywords (the pass's and the API's way of giving them)."""
        return cls(parse_mode(precision_mode), **options)
