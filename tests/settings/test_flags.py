"""The one options type from the command line to the resolver (``ampconfig/settings/flags.py``): a frozen
:class:`Flags` that keeps a copy of what it is given, so a caller's list changed afterwards changes nothing."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from ampconfig.settings import flags as flag_table
from ampconfig.settings.flags import Flags, SharedOption
from ampconfig.settings.resolve import resolve


def test_flags_copy_the_lists_they_are_given() -> None:
    shapes = ["x=1x8x32"]
    inputs = ["x=a.npy"]
    flags = Flags(shapes=shapes, input_files=inputs)  # type: ignore[arg-type]  # as typer hands them over
    shapes.append("x=2x8x32")
    inputs.clear()
    assert flags.shapes == ("x=1x8x32",) and flags.input_files == ("x=a.npy",)
    assert dict(resolve(flags).inputs.shapes) == {"x": (1, 8, 32)}


def test_paths_given_as_text_become_paths_and_nothing_given_is_empty() -> None:
    flags = Flags(model="m.onnx", ranges="r.json", input_files=None)  # type: ignore[arg-type]
    assert flags.model == Path("m.onnx") and flags.ranges == Path("r.json")
    assert flags.input_files == () and flags.shapes == ()


def test_flags_are_frozen_and_say_what_was_given_in_field_order() -> None:
    flags = Flags(seed=0, model=Path("m.onnx"), shapes=("x=1",), keep_io_types=False)
    assert flags.given() == ["model", "keep_io_types", "shapes", "seed"]  # 0 and False are given
    assert Flags().given() == []
    with pytest.raises(dataclasses.FrozenInstanceError):
        flags.seed = 1  # type: ignore[misc]


def test_a_settings_option_the_fields_of_flags_do_not_hold_fails_the_import_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Flags' fields are checked against the table of shared options when the module is imported: the table as it
    is passes; an option added without its field fails, and so does an option whose type is not its field's."""
    flag_table._check_fields()
    added = SharedOption("strict_names", ("--strict-names",), bool, "Refuse foreign op names.", ("run",))
    monkeypatch.setattr(flag_table, "_SETTINGS", (*flag_table._SETTINGS, added))
    with pytest.raises(TypeError, match="strict_names"):
        flag_table._check_fields()
    retyped = [
        dataclasses.replace(option, value_type=int) if option.name == "keep_io_types" else option
        for option in flag_table._SETTINGS
        if option is not added
    ]
    monkeypatch.setattr(flag_table, "_SETTINGS", tuple(retyped))
    with pytest.raises(TypeError, match=re.escape("('keep_io_types', 'int | None')")):
        flag_table._check_fields()
