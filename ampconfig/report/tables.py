"""Printing tables whole: a number is never cut to "0.0003…", however narrow the terminal or the log.

rich fits a table to the console's width and, when the columns cannot wrap enough, cuts cells with an ellipsis
(80 columns when the output is a pipe). :func:`print_table` gives the table the width it needs instead: in a
terminal, at least the width at which every cell still fits whole (text wraps at spaces, numbers never); in a pipe
or a file, the table's natural width, one line per row, so CI logs and grep keep every value.
"""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

#: Wide enough to measure any table without rich clamping the measurement to the console's width.
_UNBOUNDED = 1 << 14


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` (or a grid) with no cell cut: see the module's docstring."""
    measured = Measurement.get(console, console.options.update_width(_UNBOUNDED), table)
    needed = measured.minimum if console.is_terminal else measured.maximum
    if needed <= console.width:
        console.print(table)
        return
    table.width = needed  # wider than the console: rich then lays it out at this width, and nothing crops it
    console.print(table, crop=False)


def number_column(table: Table, header: str) -> None:
    """A right-aligned column of numbers, never wrapped (a wrapped number reads as two)."""
    table.add_column(header, justify="right", no_wrap=True)
