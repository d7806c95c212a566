"""What the command line (or an API caller standing in for it) says about the settings: the options the commands
share, declared once, and what a command was given of them, one frozen :class:`Flags`.

:data:`SHARED_OPTIONS` holds one :class:`SharedOption` per option (its name, how the command line spells it, its
type, default, help, the commands that take it, whether giving it runs a model, and the session config's key that
gives it), as Polygraphy's argument groups declare their options and commands list what they take. Everything else
reads it:

- :class:`Flags`, whose fields are the table's settings options (checked at import);
- the resolver (:mod:`ampconfig.settings.resolve`), which names each setting a flag gave by its spelling here;
- the command line (:mod:`ampconfig.cli.options`), which adds to each entry only what typer checks or parses of its
  value, and builds each command's signature, ``--help`` and JSON envelope from the entries;
- the console script's prediction of whether a command line runs a model (:mod:`ampconfig.cli.model_runs`).

:class:`Flags` is the one options type from the command line to the resolver: each command builds it from the
shared options it was given (:meth:`ampconfig.cli.options.SharedOptions.of`),
:func:`ampconfig.settings.resolve.resolve` merges it over the session config, and the API (``calibrate_model``),
``validate`` and a lock (``lock check``) build one the same way. Only the standard library and two leaf modules
(the precision modes' names, the numeric limits) are imported here: ``ampconfig --help`` builds the command line
from it without loading the settings machinery.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType

from ampconfig.documents.numeric_limits import DEFAULT_THRESHOLD
from ampconfig.precision_modes import V1_NAMES, V2_ALIASES


@dataclass(frozen=True)
class Wording:
    """How one command words an option its own way (same flags): its help, and the default its help shows
    (``None``: typer's own; ``False``: none)."""

    help: str
    shown_default: str | bool | None = None


@dataclass(frozen=True)
class SharedOption:
    """One shared option, declared once.

    ``name`` is its field (of :class:`~ampconfig.settings.flags.Flags` when ``setting``, else of the command line's
    :class:`~ampconfig.cli.options.SharedOptions`). ``spellings`` are its flags as declared (``--x/--no-x`` for a
    switch; none: the model argument); ``value_type`` the type of one value (a list of them where ``repeated``),
    ``default`` what the command's parameter defaults to (``defaults``: where a command defaults it otherwise),
    ``help`` and ``shown_default`` what ``--help`` says (``worded``: where a command words it its own way). It is
    taken by ``commands``; ``runs_model`` says whether giving it makes a command of
    :data:`~ampconfig.entry.RUN_WHEN_ASKED` run a model: on the command line, or through ``config_key``, the
    session config's key that gives it. ``said_as`` is how the resolver names it where not by its first spelling."""

    name: str
    spellings: tuple[str, ...]
    value_type: type
    help: str
    commands: tuple[str, ...]
    default: object = None
    repeated: bool = False
    setting: bool = True
    runs_model: bool = False
    config_key: str | None = None
    metavar: str | None = None
    shown_default: str | bool | None = None
    said_as: str | None = None
    defaults: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    worded: Mapping[str, Wording] = field(default_factory=lambda: MappingProxyType({}))

    def flags(self) -> tuple[str, ...]:
        """The flags that give it (an ``--x/--no-x`` switch: ``--x``; the model argument: none)."""
        return tuple(spelled.split("/")[0] for spelled in self.spellings)

    @property
    def spelled(self) -> str:
        """How messages name it: ``said_as``, else its first spelling as declared (``--keep-io-types/--no-keep-io-
        types``), else (the model argument) its name in capitals."""
        return self.said_as or (self.spellings[0] if self.spellings else self.name.upper())

    def help_for(self, command: str) -> Wording:
        """What ``command``'s ``--help`` says of it."""
        return self.worded.get(command, Wording(self.help, self.shown_default))

    def default_for(self, command: str) -> object:
        """The default of ``command``'s parameter."""
        return self.defaults.get(command, self.default)


# ------------------------------------------------------------------------------------------------- the commands
#: The commands that decide each node's dtype for a model.
DECIDING_COMMANDS = ("run", "explain", "compare", "tune", "rewrite", "lock", "diff")
#: The deciding commands that run the fp32 model for its values (unless --no-range-check).
PROVING_COMMANDS = ("run", "explain", "compare", "tune")
#: The commands that read a model and feed it (calibrate measures, and decides nothing).
MODEL_COMMANDS = (*DECIDING_COMMANDS, "calibrate")
#: Every command that takes shared options (the ops-info and ranges groups take none), and schema.
COMMANDS = (*MODEL_COMMANDS, "lists", "validate", "schema")

_MODES = ", ".join(V1_NAMES) + "; or a v2 name: " + ", ".join(f"{n} ({m.value})" for n, m in V2_ALIASES.items())
_STREAMS = "- is standard output (the other results then go to stderr); a FIFO or /dev/null gets a stream."
_OP_NAMES = "tensorflow|ascend|onnx"


def _in_validate(help: str) -> Mapping[str, Wording]:
    """validate's own wording of an option: its help says the default, so none is shown after it."""
    return MappingProxyType({"validate": Wording(help, False)})


_TARGETS = "cpu|cuda"

# ------------------------------------------------------------------------------------- the one table of options
#: Every shared option, in the order --help lists them (each command's signature keeps it); json_output and html
#: (:data:`RESULTS_OPTIONS`, how the results are shown) come after the command's own options.
SHARED_OPTIONS: tuple[SharedOption, ...] = (
    SharedOption(
        "model",
        (),
        Path,
        "ONNX model (default: the config's model, else the bundled example).",
        MODEL_COMMANDS,
        worded={"rewrite": Wording("Input ONNX model (default: the config's model).")},
    ),
    SharedOption("config", ("--config", "-c"), Path, "Session config (YAML/JSON/TOML).", (*MODEL_COMMANDS, "lists")),
    SharedOption(
        "precision_mode",
        ("--precision-mode", "-m"),
        str,
        f"Precision mode: {_MODES}.",
        (*MODEL_COMMANDS, "lists"),
        metavar="MODE",
        shown_default="allow_mix_precision",
    ),
    SharedOption(
        "modify_mixlist",
        ("--modify-mixlist",),
        Path,
        "modify_mixlist JSON (mixed modes only).",
        (*DECIDING_COMMANDS, "lists"),
    ),
    SharedOption(
        "keep_dtype", ("--keep-dtype",), Path, "keep_dtype file: node names kept in their dtype.", DECIDING_COMMANDS
    ),
    SharedOption(
        "customize_dtypes",
        ("--customize-dtypes",),
        Path,
        "Ascend customize_dtypes file: per node (Name::InputDtype:...,OutputDtype:...) or op type "
        "(OpType::MatMul:InputDtype:...), the dtype of each input and output. Wins over --keep-dtype, which "
        "wins over the mode and mixlist.",
        DECIDING_COMMANDS,
        metavar="FILE",
    ),
    SharedOption(
        "op_names",
        ("--op-names",),
        str,
        "Whose op type names the mixlist and keep_dtype files use. Without it, ONNX names are ONNX and "
        "TensorFlow/Ascend names (Conv2D, MatMulV2, BiasAdd) are mapped to their ONNX op (docs/op-names.md); "
        "a name that means different ops in them (Max, Mean, Sum, Min, Where) then needs this flag.",
        (*DECIDING_COMMANDS, "lists", "validate"),
        metavar=_OP_NAMES,
        shown_default="the config's op_names, else by name",
        worded=_in_validate(
            "Whose op type names the files use (default: the config's op_names, else each name by the table of "
            "docs/op-names.md; names that mean different ops, such as Max or Mean, then need this)."
        ),
    ),
    SharedOption(
        "target",
        ("--target",),
        str,
        "Decision target: whose op info decides the dtypes. Needs no device (a machine without a GPU decides for "
        "cuda).",
        (*MODEL_COMMANDS, "lists", "validate"),
        metavar=_TARGETS,
        shown_default="the config's target, else cuda",
        worded=_in_validate(
            "Decision target whose op info op types are checked against (default: the config's target, else cuda). "
            "Needs no GPU."
        ),
    ),
    SharedOption(
        "device",
        ("--device",),
        str,
        "Where the models run: auto (CUDA when a session really gets it, else the CPU, said in the output), cpu, "
        "or cuda (exit 2 when CUDA cannot be used). Changes no decision.",
        MODEL_COMMANDS,
        metavar="auto|cpu|cuda",
        shown_default="the config's run.device, else auto",
    ),
    SharedOption(
        "keep_io_types",
        ("--keep-io-types/--no-keep-io-types",),
        bool,
        "Keep graph input/output dtypes.",
        DECIDING_COMMANDS,
        shown_default="the config's keep_io_types, else on",
    ),
    SharedOption(
        "input_files",
        ("--input",),
        str,
        "One input from a .npy file (a STRING input of rank 1: also a UTF-8 text file, one string a line); "
        "repeat for more.",
        MODEL_COMMANDS,
        repeated=True,
        metavar="NAME=FILE.npy",
        runs_model=True,
    ),
    SharedOption(
        "inputs_npz",
        ("--inputs",),
        Path,
        ".npz with one array per model input.",
        MODEL_COMMANDS,
        config_key="run.inputs",
        runs_model=True,
    ),
    SharedOption(
        "data",
        ("--data",),
        Path,
        "A data set instead of one batch: a folder of .npz files (one sample each), one .npz whose arrays have a "
        "leading sample axis, or a Polygraphy JSON list of feeds. Every sample is judged: it passes when every "
        "sample meets the tolerance, and the report gives each output's worst, p95 and median error.",
        MODEL_COMMANDS,
        config_key="run.data",
        metavar="DIR|FILE",
        runs_model=True,
    ),
    SharedOption(
        "calibration_data",
        ("--calibration-data",),
        Path,
        "A data set (as --data) for what the fp32 values decide: value ranges and tune's ranking.",
        MODEL_COMMANDS,
        config_key="run.calibration_data",
        metavar="DIR|FILE",
        shown_default="the first 8 samples of --data, else the inputs",
        runs_model=True,
    ),
    SharedOption(
        "shapes",
        ("--shape",),
        str,
        "Shape of a generated input; repeat for more.",
        MODEL_COMMANDS,
        repeated=True,
        config_key="run.shapes",
        metavar="NAME=1x128",
        runs_model=True,
    ),
    SharedOption(
        "seed", ("--seed",), int, "Seed for generated inputs (0 to 2**32-1).", MODEL_COMMANDS, shown_default="0"
    ),
    SharedOption(
        "output",
        ("--output", "-o"),
        Path,
        f"Write the rewritten model here: atomically, never over an input. {_STREAMS}",
        ("run", "rewrite"),
        metavar="OUT.onnx",
    ),
    SharedOption(
        "decision_metadata",
        ("--decision-metadata/--no-decision-metadata",),
        bool,
        "Write each node's decision into the rewritten model, in the node's metadata_props (ampconfig.rule, "
        "ampconfig.cause, ampconfig.precision_mode: Netron shows them beside the node). Needs IR version 10 or "
        "later (an older model gets none, said in a note).",
        ("run", "rewrite"),
        shown_default="the config's decision_metadata, else on",
    ),
    SharedOption(
        "load_check",
        ("--load-check/--no-load-check",),
        bool,
        "Load the written model once in ONNX Runtime, on its target's provider at the default optimisation "
        "level, before writing it: nodes whose low dtype makes ONNX Runtime crash keep their dtype (rule "
        "runtime_refuses, a warning each). A target whose provider cannot be used here (cuda without a GPU) is "
        "not checked, said in a note.",
        ("run", "rewrite"),
        default=True,
        setting=False,
    ),
    SharedOption("warmup", ("--warmup",), int, "Untimed runs per model.", ("run",), shown_default="3"),
    SharedOption("iterations", ("--iterations",), int, "Timed runs per model.", ("run",), shown_default="20"),
    SharedOption(
        "tolerance",
        ("--tolerance",),
        float,
        "Largest relative L2 error per output.",
        ("run", "compare", "tune"),
        shown_default="0.01",
    ),
    SharedOption(
        "threshold",
        ("--threshold",),
        float,
        "Relative L2 error at which a node counts as bad (first bad node).",
        ("explain", "compare"),
        default=DEFAULT_THRESHOLD,
        setting=False,
    ),
    SharedOption(
        "range_check",
        ("--range-check/--no-range-check",),
        bool,
        "Run the fp32 model on the calibration inputs and keep in float32 every node whose values pass the "
        "margin in the low type: --data-max, by default half the low type's max (32752 for float16; rule "
        "range_exceeds).",
        PROVING_COMMANDS,
        default=True,
        setting=False,
        defaults=MappingProxyType({"explain": False}),
        runs_model=True,
    ),
    SharedOption(
        "data_max",
        ("--data-max",),
        float,
        "The range rule's margin: a node whose float values reached beyond it on the data the fp32 model ran on "
        "keeps float32 (rule range_exceeds).",
        DECIDING_COMMANDS,
        shown_default="the config's data_max, else half the low type's max (32752 for float16)",
    ),
    SharedOption(
        "ranges",
        ("--ranges",),
        Path,
        "A value ranges file (ampconfig calibrate, run --ranges-out): the float32 model's values on data, read "
        "instead of running the model. Every deciding command reads it the same way.",
        DECIDING_COMMANDS,
        metavar="RANGES.json",
        shown_default="the config's ranges",
    ),
    SharedOption(
        "clamp_values",
        ("--clamp-values/--no-clamp-values",),
        bool,
        "Clamp constants beyond the low type's range to its largest value (a warning per tensor) instead of "
        "keeping the nodes that read them in float32 (rule value_out_of_range).",
        DECIDING_COMMANDS,
        shown_default="the config's clamp_values, else off",
        said_as="--clamp-values",
    ),
    SharedOption(
        "json_output",
        ("--json",),
        bool,
        "Print one JSON object on stdout.",
        (*MODEL_COMMANDS, "lists", "validate"),
        default=False,
        setting=False,
    ),
    SharedOption(
        "html",
        ("--html",),
        Path,
        f"Also write a self-contained HTML report here (never over an input). {_STREAMS}",
        ("explain", "compare"),
        setting=False,
        metavar="FILE",
    ),
)
#: How the results are shown: after a command's own options.
RESULTS_OPTIONS = ("json_output", "html")


def shared_option(name: str) -> SharedOption:
    """The entry of the option ``name`` (read from the table as it is now: a test may add one)."""
    found = next((option for option in SHARED_OPTIONS if option.name == name), None)
    if found is None:
        raise KeyError(f"no shared option {name!r} in the table")
    return found


def spelled(name: str) -> str:
    """How messages name the option ``name`` (:attr:`SharedOption.spelled`)."""
    return shared_option(name).spelled


# ----------------------------------------------------------------------------- what the command line gave
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


#: The settings options of the table: Flags' fields, one each (checked below, at import).
_SETTINGS = tuple(option for option in SHARED_OPTIONS if option.setting)
#: The fields that name files or folders.
_PATHS = tuple(option.name for option in _SETTINGS if option.value_type is Path)
#: The flags given once per value (``--input a=x.npy --input b=y.npy``).
_REPEATED = tuple(option.name for option in _SETTINGS if option.repeated)


def _field_type(option: SharedOption) -> str:
    """The annotation of the field of Flags that holds ``option``: a tuple of values for a repeated flag, else
    one value or ``None``."""
    name = option.value_type.__name__
    return f"tuple[{name}, ...]" if option.repeated else f"{name} | None"


def _check_fields() -> None:
    """Flags holds each settings option of the table, with its type, and nothing else (in the order ``given``
    reports them): an option added to the table without its field, or a field without its option, fails at
    import, not in a test."""
    declared = sorted((item.name, str(item.type)) for item in fields(Flags))
    tabled = sorted((option.name, _field_type(option)) for option in _SETTINGS)
    if declared != tabled:
        raise TypeError(f"Flags' fields {declared} are not the option table's settings options {tabled}")


_check_fields()


def _texts(values: Iterable[str] | None) -> tuple[str, ...]:
    return tuple(values or ())
