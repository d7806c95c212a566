"""The validate pre-commit hook (``.pre-commit-hooks.yaml``) checks ampconfig's files and nothing else: pre-commit
runs a hook on a file its ``files`` pattern finds (``re.search``) and its ``exclude`` pattern does not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

HOOKS = Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml"


def checked(path: str) -> bool:
    hooks = yaml.safe_load(HOOKS.read_text(encoding="utf-8"))
    hook = next(hook for hook in hooks if hook["id"] == "ampconfig-validate")
    exclude = hook.get("exclude")
    return bool(re.search(hook["files"], path)) and not (exclude and re.search(exclude, path))


@pytest.mark.parametrize(
    "path",
    ["mixlist.json", "configs/session.ampconfig.yaml", "keep_dtype.cfg", "bert/keep-dtype.txt", "ampconfig.toml"],
)
def test_the_hook_checks_ampconfig_files(path: str) -> None:
    assert checked(path)


@pytest.mark.parametrize(
    "path",
    [".github/workflows/ampconfig.yml", "sub/.github/workflows/mixlist-check.yaml", "mixlist.py", "README.md"],
)
def test_the_hook_leaves_other_files_alone(path: str) -> None:
    """A CI workflow named ampconfig.yml is not a session config: validate reported it as one."""
    assert not checked(path)
