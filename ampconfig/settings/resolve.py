"""The one settings resolver: what every command uses, from the command line over the session config over defaults.

:func:`resolve` turns the command line's :class:`Flags` and the session config into one frozen :class:`Settings`.
Every command goes through it (run, rewrite, explain, compare, tune, lists, and validate for a config), so the
same config gives the same settings whatever the command. It is pure: it reads the config file through
:func:`~ampconfig.documents.session_config.load_session_config` and nothing else (no model, no ONNX Runtime).

Two settings are easily confused and are kept apart:

- the **target** (``--target``, config ``target``): whose op info decides the dtypes (``cpu`` or ``cuda``).
  Deciding needs no device; the default is :data:`DEFAULT_TARGET` for every command, because ampconfig exists to
  run models in mixed precision on GPUs, and a CI machine without a GPU validates configs for that deployment.
- the **device** (``--device``, config ``run.device``): where the commands that run models (run, compare, tune,
  explain --range-check/--compare) run them: ``auto`` (CUDA when a session really gets it, else the CPU),
  ``cpu`` or ``cuda``. It is chosen by :func:`ampconfig.runner.sessions.choose_device` only when something runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeGuard

from ampconfig.decide.chosen_lists import ChosenMixlist, read_mixlist
from ampconfig.decide.rewrite_options import RewriteOptions
from ampconfig.decide.value_limits import check_margin
from ampconfig.documents.numeric_limits import MAX_ITERATIONS, MAX_WARMUP, check_count, check_positive_finite
from ampconfig.documents.tolerance import Tolerance
from ampconfig.errors import AmpconfigError, Problem
from ampconfig.examples import DEFAULT_EXAMPLE, example_path
from ampconfig.files.paths import UNNAMEABLE, path_kind, require_file
from ampconfig.opinfo.library import DEFAULT_TARGET, TARGETS
from ampconfig.opinfo.op_names import OP_NAME_CHOICES
from ampconfig.opinfo.targets import AUTO_DEVICE as AUTO_DEVICE  # re-exported: the default device of every command
from ampconfig.opinfo.targets import DEVICES
from ampconfig.precision_modes import PrecisionMode, parse_mode
from ampconfig.settings.flags import Flags as Flags  # the resolver's input, read where the settings are
from ampconfig.settings.flags import spelled
from ampconfig.settings.input_options import parse_input_options

if TYPE_CHECKING:  # the session config's formats: imported where a config, a mixlist or a customize file is given
    from ampconfig.documents.mixlist_file import Mixlist
    from ampconfig.documents.session_config import SessionConfig

log = logging.getLogger(__name__)

#: The mode every command uses when neither ``--precision-mode`` nor the config names one.
DEFAULT_MODE = PrecisionMode.ALLOW_MIX_PRECISION
DEFAULT_WARMUP = 3
DEFAULT_ITERATIONS = 20
DEFAULT_SEED = 0

#: Where a setting came from when nothing set it.
DEFAULT_SOURCE = "default"


@dataclass(frozen=True)
class InputRequest:
    """How to get the inputs of a run, unparsed by nothing but the resolver: ``.npz``/``.npy`` files, shapes of
    generated inputs, the seed and integer range (:func:`ampconfig.prove.request.one_batch` reads them), or data
    sets of several samples (:mod:`ampconfig.inputs.datasets`)."""

    npz: Path | None = None
    data: Path | None = None
    calibration_data: Path | None = None
    arrays: Mapping[str, Path] = field(default_factory=lambda: MappingProxyType({}))
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: MappingProxyType({}))
    seed: int = DEFAULT_SEED
    int_low: int | None = None
    int_high: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "npz": _text(self.npz),
            "data": _text(self.data),
            "calibration_data": _text(self.calibration_data),
            "arrays": {name: str(path) for name, path in self.arrays.items()},
            "shapes": {name: list(dims) for name, dims in self.shapes.items()},
            "seed": self.seed,
            "int_low": self.int_low,
            "int_high": self.int_high,
        }


@dataclass(frozen=True)
class Settings:
    """Everything a command needs to know, resolved. ``sources`` says where each setting came from: the flag
    (``--target``), the config (``config session.yaml``) or ``default``.

    The user's choices for the rewrite are held as the user named them (a mixlist, keep_dtype or customize_dtypes
    file by its path, what the lock records and the roles name); :attr:`rewrite_options` is them normalised once,
    the one frozen :class:`~ampconfig.decide.rewrite_options.RewriteOptions` with those files read (on first use:
    a command that never rewrites, ``validate`` or ``lists``, reads none of them, and a command that does reads
    them where it always has, after its model and inputs are checked). The ranges file and its margin (``ranges``,
    ``data_max``) are not among them: the commands read the file (against the model they opened, with that margin)
    and hand the rewrite its :class:`~ampconfig.decide.value_limits.ValueRanges`."""

    precision_mode: PrecisionMode
    target: str
    modify_mixlist: Path | Mixlist | None  # a file, or a config's inline mixlist
    keep_dtype: Path | tuple[str, ...] | None  # a file, or a config's list of node names
    customize_dtypes: Path | None
    op_names: str | None  # whose op names the lists use: tensorflow, ascend, onnx; None: each name read by the table
    keep_io_types: bool
    clamp_values: bool  # constants beyond the low type's range clamped (warned) instead of kept float32
    decision_metadata: bool  # each node's decision written into the rewritten model's node metadata
    device: str
    model_path: Path
    example: str | None  # the bundled example's name when no model was given
    allow_tf32: bool
    output: Path | None
    inputs: InputRequest
    warmup: int
    iterations: int
    tolerance: Tolerance
    config: Path | None
    sources: Mapping[str, str]
    notes: tuple[str, ...] = ()
    data_max: float | None = None  # the range rule's margin; None: half the low type's largest value
    ranges: Path | None = None  # a value ranges file: what the float32 model's values were on data

    @property
    def mode_source(self) -> str:
        return self.sources["precision_mode"]

    @cached_property
    def rewrite_options(self) -> RewriteOptions:
        """The choices the rewrite reads, its lists read (each error at its file and line)."""
        return RewriteOptions.of(self.precision_mode, **{name: getattr(self, name) for name in _REWRITE_CHOICES})

    def read_mixlist(self) -> ChosenMixlist | None:
        """The mixlist alone, read (what ``lists`` shows); None without one."""
        if self.modify_mixlist is None:
            return None
        return read_mixlist(self.precision_mode, self.modify_mixlist, self.op_names)

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON-ready data (what ``-v`` logs)."""
        from ampconfig.documents.mixlist_file import Mixlist

        mixlist = self.modify_mixlist
        return {
            "precision_mode": self.precision_mode.value,
            "target": self.target,
            "device": self.device,
            "model": str(self.model_path),
            "example": self.example,
            "modify_mixlist": mixlist.model_dump(by_alias=True, exclude_none=True)
            if isinstance(mixlist, Mixlist)
            else _text(mixlist),
            "keep_dtype": list(self.keep_dtype) if isinstance(self.keep_dtype, tuple) else _text(self.keep_dtype),
            "customize_dtypes": _text(self.customize_dtypes),
            "op_names": self.op_names,
            "keep_io_types": self.keep_io_types,
            "allow_tf32": self.allow_tf32,
            "output": _text(self.output),
            "decision_metadata": self.decision_metadata,
            "inputs": self.inputs.to_dict(),
            "warmup": self.warmup,
            "iterations": self.iterations,
            "tolerance": self.tolerance.to_dict(),
            "clamp_values": self.clamp_values,
            "data_max": self.data_max,
            "ranges": _text(self.ranges),
            "config": _text(self.config),
            "sources": dict(self.sources),
        }


#: The settings the rewrite reads beside the mode: :class:`RewriteOptions`' fields of the same names.
_REWRITE_CHOICES = (
    "modify_mixlist",
    "keep_dtype",
    "target",
    "keep_io_types",
    "op_names",
    "customize_dtypes",
    "clamp_values",
    "decision_metadata",
)


def require_files(settings: Settings, *, model: bool = True) -> None:
    """Before any work: every file the session config names exists (:func:`require_config_files`) and, for a
    command that opens the model (``model``), the model is an existing file (:func:`require_model`)."""
    require_config_files(settings)
    if model:
        require_model(settings)


def require_model(settings: Settings) -> Path:
    """The model path of commands that open the model: an existing file, or an error naming where the path came
    from (checked here, before any work, rather than by the resolver, which reads no model)."""
    source = settings.sources.get("model", DEFAULT_SOURCE)
    what = "model" if not source.startswith("config") else "model (from the config)"
    require_file(settings.model_path, what, hint="check the path")
    return settings.model_path


#: The files a config may name, by setting: what they are called, and the config key.
_CONFIG_FILES = {
    "modify_mixlist": ("mixlist file", "modify_mixlist"),
    "keep_dtype": ("keep_dtype file", "keep_dtype"),
    "customize_dtypes": ("customize_dtypes file", "customize_dtypes"),
    "inputs": ("inputs file (.npz)", "run.inputs"),
    "data": ("data set", "run.data"),
    "calibration_data": ("calibration data set", "run.calibration_data"),
    "ranges": ("value ranges file", "ranges"),
}


def require_config_files(settings: Settings) -> None:
    """Every file the session config names exists, else an error naming the key and how a relative path was
    resolved (against the config's folder). Only here: a path given on the command line is relative to the working
    directory, and its loader's error says "check the path" without the config's rule."""
    inputs = settings.inputs
    values = {
        "modify_mixlist": settings.modify_mixlist,
        "keep_dtype": settings.keep_dtype,
        "customize_dtypes": settings.customize_dtypes,
        "inputs": inputs.npz,
        "data": inputs.data,
        "calibration_data": inputs.calibration_data,
        "ranges": settings.ranges,
    }
    for name, value in values.items():
        what, key = _CONFIG_FILES[name]
        if not isinstance(value, Path) or not settings.sources.get(name, "").startswith("config"):
            continue
        kind = path_kind(value)  # never raises: a NUL or an overlong name is a kind of its own
        if kind in UNNAMEABLE:
            hint = f"`{key}` in the config {settings.config}"
            raise AmpconfigError(f"{what}: the path {UNNAMEABLE[kind]}", file=str(value), hint=hint)
        if kind == "missing":
            from ampconfig.documents.parsing import RELATIVE_TO_CONFIG

            hint = f"`{key}` in the config {settings.config}; {RELATIVE_TO_CONFIG}"
            raise AmpconfigError(f"{what} not found", file=str(value), hint=hint)


def _text(path: Path | None) -> str | None:
    return str(path) if path is not None else None


# ---------------------------------------------------------------------------------------------------- resolve
def resolve(flags: Flags, config: SessionConfig | None = None) -> Settings:
    """Merge ``flags`` over the session config over the defaults. ``config`` is the already loaded config, else
    the file ``flags.config`` names is read (or there is none). Bad values raise located AmpconfigErrors."""
    settings, problems = resolve_with_problems(flags, config)
    if problems:
        first = problems[0]
        raise AmpconfigError(
            first.message, file=first.file, line=first.line, json_path=first.json_path, hint=first.hint
        )
    return settings


def resolve_with_problems(flags: Flags, config: SessionConfig | None = None) -> tuple[Settings, list[Problem]]:
    """:func:`resolve`, returning the settings together with what is wrong with their combination (a mixlist with
    a mode that takes none) instead of raising it: ``validate`` reports it as a finding."""
    if flags.tolerance is not None:  # a flag's own number is checked before any file is read
        check_positive_finite(flags.tolerance, spelled("tolerance"))
    if config is None and flags.config is not None:
        from ampconfig.documents.session_config import load_session_config

        config = load_session_config(flags.config)
    config_mode = config.resolved_mode() if _has_mode(config) else None
    merged = _Merge(flags, config)
    mode = merged.pick("precision_mode", flags.precision_mode, config_mode)
    precision_mode = parse_mode(mode) if mode is not None else DEFAULT_MODE
    model, example = _model(merged, config)
    mixlist = merged.pick("modify_mixlist", flags.modify_mixlist, config.modify_mixlist if config else None)
    problems = _mode_mixlist_problems(precision_mode, mixlist, merged, config)
    keep = merged.pick("keep_dtype", flags.keep_dtype, config.keep_dtype if config else None)
    run = config.run if config is not None else None
    target = merged.pick("target", flags.target, config.target if config else None, DEFAULT_TARGET)
    device = merged.pick("device", flags.device, run.device if run else None, AUTO_DEVICE)
    warmup = merged.pick("warmup", flags.warmup, _set(run, "warmup"), DEFAULT_WARMUP)
    iterations = merged.pick("iterations", flags.iterations, _set(run, "iterations"), DEFAULT_ITERATIONS)
    # Picked before `sources` is copied below, so that each says where it came from.
    clamp_values = merged.pick("clamp_values", flags.clamp_values, _set(config, "clamp_values"), False)
    data_max = _data_max(flags, config, merged, precision_mode)
    ranges = merged.pick("ranges", flags.ranges, config.ranges if config else None)
    checked_target = _choice(target, TARGETS, "target")
    checked_device = _choice(device, DEVICES, "device")
    customize = merged.pick("customize_dtypes", flags.customize_dtypes, config.customize_dtypes if config else None)
    op_names = _op_names(merged.pick("op_names", flags.op_names, config.op_names if config else None))
    keep_io_types = merged.pick("keep_io_types", flags.keep_io_types, _set(config, "keep_io_types"), True)
    allow_tf32 = merged.pick("allow_tf32", None, _set(config, "allow_tf32"), False)
    output = merged.pick("output", flags.output, config.output if config else None)
    inputs = _input_request(flags, config, merged)
    checked_warmup = check_count(warmup, spelled("warmup"), 0, MAX_WARMUP)
    checked_iterations = check_count(iterations, spelled("iterations"), 1, MAX_ITERATIONS)
    tolerance = _tolerance(flags, config, merged)
    sources = MappingProxyType(dict(merged.sources))
    # Picked after `sources` was copied, as it always has been: its source is not among them (nor in -v's log).
    decision_metadata = merged.pick(
        "decision_metadata", flags.decision_metadata, _set(config, "decision_metadata"), True
    )
    settings = Settings(
        precision_mode=precision_mode,
        target=checked_target,
        modify_mixlist=mixlist,
        keep_dtype=tuple(keep) if isinstance(keep, list) else keep,
        customize_dtypes=customize,
        op_names=op_names,
        keep_io_types=keep_io_types,
        clamp_values=clamp_values,
        decision_metadata=decision_metadata,
        device=checked_device,
        model_path=model,
        example=example,
        allow_tf32=allow_tf32,
        output=output,
        inputs=inputs,
        warmup=checked_warmup,
        iterations=checked_iterations,
        tolerance=tolerance,
        config=flags.config,
        sources=sources,
        notes=tuple(_notes(precision_mode, merged, example)),
        data_max=data_max,
        ranges=ranges,
    )
    _log(settings)
    return settings, problems


class _Merge:
    """Picks each setting from the flag, else the config, else the default, and remembers where it came from."""

    def __init__(self, flags: Flags, config: SessionConfig | None) -> None:
        self.flags = flags
        self.config = config
        self.sources: dict[str, str] = {}

    def pick(self, name: str, flag: Any, from_config: Any, default: Any = None, *, option: str | None = None) -> Any:
        """The setting ``name``: the ``flag`` given (of the shared option ``option``, by default of the same name),
        else the value ``from_config``, else the ``default``."""
        if flag is not None:
            self.sources[name] = spelled(option or name)  # as the table spells the option
            return flag
        if from_config is not None:
            self.sources[name] = f"config {self.flags.config or self.config_file()}"
            return from_config
        self.sources[name] = DEFAULT_SOURCE
        return default

    def config_file(self) -> str:
        return (self.config.source_file if self.config is not None else None) or "<config>"


def _has_mode(config: SessionConfig | None) -> TypeGuard[SessionConfig]:
    return config is not None and (config.precision_mode is not None or config.precision_mode_v2 is not None)


def _set(section: Any, name: str) -> Any:
    """A config value only where the file set it: an unset key is the default's to decide (and say so)."""
    if section is None or name not in section.model_fields_set:
        return None
    return getattr(section, name)


def _op_names(value: str | None) -> str | None:
    if value is None:
        return None
    key = str(value).strip().lower()
    if key not in OP_NAME_CHOICES:
        raise AmpconfigError(
            f"unknown --op-names {value!r}",
            hint="whose op type names the lists use: " + ", ".join(OP_NAME_CHOICES) + " (docs/op-names.md)",
        )
    return key


def _choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    key = str(value).strip().lower()
    if key not in allowed:
        raise AmpconfigError(f"unknown {what} {value!r}", hint=f"{what}s: " + ", ".join(allowed))
    return key


def _model(merged: _Merge, config: SessionConfig | None) -> tuple[Path, str | None]:
    given = merged.pick("model", merged.flags.model, config.model if config else None)
    if given is not None:
        return Path(given), None
    merged.sources["model"] = f"default: the bundled example {DEFAULT_EXAMPLE!r}"
    return example_path(DEFAULT_EXAMPLE), DEFAULT_EXAMPLE


def _mode_mixlist_problems(
    mode: PrecisionMode, mixlist: Any, merged: _Merge, config: SessionConfig | None
) -> list[Problem]:
    """Where the resolved mode meets the resolved mixlist for every command (the rewrite checks the pair it is
    handed again, for the API's callers); the finding points at the mixlist's origin."""
    if mixlist is None:  # no finding without a mixlist (mode_mixlist_problem's first check)
        return []
    from ampconfig.documents.session_config import mode_mixlist_problem

    from_config = mixlist is not None and merged.sources["modify_mixlist"].startswith("config")
    if from_config and config is not None:
        origin = config.source
        problem = mode_mixlist_problem(
            mode, True, origin.file, origin.line_of(("modify_mixlist",)), origin.json_path(("modify_mixlist",))
        )
    else:
        problem = mode_mixlist_problem(mode, mixlist is not None, str(mixlist) if mixlist is not None else None)
    if problem is None:
        return []
    if merged.sources["precision_mode"] != DEFAULT_SOURCE:
        problem = replace(problem, message=f"{problem.message} (mode from {merged.sources['precision_mode']})")
    return [problem]


def _input_request(flags: Flags, config: SessionConfig | None, merged: _Merge) -> InputRequest:
    run = config.run if config is not None else None
    shapes: dict[str, tuple[int, ...]] = {}
    if run is not None:
        shapes.update({name: tuple(int(d) for d in dims) for name, dims in run.shapes.items()})
    if flags.inputs_npz is not None and flags.input_files:
        raise AmpconfigError(
            "--inputs and --input are given together",
            hint="give the inputs one way: --inputs FILE.npz with every input, or --input NAME=FILE.npy for each",
        )
    flag_shapes, arrays = parse_input_options(flags.shapes, flags.input_files)
    # Each --shape over the config's run.shapes entry for its input, as every flag is over the config.
    shapes.update((name, tuple(dims)) for name, dims in flag_shapes.items())
    merged.sources["shapes"] = _shapes_source(merged, bool(flag_shapes), bool(run is not None and run.shapes))
    merged.sources["arrays"] = spelled("input_files") if arrays else DEFAULT_SOURCE
    return InputRequest(
        npz=merged.pick("inputs", flags.inputs_npz, run.inputs if run else None, option="inputs_npz"),
        data=merged.pick("data", flags.data, run.data if run else None),
        calibration_data=merged.pick("calibration_data", flags.calibration_data, run.calibration_data if run else None),
        arrays=MappingProxyType(arrays),
        shapes=MappingProxyType(shapes),
        seed=merged.pick("seed", flags.seed, _set(run, "seed"), DEFAULT_SEED),
        int_low=run.int_low if run else None,
        int_high=run.int_high if run else None,
    )


def _shapes_source(merged: _Merge, from_flags: bool, from_config: bool) -> str:
    """Where the shapes came from: --shape, the config's run.shapes, both (each --shape over the config's entry
    for its input), or neither."""
    config = f"config {merged.flags.config or merged.config_file()}"
    if from_flags and from_config:
        return f"{spelled('shapes')} over {config}"
    return spelled("shapes") if from_flags else config if from_config else DEFAULT_SOURCE


def _tolerance(flags: Flags, config: SessionConfig | None, merged: _Merge) -> Tolerance:
    base = merged.pick("tolerance", None, _set(config, "tolerance"), Tolerance())
    if flags.tolerance is None:
        return base
    merged.sources["tolerance"] = spelled("tolerance") + (" (max_abs, min_cosine from the config)" if config else "")
    return Tolerance(rel_l2=flags.tolerance, max_abs=base.max_abs, min_cosine=base.min_cosine)


def _data_max(flags: Flags, config: SessionConfig | None, merged: _Merge, mode: PrecisionMode) -> float | None:
    value = merged.pick("data_max", flags.data_max, config.data_max if config else None)
    return check_margin(value, mode.low_dtype, merged.sources["data_max"])


def _notes(mode: PrecisionMode, merged: _Merge, example: str | None) -> list[str]:
    notes = []
    if example is not None:
        notes.append(f"no model given: the bundled example {example!r}")
    if merged.sources["precision_mode"] == DEFAULT_SOURCE:
        notes.append(f"precision mode {mode.value} is the default (set it with --precision-mode or the config)")
    return notes


#: The settings :class:`InputRequest` holds, logged from there.
_INPUT_SETTINGS = ("data", "calibration_data", "seed", "shapes", "arrays")


def _log(settings: Settings) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    data = settings.to_dict()
    inputs = data["inputs"]
    for name, source in settings.sources.items():
        # The input settings are kept together (Settings.inputs): --inputs is its npz, the others by their name.
        value = inputs["npz"] if name == "inputs" else inputs[name] if name in _INPUT_SETTINGS else data.get(name)
        log.info("setting %s = %s  (%s)", name, json.dumps(value, default=str), source)
    log.info("resolved settings: %s", json.dumps(data, default=str, sort_keys=True))
