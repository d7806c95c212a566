"""The files a resolved run request reads and writes, declared by role to the invocation's
:class:`~ampconfig.files.guard.OutputGuard` before any work: ``run``, ``explain``, ``compare`` and ``tune``
share the request, so they share this list.

A role names what the file is and where the path came from (the flag, or the config key), so a refusal tells the
user which two settings collide.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ampconfig.files.guard import Destination, OutputGuard
from ampconfig.files.models import OpenedModel, external_data_name, stream_refused, writes_external_data

if TYPE_CHECKING:  # prove.run loads ONNX Runtime; `rewrite` declares its files without it
    from ampconfig.prove.run import RunFlags, RunRequest


def role(what: str, flag: str, flag_given: object, config_key: str, config: Path | None) -> str:
    """``what (FLAG)`` when the value came from the command line, else ``what (`key` in the config C)``."""
    if flag_given is not None or config is None:
        return f"{what} ({flag})"
    return f"{what} (`{config_key}` in the config {config})"


def declare_inputs(guard: OutputGuard, request: RunRequest, flags: RunFlags) -> None:
    """Every file the request reads: the config, the model, a mixlist and keep_dtype file (when given as paths),
    the ``.npz`` inputs and each ``.npy`` input. The model's external data comes later (:func:`declare_model`)."""
    config = flags.config
    guard.read("session config (--config)", config)
    guard.read(role("input model", "MODEL", flags.model, "model", config), request.model_path)
    if isinstance(request.modify_mixlist, Path):
        what = role("mixlist", "--modify-mixlist", flags.modify_mixlist, "modify_mixlist", config)
        guard.read(what, request.modify_mixlist)
    if isinstance(request.keep_dtype, Path):
        guard.read(role("keep_dtype file", "--keep-dtype", flags.keep_dtype, "keep_dtype", config), request.keep_dtype)
    guard.read(role(".npz inputs", "--inputs", flags.inputs_npz, "run.inputs", config), request.npz)
    for name, path in sorted(request.arrays.items()):
        guard.read(f".npy input {name} (--input)", path)


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
