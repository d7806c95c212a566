"""One ``ampconfig`` command line (or a Python script) in a fresh interpreter: its exit code, output, and the modules
it imported. Used by the start-up and decision-only tests, which must see what a command imports on its own, not
what the test process already holds."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

_PROBE = """
import json, sys
from ampconfig.cli import load_commands
try:
    load_commands(sys.argv[2:])(sys.argv[2:], prog_name="ampconfig")
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
loaded = sorted(sys.modules)
with open(sys.argv[1], "w") as report:
    json.dump({"exit_code": code, "modules": loaded}, report)
"""


def command_in_fresh_process(tmp_path: Path, *args: str | Path) -> dict[str, Any]:
    """``exit_code``, ``modules`` (a set), ``stdout`` and ``stderr`` of ``ampconfig ARGS`` run in a new interpreter,
    with the commands the ``ampconfig`` script registers for ARGS."""
    report = tmp_path / "probe.json"
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(report), *map(str, args)], capture_output=True, text=True, timeout=300
    )
    assert report.is_file(), done.stderr
    outcome = json.loads(report.read_text())
    return {**outcome, "modules": set(outcome["modules"]), "stdout": done.stdout, "stderr": done.stderr}


def script_in_fresh_process(script: str) -> subprocess.CompletedProcess[str]:
    """``python -c SCRIPT`` in a new interpreter, its output captured."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)


def as_a_terminal_job() -> None:
    """A child's ``preexec_fn``: the ending signals as a terminal's foreground job has them (default actions,
    Python's Ctrl-C handler), whatever this test process inherited. A suite run as a background job of a
    non-interactive shell (``python -m pytest &``, and so every process it starts) has SIGINT ignored, and ampconfig
    rightly keeps an inherited ignored signal ignored (``files/interrupts.end_on_signals``): a test that sends a
    terminal's Ctrl-C must start the command as a terminal would, or the command never sees it (issue 43: the two
    Ctrl-C tests of the worker hung in such runs)."""
    for each in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(each, signal.SIG_DFL if each != signal.SIGINT else signal.default_int_handler)
