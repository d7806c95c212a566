"""Issue 18, encodings: an ASCII locale (``PYTHONIOENCODING=ascii``, ``LC_ALL=C`` without locale coercion) gets
the reports in ASCII, with each command's own exit code (``run`` 0 or 1, ``validate`` 1 on findings), never a
UnicodeEncodeError; a model file name that is not UTF-8 works, in messages and in ``--html`` reports.

Locales and file names are the process's, so every case runs the real command in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper as oh

from tests.graphs import FLOAT, make_model, tensor, weight

ASCII_LOCALES = {
    "PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
    "LC_ALL=C": {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""},
}
needs_bytes_names = pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="file names must be UTF-8 here")


def ampconfig(*args: str | bytes | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ampconfig", *(os.fsdecode(arg) for arg in args)]
    return subprocess.run(command, capture_output=True, env={**os.environ, **(env or {})})


def assert_clean(done: subprocess.CompletedProcess) -> None:
    text = done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in text and "internal error" not in text and "UnicodeEncodeError" not in text, text


def model_with_unicode_names() -> onnx.ModelProto:
    """Node and value names outside ASCII, which every report prints."""
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="größe→projektion"),
        oh.make_node("Relu", ["h"], ["y"], name="激活"),
    ]
    return make_model(nodes, [tensor("x", FLOAT, [2, 8])], [tensor("y", FLOAT, [2, 8])], [weight("w", 8, 8)])


@pytest.mark.parametrize("locale", list(ASCII_LOCALES))
def test_an_ascii_locale_gets_ascii_reports_and_the_commands_exit_codes(tmp_path: Path, locale: str) -> None:
    env = ASCII_LOCALES[locale]
    model = tmp_path / "m.onnx"
    onnx.save(model_with_unicode_names(), model)
    fast = ("--warmup", "0", "--iterations", "1")
    run = ampconfig("run", model, "-m", "force_fp16", *fast, env=env)
    assert_clean(run)
    assert run.returncode == 0, run.stderr.decode()
    run.stdout.decode("ascii")  # every byte ASCII: tables drawn with - | +
    assert b"PASS" in run.stdout and b"+--" in run.stdout

    mixlist = tmp_path / "mix.json"
    mixlist.write_text('{"white-list": {"to-add": ["Relu"], "to-remove": ["Relu"]}}', encoding="utf-8")
    validate = ampconfig("validate", mixlist, env=env)
    assert_clean(validate)
    assert validate.returncode == 1  # findings, not an error of ampconfig's own


def test_an_ascii_stream_keeps_a_failed_run_at_1_and_prints_every_name(tmp_path: Path) -> None:
    env = ASCII_LOCALES["PYTHONIOENCODING=ascii"]
    model = tmp_path / "m.onnx"
    onnx.save(model_with_unicode_names(), model)
    failing = ampconfig("run", model, "-m", "force_fp16", "--tolerance", "1e-12", "--iterations", "1", env=env)
    assert_clean(failing)
    assert failing.returncode == 1, failing.stderr.decode()
    assert b"FAIL" in failing.stdout
    explain = ampconfig("explain", model, "-m", "force_fp16", env=env)
    assert_clean(explain)
    assert explain.returncode == 0
    assert b"gro\\xdfe->" in explain.stdout  # the node name in ASCII: an arrow reads ->, the rest escaped


@needs_bytes_names
def test_a_model_name_that_is_not_utf8_works_with_html(tmp_path: Path) -> None:
    folder = os.fsencode(tmp_path)
    model = folder + b"/m\xff.onnx"
    onnx.save(model_with_unicode_names(), os.fsdecode(model))
    report = tmp_path / "report.html"
    explain = ampconfig("explain", model, "-m", "force_fp16", "--html", report)
    assert_clean(explain)
    assert explain.returncode == 0, explain.stderr.decode("utf-8", "replace")
    html = report.read_bytes().decode("utf-8")  # valid UTF-8 throughout
    assert "<title>ampconfig explain: " in html and "m\ufffd.onnx" in html

    compared = tmp_path / "compare.html"
    compare = ampconfig("compare", model, "-m", "force_fp16", "--html", compared)
    assert_clean(compare)
    assert compare.returncode == 0, compare.stderr.decode("utf-8", "replace")
    assert "<title>ampconfig compare: " in compared.read_bytes().decode("utf-8")

    missing = ampconfig("run", folder + b"/gone\xfe.onnx", "--json")
    assert_clean(missing)
    assert missing.returncode == 2
    assert b"gone\xfe.onnx" in missing.stderr and b"not found" in missing.stderr  # the name as it was given
