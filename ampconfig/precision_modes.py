"""Precision modes: Ascend's v1 names, their v2 aliases, and what each one implies.

The per-node policy of each mode lives in :mod:`ampconfig.decide.passes.mode_rules`; this module only names the modes.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from ampconfig.dtypes import Dtype
from ampconfig.errors import AmpconfigError


class PrecisionMode(str, Enum):
    FORCE_FP32 = "force_fp32"
    FORCE_FP16 = "force_fp16"
    ALLOW_FP32_TO_FP16 = "allow_fp32_to_fp16"
    MUST_KEEP_ORIGIN_DTYPE = "must_keep_origin_dtype"
    ALLOW_MIX_PRECISION = "allow_mix_precision"
    ALLOW_MIX_PRECISION_FP16 = "allow_mix_precision_fp16"
    ALLOW_MIX_PRECISION_BF16 = "allow_mix_precision_bf16"
    ALLOW_FP32_TO_BF16 = "allow_fp32_to_bf16"

    @property
    def is_mixed(self) -> bool:
        return self in _MIXED

    @property
    def accepts_mixlist(self) -> bool:
        # Ascend: modify_mixlist only applies to the mixed modes.
        return self.is_mixed

    @property
    def low_dtype(self) -> Dtype:
        """The reduced float type this mode introduces (float16 or bfloat16)."""
        return Dtype.BFLOAT16 if self in _BF16 else Dtype.FLOAT16


_MIXED = frozenset(
    {
        PrecisionMode.ALLOW_MIX_PRECISION,
        PrecisionMode.ALLOW_MIX_PRECISION_FP16,
        PrecisionMode.ALLOW_MIX_PRECISION_BF16,
    }
)
_BF16 = frozenset({PrecisionMode.ALLOW_MIX_PRECISION_BF16, PrecisionMode.ALLOW_FP32_TO_BF16})

#: The v1 and v2 names as types, for settings and lock files (tests/test_typing.py checks they equal
#: :data:`V1_NAMES` and :data:`V2_NAMES`).
V1Name = Literal[
    "force_fp32",
    "force_fp16",
    "allow_fp32_to_fp16",
    "must_keep_origin_dtype",
    "allow_mix_precision",
    "allow_mix_precision_fp16",
    "allow_mix_precision_bf16",
    "allow_fp32_to_bf16",
]
V2Name = Literal["cube_fp16in_fp32out", "fp16", "origin", "mixed_float16", "mixed_bfloat16"]

#: precision_mode_v2 names (Ascend) and the v1 mode each one means.
V2_ALIASES: dict[str, PrecisionMode] = {
    "cube_fp16in_fp32out": PrecisionMode.FORCE_FP32,
    "fp16": PrecisionMode.FORCE_FP16,
    "origin": PrecisionMode.MUST_KEEP_ORIGIN_DTYPE,
    "mixed_float16": PrecisionMode.ALLOW_MIX_PRECISION_FP16,
    "mixed_bfloat16": PrecisionMode.ALLOW_MIX_PRECISION_BF16,
}

V1_NAMES: tuple[str, ...] = tuple(mode.value for mode in PrecisionMode)
V2_NAMES: tuple[str, ...] = tuple(V2_ALIASES)
ALL_NAMES: tuple[str, ...] = V1_NAMES + V2_NAMES


def parse_mode(name: str) -> PrecisionMode:
    """Resolve a v1 name or a v2 alias; an unknown name is an error listing the valid ones."""
    if isinstance(name, PrecisionMode):
        return name
    key = str(name).strip()
    if key in V1_NAMES:
        return PrecisionMode(key)
    if key in V2_ALIASES:
        return V2_ALIASES[key]
    raise AmpconfigError(
        f"unknown precision mode {name!r}",
        hint="valid modes: " + ", ".join(V1_NAMES) + "; v2 aliases: " + ", ".join(V2_NAMES),
    )
