"""Whether a command that runs a model only when asked (:data:`ampconfig.entry.RUN_WHEN_ASKED`) is asked, by a
shared option that runs a model (``runs_model`` in :data:`~ampconfig.settings.flags.SHARED_OPTIONS`) or one
of its own: on the command line, or through the session config it names (``run.data`` in ``--config session.yaml``
runs the fp32 model as ``--data`` does). The config is only glanced at here, never checked: the command reads it
properly, and reports what is wrong with it."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ampconfig.settings import flags as flag_table
from ampconfig.settings.flags import SharedOption

#: A config larger than this is not glanced at (the command then starts the worker when it needs it).
_GLANCED_BYTES = 1 << 20


def asked_to_run(command: str, args: Sequence[str], own: Sequence[str]) -> bool:
    """Whether the command line ``args`` of ``command`` gives an option that runs a model: a shared one, one of the
    command's ``own`` flags, or the config's key of a shared one."""
    taken = [option for option in flag_table.SHARED_OPTIONS if command in option.commands]
    running = {flag for option in taken if option.runs_model for flag in option.flags()}
    words = {word.split("=", 1)[0] for word in args}
    if words & (running | set(own)):
        return True
    config = _config_path(args, next((option for option in taken if option.name == "config"), None))
    keys = [option.config_key for option in taken if option.runs_model and option.config_key is not None]
    return config is not None and any(_given(value) for value in _config_values(config, keys))


def _config_path(args: Sequence[str], config: SharedOption | None) -> Path | None:
    """The session config the command line names (``-c FILE``, ``--config FILE``, ``--config=FILE``, ``-cFILE``)."""
    if config is None:
        return None
    flags = config.flags()
    short = [flag for flag in flags if not flag.startswith("--")]
    for index, word in enumerate(args):
        if word == "--":
            break
        if word in flags and index + 1 < len(args):
            return Path(args[index + 1])
        if word.startswith("--") and word.split("=", 1)[0] in flags and "=" in word:
            return Path(word.split("=", 1)[1])
        if any(word.startswith(flag) and len(word) > len(flag) for flag in short):
            return Path(word[2:])
    return None


def _config_values(path: Path, keys: Sequence[str]) -> list[Any]:
    """The values the config at ``path`` gives the dotted ``keys`` (``run.data``); none where it cannot be read or
    parsed (the command says why)."""
    from ampconfig.files.paths import open_regular  # a FIFO or device in the config's place is never waited on

    try:
        with open_regular(path, "session config") as file:
            data = file.read(_GLANCED_BYTES + 1)
        if len(data) > _GLANCED_BYTES:
            return []
        document = _parsed(data.decode("utf-8"), path.suffix.lower())
    except Exception:  # noqa: BLE001  # unreadable or malformed in any way (OSError, a parser's own error type)
        return []
    values = []
    for key in keys:
        value: Any = document
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        values.append(value)
    return values


def _parsed(text: str, suffix: str) -> Any:
    if suffix == ".json":
        import json

        return json.loads(text)
    if suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # pragma: no cover - Python 3.10 only
            import tomli as tomllib
        return tomllib.loads(text)
    if suffix in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(text)
    return None


def _given(value: Any) -> bool:
    return value is not None and value != "" and not (isinstance(value, (Mapping, list)) and not value)
