"""Every user string a report echoes is escaped (issue 44): a node named with a right-to-left override (U+202E)
and an escape sequence, printed by explain, run and lock --check in every output format, shows as ``\\u202e``
and ``\\x1b``, never as the characters a terminal or a browser would act on; JSON keeps them as JSON escapes and
reads back as the name. A lock whose recorded ranges path was edited to such a name is noted escaped as well.

On main the text, github and markdown outputs and the HTML report held the raw characters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as oh

from ampconfig.errors import printable
from tests.graphs import FLOAT, make_model, tensor, weight
from tests.lock_trees import cli

#: The hostile part of every name: a right-to-left override, an isolate, a mark and an escape sequence.
HOSTILE = "\u202eevil\u2066\u200f\x1b[2J"
NODE = f"mm{HOSTILE}"
VALUE = f"h{HOSTILE}"
OUTPUT = f"y{HOSTILE}"  # the run report's accuracy table names the outputs


def _raw_free(text: str) -> None:
    """No control or bidi character of the name in ``text``; its escaped form is there."""
    for char in "\u202e\u2066\u200f\x1b":
        assert char not in text, (char, text)
    assert "\\u202e" in text and "\\x1b[2J" in text, text


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("escaping")
    nodes = [
        oh.make_node("MatMul", ["x", "w"], [VALUE], name=NODE),
        oh.make_node("Softmax", [VALUE], [OUTPUT], name=f"softmax{HOSTILE}"),
    ]
    proto = make_model(nodes, [tensor("x", FLOAT, [2, 8])], [tensor(OUTPUT, FLOAT, [2, 8])], [weight("w", 8, 8)])
    path = folder / "hostile.onnx"
    onnx.save(proto, path)
    np.savez(folder / "x.npz", x=np.ones((2, 8), np.float32))
    return path


def test_printable_escapes_every_control_and_bidi_character() -> None:
    hostile = "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0), 0x61C, 0x200E, 0x200F, 0x2028, 0x2029]))
    hostile += "".join(map(chr, [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]))
    shown = printable(hostile)
    assert shown.isascii() and shown.isprintable() and shown.count("\\") == len(hostile)
    assert printable("a\nb", keep="\n") == "a\nb" and printable("né 名") == "né 名"


def test_explain_escapes_the_names_in_text_json_and_html(model: Path, tmp_path: Path) -> None:
    text = cli("explain", model, "-m", "force_fp16")
    assert text.exit_code == 0, text.output
    _raw_free(text.stdout)
    html = tmp_path / "explain.html"
    as_json = cli("explain", model, "-m", "force_fp16", "--json", "--html", html)
    assert as_json.exit_code == 0
    _raw_free(as_json.stdout.replace("\\u001b", "\\x1b"))  # JSON writes ESC as \u001b: still an escape
    assert {node["name"] for node in json.loads(as_json.stdout)["nodes"]} >= {NODE}
    _raw_free(html.read_text(encoding="utf-8"))


def test_run_escapes_the_names_in_text_and_json(model: Path) -> None:
    inputs = model.parent / "x.npz"
    text = cli("run", model, "-m", "force_fp16", "--inputs", inputs, "--iterations", "1", "--warmup", "0")
    assert text.exit_code in (0, 1), text.output
    _raw_free(text.stdout)
    as_json = cli("run", model, "-m", "force_fp16", "--inputs", inputs, "--iterations", "1", "--warmup", "0", "--json")
    _raw_free(as_json.stdout.replace("\\u001b", "\\x1b"))
    assert [output["name"] for output in json.loads(as_json.stdout)["outputs"]] == [OUTPUT]  # the very name


@pytest.mark.parametrize("output_format", ["text", "markdown", "github", "json"])
def test_lock_check_escapes_the_names_in_every_format(model: Path, tmp_path: Path, output_format: str) -> None:
    mixlist = tmp_path / "mixlist.json"
    mixlist.write_text(json.dumps({"black-list": {"to-add": []}}), encoding="utf-8")
    lock = tmp_path / "hostile.lock.json"
    made = cli("lock", model, "--modify-mixlist", mixlist, "-o", lock)
    assert made.exit_code == 0, made.output
    mixlist.write_text(json.dumps({"black-list": {"to-add": ["MatMul"]}}), encoding="utf-8")  # mm's decision moves
    check = cli("lock", "--check", lock, "--format", output_format)
    assert check.exit_code == 1, check.output
    shown = check.stdout.replace("\\u001b", "\\x1b") if output_format == "json" else check.stdout
    _raw_free(shown)


def test_an_edited_ranges_path_is_noted_escaped(model: Path, tmp_path: Path) -> None:
    """The lock keeps the statistics that decided, so a recorded ranges path that leads nowhere passes the check
    (by design); the note that says so printed the edited path raw on main."""
    ranges = tmp_path / "r.json"
    assert cli("calibrate", model, "--inputs", model.parent / "x.npz", "-o", ranges).exit_code == 0
    lock = tmp_path / "ranged.lock.json"
    assert cli("lock", model, "--ranges", ranges, "-o", lock).exit_code == 0
    text = lock.read_text(encoding="utf-8")
    assert '"r.json"' in text
    lock.write_text(text.replace('"r.json"', json.dumps(f"gone{HOSTILE}.json", ensure_ascii=False)), "utf-8")
    check = cli("lock", "--check", lock)
    assert check.exit_code == 0, check.output
    assert "is gone" in check.stdout + check.stderr
    _raw_free(check.stdout + check.stderr)
