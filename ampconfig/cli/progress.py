"""Progress on stderr while models run: timing runs, long data sets sample by sample, and tune's steps.

Shown only on a terminal and never with ``--json``: a log or a pipe gets the results alone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ampconfig.cli.output import stderr

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads none of the runner
    from rich.progress import TaskID

    from ampconfig.diagnose.tune.trials import ProgressEvent, ProgressHook
    from ampconfig.runner.timing import ProgressCallback


#: Narrower than this, a progress line is its label and count only.
NARROW = 40
#: Seconds between two redraws of one label's count (the worker sends at most ten a second too; a data set read
#: here reports every sample): the first and last counts are always shown.
UPDATE_INTERVAL_S = 0.1


def shown(json_output: bool) -> bool:
    """Whether this invocation shows progress."""
    return stderr.is_terminal and not json_output


@contextmanager
def progress_bar(enabled: bool) -> Iterator[ProgressCallback | None]:
    """A rich progress bar per label on stderr; yields the ``progress(label, done, total)`` callback the runner
    reports to (None when disabled). A label with a colon (``fp32: samples``, ``ranges: fp32 values``) is shown as
    it is, any other as timing."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.table import Column

    # The label folds rather than being cut; the bar shrinks with the terminal, and below NARROW columns only the
    # label and the count are left (a bar and a clock would squeeze them to nothing).
    label = TextColumn("{task.description}", table_column=Column(overflow="fold"))
    if stderr.width < NARROW:
        columns: tuple[ProgressColumn, ...] = (label, MofNCompleteColumn())
    else:
        columns = (label, BarColumn(bar_width=min(40, stderr.width - 36)), MofNCompleteColumn(), TimeElapsedColumn())
    bar = Progress(*columns, console=stderr, transient=True)
    tasks: dict[str, TaskID] = {}
    shown_at: dict[str, float] = {}

    def update(label: str, done: int, total: int) -> None:
        now = time.monotonic()
        if label in tasks and done < total and now - shown_at[label] < UPDATE_INTERVAL_S:
            return
        shown_at[label] = now
        if label not in tasks:
            tasks[label] = bar.add_task(label if ": " in label else f"timing {label}", total=total)
        bar.update(tasks[label], completed=done, total=total)

    with bar:
        yield update


@contextmanager
def tune_progress(enabled: bool) -> Iterator[tuple[ProgressHook | None, ProgressCallback | None]]:
    """tune's progress: a live line on stderr, shown from the start; yields the hook the tune reports to and the
    callback long data sets report their samples to (None, None when off)."""
    if not enabled:
        yield None, None
        return
    from ampconfig.report.tune import ProgressState, progress_line

    state = ProgressState()
    with stderr.status("tune: loading the model", spinner="dots") as status:
        line = ""

        def update(event: ProgressEvent) -> None:
            nonlocal line
            line = progress_line(event, state)
            status.update(line)

        def samples(label: str, done: int, total: int) -> None:
            status.update(f"{line}  ({label}: {done}/{total})")

        yield update, samples
