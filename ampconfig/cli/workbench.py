"""The workbench every model command works at: the settings resolved, an output guard that knows every file they
read (so no output lands on an input), the HTML report's place refused or taken before any work, and the progress
callback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ampconfig.cli.options import HTML_ROLE, SharedOptions
from ampconfig.cli.output import output_guard, stderr
from ampconfig.cli.progress import progress_bar, shown

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads none of the settings machinery
    from ampconfig.files.guard import Destination, OutputGuard
    from ampconfig.runner.timing import ProgressCallback
    from ampconfig.settings.resolve import Settings


@dataclass(frozen=True)
class Workbench:
    """What a command works with once its inputs are declared: its settings, guard, progress and HTML report."""

    settings: Settings
    guard: OutputGuard
    progress: ProgressCallback | None
    html: Destination | None  # --html, already checked against every input

    def write_html(self, render: Callable[[], str]) -> None:
        """Write the HTML report ``render`` makes, where --html asked for one."""
        if self.html is not None:
            written = self.guard.write_text(self.html, render())
            stderr.print(f"wrote {written}", markup=False)


@contextmanager
def workbench(options: SharedOptions, *, opens_model: bool = True, progress: bool = True) -> Iterator[Workbench]:
    """Resolve the settings and open the output guard with their files declared as inputs; ``progress`` shows a
    progress bar (on a terminal, without --json). Outputs written through the guard are taken back when the
    command fails inside."""
    from ampconfig.settings.declared_files import declare_inputs

    settings = options.settings(opens_model=opens_model)
    with output_guard() as guard, progress_bar(progress and shown(options.json_output)) as callback:
        declare_inputs(guard, settings)
        html = guard.output(HTML_ROLE, options.html) if options.html is not None else None
        yield Workbench(settings, guard, callback, html)
