"""The options the commands share, declared once: :class:`SharedOptions` is both their typer declaration (each
field's annotation) and the one typed object a command is handed. :data:`COMMAND_OPTIONS` says which of them each
command takes; :func:`with_shared_options` puts those into the command's signature (``--help`` shows them) and
builds the object from what was parsed. A command's own options stay in its own signature.

:meth:`SharedOptions.settings` is the one way a command turns the options it was given into
:class:`~ampconfig.settings.resolve.Settings` (flags over the session config over defaults)."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_type_hints

import typer

from ampconfig.settings.limits import (
    DEFAULT_THRESHOLD,
    MAX_ITERATIONS,
    MAX_SEED,
    MAX_WARMUP,
    check_count,
    check_positive_finite,
)
from ampconfig.settings.modes import V1_NAMES, V2_ALIASES

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads none of the settings machinery
    from ampconfig.settings.resolve import Flags, Settings

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


_MODES = ", ".join(V1_NAMES) + "; or a v2 name: " + ", ".join(f"{n} ({m.value})" for n, m in V2_ALIASES.items())
_STREAMS = "- is standard output (the other results then go to stderr); a FIFO or /dev/null gets a stream."
#: How refusals name the HTML report.
HTML_ROLE = "HTML report (--html)"


@dataclass(frozen=True)
class SharedOptions:
    """The shared options as one command gave them. ``None`` (or empty) means "not given": the config or a default
    decides (:meth:`settings`). A field the command does not take (:data:`COMMAND_OPTIONS`) keeps its default.

    The order of the fields is the order ``--help`` lists them in; ``json_output`` and ``html`` (how the results
    are shown) come after the command's own options."""

    model: Annotated[
        Path | None, typer.Argument(help="ONNX model (default: the config's model, else the bundled example).")
    ] = None
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Session config (YAML/JSON/TOML).")] = None
    precision_mode: Annotated[
        str | None,
        typer.Option(
            "--precision-mode",
            "-m",
            metavar="MODE",
            help=f"Precision mode: {_MODES}.",
            show_default="allow_mix_precision",
        ),
    ] = None
    modify_mixlist: Annotated[
        Path | None, typer.Option("--modify-mixlist", help="modify_mixlist JSON (mixed modes only).")
    ] = None
    keep_dtype: Annotated[
        Path | None, typer.Option("--keep-dtype", help="keep_dtype file: node names kept in their dtype.")
    ] = None
    customize_dtypes: Annotated[
        Path | None,
        typer.Option(
            "--customize-dtypes",
            metavar="FILE",
            help="Ascend customize_dtypes file: per node (Name::InputDtype:...,OutputDtype:...) or op type "
            "(OpType::MatMul:InputDtype:...), the dtype of each input and output. Wins over --keep-dtype, which "
            "wins over the mode and mixlist.",
        ),
    ] = None
    op_names: Annotated[
        str | None,
        typer.Option(
            "--op-names",
            metavar="tensorflow|ascend|onnx",
            help="Whose op type names the mixlist and keep_dtype files use. Without it, ONNX names are ONNX and "
            "TensorFlow/Ascend names (Conv2D, MatMulV2, BiasAdd) are mapped to their ONNX op (docs/op-names.md); "
            "a name that means different ops in them (Max, Mean, Sum, Min, Where) then needs this flag.",
            show_default="the config's op_names, else by name",
        ),
    ] = None
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            metavar="cpu|cuda",
            help="Decision target: whose op info decides the dtypes. Needs no device (a machine without a GPU "
            "decides for cuda).",
            show_default="the config's target, else cuda",
        ),
    ] = None
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            metavar="auto|cpu|cuda",
            help="Where the models run: auto (CUDA when a session really gets it, else the CPU, said in the "
            "output), cpu, or cuda (exit 2 when CUDA cannot be used). Changes no decision.",
            show_default="the config's run.device, else auto",
        ),
    ] = None
    keep_io_types: Annotated[
        bool | None,
        typer.Option(
            "--keep-io-types/--no-keep-io-types",
            help="Keep graph input/output dtypes.",
            show_default="the config's keep_io_types, else on",
        ),
    ] = None
    input_files: Annotated[
        list[str] | None,
        typer.Option("--input", metavar="NAME=FILE.npy", help="One input from a .npy file; repeat for more."),
    ] = None
    inputs_npz: Annotated[Path | None, typer.Option("--inputs", help=".npz with one array per model input.")] = None
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            metavar="DIR|FILE",
            help="A data set instead of one batch: a folder of .npz files (one sample each), one .npz whose arrays "
            "have a leading sample axis, or a Polygraphy JSON list of feeds. Every sample is judged: it passes "
            "when every sample meets the tolerance, and the report gives each output's worst, p95 and median "
            "error.",
        ),
    ] = None
    calibration_data: Annotated[
        Path | None,
        typer.Option(
            "--calibration-data",
            metavar="DIR|FILE",
            help="A data set (as --data) for what the fp32 values decide: value ranges and tune's ranking.",
            show_default="the first 8 samples of --data, else the inputs",
        ),
    ] = None
    shapes: Annotated[
        list[str] | None,
        typer.Option("--shape", metavar="NAME=1x128", help="Shape of a generated input; repeat for more."),
    ] = None
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Seed for generated inputs (0 to 2**32-1).",
            show_default="0",
            callback=count_between(0, MAX_SEED),
        ),
    ] = None
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="OUT.onnx",
            help=f"Write the rewritten model here: atomically, never over an input. {_STREAMS}",
        ),
    ] = None
    warmup: Annotated[
        int | None,
        typer.Option(
            "--warmup", help="Untimed runs per model.", show_default="3", callback=count_between(0, MAX_WARMUP)
        ),
    ] = None
    iterations: Annotated[
        int | None,
        typer.Option(
            "--iterations", help="Timed runs per model.", show_default="20", callback=count_between(1, MAX_ITERATIONS)
        ),
    ] = None
    tolerance: Annotated[
        float | None,
        typer.Option(
            "--tolerance", help="Largest relative L2 error per output.", show_default="0.01", callback=positive_finite()
        ),
    ] = None
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold",
            help="Relative L2 error at which a node counts as bad (first bad node).",
            callback=positive_finite(),
        ),
    ] = DEFAULT_THRESHOLD
    range_check: Annotated[
        bool,
        typer.Option(
            "--range-check/--no-range-check",
            help="Run the fp32 model on the calibration inputs and keep in float32 every node whose values pass "
            "the margin in the low type: --data-max, by default half the low type's max (32752 for float16; rule "
            "range_exceeds).",
        ),
    ] = True
    data_max: Annotated[
        float | None,
        typer.Option(
            "--data-max",
            help="The range rule's margin: a node whose float values reached beyond it on the data the fp32 model "
            "ran on keeps float32 (rule range_exceeds).",
            show_default="the config's data_max, else half the low type's max (32752 for float16)",
            callback=positive_finite("32752"),
        ),
    ] = None
    ranges: Annotated[
        Path | None,
        typer.Option(
            "--ranges",
            metavar="RANGES.json",
            help="A value ranges file (ampconfig calibrate, run --ranges-out): the float32 model's values on data, "
            "read instead of running the model. Every deciding command reads it the same way.",
            show_default="the config's ranges",
        ),
    ] = None
    clamp_values: Annotated[
        bool | None,
        typer.Option(
            "--clamp-values/--no-clamp-values",
            help="Clamp constants beyond the low type's range to its largest value (a warning per tensor) instead "
            "of keeping the nodes that read them in float32 (rule value_out_of_range).",
            show_default="the config's clamp_values, else off",
        ),
    ] = None
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help=f"Also write a self-contained HTML report here (never over an input). {_STREAMS}",
        ),
    ] = None

    def flags(self) -> Flags:
        """What the command line said about the settings."""
        from ampconfig.settings.resolve import Flags

        return Flags(
            model=_path(self.model),
            config=_path(self.config),
            precision_mode=self.precision_mode,
            modify_mixlist=_path(self.modify_mixlist),
            keep_dtype=_path(self.keep_dtype),
            customize_dtypes=_path(self.customize_dtypes),
            op_names=self.op_names,
            target=self.target,
            device=self.device,
            keep_io_types=self.keep_io_types,
            output=_path(self.output),
            inputs_npz=_path(self.inputs_npz),
            input_files=tuple(self.input_files or ()),
            shapes=tuple(self.shapes or ()),
            warmup=self.warmup,
            iterations=self.iterations,
            seed=self.seed,
            tolerance=self.tolerance,
            data=_path(self.data),
            calibration_data=_path(self.calibration_data),
            clamp_values=self.clamp_values,
            data_max=self.data_max,
            ranges=_path(self.ranges),
        )

    def given(self) -> list[str]:
        """The settings flags given, by field name, in the order of the fields."""
        flags = self.flags()
        return [item.name for item in fields(flags) if getattr(flags, item.name) not in (None, ())]

    def settings(self, *, opens_model: bool = True, replaced: Mapping[str, object] | None = None) -> Settings:
        """The settings of this invocation: these flags over the session config over the defaults. ``replaced``
        gives some flags other values (``diff`` resolves its base side so). With ``opens_model``, the model must
        be an existing file (checked before any work)."""
        from ampconfig.settings.resolve import require_config_files, require_model, resolve

        changes: dict[str, Any] = dict(replaced or {})
        settings = resolve(replace(self.flags(), **changes))
        require_config_files(settings)
        if opens_model:
            require_model(settings)
        return settings


def _path(value: Path | str | None) -> Path | None:
    return None if value is None else Path(value)  # click hands some typer versions' paths over as strings


# ------------------------------------------------------------------------------------- who takes which options
@dataclass(frozen=True)
class Uses:
    """The shared options a command takes; ``defaults`` where its default differs, ``worded`` where it words an
    option its own way (typer.Option attributes: ``help``, ``show_default``)."""

    names: frozenset[str]
    defaults: Mapping[str, object] = field(default_factory=dict)
    worded: Mapping[str, Mapping[str, object]] = field(default_factory=dict)


def uses(*names: str, defaults: Mapping[str, object] | None = None, **worded: Mapping[str, object]) -> Uses:
    return Uses(frozenset(names), defaults or {}, worded)


#: The settings that decide the dtypes.
DECIDING = (
    "config",
    "precision_mode",
    "modify_mixlist",
    "keep_dtype",
    "customize_dtypes",
    "op_names",
    "target",
    "keep_io_types",
)
#: Where the models run and on what.
RUNNING = ("device", "input_files", "inputs_npz", "shapes", "seed")
#: What the fp32 values decide: ranges from a file, or from data the fp32 model runs on.
VALUES = ("data", "calibration_data", "ranges", "range_check", "data_max", "clamp_values")
#: The same for the commands that run nothing unless given data (no --range-check: data given is a range check).
DECIDING_VALUES = (
    "device",
    "input_files",
    "inputs_npz",
    "shapes",
    "seed",
    "data",
    "calibration_data",
    "ranges",
    "data_max",
    "clamp_values",
)

#: Which shared options each command takes: the one table (tests/cli/test_options.py holds every command to it).
COMMAND_OPTIONS: dict[str, Uses] = {
    "run": uses(
        "model",
        *DECIDING,
        *RUNNING,
        *VALUES,
        "output",
        "warmup",
        "iterations",
        "tolerance",
        "json_output",
    ),
    "explain": uses(
        "model",
        *DECIDING,
        *RUNNING,
        *VALUES,
        "threshold",
        "json_output",
        "html",
        defaults={"range_check": False},
    ),
    "compare": uses("model", *DECIDING, *RUNNING, *VALUES, "tolerance", "threshold", "json_output", "html"),
    "tune": uses("model", *DECIDING, *RUNNING, *VALUES, "tolerance", "json_output"),
    "rewrite": uses(
        "model",
        *DECIDING,
        *DECIDING_VALUES,
        "output",
        "json_output",
        model={"help": "Input ONNX model (default: the config's model)."},
    ),
    "lock": uses("model", *DECIDING, *DECIDING_VALUES, "json_output"),
    "diff": uses("model", *DECIDING, *DECIDING_VALUES, "json_output"),
    "calibrate": uses(
        "model", "config", "target", "precision_mode", *RUNNING, "data", "calibration_data", "json_output"
    ),
    "lists": uses("config", "precision_mode", "modify_mixlist", "op_names", "target", "json_output"),
    "validate": uses(
        "target",
        "op_names",
        target={
            "help": "Decision target whose op info op types are checked against (default: the config's target, "
            "else cuda). Needs no GPU.",
            "show_default": False,
        },
        op_names={
            "help": "Whose op type names the files use (default: the config's op_names, else each name by the table "
            "of docs/op-names.md; names that mean different ops, such as Max or Mean, then need this).",
            "show_default": False,
        },
    ),
    "schema": uses(),
}

#: How the results are shown: listed after a command's own options.
_LAST = ("json_output", "html")

F = TypeVar("F", bound=Callable[..., Any])


def with_shared_options(func: F, used: Uses) -> F:
    """``func(options: SharedOptions, *own)`` as typer sees a command: the shared options ``used`` names as
    parameters (before its own, ``--json``/``--html`` after), called with one :class:`SharedOptions`."""
    signature = inspect.signature(func, eval_str=True)
    if not used.names and "options" not in signature.parameters:
        return func  # a command that takes no shared option has no `options` parameter
    first, *own = signature.parameters.values()
    if first.name != "options":
        raise TypeError(f"{func.__qualname__}: a command's first parameter is `options: SharedOptions`")
    unknown = used.names - {item.name for item in fields(SharedOptions)}
    redeclared = used.names & {parameter.name for parameter in own}
    if unknown or redeclared:
        wrong = f"not shared options {sorted(unknown)}, shared options declared again {sorted(redeclared)}"
        raise TypeError(f"{func.__qualname__}: {wrong}")
    shared = [_parameter(item.name, item.default, used) for item in fields(SharedOptions) if item.name in used.names]
    parameters = [
        *(parameter for parameter in shared if parameter.name not in _LAST),
        *(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY) for parameter in own),
        *(parameter for parameter in shared if parameter.name in _LAST),
    ]

    @functools.wraps(func)
    def command(**given: Any) -> Any:
        options = SharedOptions(**{name: given.pop(name) for name in used.names})
        return func(options, **given)

    # typer reads a function's __signature__, which typeshed does not declare on functions.
    command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    command.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
    return command  # type: ignore[return-value]  # F as typer calls it: the signature set above


def _parameter(name: str, default: object, used: Uses) -> inspect.Parameter:
    annotation = _declarations()[name]
    worded = used.worded.get(name)
    if worded:
        declaration = copy.copy(annotation.__metadata__[0])
        for attribute, value in worded.items():
            setattr(declaration, attribute, value)
        annotation = Annotated[annotation.__origin__, declaration]
    default = used.defaults.get(name, default)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


@functools.cache
def _declarations() -> dict[str, Any]:
    """Each field's ``Annotated[type, typer.Option(...)]``."""
    return get_type_hints(SharedOptions, include_extras=True)
