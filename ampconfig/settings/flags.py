"""What the command line (or an API caller standing in for it) says about the settings: one frozen :class:`Flags`.

It is the one options type from the command line to the resolver: each command builds it from the shared options
it was given (:meth:`ampconfig.cli.options.SharedOptions.of`), :func:`ampconfig.settings.resolve.resolve` merges it
over the session config, and the API (``calibrate_model``), ``validate`` and a lock (``lock check``) build one the
same way. Only the standard library is imported here: ``ampconfig --help`` builds the command line from it without
loading the settings machinery.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass(frozen=True)
class Flags:
    """What the command line said; ``None`` (or empty) means "not given": the config or a default decides.

    Built from what a caller holds, it keeps a copy: paths become :class:`~pathlib.Path` (click hands some typer
    versions' paths over as strings) and the repeatable flags (``--input``, ``--shape``) tuples, so a caller's list
    changed afterwards changes nothing here."""

    model: Path | None = None
    config: Path | None = None
    precision_mode: str | None = None
    modify_mixlist: Path | None = None
    keep_dtype: Path | None = None
    customize_dtypes: Path | None = None
    op_names: str | None = None
    target: str | None = None
    device: str | None = None
    keep_io_types: bool | None = None
    output: Path | None = None
    decision_metadata: bool | None = None
    inputs_npz: Path | None = None
    input_files: tuple[str, ...] = ()  # NAME=FILE.npy
    shapes: tuple[str, ...] = ()  # NAME=1x128
    warmup: int | None = None
    iterations: int | None = None
    seed: int | None = None
    tolerance: float | None = None
    data: Path | None = None
    calibration_data: Path | None = None
    clamp_values: bool | None = None
    data_max: float | None = None
    ranges: Path | None = None

    def __post_init__(self) -> None:
        for name in _PATHS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        for name in _REPEATED:
            object.__setattr__(self, name, _texts(getattr(self, name)))

    def given(self) -> list[str]:
        """The flags given, by field name, in the order of the fields."""
        return [item.name for item in fields(self) if getattr(self, item.name) not in (None, ())]


#: The fields that name files or folders.
_PATHS = (
    "model",
    "config",
    "modify_mixlist",
    "keep_dtype",
    "customize_dtypes",
    "output",
    "inputs_npz",
    "data",
    "calibration_data",
    "ranges",
)
#: The flags given once per value (``--input a=x.npy --input b=y.npy``).
_REPEATED = ("input_files", "shapes")


def _texts(values: Iterable[str] | None) -> tuple[str, ...]:
    return tuple(values or ())
