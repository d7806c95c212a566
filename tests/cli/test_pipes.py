"""A closed stdout (``ampconfig ops-info show | head -1``) ends the command quietly, as it ends cat or grep."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest


@pytest.mark.skipif(not hasattr(signal, "SIGPIPE"), reason="no SIGPIPE on this platform")
def test_a_reader_that_goes_away_ends_the_command_without_an_error() -> None:
    # Some 300 KB of table: far more than a pipe holds, so the command is still writing when the reader leaves.
    command = [sys.executable, "-m", "ampconfig", "ops-info", "show", "--target", "cuda"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # what `head -1` does after its line
    errors = process.stderr.read()
    code = process.wait(timeout=120)
    assert first.strip()
    assert code == -signal.SIGPIPE  # the shell shows 141
    assert b"Traceback" not in errors and b"internal error" not in errors and b"BrokenPipe" not in errors
