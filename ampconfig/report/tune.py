"""``tune``: the report as one JSON-ready dict and as rich tables, and the progress line. Data in, text out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ampconfig.report.tables import number_column, print_table

if TYPE_CHECKING:
    from ampconfig.diagnose.tune.trials import ProgressEvent
    from ampconfig.diagnose.tune.workflow import TuneReport

#: Node pins listed by name in the table (the JSON and the file list all of them).
SHOWN_PINS = 20


def tune_payload(report: TuneReport, model: str) -> dict[str, Any]:
    """The ``--json`` object of ``ampconfig tune``."""
    return {"model": model, **report.to_dict()}


def _num(value: float | None, spec: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "inf"
    return format(value, spec)


@dataclass
class ProgressState:
    """What the progress line keeps between events: the last error and low-node count judged."""

    error: float | None = None
    low_kept: int | None = None
    low_total: int | None = None


def progress_line(event: ProgressEvent, state: ProgressState) -> str:
    """One line: step, runs used, current error, low nodes kept, seconds."""
    if event.error is not None:
        state.error = event.error
    if event.low_kept is not None:
        state.low_kept = event.low_kept
    if event.low_total is not None:
        state.low_total = event.low_total
    kept = "-" if state.low_kept is None else f"{state.low_kept}/{state.low_total or '?'}"
    return (
        f"tune: {event.step} | runs {event.runs}/{event.max_runs} | error {_num(state.error)} | "
        f"low nodes kept {kept} | {event.elapsed:.0f}s"
    )


def render_tune(report: TuneReport, console: Console, tolerance: float) -> None:
    """Print the tune report for people: the answer, what it costs, the verified errors, the search."""
    _steps(report, console)
    if report.seeds:
        console.print(f"overflow seeds (range analysis, inf/NaN in low precision): {', '.join(report.seeds)}")
    candidate = report.candidate
    if report.succeeded and candidate is not None:
        pins = sorted(candidate.pins)
        shown = ", ".join(pins[:SHOWN_PINS]) + (f", ... ({len(pins)} in all)" if len(pins) > SHOWN_PINS else "")
        console.print(f"keep_dtype node pins: {shown or '-'}")
        if candidate.black_ops:
            console.print("black-list.to-add: " + ", ".join(sorted(candidate.black_ops)))
        _cost(report, console)
        _verified(report, console)
        for path in (report.keep_dtype_path, report.mixlist_path):
            if path:
                console.print(f"wrote {path}")
    for note in report.notes:
        console.print(Text("note: " + note, style="dim"))
    console.print(f"model runs: {report.runs} (of at most {report.max_runs}), {report.seconds:.1f} s")
    for index, run in enumerate(report.run_log, start=1):
        console.print(f"  run {index}: {run}")
    if report.succeeded and report.cost is not None:
        console.print(
            Text.assemble(
                ("FOUND", "bold green"),
                f"  verified as run judges: worst rel L2 {_num(report.verified_error)} <= {tolerance:g}; "
                f"{report.cost.low_nodes} of the mode's {report.cost.low_nodes_all_low} low-precision nodes kept "
                f"low ({report.cost.low_fraction:.0%}; {report.cost.fp32_pinned} short of all-low)",
            )
        )
    elif report.outcome == "no_useful_answer":
        console.print(Text.assemble(("NO USEFUL ANSWER", "bold red"), "  " + report.reason))
    else:
        console.print(Text.assemble(("NOT FOUND", "bold red"), "  " + report.reason))


def _steps(report: TuneReport, console: Console) -> None:
    if not report.steps:
        return
    table = Table(title="search", title_justify="left")
    number_column(table, "step")
    table.add_column("tried", overflow="fold")
    table.add_column("why", overflow="fold")
    for header in ("pins", "predicted", "passed", "worst rel L2", "low nodes"):
        number_column(table, header)
    for index, step in enumerate(report.steps, start=1):
        table.add_row(
            str(index),
            step.what,
            step.why,
            str(step.pins),
            _num(step.predicted),
            "yes" if step.passed else "no",
            _num(step.error),
            str(step.low_nodes),
        )
    print_table(console, table)


def _cost(report: TuneReport, console: Console) -> None:
    cost = report.cost
    if cost is None:
        return
    table = Table(title="what the answer costs", title_justify="left")
    table.add_column("")
    for header in ("answer", "all-low (the mode alone)", "fp32"):
        number_column(table, header)
    table.add_row("low-precision nodes", str(cost.low_nodes), str(cost.low_nodes_all_low), "0")
    table.add_row("casts", str(cost.casts), str(cost.casts_all_low), "0")
    table.add_row(
        "estimated latency (H100 kernel costs), us",
        _num(cost.latency_us, ".1f"),
        _num(cost.latency_all_low_us, ".1f"),
        _num(cost.latency_fp32_us, ".1f"),
    )
    print_table(console, table)


def _verified(report: TuneReport, console: Console) -> None:
    table = Table(title="verified from the written files, as run judges", title_justify="left")
    table.add_column("output")
    for header in ("rel L2", "max abs", "cosine", "non-finite"):
        number_column(table, header)
    for item in report.verified:
        table.add_row(item.name, _num(item.rel_l2), _num(item.max_abs), _num(item.cosine), str(item.nonfinite))
    print_table(console, table)
    if report.verified_spreads:
        from ampconfig.report.run_report import spread_table

        print_table(console, spread_table(report.verified_spreads))
