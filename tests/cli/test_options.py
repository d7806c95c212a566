"""One option group (issue 20): every command takes exactly the shared options it documents, each declared once
(:class:`~ampconfig.cli.options.SharedOptions`) and handed to the command as one typed object.

A dropped flag (a name gone from a command's row of ``COMMAND_OPTIONS``, a command registered around the group) or
an extra one (a command declaring a shared flag again) fails here."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, get_type_hints

import pytest
import typer
from typer.core import TyperArgument, TyperGroup
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.cli.options import COMMAND_OPTIONS, SharedOptions, with_shared_options

runner = CliRunner()
WIDE = {"COLUMNS": "250", "TERMINAL_WIDTH": "250"}
SHARED = {item.name for item in dataclasses.fields(SharedOptions)}
DECLARATIONS = get_type_hints(SharedOptions, include_extras=True)

_DECIDING = ["-c", "-m", "--modify-mixlist", "--keep-dtype", "--customize-dtypes", "--op-names", "--target"]
_DECIDING += ["--keep-io-types"]
_RUNNING = ["--device", "--input", "--inputs", "--shape", "--seed"]
_VALUES = ["--data", "--calibration-data", "--ranges", "--range-check", "--data-max", "--clamp-values"]
#: Commands that run nothing unless given values: the same inputs, no --range-check (values given are a check).
_DECIDING_VALUES = [*_RUNNING, "--data", "--calibration-data", "--ranges", "--data-max", "--clamp-values"]
#: The shared options each command documents (its --help), by flag; "model" is the model argument ([model]).
#: Changing a command's interface means changing its row here on purpose.
DOCUMENTED: dict[str, list[str]] = {
    "run": ["model", *_DECIDING, *_RUNNING, *_VALUES, "-o", "--warmup", "--iterations", "--tolerance", "--json"],
    "explain": ["model", *_DECIDING, *_RUNNING, *_VALUES, "--threshold", "--json", "--html"],
    "compare": ["model", *_DECIDING, *_RUNNING, *_VALUES, "--tolerance", "--threshold", "--json", "--html"],
    "tune": ["model", *_DECIDING, *_RUNNING, *_VALUES, "--tolerance", "--json"],
    "rewrite": ["model", *_DECIDING, *_DECIDING_VALUES, "-o", "--json"],
    "lock": ["model", *_DECIDING, *_DECIDING_VALUES, "--json"],
    "diff": ["model", *_DECIDING, *_DECIDING_VALUES, "--json"],
    "calibrate": ["model", "-c", "-m", "--target", *_RUNNING, "--data", "--calibration-data", "--json"],
    "lists": ["-c", "-m", "--modify-mixlist", "--op-names", "--target", "--json"],
    "validate": ["--target", "--op-names"],
    "schema": [],
}
#: A command's own option that spells a shared flag with another meaning: its -o writes a lock or a mixlist.
OWN_MEANING = {("lock", "lock_out"), ("tune", "mixlist_out"), ("calibrate", "ranges_path")}


def _commands() -> dict[str, Any]:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    # ops-info builds the op info library: a group of its own, whose --target is the execution target to measure
    return {name: command for name, command in group.commands.items() if not isinstance(command, TyperGroup)}


def _declared_flags(name: str) -> set[str]:
    """The flags SharedOptions declares for field ``name`` (the argument: its name)."""
    info = DECLARATIONS[name].__metadata__[0]
    if isinstance(info, typer.models.ArgumentInfo):
        return {name}
    return {flag for spelled in (info.default, *info.param_decls) for flag in spelled.split("/")}


def _flags(parameter: Any) -> set[str]:
    if isinstance(parameter, TyperArgument):
        return {parameter.name}
    return {*parameter.opts, *parameter.secondary_opts}


def test_every_command_has_a_row() -> None:
    assert set(COMMAND_OPTIONS) == set(_commands()) == set(DOCUMENTED)


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_a_command_takes_exactly_the_shared_options_it_documents(name: str) -> None:
    command = _commands()[name]
    shared = [parameter for parameter in command.params if parameter.name in SHARED]
    assert {parameter.name for parameter in shared} == COMMAND_OPTIONS[name].names
    exposed = set().union(*(_flags(parameter) for parameter in shared))
    documented = set(DOCUMENTED[name])
    assert documented <= exposed, f"{name} lost {sorted(documented - exposed)}"
    assert all(documented & _flags(parameter) for parameter in shared), f"{name} takes undocumented options"
    for parameter in shared:  # each as SharedOptions declares it: the same flags, the one declaration
        assert _flags(parameter) == _declared_flags(parameter.name or ""), parameter.name
    text = runner.invoke(app, [name, "--help"], env=WIDE).output
    assert [flag for flag in documented if flag not in text] == [], text


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_no_command_declares_a_shared_flag_again(name: str) -> None:
    every_shared_flag = set().union(*(_declared_flags(field) for field in SHARED)) - {"model"}
    for parameter in _commands()[name].params:
        if parameter.name in SHARED or (name, parameter.name) in OWN_MEANING:
            continue
        assert not _flags(parameter) & every_shared_flag, f"{name} declares {parameter.name} again"


def test_what_the_command_line_says_arrives_in_the_typed_object(tmp_path: Path) -> None:
    """Every shared option run takes reaches its SharedOptions field, under its own name."""
    seen: list[SharedOptions] = []

    def record(options: SharedOptions) -> None:
        seen.append(options)

    probe = typer.Typer()
    probe.command()(with_shared_options(record, COMMAND_OPTIONS["run"]))
    model, config = tmp_path / "m.onnx", tmp_path / "c.yaml"
    args = [str(model), "-c", str(config), "-m", "force_fp16", "--target", "cpu", "--device", "cpu"]
    args += ["--no-keep-io-types", "--input", "x=a.npy", "--shape", "x=1x2", "--seed", "7", "--warmup", "1"]
    args += ["--iterations", "2", "--tolerance", "0.5", "--data-max", "100", "--clamp-values", "--json"]
    result = runner.invoke(probe, args)
    assert result.exit_code == 0, result.output
    options = seen[0]
    expected: dict[str, Any] = {
        "model": model, "config": config, "precision_mode": "force_fp16", "target": "cpu", "device": "cpu",
        "keep_io_types": False, "input_files": ["x=a.npy"], "shapes": ["x=1x2"], "seed": 7, "warmup": 1,
        "iterations": 2, "tolerance": 0.5, "data_max": 100.0, "clamp_values": True, "json_output": True,
    }  # fmt: skip
    assert {name: getattr(options, name) for name in expected} == expected
    flags = options.flags()
    assert (flags.model, flags.input_files, flags.shapes, flags.keep_io_types) == (
        model,
        ("x=a.npy",),
        ("x=1x2",),
        False,
    )
    assert options.given() == [
        "model", "config", "precision_mode", "target", "device", "keep_io_types", "input_files", "shapes", "warmup",
        "iterations", "seed", "tolerance", "clamp_values", "data_max",
    ]  # fmt: skip


def test_a_command_that_declares_a_shared_option_again_is_refused() -> None:
    def twice(options: SharedOptions, seed: int = 0) -> None:
        del options, seed

    with pytest.raises(TypeError, match="declared again"):
        with_shared_options(twice, COMMAND_OPTIONS["run"])
