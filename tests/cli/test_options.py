"""One option table (issues 20 and 46): every command takes exactly the shared options it documents, each declared
once (an entry of :data:`ampconfig.settings.flags.SHARED_OPTIONS`, which the command's registered signature is built
from) and handed to the command as one typed :class:`~ampconfig.cli.options.SharedOptions`: the settings flags as
one :class:`~ampconfig.settings.flags.Flags` (the type the resolver reads) and the few options only the command line
reads, each option a field of one of them, never of both.

A dropped flag (a command gone from an option's entry) or an extra one (a command declaring a shared flag again, or
a shared option declared a second way) fails here, and an option added to the table reaches every command it
names, and the resolver by its spelling."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
from typer.core import TyperArgument, TyperGroup
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.cli import options as shared
from ampconfig.cli.options import (
    COMMAND_LINE_NAMES,
    COMMAND_OPTIONS,
    FLAG_NAMES,
    SharedOptions,
    receiving_shared_options,
    typer_info,
)
from ampconfig.cli.typer_app import REGISTERED, register_command
from ampconfig.settings import flags as flag_table
from ampconfig.settings.flags import RESULTS_OPTIONS, SHARED_OPTIONS, Flags, SharedOption, shared_option
from ampconfig.settings.resolve import _Merge

runner = CliRunner()
WIDE = {"COLUMNS": "250", "TERMINAL_WIDTH": "250"}
SHARED = {*FLAG_NAMES, *COMMAND_LINE_NAMES}
#: The order --help lists the shared options in: the table's.
ORDER = [option.name for option in SHARED_OPTIONS]
DECLARATIONS = {option.name: option.spellings for option in SHARED_OPTIONS}


def _typed(name: str, value: Any) -> Any:
    """``value`` given for the shared option ``name``, as the typed object holds it."""
    options = SharedOptions.of({name: value})
    return getattr(options.flags, name) if name in FLAG_NAMES else getattr(options, name)


def _default(name: str) -> Any:
    """What the typed object holds for the shared option ``name`` when the command line does not give it."""
    return getattr(Flags(), name) if name in FLAG_NAMES else getattr(SharedOptions(), name)


_DECIDING = ["-c", "-m", "--modify-mixlist", "--keep-dtype", "--customize-dtypes", "--op-names", "--target"]
_DECIDING += ["--keep-io-types"]
_RUNNING = ["--device", "--input", "--inputs", "--shape", "--seed"]
_VALUES = ["--data", "--calibration-data", "--ranges", "--range-check", "--data-max", "--clamp-values"]
#: Commands that run nothing unless given values: the same inputs, no --range-check (values given are a check).
_DECIDING_VALUES = [*_RUNNING, "--data", "--calibration-data", "--ranges", "--data-max", "--clamp-values"]
#: The shared options each command documents (its --help), by flag; "model" is the model argument ([model]).
#: Changing a command's interface means changing its row here on purpose.
DOCUMENTED: dict[str, list[str]] = {
    "run": [
        "model",
        *_DECIDING,
        *_RUNNING,
        *_VALUES,
        "-o",
        "--decision-metadata",
        "--load-check",
        "--warmup",
        "--iterations",
        "--tolerance",
        "--json",
    ],
    "explain": ["model", *_DECIDING, *_RUNNING, *_VALUES, "--threshold", "--json", "--html"],
    "compare": ["model", *_DECIDING, *_RUNNING, *_VALUES, "--tolerance", "--threshold", "--json", "--html"],
    "tune": ["model", *_DECIDING, *_RUNNING, *_VALUES, "--tolerance", "--json"],
    "rewrite": ["model", *_DECIDING, *_DECIDING_VALUES, "-o", "--decision-metadata", "--load-check", "--json"],
    "lock": ["model", *_DECIDING, *_DECIDING_VALUES, "--json"],
    "diff": ["model", *_DECIDING, *_DECIDING_VALUES, "--json"],
    "calibrate": ["model", "-c", "-m", "--target", *_RUNNING, "--data", "--calibration-data", "--json"],
    "lists": ["-c", "-m", "--modify-mixlist", "--op-names", "--target", "--json"],
    "validate": ["--target", "--op-names", "--json"],
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
    """The flags the table declares for field ``name`` (the argument: its name)."""
    if not DECLARATIONS[name]:
        return {name}
    return {flag for spelled in DECLARATIONS[name] for flag in spelled.split("/")}


def _flags(parameter: Any) -> set[str]:
    if isinstance(parameter, TyperArgument):
        return {parameter.name}
    return {*parameter.opts, *parameter.secondary_opts}


def test_every_command_has_a_row() -> None:
    assert set(COMMAND_OPTIONS) == set(_commands()) == set(DOCUMENTED)


def test_each_shared_option_is_one_field_of_one_type() -> None:
    """A settings flag is a field of Flags, a command-line option one of SharedOptions; none is both, and each has
    its one declaration."""
    assert not set(FLAG_NAMES) & set(COMMAND_LINE_NAMES)
    assert {item.name for item in dataclasses.fields(Flags)} == set(FLAG_NAMES)
    assert set(DECLARATIONS) == SHARED


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


def _declared_again(name: str, command: Any) -> list[str]:
    """The parameters of ``command`` (registered as ``name``) that spell a shared flag under another name."""
    every_shared_flag = set().union(*(_declared_flags(field) for field in SHARED)) - {"model"}
    return [
        parameter.name
        for parameter in command.params
        if parameter.name not in SHARED
        and (name, parameter.name) not in OWN_MEANING
        and _flags(parameter) & every_shared_flag
    ]


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_no_command_declares_a_shared_flag_again(name: str) -> None:
    assert _declared_again(name, _commands()[name]) == []


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_each_shared_parameter_is_its_one_declaration_in_help_order(name: str) -> None:
    """The command's registered signature uses the table's declaration for each shared option (the command's own
    wording where its entry gives one), with the entry's default; --help lists the shared options in the table's
    order, then the command's own, then --json/--html. The command's function declares none of them itself."""
    used = COMMAND_OPTIONS[name]
    callback = _commands()[name].callback
    parameters = inspect.signature(callback).parameters
    for option in used.names:
        assert parameters[option].annotation is used.declaration(option), f"{name}: {option} is declared apart"
        entry = next(each for each in SHARED_OPTIONS if each.name == option)
        expected = used.default(option) if name in entry.defaults else _default(option)
        assert _typed(option, parameters[option].default) == expected, option
    own = list(inspect.signature(inspect.unwrap(callback)).parameters)
    assert not set(own) & SHARED and own[:1] == (["options"] if used.names else own[:1])
    order = [parameter.name for parameter in _commands()[name].params]
    fields_order = [field for field in ORDER if field in used.names]
    assert [each for each in order if each in used.names] == fields_order
    shown_last = [each for each in fields_order if each in RESULTS_OPTIONS]
    first = [each for each in fields_order if each not in RESULTS_OPTIONS]
    assert order[: len(first)] == first
    assert order[len(order) - len(shown_last) :] == shown_last


def test_what_the_command_line_says_arrives_in_the_typed_object(tmp_path: Path) -> None:
    """Every shared option given reaches its field (of the flags, or of SharedOptions), under its own name; the
    repeatable flags arrive as tuples, the paths as paths."""
    seen: list[SharedOptions] = []

    def record(options: SharedOptions) -> None:
        seen.append(options)

    probe = typer.Typer()
    probe.command()(receiving_shared_options("run", record))
    model, config = tmp_path / "m.onnx", tmp_path / "c.yaml"
    args = [str(model), "-c", str(config), "-m", "force_fp16", "--target", "cpu", "--device", "cpu"]
    args += ["--no-keep-io-types", "--input", "x=a.npy", "--shape", "x=1x2", "--seed", "7", "--warmup", "1"]
    args += ["--iterations", "2", "--tolerance", "0.5", "--data-max", "100", "--clamp-values", "--json"]
    result = runner.invoke(probe, args)
    assert result.exit_code == 0, result.output
    options = seen[0]
    expected: dict[str, Any] = {
        "model": model, "config": config, "precision_mode": "force_fp16", "target": "cpu", "device": "cpu",
        "keep_io_types": False, "input_files": ("x=a.npy",), "shapes": ("x=1x2",), "seed": 7, "warmup": 1,
        "iterations": 2, "tolerance": 0.5, "data_max": 100.0, "clamp_values": True,
    }  # fmt: skip
    assert {name: getattr(options.flags, name) for name in expected} == expected
    assert options.json_output is True
    assert options.flags.ranges is None and options.range_check is True  # not given: the default
    assert options.flags.given() == [
        "model", "config", "precision_mode", "target", "device", "keep_io_types", "input_files", "shapes", "warmup",
        "iterations", "seed", "tolerance", "clamp_values", "data_max",
    ]  # fmt: skip


def test_a_command_that_declares_a_shared_option_again_is_caught() -> None:
    """The check above finds a command that spells a shared flag under a name of its own."""

    def twice(
        *,
        seed: Annotated[int | None, typer_info(shared_option("seed"))] = None,
        own_seed: Annotated[int, typer.Option("--seed", help="A seed again.")] = 0,
    ) -> None:
        del seed, own_seed

    probe = typer.Typer()
    probe.command("run")(twice)
    command = typer.main.get_command(probe)
    assert _declared_again("run", command) == ["own_seed"]


#: A shared option only this test declares: a settings flag of three commands, declared as data in the one table.
STRICT_NAMES = SharedOption(
    "strict_names",
    ("--strict-names/--loose-names",),
    bool,
    "Refuse op names of another framework.",
    ("run", "lists", "validate"),
)
#: What each command needs on its command line besides the shared options (calibrate: -o, validate: a path).
REQUIRED = {"calibrate": ["-o", "ranges.json"], "validate": ["session.yaml"]}


def _recording(name: str, function: Callable[..., Any], received: dict[str, SharedOptions]) -> Callable[..., Any]:
    """A stand-in for the command ``function`` (its signature: ``options``, then its own parameters) that keeps
    the SharedOptions it receives."""

    def record(options: SharedOptions, **own: Any) -> None:
        received[name] = options

    record.__signature__ = inspect.signature(function, eval_str=True)  # type: ignore[attr-defined]
    return record


@pytest.fixture
def app_with_strict_names(monkeypatch: pytest.MonkeyPatch) -> tuple[typer.Typer, dict[str, SharedOptions]]:
    """Every command registered again on a fresh app, with one entry added to the table (and the field of Flags
    that holds its value, as a real settings flag has); each command's stand-in records what it receives."""
    monkeypatch.setattr(flag_table, "SHARED_OPTIONS", (*SHARED_OPTIONS, STRICT_NAMES))
    with_field = dataclasses.make_dataclass(
        "FlagsWithStrictNames", [("strict_names", "bool | None", None)], bases=(Flags,), frozen=True
    )
    monkeypatch.setattr(shared, "Flags", with_field)
    received: dict[str, SharedOptions] = {}
    fresh = typer.Typer()
    for name, (function, pause_gc, kwargs) in REGISTERED.items():
        register_command(fresh, name, _recording(name, function, received), pause_gc=pause_gc, **kwargs)
    return fresh, received


def test_a_shared_option_added_to_the_table_reaches_every_command_that_takes_it(
    app_with_strict_names: tuple[typer.Typer, dict[str, SharedOptions]],
) -> None:
    """One entry added to the table: each command it names lists it in --help and receives it in its
    SharedOptions, given or not; every other command refuses it as an unknown option (exit 2). The resolver
    picking the setting from those flags names where it came from by the table's spelling."""
    fresh, received = app_with_strict_names
    assert set(REGISTERED) == set(COMMAND_OPTIONS)
    for name in REGISTERED:
        help_text = runner.invoke(fresh, [name, "--help"], env=WIDE).output
        takes = name in STRICT_NAMES.commands
        assert ("--strict-names" in help_text) == takes == (STRICT_NAMES.help in help_text), name
        result = runner.invoke(fresh, [name, *REQUIRED.get(name, []), "--loose-names"])
        assert result.exit_code == (0 if takes else 2), (name, result.output)
        if takes:
            assert _resolved(received.pop(name).flags) == (False, "--strict-names/--loose-names"), name
            assert runner.invoke(fresh, [name, *REQUIRED.get(name, [])]).exit_code == 0
            assert _resolved(received.pop(name).flags) == (True, "default"), name
    assert received == {}


def _resolved(flags: Flags) -> tuple[object, str]:
    """The strict_names setting as the resolver picks it from ``flags`` (the flag over the config, here none, over
    the default, on), and where it says the setting came from."""
    merged = _Merge(flags, None)
    return merged.pick("strict_names", vars(flags)["strict_names"], None, True), merged.sources["strict_names"]
