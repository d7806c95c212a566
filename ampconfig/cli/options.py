"""Options shared by the commands, and :func:`resolved_settings`, the one way a command turns the options it was
given into :class:`~ampconfig.settings.resolve.Settings` (flags over the session config over defaults)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ampconfig.settings.modes import V1_NAMES, V2_ALIASES
from ampconfig.settings.values import MAX_SEED, check_count, check_positive_finite

if TYPE_CHECKING:
    from ampconfig.settings.resolve import Settings

FloatCheck = Callable[[typer.Context, typer.CallbackParam, "float | None"], "float | None"]
IntCheck = Callable[[typer.Context, typer.CallbackParam, "int | None"], "int | None"]


def _flag(param: typer.CallbackParam) -> str:
    return param.opts[0] if param.opts else f"--{param.name}"


def positive_finite(example: str = "1e-2") -> FloatCheck:
    """An option callback refusing NaN, infinities, 0 and negative numbers, naming the flag."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> float | None:
        return value if value is None else check_positive_finite(value, _flag(param), example)

    return check


def count_between(low: int, high: int) -> IntCheck:
    """An option callback refusing integers outside ``[low, high]``, naming the flag."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: int | None) -> int | None:
        return value if value is None else check_count(value, _flag(param), low, high)

    return check


ModelArg = Annotated[
    Path | None, typer.Argument(help="ONNX model (default: the config's model, else the bundled example).")
]
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="Session config (YAML/JSON/TOML).")]
ModeOpt = Annotated[
    str | None,
    typer.Option(
        "--precision-mode",
        "-m",
        metavar="MODE",
        help="Precision mode: "
        + ", ".join(V1_NAMES)
        + "; or a v2 name: "
        + ", ".join(f"{name} ({mode.value})" for name, mode in V2_ALIASES.items())
        + ".",
        show_default="allow_mix_precision",
    ),
]
MixlistOpt = Annotated[Path | None, typer.Option("--modify-mixlist", help="modify_mixlist JSON (mixed modes only).")]
KeepDtypeOpt = Annotated[
    Path | None, typer.Option("--keep-dtype", help="keep_dtype file: node names kept in their dtype.")
]
CustomizeDtypesOpt = Annotated[
    Path | None,
    typer.Option(
        "--customize-dtypes",
        metavar="FILE",
        help="Ascend customize_dtypes file: per node (Name::InputDtype:float16,float16,OutputDtype:float16) or op "
        "type (OpType::MatMul:InputDtype:...,OutputDtype:...), the dtype of each input and output. Wins over "
        "--keep-dtype, which wins over the mode and mixlist.",
    ),
]
OpNamesOpt = Annotated[
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
TargetOpt = Annotated[
    str | None,
    typer.Option(
        "--target",
        metavar="cpu|cuda",
        help="Decision target: whose op info decides the dtypes. Needs no device (a machine without a GPU "
        "decides for cuda).",
        show_default="the config's target, else cuda",
    ),
]
DeviceOpt = Annotated[
    str | None,
    typer.Option(
        "--device",
        metavar="auto|cpu|cuda",
        help="Where the models run: auto (CUDA when a session really gets it, else the CPU, said in the output), "
        "cpu, or cuda (exit 2 when CUDA cannot be used). Changes no decision.",
        show_default="the config's run.device, else auto",
    ),
]
KeepIoTypesOpt = Annotated[
    bool | None,
    typer.Option(
        "--keep-io-types/--no-keep-io-types",
        help="Keep graph input/output dtypes.",
        show_default="the config's keep_io_types, else on",
    ),
]
InputsOpt = Annotated[Path | None, typer.Option("--inputs", help=".npz with one array per model input.")]
InputFilesOpt = Annotated[
    list[str] | None,
    typer.Option("--input", metavar="NAME=FILE.npy", help="One input from a .npy file; repeat for more."),
]
DataOpt = Annotated[
    Path | None,
    typer.Option(
        "--data",
        metavar="DIR|FILE",
        help="A data set instead of one batch: a folder of .npz files (one sample each), one .npz whose arrays "
        "have a leading sample axis, or a Polygraphy JSON list of feeds. Every sample is judged: it passes when "
        "every sample meets the tolerance, and the report gives each output's worst, p95 and median error.",
    ),
]
CalibrationDataOpt = Annotated[
    Path | None,
    typer.Option(
        "--calibration-data",
        metavar="DIR|FILE",
        help="A data set (as --data) for what the fp32 values decide: value ranges and tune's ranking.",
        show_default="the first 8 samples of --data, else the inputs",
    ),
]
ShapesOpt = Annotated[
    list[str] | None,
    typer.Option("--shape", metavar="NAME=1x128", help="Shape of a generated input; repeat for more."),
]
SeedOpt = Annotated[
    int | None,
    typer.Option(
        "--seed",
        help="Seed for generated inputs (0 to 2**32-1).",
        show_default="0",
        callback=count_between(0, MAX_SEED),
    ),
]
DataMaxOpt = Annotated[
    float | None,
    typer.Option(
        "--data-max",
        help="The range rule's margin: a node whose float values reached beyond it on the data the fp32 model ran "
        "on keeps float32 (rule range_exceeds).",
        show_default="the config's data_max, else half the low type's max (32752 for float16)",
        callback=positive_finite("32752"),
    ),
]
ClampValuesOpt = Annotated[
    bool | None,
    typer.Option(
        "--clamp-values/--no-clamp-values",
        help="Clamp constants beyond the low type's range to its largest value (a warning per tensor) instead of "
        "keeping the nodes that read them in float32 (rule value_out_of_range).",
        show_default="the config's clamp_values, else off",
    ),
]
RangeCheckOpt = Annotated[
    bool,
    typer.Option(
        "--range-check/--no-range-check",
        help="Run the fp32 model on the calibration inputs and keep in float32 every node whose values pass the "
        "margin in the low type: --data-max, by default half the low type's max (32752 for float16; rule "
        "range_exceeds).",
    ),
]
ThresholdOpt = Annotated[
    float,
    typer.Option(
        "--threshold",
        help="Relative L2 error at which a node counts as bad (first bad node).",
        callback=positive_finite(),
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
HTML_ROLE = "HTML report (--html)"
HtmlOpt = Annotated[
    Path | None,
    typer.Option(
        "--html",
        metavar="FILE",
        help="Also write a self-contained HTML report here (never over an input). - is standard output (the other "
        "results then go to stderr); a FIFO or /dev/null gets a stream.",
    ),
]
ModelOutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        metavar="OUT.onnx",
        help="Write the rewritten model here: atomically, never over an input. - is standard output (the other "
        "results then go to stderr); a FIFO or /dev/null gets a stream.",
    ),
]
ToleranceOpt = Annotated[
    float | None,
    typer.Option(
        "--tolerance", help="Largest relative L2 error per output.", show_default="0.01", callback=positive_finite()
    ),
]


def resolved_settings(ctx: typer.Context, *, opens_model: bool = True, **replaced: Any) -> Settings:
    """The settings of this invocation: the shared options it was given (its parsed parameters whose names are
    :class:`~ampconfig.settings.resolve.Flags` fields) over the session config over the defaults. ``replaced``
    gives some flags other values (``diff`` resolves its base side so). With ``opens_model``, the model must be
    an existing file (checked before any work)."""
    from ampconfig.settings.resolve import Flags, require_model, resolve

    settings = resolve(replace(Flags.from_params(ctx.params), **replaced))
    if opens_model:
        require_model(settings)
    return settings
