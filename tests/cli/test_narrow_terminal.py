"""An 80-column terminal (issue 31): every command's --help and explain's report fit it, nothing cut. --help is
rendered in-process at COLUMNS=80; explain runs in a real pseudo-terminal 80 columns wide (rich lays out for a
terminal only when it writes to one), and again through a pipe, where its table keeps one line per node."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.examples import example_path
from tests.cli.test_help import ALL, commands

runner = CliRunner()
NARROW = {"COLUMNS": "80", "TERMINAL_WIDTH": "80"}
#: A word that rich shortened: a letter, digit or punctuation right before the ellipsis.
_CUT = re.compile(r"[\w\-.,:)\]|]…")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _too_wide_or_cut(text: str, width: int = 80) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width or _CUT.search(line)]


@pytest.mark.parametrize("path", ALL, ids=lambda path: " ".join(path) or "ampconfig")
def test_help_fits_80_columns_with_every_name_whole(path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "--help"], env=NARROW)
    assert result.exit_code == 0, result.output
    assert _too_wide_or_cut(result.output) == []
    command = dict(commands())[path]
    context = typer.main.get_command(app).make_context("ampconfig", ["--help"], resilient_parsing=True)
    for param in command.get_params(context):
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("--"):
                assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", result.output), name


def _in_terminal(args: list[str], cwd: Path, columns: int = 80) -> tuple[int, str]:
    """Run ``args`` with a pseudo-terminal of ``columns`` columns as stdin, stdout and stderr; exit code and what
    it showed (escape sequences removed)."""
    import fcntl
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("TERMINAL_WIDTH", None)
    process = subprocess.Popen(args, stdin=child, stdout=child, stderr=child, cwd=cwd, env=env, close_fds=True)
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child side closed: Linux reports EIO
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=120)
    os.close(main)
    return process.returncode, _ANSI.sub("", b"".join(chunks).decode()).replace("\r", "")


@pytest.mark.skipif(os.name != "posix", reason="pseudo-terminals are POSIX")
def test_explain_in_an_80_column_terminal_fits_and_keeps_every_node(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    shutil.copyfile(example_path(), model)
    code, shown = _in_terminal([sys.executable, "-m", "ampconfig", "explain", str(model)], tmp_path)
    assert code == 0, shown
    assert _too_wide_or_cut(shown) == []
    for name in ("embedding/Gather", "attn.scores/MatMul", "lm_head/MatMul"):  # every node, with its reason
        assert name in shown
    assert shown.count("every consumer computes in float16") >= 1 and "MatMul is on the white list" in shown
    piped = subprocess.run(
        [sys.executable, "-m", "ampconfig", "explain", str(model)],
        capture_output=True,
        text=True,
        env={**os.environ, **NARROW},
        timeout=120,
    )
    rows = [line for line in piped.stdout.splitlines() if "attn.scores/MatMul " in line and "white_list" in line]
    assert len(rows) == 1 and "MatMul is on the white list" in rows[0]  # one line per node, nothing folded
