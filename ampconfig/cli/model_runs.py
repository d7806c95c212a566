"""Whether a command line will run a model in ONNX Runtime, predicted from its words and the table of shared options
(:data:`~ampconfig.cli.options.SHARED_OPTIONS`): the console script forks ONNX Runtime's worker before anything
starts a thread when it will (:mod:`ampconfig.entry`).

A command of :data:`~ampconfig.cli.options.ALWAYS_RUN` always runs one; one of
:data:`~ampconfig.cli.options.RUN_WHEN_ASKED` when it is given an option that runs a model, on the command line or
through the session config it names (``run.data`` in ``--config session.yaml`` runs the fp32 model as ``--data``
does). The config is only glanced at here, never checked: the command reads it properly, and reports what is
wrong with it."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ampconfig.cli.options import ALWAYS_RUN, RUN_WHEN_ASKED, SharedOption, uses

#: A config larger than this is not glanced at (the command then starts the worker when it needs it).
_GLANCED_BYTES = 1 << 20


def command_runs_models(args: Sequence[str]) -> bool:
    """Whether the command line ``args`` (the script's arguments: no --help, no --version) will run a model."""
    command = next((word for word in args if not word.startswith("-")), None)
    if command in ALWAYS_RUN:
        return True
    if command not in RUN_WHEN_ASKED:
        return False
    taken = uses(command).options
    running = {flag for option in taken if option.runs_model for flag in option.flags()}
    words = {word.split("=", 1)[0] for word in args}
    if words & (running | set(RUN_WHEN_ASKED[command])):
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
    try:
        if path.stat().st_size > _GLANCED_BYTES:
            return []
        document = _parsed(path.read_text(encoding="utf-8"), path.suffix.lower())
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
