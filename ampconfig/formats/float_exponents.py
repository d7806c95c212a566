"""float32's binary exponents, the bins of a ranges file's exponent histogram. A module of its own, without the
file format's models, so that deciding with value ranges in memory loads no pydantic."""

from __future__ import annotations

#: float32's binary exponents: its smallest subnormal is 2^-149, its largest finite value lies below 2^128. An
#: exponent histogram has one bin per exponent between them (a float64 value beyond them counts at the nearest end).
EXPONENT_MIN, EXPONENT_MAX = -149, 127
