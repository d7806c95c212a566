"""Printing tables whole: a number is never cut to "0.0003…", however narrow the terminal or the log.

rich fits a table to the console's width and, when the columns cannot wrap enough, cuts cells with an ellipsis
(80 columns when the output is a pipe). :func:`print_table` decides the width itself:

- in a pipe or a file, the table's natural width, one line per row, so CI logs and grep keep every value;
- in a terminal, the table as it is when it fits; else folded to the terminal's width: text columns wrap at
  spaces and fold a word too long for them, columns of numbers (``no_wrap``) keep their width, so nothing is cut
  and no line is wider than the terminal (a wider table would be wrapped by the terminal, every row broken in
  two). Only when even the numbers do not fit is the table drawn wider, at the width where every cell is whole.
"""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

#: Wide enough to measure any table without rich clamping the measurement to the console's width.
_UNBOUNDED = 1 << 14
#: The narrowest a folded text column may become: narrower, a word becomes a column of letters.
_NARROWEST_TEXT = 6


def measure(console: Console, table: Table) -> Measurement:
    """The table's narrowest width with every cell whole, and its natural width (one line per row)."""
    return Measurement.get(console, console.options.update_width(_UNBOUNDED), table)


def fits(console: Console, table: Table) -> bool:
    """Whether the table fits the console's width as it is (in a pipe: at its natural width)."""
    measured = measure(console, table)
    return (measured.minimum if console.is_terminal else measured.maximum) <= console.width


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` (or a grid) with no cell cut: see the module's docstring."""
    measured = measure(console, table)
    needed = measured.minimum if console.is_terminal else measured.maximum
    if needed <= console.width:
        console.print(table)
        return
    for column in table.columns:  # a word wider than its column folds onto the next line rather than being cut
        if not column.no_wrap:
            column.overflow = "fold"
    if console.is_terminal and _foldable(console, table):
        console.print(table)
        return
    table.width = needed  # wider than the console: rich then lays it out at this width, and nothing crops it
    console.print(table, crop=False)


def _foldable(console: Console, table: Table) -> bool:
    """Whether the table fits the console with its number columns whole and every text column at least
    :data:`_NARROWEST_TEXT` wide."""
    columns = table.columns
    if not columns:
        return False
    # Counted generously (every column padded on both sides, a border beside each): a table that only nearly
    # fits is drawn wider rather than have rich squeeze its numbers.
    extra = (table.padding[1] + table.padding[3]) * len(columns) + (len(columns) + 1 if table.box else 0)
    fixed = 0
    for column in columns:
        if column.no_wrap:
            cells = [Measurement.get(console, console.options, cell).maximum for cell in column.cells]
            header = Measurement.get(console, console.options, column.header).maximum if table.show_header else 0
            fixed += max([header, *cells], default=0)
        else:
            fixed += _NARROWEST_TEXT
    return fixed + extra <= console.width


def number_column(table: Table, header: str) -> None:
    """A right-aligned column of numbers, never wrapped (a wrapped number reads as two)."""
    table.add_column(header, justify="right", no_wrap=True)
