"""The files resolved settings read and write, declared by role to the invocation's
:class:`~ampconfig.files.guard.OutputGuard` before any work: every command that opens a model resolves the same
settings (:mod:`ampconfig.settings.resolve`), so they share this list.

A role names what the file is and where the path came from (the flag, or the config key), so a refusal tells the
user which two settings collide.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ampconfig.files.guard import Destination, FileRole, OutputGuard
from ampconfig.files.paths import path_kind
from ampconfig.model_io.models import OpenedModel, external_data_name, stream_refused, writes_external_data

if TYPE_CHECKING:
    from ampconfig.settings.resolve import Settings


def role(what: str, flag: str, flag_given: object, config_key: str, config: Path | None) -> str:
    """``what (FLAG)`` when the value came from the command line, else ``what (`key` in the config C)``."""
    if flag_given is not None or config is None:
        return f"{what} ({flag})"
    return f"{what} (`{config_key}` in the config {config})"


def settings_role(settings: Settings, what: str, flag: str, name: str, config_key: str | None = None) -> str:
    """:func:`role` for a resolved setting: from the config when the resolver took it from there."""
    from_config = settings.sources.get(name, "").startswith("config")
    return role(what, flag, None if from_config else flag, config_key or name, settings.config)


def input_files(settings: Settings) -> list[FileRole]:
    """Every file the settings read, in the order they are declared: the config, the model, a mixlist, keep_dtype
    and customize_dtypes file (when given as paths), the value ranges file, the ``.npz`` inputs, each ``.npy``
    input and the data sets' files. The model's external data comes later (:func:`declare_model`)."""
    given: list[tuple[str, Path | None]] = [
        ("session config (--config)", settings.config),
        (settings_role(settings, "input model", "MODEL", "model"), settings.model_path),
    ]
    if isinstance(settings.modify_mixlist, Path):
        what = settings_role(settings, "mixlist", "--modify-mixlist", "modify_mixlist")
        given.append((what, settings.modify_mixlist))
    if isinstance(settings.keep_dtype, Path):
        given.append((settings_role(settings, "keep_dtype file", "--keep-dtype", "keep_dtype"), settings.keep_dtype))
    customize = settings.customize_dtypes
    customize_path = customize if isinstance(customize, Path) else getattr(customize, "source", None)
    what = settings_role(settings, "customize_dtypes file", "--customize-dtypes", "customize_dtypes")
    given.append((what, customize_path))
    given.append((settings_role(settings, "value ranges file", "--ranges", "ranges"), settings.ranges))
    what = settings_role(settings, ".npz inputs", "--inputs", "inputs", "run.inputs")
    given.append((what, settings.inputs.npz))
    given.extend((f".npy input {name} (--input)", path) for name, path in sorted(settings.inputs.arrays.items()))
    for flag, name, data_path in (
        ("--data", "data", settings.inputs.data),
        ("--calibration-data", "calibration_data", settings.inputs.calibration_data),
    ):
        what = settings_role(settings, "data set", flag, name, f"run.{name}")
        if data_path is not None and path_kind(data_path) == "folder":
            given.extend((what, item) for item in sorted(data_path.iterdir()) if item.suffix == ".npz")
        else:
            given.append((what, data_path))
    return [FileRole(what, Path(path)) for what, path in given if path is not None]


def declare_inputs(guard: OutputGuard, settings: Settings) -> None:
    """Declare :func:`input_files` to the guard, before any of them is read."""
    inputs = input_files(settings)
    guard.read_each(inputs)


def declare_model(guard: OutputGuard, opened: OpenedModel) -> None:
    """The model's external data files, known once its proto is read (before any tensor is)."""
    guard.read_all("input model's external data", opened.external_files)


def declare_model_output(guard: OutputGuard, path: Path, what: str, opened: OpenedModel) -> Destination:
    """A model output and, when its rewrite's weights go to an external data file, that file too."""
    destination = guard.output(what, path)
    if not writes_external_data(opened):
        return destination
    if destination.is_stream:
        raise stream_refused(destination)
    guard.output(f"external data of the {what}", destination.target.parent / external_data_name(destination.target))
    return destination
