"""The session config (precision mode, target, mixlist, pins, tolerance, run options) from YAML, JSON or TOML.

.. code-block:: yaml

    precision_mode: allow_mix_precision
    target: cuda
    model: bert.onnx
    modify_mixlist: mixlist.json        # or the mixlist object inline
    keep_dtype: [OpType::Softmax]       # or the path of an Ascend keep_dtype.cfg
    tolerance: {rel_l2: 0.01}

Relative paths are resolved against the config file's folder. Loading errors carry file, line and JSON path.
The mode/mixlist pairing is checked by :func:`check_mode_accepts_mixlist` after command-line overrides are
applied, because ``--precision-mode`` may turn a config's mode into one that accepts the mixlist (or not).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from ampconfig.documents.mixlist_file import Mixlist, load_mixlist, mixlist_from_data
from ampconfig.documents.numeric_limits import MAX_ITERATIONS, MAX_SEED, MAX_WARMUP
from ampconfig.documents.parsing import (
    Document,
    DocumentFormat,
    SourceMap,
    closest,
    describe_value,
    parse_document,
    read_text,
    validation_problems,
)
from ampconfig.documents.tf_env_lists import is_tf_lists_mapping
from ampconfig.documents.tolerance import Tolerance as Tolerance
from ampconfig.errors import AmpconfigError, Problem, Severity
from ampconfig.files.paths import folder_ending, names_a_folder
from ampconfig.opinfo.targets import TargetName
from ampconfig.precision_modes import V1_NAMES, V2_ALIASES, V2_NAMES, PrecisionMode, V1Name, V2Name, parse_mode

#: Config file suffixes and their formats.
CONFIG_FORMATS: dict[str, DocumentFormat] = {
    ".yaml": "yaml",
    ".yml": "yaml",
    ".json": "json",
    ".toml": "toml",
}

MIXED_MODE_NAMES: tuple[str, ...] = tuple(mode.value for mode in PrecisionMode if mode.accepts_mixlist)


def _non_empty_path(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        raise PydanticCustomError("empty_path", "empty path", {"hint": "give a file path or leave the key out"})
    return value


UserPath = Annotated[Path, BeforeValidator(_non_empty_path)]


def _file_spelling(value: Any) -> Any:
    if isinstance(value, str) and names_a_folder(value):
        raise PydanticCustomError(
            "folder_path",
            "the path names a folder (it ends in '{ending}'), not a file",
            {"ending": folder_ending(value), "hint": "give a file name inside the folder"},
        )
    return value


#: A path ampconfig writes: checked as written, since ``Path`` drops a trailing separator (``out/`` -> ``out``).
UserOutputPath = Annotated[Path, BeforeValidator(_non_empty_path), BeforeValidator(_file_spelling)]


def _path_or_object(value: Any) -> str | None:
    """Discriminates `path | inline value` settings by the type the file holds."""
    if isinstance(value, (str, PurePath)):
        return "@path"
    if isinstance(value, (Mapping, Mixlist)):
        return "@object"
    if isinstance(value, list):
        return "@list"
    return None


MixlistSetting = Annotated[
    Annotated[UserPath, Tag("@path")] | Annotated[Mixlist, Tag("@object")],
    Discriminator(
        _path_or_object,
        custom_error_type="mixlist_setting_type",
        custom_error_message="expected the path of a mixlist JSON file or an inline mixlist object",
    ),
]
KeepDtypeSetting = Annotated[
    Annotated[UserPath, Tag("@path")] | Annotated[list[str], Tag("@list")],
    Discriminator(
        _path_or_object,
        custom_error_type="keep_dtype_setting_type",
        custom_error_message="expected the path of a keep_dtype file or a list of node names and OpType::X",
    ),
]


class RunOptions(BaseModel):
    """How `ampconfig run` feeds and times the models."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    device: Literal["auto", "cpu", "cuda"] | None = Field(
        default=None,
        description="Where run, compare, tune and explain --range-check/--compare run the models (`--device` "
        "overrides it): auto (CUDA when a session really gets it, else the CPU, said in the output), cpu, or "
        "cuda (an error where CUDA cannot be used). Absent: auto. It does not change the decisions: `target` does.",
    )
    warmup: int = Field(default=3, ge=0, le=MAX_WARMUP, strict=True, description="Untimed runs before timing starts.")
    iterations: int = Field(
        default=20, ge=1, le=MAX_ITERATIONS, strict=True, description="Timed runs; median and p90 are reported."
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED, strict=True, description="Seed of the random inputs.")
    inputs: UserPath | None = Field(
        default=None,
        description="A .npz file with one array per graph input, used instead of random inputs.",
    )
    data: UserPath | None = Field(
        default=None,
        description="A data set to run instead of one batch (`--data`): a folder of .npz files (one sample each), "
        "one .npz whose arrays have a leading sample axis, or a Polygraphy JSON list of feeds. Every sample is "
        "judged; the run passes when every sample meets the tolerance.",
    )
    calibration_data: UserPath | None = Field(
        default=None,
        description="A data set (same layouts as `data`) for what the float32 model's values decide: the value "
        "ranges and tune's ranking (`--calibration-data`). Absent: the first samples of `data`, else the inputs.",
    )
    shapes: dict[str, list[Annotated[int, Field(ge=0, strict=True)]]] = Field(
        default_factory=dict,
        description="Per graph input name, the concrete shape to feed, one int per dimension (static "
        "dimensions must match the model; 0 is an empty dimension). Needed for inputs with dynamic dimensions "
        "when `inputs` is not given.",
    )
    int_low: int | None = Field(
        default=None,
        strict=True,
        description="Lowest value (inclusive) of random integer inputs such as token ids; default 0.",
    )
    int_high: int | None = Field(
        default=None,
        strict=True,
        description="Bound (exclusive) of random integer inputs, e.g. the vocabulary size; default 100.",
    )

    @field_validator("inputs")
    @classmethod
    def _inputs_are_npz(cls, value: Path | None) -> Path | None:
        if value is not None and value.suffix.lower() != ".npz":
            raise PydanticCustomError(
                "inputs_not_npz",
                f"run.inputs must be a .npz file, got {str(value)!r}",
                {"hint": "save the arrays with numpy.savez(path, **{input_name: array})"},
            )
        return value

    @field_validator("int_high")
    @classmethod
    def _high_above_low(cls, value: int | None, info: ValidationInfo) -> int | None:
        low = info.data.get("int_low")
        if value is not None and low is not None and value <= low:
            raise PydanticCustomError(
                "int_range",
                f"int_high ({value}) must be greater than int_low ({low})",
                {"hint": "int_high is exclusive"},
            )
        return value


def _check_v1_name(value: Any) -> Any:
    if not isinstance(value, str) or value in V1_NAMES:
        return value
    if value in V2_ALIASES:
        raise PydanticCustomError(
            "v2_name_in_precision_mode",
            f"{value!r} is a precision_mode_v2 name, not a precision_mode name",
            {"hint": f"write `precision_mode_v2: {value}` or `precision_mode: {V2_ALIASES[value].value}`"},
        )
    raise PydanticCustomError(
        "unknown_precision_mode", f"unknown precision mode {value!r}", {"hint": _mode_hint(value)}
    )


def _check_v2_name(value: Any) -> Any:
    if not isinstance(value, str) or value in V2_NAMES:
        return value
    if value in V1_NAMES:
        raise PydanticCustomError(
            "v1_name_in_precision_mode_v2",
            f"{value!r} is a precision_mode name, not a precision_mode_v2 name",
            {"hint": f"write `precision_mode: {value}`; precision_mode_v2 names are " + ", ".join(V2_NAMES)},
        )
    raise PydanticCustomError(
        "unknown_precision_mode", f"unknown precision_mode_v2 {value!r}", {"hint": _mode_hint(value)}
    )


def _mode_hint(value: str) -> str:
    suggestion = closest(value, V1_NAMES + V2_NAMES)
    listing = "precision_mode: " + ", ".join(V1_NAMES) + "; precision_mode_v2: " + ", ".join(V2_NAMES)
    return (f"did you mean {suggestion!r}? " if suggestion else "") + listing


class SessionConfig(BaseModel):
    """ampconfig session config: how to reduce an ONNX model's precision and how to prove the result."""

    model_config = ConfigDict(defer_build=True, extra="forbid", title="ampconfig session config")

    schema_ref: str | None = Field(default=None, alias="$schema", description="JSON Schema of this file.")
    precision_mode: Annotated[V1Name | None, BeforeValidator(_check_v1_name)] = Field(
        default=None,
        description="Ascend precision mode. Mixed modes (allow_mix_precision, allow_mix_precision_fp16, "
        "allow_mix_precision_bf16) paint ops white/black/gray/clear and accept modify_mixlist; "
        "force_fp32, force_fp16, allow_fp32_to_fp16, must_keep_origin_dtype and allow_fp32_to_bf16 apply one "
        "rule to every op. Give this or precision_mode_v2, not both; `--precision-mode` overrides it.",
    )
    precision_mode_v2: Annotated[V2Name | None, BeforeValidator(_check_v2_name)] = Field(
        default=None,
        description="Ascend precision_mode_v2 name: fp16 (= force_fp16), origin (= must_keep_origin_dtype), "
        "cube_fp16in_fp32out (= force_fp32), mixed_float16 (= allow_mix_precision_fp16), mixed_bfloat16 "
        "(= allow_mix_precision_bf16). Give this or precision_mode, not both.",
    )
    target: TargetName | None = Field(
        default=None,
        description="Decision target: the execution provider whose op info and kernels decide the dtypes "
        "(`--target` overrides it). Absent: cuda, for every command. Deciding needs no device: a machine "
        "without a GPU decides for cuda; where models run is `run.device`.",
    )
    model: UserPath | None = Field(default=None, description="The fp32 ONNX model (a command-line path wins).")
    output: UserOutputPath | None = Field(default=None, description="Where the rewritten model is written.")
    decision_metadata: bool = Field(
        default=True,
        strict=True,
        description="Write each node's decision into the rewritten model, in the node's metadata_props "
        "(ampconfig.rule, ampconfig.cause, ampconfig.precision_mode), which Netron shows beside "
        "the node; false leaves them out (`--no-decision-metadata`). A model below IR version 10 has no node "
        "metadata and gets none.",
    )
    modify_mixlist: MixlistSetting | None = Field(
        default=None,
        description="Ascend modify_mixlist: the path of a mixlist JSON file, or the mixlist object inline. "
        "Only the mixed precision modes accept it.",
    )
    keep_dtype: KeepDtypeSetting | None = Field(
        default=None,
        description="Nodes that keep their original dtype whatever the mode or mixlist: the path of an "
        "Ascend keep_dtype.cfg file, or a list of its entries (a node name, or `OpType::Op` for every node "
        "of that op type).",
    )
    customize_dtypes: UserPath | None = Field(
        default=None,
        description="Ascend customize_dtypes file: per node (`Name::InputDtype:float16,float16,OutputDtype:float16`) "
        "or op type (`OpType::MatMul:InputDtype:...,OutputDtype:...`), the dtype of every input and output; the "
        "node computes in the dtype of its compute type. Wins over keep_dtype, which wins over the mode and "
        "mixlist (Ascend's precedence). `--customize-dtypes` overrides it.",
    )
    op_names: Literal["tensorflow", "ascend", "onnx"] | None = Field(
        default=None,
        description="Whose op type names the mixlist, keep_dtype and customize_dtypes files use (`--op-names` "
        "overrides it). Absent: ONNX names as ONNX, TensorFlow/Ascend names (Conv2D, MatMulV2, BiasAdd) through "
        "ampconfig's table (docs/op-names.md), and a name that means different ops in the two (Max, Mean, Sum, "
        "Min, Where) is an error until this says whose it is. `tensorflow`/`ascend`: such names take that "
        "vocabulary's meaning. `onnx`: every name is read as an ONNX op type.",
    )
    keep_io_types: bool = Field(
        default=True,
        strict=True,
        description="Keep graph inputs and outputs in their original dtypes; casts go inside the model.",
    )
    allow_tf32: bool = Field(
        default=False,
        strict=True,
        description="Let fp32 MatMul/Conv use TF32 tensor cores on CUDA (ONNX Runtime's own default is "
        "on). Off keeps fp32 ops exact fp32; force_fp32 always turns TF32 off.",
    )
    clamp_values: bool = Field(
        default=False,
        strict=True,
        description="Clamp constants whose finite values lie beyond the low type's range to its largest value, "
        "instead of keeping the nodes that read them in float32 (rule value_out_of_range); each clamped tensor is "
        "a warning (`--clamp-values`).",
    )
    data_max: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="The margin of the range rule (`--data-max`): a node whose float values reached beyond it on "
        "the data the float32 model ran on keeps float32 (rule range_exceeds). Absent: half the low type's "
        "largest value (32752 for float16).",
    )
    ranges: UserPath | None = Field(
        default=None,
        description="A value ranges file (`ampconfig calibrate`, `run --ranges-out`): the float32 model's value "
        "ranges on data, read by every deciding command instead of running the model (`--ranges` overrides it). "
        "A node whose values passed the margin keeps float32 (rule range_exceeds).",
    )
    tolerance: Tolerance = Field(default_factory=Tolerance, description="Accuracy the result must hold.")
    run: RunOptions = Field(default_factory=RunOptions, description="Inputs and timing of `ampconfig run`.")

    _source: SourceMap = PrivateAttr(default_factory=SourceMap)

    @field_validator("precision_mode_v2")
    @classmethod
    def _not_both_modes(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("precision_mode") is not None:
            raise PydanticCustomError(
                "both_precision_modes",
                "precision_mode and precision_mode_v2 are both given",
                {"hint": "keep one of them"},
            )
        return value

    @property
    def source(self) -> SourceMap:
        """Where the config was read from (file and key lines); empty for configs built in code."""
        return self._source

    @property
    def source_file(self) -> str | None:
        return self._source.file

    @property
    def has_mixlist(self) -> bool:
        return self.modify_mixlist is not None

    def resolved_mode(self, override: str | PrecisionMode | None = None) -> PrecisionMode:
        """The mode to use: the command-line override, else precision_mode, else precision_mode_v2."""
        if override is not None:
            return parse_mode(override)
        if self.precision_mode is not None:
            return PrecisionMode(self.precision_mode)
        if self.precision_mode_v2 is not None:
            return V2_ALIASES[self.precision_mode_v2]
        raise AmpconfigError(
            "no precision mode: the config sets neither precision_mode nor precision_mode_v2, and none was "
            "given on the command line",
            file=self.source_file,
            hint="add `precision_mode: allow_mix_precision` (or another mode) or pass --precision-mode",
        )

    def mixlist(self) -> Mixlist | None:
        """The mixlist, read from its file when the config names one."""
        if isinstance(self.modify_mixlist, Path):
            return load_mixlist(self.modify_mixlist)
        return self.modify_mixlist

    def resolved_against(self, folder: Path) -> SessionConfig:
        """A copy with relative paths made relative to ``folder`` (the config file's folder)."""

        def resolve(path: Any) -> Any:
            if not isinstance(path, Path):
                return path
            path = path.expanduser()
            return path if path.is_absolute() else folder / path

        run_paths = ("inputs", "data", "calibration_data")
        run = self.run.model_copy(update={name: resolve(getattr(self.run, name)) for name in run_paths})
        names = ("model", "output", "modify_mixlist", "keep_dtype", "customize_dtypes", "ranges")
        updates = {name: resolve(getattr(self, name)) for name in names}
        copy = self.model_copy(update={**updates, "run": run})
        copy._source = self._source
        return copy


# -------------------------------------------------------------------------------------------- mode + mixlist
def mode_mixlist_problem(
    mode: PrecisionMode,
    has_mixlist: bool,
    source: str | None = None,
    line: int | None = None,
    json_path: str | None = None,
) -> Problem | None:
    """The finding for a mixlist given with a mode that does not accept one (docs/design.md §4), or None."""
    if not has_mixlist or mode.accepts_mixlist:
        return None
    return Problem(
        f"precision mode {mode.value!r} does not accept a modify_mixlist; only the mixed modes do ("
        + ", ".join(MIXED_MODE_NAMES)
        + ")",
        file=source,
        line=line,
        json_path=json_path,
        hint="remove modify_mixlist, or choose a mixed mode such as allow_mix_precision",
    )


def check_mode_accepts_mixlist(mode: PrecisionMode, has_mixlist: bool, source: str | None = None) -> None:
    """Raise AmpconfigError when a mixlist comes with a mode that does not accept one."""
    problem = mode_mixlist_problem(mode, has_mixlist, source)
    if problem is not None:
        raise AmpconfigError(problem.message, file=source, hint=problem.hint)


# --------------------------------------------------------------------------------------------------- loading
def config_format(path: Path) -> DocumentFormat:
    fmt = CONFIG_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise AmpconfigError(
            f"unsupported config file type {path.suffix or '(no suffix)'!r}",
            file=str(path),
            hint="a session config is .yaml, .yml, .json or .toml",
        )
    return fmt


def session_config_from_document(
    document: Document, base_dir: Path | None = None
) -> tuple[SessionConfig | None, list[Problem]]:
    """Validate parsed data as a session config: the config, or None and every finding."""
    origin = document.source
    if not isinstance(document.data, Mapping):
        problem = origin.problem(
            f"a session config is a mapping of keys to values, got {describe_value(document.data)}"
        )
        return None, [*document.problems, problem]
    data, tf_problems = _tf_lists_read(document.data, origin)
    if data is None:
        return None, [*document.problems, *tf_problems]
    try:
        config = SessionConfig.model_validate(data)
    except ValidationError as exc:
        return None, [*document.problems, *validation_problems(exc, origin, SessionConfig)]
    if any(problem.severity is Severity.ERROR for problem in document.problems):
        return None, list(document.problems)
    if base_dir is not None:
        config = config.resolved_against(base_dir)
    config._source = origin
    if isinstance(config.modify_mixlist, Mixlist) and config.modify_mixlist.op_names is None:
        config.modify_mixlist.located(origin.nested(("modify_mixlist",)))
    return config, list(document.problems)


def _tf_lists_read(data: Mapping[str, Any], origin: SourceMap) -> tuple[Mapping[str, Any] | None, list[Problem]]:
    """The config's data with an inline ``modify_mixlist`` of TensorFlow's list variables read as the mixlist it
    means (located at its lines); None and the errors when they cannot be read."""
    inline = data.get("modify_mixlist")
    if not is_tf_lists_mapping(inline):
        return data, []
    mixlist, problems = mixlist_from_data(inline, origin.nested(("modify_mixlist",)))
    if mixlist is None:
        return None, problems
    return {**data, "modify_mixlist": mixlist}, problems


def session_config_from_data(
    data: Mapping[str, Any], base_dir: Path | None = None, source: str | None = None
) -> SessionConfig:
    """A config from a dict (the Python API); invalid data raises AmpconfigError with every finding."""
    document = Document(data, SourceMap(source))
    config, problems = session_config_from_document(document, base_dir)
    if config is None:
        raise AmpconfigError(problems[0].message, file=source, problems=problems)
    return config


def load_session_config(path: str | Path) -> SessionConfig:
    """Read a .yaml/.yml, .json or .toml session config; relative paths in it resolve against its folder."""
    path = Path(path)
    fmt = config_format(path)
    document = parse_document(read_text(path, "config file"), str(path), fmt)
    config, problems = session_config_from_document(document, path.parent)
    if config is None:
        errors = [problem for problem in problems if problem.severity is Severity.ERROR]
        raise AmpconfigError(errors[0].message, file=str(path), line=errors[0].line, problems=errors)
    return config


__all__ = [
    "CONFIG_FORMATS",
    "RunOptions",
    "SessionConfig",
    "Tolerance",
    "check_mode_accepts_mixlist",
    "config_format",
    "load_session_config",
    "mode_mixlist_problem",
    "session_config_from_data",
    "session_config_from_document",
]
