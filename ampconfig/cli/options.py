"""The options the commands share, declared once: each is a type alias here (``Annotated`` with its
``typer.Option`` or ``typer.Argument``) that every command taking it uses in its own signature, and
:class:`SharedOptions` is the one typed object a command builds from them (``SharedOptions.of(locals())``, its
first line): the settings flags as one :class:`~ampconfig.settings.flags.Flags`, the type the resolver reads, and
beside it the few options only the command line reads. :data:`COMMAND_OPTIONS` says which of them each command
takes (tests/cli/test_options.py holds every command's signature to it). A command's own options stay in its own
signature, after the shared ones and before ``--json``/``--html``.

:meth:`SharedOptions.settings` is the one way a command turns the options it was given into
:class:`~ampconfig.settings.resolve.Settings` (flags over the session config over defaults)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ampconfig.files.paths import refuse_folder_spelling
from ampconfig.formats.numeric_limits import (
    DEFAULT_THRESHOLD,
    MAX_ITERATIONS,
    MAX_SEED,
    MAX_WARMUP,
    check_count,
    check_positive_finite,
)
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


_MODES = ", ".join(V1_NAMES) + "; or a v2 name: " + ", ".join(f"{n} ({m.value})" for n, m in V2_ALIASES.items())
_STREAMS = "- is standard output (the other results then go to stderr); a FIFO or /dev/null gets a stream."
#: How refusals name the HTML report.
HTML_ROLE = "HTML report (--html)"


# ------------------------------------------------------------------------- each shared option, declared once
# The order here is the order --help lists them in (each command's signature keeps it); JsonOutput and Html (how
# the results are shown) come after the command's own options.
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

#: Each shared option's declaration, by its field name (of :class:`~ampconfig.settings.flags.Flags` or of
#: :class:`SharedOptions`).
DECLARATIONS: dict[str, Any] = {
    "model": Model,
    "config": Config,
    "precision_mode": PrecisionMode,
    "modify_mixlist": ModifyMixlist,
    "keep_dtype": KeepDtype,
    "customize_dtypes": CustomizeDtypes,
    "op_names": OpNames,
    "target": Target,
    "device": Device,
    "keep_io_types": KeepIoTypes,
    "input_files": InputFiles,
    "inputs_npz": InputsNpz,
    "data": Data,
    "calibration_data": CalibrationData,
    "shapes": Shapes,
    "seed": Seed,
    "output": Output,
    "decision_metadata": DecisionMetadata,
    "load_check": LoadCheck,
    "warmup": Warmup,
    "iterations": Iterations,
    "tolerance": Tolerance,
    "threshold": Threshold,
    "range_check": RangeCheck,
    "data_max": DataMax,
    "ranges": Ranges,
    "clamp_values": ClampValues,
    "json_output": JsonOutput,
    "html": Html,
}
#: How the results are shown: after a command's own options.
RESULTS_OPTIONS = ("json_output", "html")


@dataclass(frozen=True)
class SharedOptions:
    """The shared options as one command gave them: ``flags``, what the command line says about the settings
    (:class:`~ampconfig.settings.flags.Flags`, the one type the resolver reads), and the options only the command
    line reads: when a node counts as bad, whether the fp32 values are measured, how the results are shown. A field
    the command does not take (:data:`COMMAND_OPTIONS`) keeps its default."""

    flags: Flags = field(default_factory=Flags)
    threshold: float = DEFAULT_THRESHOLD
    range_check: bool = True
    load_check: bool = True
    json_output: bool = False
    html: Path | None = None

    @classmethod
    def of(cls, parameters: Mapping[str, Any]) -> SharedOptions:
        """The shared options among a command's parameters: ``SharedOptions.of(locals())`` as its first line."""
        flags = Flags(**{name: parameters[name] for name in FLAG_NAMES if name in parameters})
        own = {name: parameters[name] for name in COMMAND_LINE_NAMES if name in parameters}
        return cls(flags, **own)

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
    """The shared options a command takes; ``defaults`` where its default differs (its signature's default),
    ``worded`` where it words an option its own way (the declaration its signature uses instead, same flags)."""

    names: frozenset[str]
    defaults: Mapping[str, object] = field(default_factory=dict)
    worded: Mapping[str, Any] = field(default_factory=dict)

    def declaration(self, name: str) -> Any:
        """The ``Annotated`` declaration the command's parameter ``name`` uses."""
        return self.worded.get(name, DECLARATIONS[name])


def uses(*names: str, defaults: Mapping[str, object] | None = None, **worded: Any) -> Uses:
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
        "decision_metadata",
        "load_check",
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
        "decision_metadata",
        "load_check",
        "json_output",
        model=RewriteModel,
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
        "json_output",
        target=ValidateTarget,
        op_names=ValidateOpNames,
    ),
    "schema": uses(),
}
