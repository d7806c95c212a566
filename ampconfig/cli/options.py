"""The options the commands share, as the command line takes them. Each is declared once, as data, in
:data:`~ampconfig.settings.flags.SHARED_OPTIONS` (its name, flags, type, default, help, the commands that
take it, whether it runs a model, its config key); this module adds only what typer checks or parses of its value,
and builds from the table:

- each shared option's declaration (:func:`declaration`: ``Annotated`` with its ``typer.Option`` or
  ``typer.Argument``), and each command's signature and so its ``--help`` (:func:`receiving_shared_options`: the
  command's function takes ``options: SharedOptions`` and declares only its own options, which come after the
  shared ones and before ``--json``/``--html``);
- :class:`SharedOptions`, the one typed object the command receives: the settings flags as one
  :class:`~ampconfig.settings.flags.Flags`, the type the resolver reads, and beside it the few options only the
  command line reads (``json_output`` among them, which decides the JSON envelope).

:meth:`SharedOptions.settings` is the one way a command turns the options it was given into
:class:`~ampconfig.settings.resolve.Settings` (flags over the session config over defaults)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ampconfig.documents.numeric_limits import (
    DEFAULT_THRESHOLD,
    MAX_ITERATIONS,
    MAX_SEED,
    MAX_WARMUP,
    check_count,
    check_positive_finite,
)
from ampconfig.files.paths import refuse_folder_spelling
from ampconfig.settings import flags as flag_table
from ampconfig.settings.flags import (
    COMMANDS,
    RESULTS_OPTIONS,
    SHARED_OPTIONS,
    Flags,
    SharedOption,
    Wording,
    shared_option,
)

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads none of the settings machinery
    from ampconfig.settings.resolve import Settings

FloatCheck = Callable[[typer.CallbackParam, "float | None"], "float | None"]
IntCheck = Callable[[typer.CallbackParam, "int | None"], "int | None"]


def _flag(param: typer.CallbackParam) -> str:
    return param.opts[0] if param.opts else f"--{param.name}"


def positive_finite(example: str = "1e-2") -> FloatCheck:
    """An option callback refusing NaN, infinities, 0 and negative numbers, naming the flag."""

    def check(param: typer.CallbackParam, value: float | None) -> float | None:
        return value if value is None else check_positive_finite(value, _flag(param), example)

    return check


def count_between(low: int, high: int) -> IntCheck:
    """An option callback refusing integers outside ``[low, high]``, naming the flag."""

    def check(param: typer.CallbackParam, value: int | None) -> int | None:
        return value if value is None else check_count(value, _flag(param), low, high)

    return check


def output_path(flag: str) -> Callable[[str], Path]:
    """The parser of an output path option: the path as written is checked before it becomes a ``Path``, which
    drops a trailing separator (``-o out_dir/`` would write a file named ``out_dir``)."""

    def parse(value: str | Path) -> Path:
        if isinstance(value, str):
            refuse_folder_spelling(value, flag)
        return Path(value)

    return parse


def output_option(*flags: str, help: str, **more: Any) -> Any:
    """The ``typer.Option`` of a file the command writes: ``flags``, ``help`` and typer's ``more``, the path parsed
    by :func:`output_path` under the first flag."""
    return typer.Option(*flags, help=help, parser=output_path(flags[0]), **more)


#: How refusals name the HTML report.
HTML_ROLE = "HTML report (--html)"


# ---------------------------------------------------------------------- each shared option's typer declaration
#: What typer checks or parses of a shared option's value, by option: the rest of its declaration (flags, help,
#: metavar, the default --help shows) is its entry in the table.
_VALUE_CHECKS: dict[str, dict[str, Any]] = {
    "seed": {"callback": count_between(0, MAX_SEED)},
    "output": {"parser": output_path("--output")},
    "warmup": {"callback": count_between(0, MAX_WARMUP)},
    "iterations": {"callback": count_between(1, MAX_ITERATIONS)},
    "tolerance": {"callback": positive_finite()},
    "threshold": {"callback": positive_finite()},
    "html": {"parser": output_path("--html")},
}


def typer_info(option: SharedOption, wording: Wording | None = None) -> Any:
    """The ``typer.Option`` (the model: ``typer.Argument``) of ``option``, worded as ``wording`` says (by default
    as its entry does), with what typer checks or parses of its value."""
    said = wording or Wording(option.help, option.shown_default)
    more = dict(_VALUE_CHECKS.get(option.name, {}))
    if option.metavar is not None:
        more["metavar"] = option.metavar
    if said.shown_default is not None:
        more["show_default"] = said.shown_default
    if not option.spellings:
        return typer.Argument(help=said.help, **more)
    return typer.Option(*option.spellings, help=said.help, **more)


def _parameter_type(option: SharedOption) -> Any:
    """The type of ``option``'s parameter: a list of values for a repeated flag; ``None`` for "not given" where
    the parameter defaults to it."""
    if option.repeated:
        return list[option.value_type] | None  # type: ignore[name-defined]  # built at run time, from the table
    return option.value_type | None if option.default is None else option.value_type


#: Each declaration built, by option and wording: a command's parameter is the one object its entry gives.
_DECLARED: dict[tuple[str, Wording], Any] = {}


def declaration(option: SharedOption, command: str) -> Any:
    """The ``Annotated`` declaration of ``option`` as ``command`` takes it (its type, then its typer information:
    flags, help, checks), built once per wording."""
    wording = option.help_for(command)
    key = (option.name, wording)
    if key not in _DECLARED:
        _DECLARED[key] = Annotated[_parameter_type(option), typer_info(option, wording)]
    return _DECLARED[key]


#: The ``--json`` option of a command that takes no shared options (``ranges merge``), as the table declares it.
JsonOutput = Annotated[bool, typer_info(shared_option("json_output"))]


@dataclass(frozen=True)
class SharedOptions:
    """The shared options as one command gave them: ``flags``, what the command line says about the settings
    (:class:`~ampconfig.settings.flags.Flags`, the one type the resolver reads), and the options only the command
    line reads: when a node counts as bad, whether the fp32 values are measured, how the results are shown. A field
    the command does not take (:data:`SHARED_OPTIONS`) keeps its default."""

    flags: Flags = field(default_factory=Flags)
    threshold: float = DEFAULT_THRESHOLD
    range_check: bool = True
    load_check: bool = True
    json_output: bool = False
    html: Path | None = None

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> SharedOptions:
        """The shared options ``given`` by name: each a field of the flags, else of this object."""
        flag_names = {option.name for option in flag_table.SHARED_OPTIONS if option.setting}
        flags = Flags(**{name: value for name, value in given.items() if name in flag_names})
        return cls(flags, **{name: value for name, value in given.items() if name not in flag_names})

    def settings(self, *, opens_model: bool = True, replaced: Mapping[str, object] | None = None) -> Settings:
        """The settings of this invocation: these flags over the session config over the defaults. ``replaced``
        gives some flags other values (``diff`` resolves its base side so). With ``opens_model``, the model must
        be an existing file (checked before any work)."""
        from ampconfig.settings.resolve import require_files, resolve

        changes: dict[str, Any] = dict(replaced or {})
        settings = resolve(replace(self.flags, **changes))
        require_files(settings, model=opens_model)
        return settings


#: The shared options that are settings flags (fields of :class:`~ampconfig.settings.flags.Flags`), and those only
#: the command line reads (fields of :class:`SharedOptions`): each shared option is one or the other.
FLAG_NAMES = tuple(option.name for option in SHARED_OPTIONS if option.setting)
COMMAND_LINE_NAMES = tuple(option.name for option in SHARED_OPTIONS if not option.setting)
_UNGIVEN = SharedOptions()
if {item.name for item in fields(SharedOptions)} != {"flags", *COMMAND_LINE_NAMES} or any(
    getattr(_UNGIVEN, name) != shared_option(name).default for name in COMMAND_LINE_NAMES
):  # the table's fields and defaults, checked at import
    raise TypeError(f"SharedOptions' fields are not the table's command-line options {COMMAND_LINE_NAMES}")


# ------------------------------------------------------------------------------------- who takes which options
@dataclass(frozen=True)
class Uses:
    """The shared options one command takes, in the table's order: each one's declaration (the command's own
    wording where it has one, same flags) and default."""

    options: tuple[SharedOption, ...]
    command: str

    @property
    def names(self) -> frozenset[str]:
        return frozenset(option.name for option in self.options)

    def declaration(self, name: str) -> Any:
        """The ``Annotated`` declaration the command's parameter ``name`` uses."""
        return declaration(self._option(name), self.command)

    def default(self, name: str) -> object:
        """The default of the command's parameter ``name``."""
        return self._option(name).default_for(self.command)

    def parameters(self) -> tuple[list[inspect.Parameter], list[inspect.Parameter]]:
        """The command's shared parameters: those before its own, and those after (:data:`RESULTS_OPTIONS`)."""
        parameters = [
            inspect.Parameter(
                option.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=self.default(option.name),
                annotation=self.declaration(option.name),
            )
            for option in self.options
        ]
        last = [parameter for parameter in parameters if parameter.name in RESULTS_OPTIONS]
        return [parameter for parameter in parameters if parameter.name not in RESULTS_OPTIONS], last

    def _option(self, name: str) -> SharedOption:
        return next(option for option in self.options if option.name == name)


def uses(command: str) -> Uses:
    """The shared options ``command`` takes (none for a command the table does not name)."""
    return Uses(tuple(option for option in flag_table.SHARED_OPTIONS if command in option.commands), command)


#: Which shared options each command takes, as the table says (tests/cli/test_options.py holds every command to it).
COMMAND_OPTIONS: dict[str, Uses] = {command: uses(command) for command in COMMANDS}


def receiving_shared_options(command: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function(options, *, own...)`` as the command ``command`` typer registers: its signature is the shared
    options the table gives the command (their declarations and defaults, in the table's order), then the
    function's own parameters, then how the results are shown; called, it hands ``function`` those options as
    one :class:`SharedOptions`, and its own parameters by name."""
    before, after = uses(command).parameters()
    return receiving_bundled(function, before, after, SharedOptions.of)


def receiving_bundled(
    function: Callable[..., Any],
    before: list[inspect.Parameter],
    after: list[inspect.Parameter],
    bundle: Callable[[dict[str, Any]], Any],
) -> Callable[..., Any]:
    """``function(bundled, *, own...)`` as typer registers it: its signature is the parameters ``before``, the
    function's own (keyword-only), then those ``after``; called, it hands ``function`` the values given for
    ``before`` and ``after`` as one object, ``bundle(values by name)``, and its own parameters by name."""
    own = [
        parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for parameter in list(inspect.signature(function, eval_str=True).parameters.values())[1:]
    ]
    signature = inspect.Signature([*before, *own, *after], return_annotation=None)
    names = [parameter.name for parameter in (*before, *after)]

    @functools.wraps(function)
    def with_bundle(**given: Any) -> Any:
        bundled = {name: given.pop(name) for name in names}
        return function(bundle(bundled), **given)

    # typer reads the parameters from the signature, and the types of those without a declaration from the
    # annotations: both say what the bundle gives the command, not what the function's own signature says.
    with_bundle.__signature__ = signature  # type: ignore[attr-defined]
    with_bundle.__annotations__ = {parameter.name: parameter.annotation for parameter in signature.parameters.values()}
    return with_bundle
