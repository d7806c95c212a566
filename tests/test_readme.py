"""The README cannot rot: every command block runs as written, in an empty folder, with the files the README names.

``bash`` blocks run line by line in bash (a ``\\`` continues a line), with ``ampconfig`` and ``python3`` on PATH
as this interpreter's; each must exit 0. The folder is a git repository, everything made so far committed before
each block (the README's project is kept under git). The setup lines that a test cannot run (creating and entering
the venv, ``pip install``, the test suite itself) are listed in :data:`SETUP_LINES` and skipped. A data
block (JSON, YAML, text) whose paragraph names a file in backticks (`` `mixlist.json` ``) is written to that file
where the README shows it, so the commands read exactly what the README shows, in the order a reader meets them.
``python`` blocks run as scripts.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
#: Lines the README shows that a test run cannot repeat: the venv and the install (the suite runs inside one) and
#: the suite itself.
SETUP_LINES = (
    "python3 -m venv .venv",
    ". .venv/bin/activate",
    'python3 -m pip install ".[test]"',
    "python3 -m pytest",
)
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
_FILE_NAME = re.compile(r"`([\w.-]+\.(?:json|ya?ml|toml|cfg|txt|env))`")
_POSIX = pytest.mark.skipif(os.name != "posix", reason="the README's commands are POSIX shell")


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    names: tuple[str, ...]  # file names in backticks in the prose right before the block
    line: int


def readme_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    blocks, previous_end = [], 0
    for match in _FENCE.finditer(text):
        prose = text[previous_end : match.start()].rstrip().rsplit("\n\n", 1)[-1]
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(Block(match.group(1), match.group(2), tuple(_FILE_NAME.findall(prose)), line))
        previous_end = match.end()
    return blocks


def command_lines(block: Block) -> list[str]:
    """The block's command lines as bash runs them (continuations joined); blank and comment-only lines dropped."""
    return [raw for raw in block.text.replace("\\\n", " ").splitlines() if shlex.split(raw, comments=True)]


def is_setup(line: str) -> bool:
    words = shlex.join(shlex.split(line, comments=True))
    return any(words == shlex.join(shlex.split(setup)) for setup in SETUP_LINES)


def _shims(folder: Path) -> dict[str, str]:
    """``ampconfig`` and ``python3`` on PATH as this interpreter (the suite may run without the venv active)."""
    folder.mkdir()
    programs = {"python3": f'exec "{sys.executable}" "$@"', "ampconfig": f'exec "{sys.executable}" -m ampconfig "$@"'}
    for name, target in programs.items():
        shim = folder / name
        shim.write_text(f"#!/bin/sh\n{target}\n", encoding="utf-8")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_the_readme_has_the_blocks_this_test_relies_on() -> None:
    blocks = readme_blocks()
    languages = {block.language for block in blocks}
    assert {"bash", "json", "yaml", "python"} <= languages
    written = [name for block in blocks if block.language in ("json", "yaml", "text") for name in block.names[:1]]
    assert {"mixlist.json", "session.yaml", "keep_dtype.cfg", "customize.cfg"} <= set(written)
    assert len(written) == len(set(written)), "two blocks write one file: a reader would overwrite the first"
    runnable = [line for block in blocks if block.language == "bash" for line in command_lines(block)]
    skipped = [shlex.join(shlex.split(line, comments=True)) for line in runnable if is_setup(line)]
    wanted = [shlex.join(shlex.split(setup)) for setup in SETUP_LINES]
    assert sorted(skipped) == sorted(wanted), "a setup line changed: update SETUP_LINES with the README"


def _commit_all(work: Path) -> None:
    """The folder as a project under git keeps it: what the README has made so far is committed (its `git show
    HEAD:...` lines read the committed files)."""
    git = ["git", "-c", "user.name=readme", "-c", "user.email=readme@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "add", "-A"], cwd=work, check=True, capture_output=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "README so far"], cwd=work, check=True)


@_POSIX
@pytest.mark.skipif(shutil.which("git") is None, reason="the README's project is a git repository")
def test_every_readme_command_block_runs_as_written(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = _shims(tmp_path / "bin")
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    for block in readme_blocks():
        if block.language in ("json", "yaml", "text") and block.names:
            # Written where the README shows it, as a reader following it does: a command that reads a file the
            # README only shows further down fails here as it would for the reader (issue 31: step 4 once ran a
            # session config naming a customize_dtypes file written two sections later).
            (work / block.names[0]).write_text(block.text, encoding="utf-8")
        elif block.language == "bash":
            _commit_all(work)
            for line in command_lines(block):
                if is_setup(line):
                    continue
                done = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, timeout=600)
                assert done.returncode == 0, (
                    f"README line {block.line}: {line}\nexit {done.returncode}\n{done.stderr.decode()[-3000:]}"
                )
        elif block.language == "python" and "import ray" in block.text:
            continue  # the Ray recipe: tests/cli/test_ci_recipes.py runs it against a local Ray instance
        elif block.language == "python":
            done = subprocess.run(
                [sys.executable, "-c", block.text], cwd=work, env=env, capture_output=True, timeout=600
            )
            assert done.returncode == 0, f"README line {block.line}:\n{done.stderr.decode()[-3000:]}"
    assert (work / "model.mixed.onnx").is_file() and (work / "model.fp16.onnx").is_file()
