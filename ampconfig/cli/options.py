"""The options the commands share, declared once: :data:`SHARED_OPTIONS` is the one table, each entry an option's
name, its declaration (a type alias here: ``Annotated`` with its ``typer.Option`` or ``typer.Argument``, so its type,
flags, help), its default, the commands that take it, and whether giving it runs a model (as Polygraphy's argument
groups declare their options, and commands list what they take). From it come:

- each command's signature and so its ``--help`` (:func:`receiving_shared_options`: the command's function takes
  ``options: SharedOptions`` and declares only its own options, which come after the shared ones and before
  ``--json``/``--html``);
- :class:`SharedOptions`, the one typed object the command receives: the settings flags as one
  :class:`~ampconfig.settings.flags.Flags`, the type the resolver reads, and beside it the few options only the
  command line reads (``json_output`` among them, which decides the JSON envelope);
- the console script's prediction of whether a command line runs a model (:mod:`ampconfig.cli.model_runs`).

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
from ampconfig.precision_modes import V1_NAMES, V2_ALIASES
from ampconfig.settings.flags import Flags

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


_MODES = ", ".join(V1_NAMES) + "; or a v2 name: " + ", ".join(f"{n} ({m.value})" for n, m in V2_ALIASES.items())
_STREAMS = "- is standard output (the other results then go to stderr); a FIFO or /dev/null gets a stream."
#: How refusals name the HTML report.
HTML_ROLE = "HTML report (--html)"


# ---------------------------------------------------------------------- each shared option's declaration
Model = Annotated[
    Path | None, typer.Argument(help="ONNX model (default: the config's model, else the bundled example).")
]
Config = Annotated[Path | None, typer.Option("--config", "-c", help="Session config (YAML/JSON/TOML).")]
PrecisionMode = Annotated[
    str | None,
    typer.Option(
        "--precision-mode",
        "-m",
        metavar="MODE",
        help=f"Precision mode: {_MODES}.",
        show_default="allow_mix_precision",
    ),
]
ModifyMixlist = Annotated[Path | None, typer.Option("--modify-mixlist", help="modify_mixlist JSON (mixed modes only).")]
KeepDtype = Annotated[
    Path | None, typer.Option("--keep-dtype", help="keep_dtype file: node names kept in their dtype.")
]
CustomizeDtypes = Annotated[
    Path | None,
    typer.Option(
        "--customize-dtypes",
        metavar="FILE",
        help="Ascend customize_dtypes file: per node (Name::InputDtype:...,OutputDtype:...) or op type "
        "(OpType::MatMul:InputDtype:...), the dtype of each input and output. Wins over --keep-dtype, which "
        "wins over the mode and mixlist.",
    ),
]
OpNames = Annotated[
    str | None,
    typer.Option(
        "--op-names",
        metavar="tensorflow|ascend|onnx",
        help="Whose op type names the mixlist and keep_dtype files use. Without it, ONNX names are ONNX and "
        "TensorFlow/Ascend names (Conv2D, MatMulV2, BiasAdd) are mapped to their ONNX op (docs/op-names.md); "
        "a name that means different ops in them (Max, Mean, Sum, Min, Where) then needs this flag.",
        show_default="the config's op_names, else by name",
    ),
]
Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        metavar="cpu|cuda",
        help="Decision target: whose op info decides the dtypes. Needs no device (a machine without a GPU "
        "decides for cuda).",
        show_default="the config's target, else cuda",
    ),
]
Device = Annotated[
    str | None,
    typer.Option(
        "--device",
        metavar="auto|cpu|cuda",
        help="Where the models run: auto (CUDA when a session really gets it, else the CPU, said in the "
        "output), cpu, or cuda (exit 2 when CUDA cannot be used). Changes no decision.",
        show_default="the config's run.device, else auto",
    ),
]
KeepIoTypes = Annotated[
    bool | None,
    typer.Option(
        "--keep-io-types/--no-keep-io-types",
        help="Keep graph input/output dtypes.",
        show_default="the config's keep_io_types, else on",
    ),
]
InputFiles = Annotated[
    list[str] | None,
    typer.Option(
        "--input",
        metavar="NAME=FILE.npy",
        help="One input from a .npy file (a STRING input of rank 1: also a UTF-8 text file, one string a line); "
        "repeat for more.",
    ),
]
InputsNpz = Annotated[Path | None, typer.Option("--inputs", help=".npz with one array per model input.")]
Data = Annotated[
    Path | None,
    typer.Option(
        "--data",
        metavar="DIR|FILE",
        help="A data set instead of one batch: a folder of .npz files (one sample each), one .npz whose arrays "
        "have a leading sample axis, or a Polygraphy JSON list of feeds. Every sample is judged: it passes "
        "when every sample meets the tolerance, and the report gives each output's worst, p95 and median "
        "error.",
    ),
]
CalibrationData = Annotated[
    Path | None,
    typer.Option(
        "--calibration-data",
        metavar="DIR|FILE",
        help="A data set (as --data) for what the fp32 values decide: value ranges and tune's ranking.",
        show_default="the first 8 samples of --data, else the inputs",
    ),
]
Shapes = Annotated[
    list[str] | None, typer.Option("--shape", metavar="NAME=1x128", help="Shape of a generated input; repeat for more.")
]
Seed = Annotated[
    int | None,
    typer.Option(
        "--seed",
        help="Seed for generated inputs (0 to 2**32-1).",
        show_default="0",
        callback=count_between(0, MAX_SEED),
    ),
]
Output = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        metavar="OUT.onnx",
        parser=output_path("--output"),
        help=f"Write the rewritten model here: atomically, never over an input. {_STREAMS}",
    ),
]
DecisionMetadata = Annotated[
    bool | None,
    typer.Option(
        "--decision-metadata/--no-decision-metadata",
        help="Write each node's decision into the rewritten model, in the node's metadata_props (ampconfig.rule, "
        "ampconfig.cause, ampconfig.precision_mode: Netron shows them beside the node). Needs IR "
        "version 10 or later (an older model gets none, said in a note).",
        show_default="the config's decision_metadata, else on",
    ),
]
LoadCheck = Annotated[
    bool,
    typer.Option(
        "--load-check/--no-load-check",
        help="Load the written model once in ONNX Runtime, on its target's provider at the default optimisation "
        "level, before writing it: nodes whose low dtype makes ONNX Runtime crash keep their dtype (rule "
        "runtime_refuses, a warning each). A target whose provider cannot be used here (cuda without a GPU) is "
        "not checked, said in a note.",
    ),
]
Warmup = Annotated[
    int | None,
    typer.Option("--warmup", help="Untimed runs per model.", show_default="3", callback=count_between(0, MAX_WARMUP)),
]
Iterations = Annotated[
    int | None,
    typer.Option(
        "--iterations", help="Timed runs per model.", show_default="20", callback=count_between(1, MAX_ITERATIONS)
    ),
]
Tolerance = Annotated[
    float | None,
    typer.Option(
        "--tolerance", help="Largest relative L2 error per output.", show_default="0.01", callback=positive_finite()
    ),
]
Threshold = Annotated[
    float,
    typer.Option(
        "--threshold",
        help="Relative L2 error at which a node counts as bad (first bad node).",
        callback=positive_finite(),
    ),
]
RangeCheck = Annotated[
    bool,
    typer.Option(
        "--range-check/--no-range-check",
        help="Run the fp32 model on the calibration inputs and keep in float32 every node whose values pass "
        "the margin in the low type: --data-max, by default half the low type's max (32752 for float16; rule "
        "range_exceeds).",
    ),
]
DataMax = Annotated[
    float | None,
    typer.Option(
        "--data-max",
        help="The range rule's margin: a node whose float values reached beyond it on the data the fp32 model "
        "ran on keeps float32 (rule range_exceeds).",
        show_default="the config's data_max, else half the low type's max (32752 for float16)",
    ),
]
Ranges = Annotated[
    Path | None,
    typer.Option(
        "--ranges",
        metavar="RANGES.json",
        help="A value ranges file (ampconfig calibrate, run --ranges-out): the float32 model's values on data, "
        "read instead of running the model. Every deciding command reads it the same way.",
        show_default="the config's ranges",
    ),
]
ClampValues = Annotated[
    bool | None,
    typer.Option(
        "--clamp-values/--no-clamp-values",
        help="Clamp constants beyond the low type's range to its largest value (a warning per tensor) instead "
        "of keeping the nodes that read them in float32 (rule value_out_of_range).",
        show_default="the config's clamp_values, else off",
    ),
]
JsonOutput = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
Html = Annotated[
    Path | None,
    typer.Option(
        "--html",
        metavar="FILE",
        parser=output_path("--html"),
        help=f"Also write a self-contained HTML report here (never over an input). {_STREAMS}",
    ),
]

# Where a command words an option its own way: a declaration of its own, with the same flags.
RewriteModel = Annotated[Path | None, typer.Argument(help="Input ONNX model (default: the config's model).")]
ValidateTarget = Annotated[
    str | None,
    typer.Option(
        "--target",
        metavar="cpu|cuda",
        help="Decision target whose op info op types are checked against (default: the config's target, else "
        "cuda). Needs no GPU.",
        show_default=False,
    ),
]
ValidateOpNames = Annotated[
    str | None,
    typer.Option(
        "--op-names",
        metavar="tensorflow|ascend|onnx",
        help="Whose op type names the files use (default: the config's op_names, else each name by the table of "
        "docs/op-names.md; names that mean different ops, such as Max or Mean, then need this).",
        show_default=False,
    ),
]


# ------------------------------------------------------------------------------------- the one table of options
#: The commands that decide each node's dtype for a model.
DECIDING_COMMANDS = ("run", "explain", "compare", "tune", "rewrite", "lock", "diff")
#: The deciding commands that run the fp32 model for its values (unless --no-range-check).
PROVING_COMMANDS = ("run", "explain", "compare", "tune")
#: The commands that read a model and feed it (calibrate measures, and decides nothing).
MODEL_COMMANDS = (*DECIDING_COMMANDS, "calibrate")
#: Every command registered with :func:`~ampconfig.cli.typer_app.command` (the ops-info and ranges groups take
#: no shared option).
COMMANDS = (*MODEL_COMMANDS, "lists", "validate", "schema")


@dataclass(frozen=True)
class SharedOption:
    """One shared option, declared once: its field name (of :class:`~ampconfig.settings.flags.Flags`, else of
    :class:`SharedOptions`), its ``Annotated`` declaration (type, flags, help), its parameter's default, the
    commands that take it (where one words it its own way or defaults it otherwise, ``worded`` and ``defaults``
    by command), and whether giving it makes a command of :data:`~ampconfig.entry.RUN_WHEN_ASKED` run a
    model: on the command line, or through ``config_key``, the session config's key that gives it."""

    name: str
    declaration: Any
    commands: tuple[str, ...]
    default: object = None
    runs_model: bool = False
    config_key: str | None = None
    defaults: Mapping[str, object] = field(default_factory=dict)
    worded: Mapping[str, Any] = field(default_factory=dict)

    def flags(self) -> tuple[str, ...]:
        """The flags that give it (an ``--x/--no-x`` switch: ``--x``; the model argument: none)."""
        info = self.declaration.__metadata__[0]
        if not isinstance(info, typer.models.OptionInfo):
            return ()
        spellings = (info.default, *(info.param_decls or ()))  # an Annotated option's first flag is its "default"
        return tuple(spelled.split("/")[0] for spelled in spellings if isinstance(spelled, str))


#: Every shared option, in the order --help lists them (each command's signature keeps it); json_output and html
#: (:data:`RESULTS_OPTIONS`, how the results are shown) come after the command's own options.
SHARED_OPTIONS: tuple[SharedOption, ...] = (
    SharedOption("model", Model, MODEL_COMMANDS, worded={"rewrite": RewriteModel}),
    SharedOption("config", Config, (*MODEL_COMMANDS, "lists")),
    SharedOption("precision_mode", PrecisionMode, (*MODEL_COMMANDS, "lists")),
    SharedOption("modify_mixlist", ModifyMixlist, (*DECIDING_COMMANDS, "lists")),
    SharedOption("keep_dtype", KeepDtype, DECIDING_COMMANDS),
    SharedOption("customize_dtypes", CustomizeDtypes, DECIDING_COMMANDS),
    SharedOption("op_names", OpNames, (*DECIDING_COMMANDS, "lists", "validate"), worded={"validate": ValidateOpNames}),
    SharedOption("target", Target, (*MODEL_COMMANDS, "lists", "validate"), worded={"validate": ValidateTarget}),
    SharedOption("device", Device, MODEL_COMMANDS),
    SharedOption("keep_io_types", KeepIoTypes, DECIDING_COMMANDS),
    SharedOption("input_files", InputFiles, MODEL_COMMANDS, runs_model=True),
    SharedOption("inputs_npz", InputsNpz, MODEL_COMMANDS, runs_model=True, config_key="run.inputs"),
    SharedOption("data", Data, MODEL_COMMANDS, runs_model=True, config_key="run.data"),
    SharedOption(
        "calibration_data", CalibrationData, MODEL_COMMANDS, runs_model=True, config_key="run.calibration_data"
    ),
    SharedOption("shapes", Shapes, MODEL_COMMANDS, runs_model=True, config_key="run.shapes"),
    SharedOption("seed", Seed, MODEL_COMMANDS),
    SharedOption("output", Output, ("run", "rewrite")),
    SharedOption("decision_metadata", DecisionMetadata, ("run", "rewrite")),
    SharedOption("load_check", LoadCheck, ("run", "rewrite"), default=True),
    SharedOption("warmup", Warmup, ("run",)),
    SharedOption("iterations", Iterations, ("run",)),
    SharedOption("tolerance", Tolerance, ("run", "compare", "tune")),
    SharedOption("threshold", Threshold, ("explain", "compare"), default=DEFAULT_THRESHOLD),
    SharedOption(
        "range_check", RangeCheck, PROVING_COMMANDS, default=True, runs_model=True, defaults={"explain": False}
    ),
    SharedOption("data_max", DataMax, DECIDING_COMMANDS),
    SharedOption("ranges", Ranges, DECIDING_COMMANDS),
    SharedOption("clamp_values", ClampValues, DECIDING_COMMANDS),
    SharedOption("json_output", JsonOutput, (*MODEL_COMMANDS, "lists", "validate"), default=False),
    SharedOption("html", Html, ("explain", "compare")),
)
#: How the results are shown: after a command's own options.
RESULTS_OPTIONS = ("json_output", "html")


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
        flag_names = {item.name for item in fields(Flags)}
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
FLAG_NAMES = tuple(item.name for item in fields(Flags))
COMMAND_LINE_NAMES = tuple(item.name for item in fields(SharedOptions) if item.name != "flags")


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
        option = self._option(name)
        return option.worded.get(self.command, option.declaration)

    def default(self, name: str) -> object:
        """The default of the command's parameter ``name``."""
        option = self._option(name)
        return option.defaults.get(self.command, option.default)

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
    return Uses(tuple(option for option in SHARED_OPTIONS if command in option.commands), command)


#: Which shared options each command takes, as the table says (tests/cli/test_options.py holds every command to it).
COMMAND_OPTIONS: dict[str, Uses] = {command: uses(command) for command in COMMANDS}


def receiving_shared_options(command: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function(options, *, own...)`` as the command ``command`` typer registers: its signature is the shared
    options the table gives the command (their declarations and defaults, in the table's order), then the
    function's own parameters, then how the results are shown; called, it hands ``function`` those options as
    one :class:`SharedOptions`, and its own parameters by name."""
    used = uses(command)
    own = list(inspect.signature(function, eval_str=True).parameters.values())[1:]
    before, after = used.parameters()
    signature = inspect.Signature([*before, *own, *after], return_annotation=None)
    names = used.names

    @functools.wraps(function)
    def with_shared_options(**given: Any) -> Any:
        shared = {name: given.pop(name) for name in names}
        return function(SharedOptions.of(shared), **given)

    # typer reads the parameters from the signature, and the types of those without a declaration from the
    # annotations: both say what the table gives the command, not what the function's own signature says.
    with_shared_options.__signature__ = signature  # type: ignore[attr-defined]
    with_shared_options.__annotations__ = {
        parameter.name: parameter.annotation for parameter in signature.parameters.values()
    }
    return with_shared_options
