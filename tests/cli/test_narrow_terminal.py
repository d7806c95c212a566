"""Narrow terminals. Issue 31: every command's --help and explain's report fit 80 columns, nothing cut (--help
rendered in-process at COLUMNS=80; explain in a real pseudo-terminal, rich lays out for a terminal only when it
writes to one, and through a pipe, where its table keeps one line per node). Issue 38: every command, its help and
its located errors, run as the real ``ampconfig`` script in a pseudo-terminal of 20, 40 and 80 columns: no line is
wider than the terminal, nothing is cut with an ellipsis, and every identifier (node names, op types, rules, modes,
flags, paths) appears whole, on one line where it fits one. --json, GitHub annotations and piped output are never
wrapped."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.cli.help_format import STACKED_BELOW
from ampconfig.examples import example_path
from tests.cli.test_help import ALL, commands
from tests.overflow_model import write_case

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
    it showed (escape sequences removed; a carriage return, which redraws a progress line, starts a line)."""
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
    shown = _ANSI.sub("", b"".join(chunks).decode())
    return process.returncode, shown.replace("\r\n", "\n").replace("\r", "\n")


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


# ------------------------------------------------------------------------------------ 20, 40 and 80 columns
WIDTHS = (20, 40, 80)
#: What a line may hold besides text: the borders of tables and panels, a progress bar.
_DRAWING = re.compile(r"[\s\u2500-\u259f]")
SCRIPT = str(Path(sys.executable).with_name("ampconfig"))


def _squashed(text: str) -> str:
    return _DRAWING.sub("", text)


def _fits_and_keeps_whole(shown: str, width: int, identifiers: set[str]) -> list[str]:
    """What is wrong with ``shown`` in a terminal ``width`` columns wide: a line wider than it, an ellipsis, an
    identifier missing (cut) or broken across lines although it fits on one beside an indent."""
    lines = shown.splitlines()
    problems = [f"{len(line)} columns: {line!r}" for line in lines if len(line) > width]
    problems += [f"cut: {line!r}" for line in lines if "…" in line]
    squashed = _squashed(shown)
    for identifier in sorted(identifiers):
        if _squashed(identifier) not in squashed:
            problems.append(f"not whole: {identifier!r}")
        elif len(identifier) <= width // 2 and not any(identifier in line for line in lines):
            problems.append(f"broken across lines: {identifier!r}")
    return problems


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A project as a user has it: the example model, a mixlist that makes an island, two configs, a lock whose
    mixlist changed since (drift), the overflow model with its session config, and what explain says of each."""
    folder = tmp_path_factory.mktemp("narrow")
    model = folder / "model.onnx"
    shutil.copyfile(example_path(), model)
    (folder / "mixlist.json").write_text('{"black-list": {"to-add": ["Softmax"]}}\n', encoding="utf-8")
    (folder / "base.yaml").write_text("precision_mode: allow_mix_precision\nmodify_mixlist: mixlist.json\n", "utf-8")
    (folder / "new.yaml").write_text("precision_mode: allow_mix_precision\n", encoding="utf-8")
    (folder / "invalid.yaml").write_text(
        "precision_mode: allow_mix_precision_fp32\nmodify_mixlist: missing_mixlist_file.json\nrun:\n  warmpu: 2\n",
        encoding="utf-8",
    )
    (folder / "drift").mkdir()
    shutil.copyfile(model, folder / "drift" / "model.onnx")
    (folder / "drift" / "mixlist.json").write_text('{"black-list": {"to-add": ["Softmax"]}}', encoding="utf-8")
    lock = folder / "drift" / "precision.lock.json"
    written = runner.invoke(
        app,
        [
            "lock",
            str(folder / "drift" / "model.onnx"),
            "--modify-mixlist",
            str(folder / "drift" / "mixlist.json"),
            "-o",
            str(lock),
        ],
    )
    assert written.exit_code == 0, written.output
    (folder / "drift" / "mixlist.json").write_text('{"black-list": {"to-add": ["Erf"]}}', encoding="utf-8")
    (folder / "overflow").mkdir()
    overflow = write_case(folder / "overflow")
    explained = runner.invoke(app, ["explain", str(model), "--modify-mixlist", str(folder / "mixlist.json"), "--json"])
    assert explained.exit_code == 0, explained.output
    payload = json.loads(explained.stdout)
    identifiers = {node["name"] for node in payload["nodes"]} | {node["op_type"] for node in payload["nodes"]}
    identifiers |= {node["rule"] for node in payload["nodes"]} | {"allow_mix_precision"}
    return {"folder": folder, "model": model, "lock": lock, "overflow": overflow, "identifiers": identifiers}


def _model_commands(project: dict[str, Any]) -> list[tuple[list[str], set[str]]]:
    """Each command with what it must show whole (besides the model's identifiers where it lists nodes)."""
    folder, overflow = project["folder"], project["overflow"]
    nodes = project["identifiers"]
    fast = ["--warmup", "0", "--iterations", "1"]
    case = [str(overflow["model"]), "-c", str(overflow["config"]), "--no-range-check"]
    return [
        (["explain", "model.onnx", "--modify-mixlist", "mixlist.json"], nodes),
        (["rewrite", "model.onnx", "-o", "out.onnx"], {"out.onnx", "allow_mix_precision"}),
        (["run", "model.onnx", *fast], {"logits", "allow_mix_precision", "CPUExecutionProvider"}),
        (["compare", *case], {"square", "mm_big"}),
        (["tune", *case, "--keep-dtype-out", "pins.cfg", "--max-runs", "8"], {"square", "pins.cfg"}),
        (["lock", "model.onnx", "-o", "new.lock.json"], {"new.lock.json", "allow_mix_precision"}),
        (["lock", "--check", "drift/precision.lock.json"], {"attn/Softmax", "black_list", "drift/mixlist.json"}),
        (["diff", "model.onnx", "--base-config", "base.yaml", "--config", "new.yaml"], {"attn/Softmax"}),
        (["calibrate", "model.onnx", "-o", "ranges.json"], {"ranges.json", "lm_head/Transpose_out"}),
        (["lists"], {"com.microsoft::DecoderMaskedMultiHeadAttention", "SoftmaxCrossEntropyLoss"}),
        (["validate", "invalid.yaml"], {"allow_mix_precision_fp32", "missing_mixlist_file.json", "warmpu"}),
        (["ops-info", "show", "MatMul"], {"MatMul"}),
        (["explain", str(folder / "no" / "such" / "folder" / "of" / "models" / "model.onnx")], {str(folder)}),
        (["rewrite", "model.onnx", "-o", "out_dir/"], {"out_dir/"}),
    ]


@pytest.mark.skipif(os.name != "posix", reason="pseudo-terminals are POSIX")
@pytest.mark.parametrize("width", WIDTHS)
def test_every_command_fits_the_terminal_with_every_identifier_whole(project: dict[str, Any], width: int) -> None:
    problems = {}
    for args, identifiers in _model_commands(project):
        code, shown = _in_terminal([SCRIPT, *args], project["folder"], width)
        assert code in (0, 1, 2) and "Traceback" not in shown, (args, shown[-2000:])
        found = _fits_and_keeps_whole(shown, width, identifiers)
        if found:
            problems[" ".join(args)] = found[:5]
    assert problems == {}


def _squeezed(shown: str) -> list[str]:
    """The lines of a narrow --help whose text sits in a column to the right: below 40 columns an option's (or
    command's) names start a line and its help is on the lines below, indented two columns, so no line of the
    panels (from the first one on) is indented further."""
    lines = shown.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip("╭─ ").startswith(("Arguments", "Options"))), None)
    squeezed = []
    for line in lines[first or len(lines) :]:
        inside = re.sub(r"^[│┃] ?", "", line).rstrip("│┃ ")
        if inside and len(inside) - len(inside.lstrip(" ")) > 2:
            squeezed.append(f"help in a column: {line!r}")
    return squeezed[:3]


@pytest.mark.skipif(os.name != "posix", reason="pseudo-terminals are POSIX")
@pytest.mark.parametrize("width", WIDTHS)
def test_every_help_fits_and_stacks_options_below_40_columns(tmp_path: Path, width: int) -> None:
    context = typer.main.get_command(app).make_context("ampconfig", ["--help"], resilient_parsing=True)
    problems = {}
    for path in ALL:
        code, shown = _in_terminal([SCRIPT, *path, "--help"], tmp_path, width)
        assert code == 0, shown
        flags = {name for param in dict(commands())[path].get_params(context) for name in param.opts if "--" in name}
        found = _fits_and_keeps_whole(shown, width, flags)
        if found:
            problems[" ".join(path) or "ampconfig"] = found[:5]
        if width < STACKED_BELOW:
            problems.update({" ".join(path) or "ampconfig": squeezed} if (squeezed := _squeezed(shown)) else {})
    assert problems == {}


@pytest.mark.skipif(os.name != "posix", reason="pseudo-terminals are POSIX")
def test_json_annotations_and_pipes_are_never_wrapped(project: dict[str, Any]) -> None:
    folder = project["folder"]
    code, shown = _in_terminal([SCRIPT, "explain", "model.onnx", "--json"], folder, 20)
    assert code == 0 and json.loads(shown)["nodes"]  # one JSON object, nothing folded into it
    assert max(len(line) for line in shown.splitlines()) > 20
    code, shown = _in_terminal([SCRIPT, "lock", "--check", str(project["lock"]), "--format", "github"], folder, 20)
    annotations = [line for line in shown.splitlines() if line.startswith("::")]
    assert code == 1 and annotations and all("::" in line[2:] for line in annotations)
    assert all(line.startswith("::") for line in shown.splitlines() if line.strip())  # no line folded off one
    piped = subprocess.run(
        [SCRIPT, "validate", "invalid.yaml"],
        capture_output=True,
        text=True,
        cwd=folder,
        env={**os.environ, "COLUMNS": "20"},
        timeout=120,
    )
    located = [line for line in piped.stdout.splitlines() if "allow_mix_precision_fp32" in line]
    assert located and located[0].startswith("invalid.yaml:1: $.precision_mode: error:")
    assert any(len(line) > 60 for line in piped.stdout.splitlines())
