"""Printing tables whole: a number is never cut to "0.0003…", however narrow the terminal or the log.

rich fits a table to the console's width and, when the columns cannot wrap enough, cuts cells with an ellipsis
(80 columns when the output is a pipe). :func:`print_table` decides the width itself:

- in a pipe or a file, the table's natural width, one line per row, so CI logs and grep keep every value;
- in a terminal, the table as it is when it fits; else folded to the terminal's width: text columns wrap at
  spaces (a long identifier folds), columns of numbers (``no_wrap``) keep their width, so nothing is cut and no
  line is wider than the terminal (a wider table would be wrapped by the terminal, every row broken in two). When
  the numbers and the words do not fit side by side, each row is a record instead (:func:`print_records`): its
  first cell, then one ``header: value`` line per other cell, each wrapped to the terminal's width.
"""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ampconfig.errors import printable

#: Wide enough to measure any table without rich clamping the measurement to the console's width.
_UNBOUNDED = 1 << 14
#: The narrowest a folded text column may become: narrower, a word becomes a column of letters.
_NARROWEST_TEXT = 6
#: A word longer than this (a node's dotted path) may fold in its column; a shorter one keeps a line of its own.
_FOLDED_WORD = 24


def measure(console: Console, table: Table) -> Measurement:
    """The table's narrowest width with every cell whole, and its natural width (one line per row)."""
    return Measurement.get(console, console.options.update_width(_UNBOUNDED), table)


def fits(console: Console, table: Table) -> bool:
    """Whether the table fits the console's width (in a terminal: folded as :func:`print_table` folds it; in a pipe:
    at its natural width)."""
    if measure(console, table).maximum <= console.width:
        return True
    return console.is_terminal and _folded_widths(console, table) is not None


def escaped(renderable: RenderableType) -> RenderableType:
    """``renderable`` with the user strings in it escaped (:func:`~ampconfig.errors.printable`, lines kept): a
    string, a Text (its styles dropped where something is escaped), a table's every cell; anything else as it is.
    Rich writes a node name's escape sequence or right-to-left override as it is given."""
    if isinstance(renderable, (str, Text)):
        return _escaped_text(renderable)
    if isinstance(renderable, Table):
        if renderable.title is not None:
            renderable.title = _escaped_text(renderable.title)
        for column in renderable.columns:
            column._cells[:] = [escaped(cell) for cell in column._cells]
    return renderable


def _escaped_text(text: str | Text) -> str | Text:
    if isinstance(text, str):
        return printable(text, keep="\n")
    shown = printable(text.plain, keep="\n")
    if shown == text.plain:
        return text
    return Text(shown, style=text.style, justify=text.justify, end=text.end)


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` (or a grid) with no cell cut, its user strings escaped (:func:`escaped`): see the module's
    docstring."""
    escaped(table)
    measured = measure(console, table)
    for column in table.columns:  # a word wider than its column folds onto the next line rather than being cut
        if not column.no_wrap:
            column.overflow = "fold"
    if measured.maximum <= console.width:
        console.print(table)
        return
    if console.is_terminal:
        widths = _folded_widths(console, table)
        if widths is None:
            print_records(console, table)
            return
        for column, width in zip(table.columns, widths, strict=True):
            column.width = width
        console.print(table)
        return
    table.width = measured.maximum  # wider than the console: laid out at this width, and nothing crops it
    console.print(table, crop=False)


def print_records(console: Console, table: Table) -> None:
    """``table`` one row after the other, for a terminal too narrow for its columns: the title, then per row its
    first cell and a ``header: value`` line for each other cell (a grid without headers: its other cells below),
    each wrapped at word boundaries to the terminal's width, continuation lines indented."""
    if table.title:
        console.print(_text(console, table.title), soft_wrap=False)
    headers = [_text(console, column.header).plain for column in table.columns] if table.show_header else []
    cells = [list(column.cells) for column in table.columns]
    for row in range(table.row_count):
        values = [_text(console, column[row]) if row < len(column) else Text("") for column in cells]
        if not headers:  # a grid: its first cell, the others below it
            console.print(values[0], soft_wrap=False)
            rest = Text("  ").join(value for value in values[1:] if value.plain)
            if rest.plain:
                console.print(Padding(rest, (0, 0, 0, 2)), soft_wrap=False)
            continue
        console.print(values[0], soft_wrap=False)
        for header, value in zip(headers[1:], values[1:], strict=True):
            if value.plain:
                console.print(Padding(Text.assemble(f"{header}: ", value), (0, 0, 0, 2)), soft_wrap=False)


def _text(console: Console, cell: RenderableType) -> Text:
    """A table cell as the text it shows (a string's markup rendered as the table renders it)."""
    if isinstance(cell, Text):
        return cell
    if isinstance(cell, str):
        return console.render_str(cell)
    return Text(str(cell))


def _folded_widths(console: Console, table: Table) -> list[int] | None:
    """Each column's width for the table to fit the terminal, or None when it cannot: numbers (``no_wrap``
    columns) keep their width; text columns give up width, the widest first, down to their longest word (a word
    over :data:`_FOLDED_WORD` characters, such as a node's dotted path, may fold) and never below
    :data:`_NARROWEST_TEXT`. rich's own squeezing of a too-wide table leaves a column of three letters."""
    if not table.columns:
        return None
    options = console.options.update_width(_UNBOUNDED)
    widths: list[int] = []
    floors: list[int] = []
    for column in table.columns:
        cells = [*column.cells, *([column.header] if table.show_header else [])]
        sizes = [Measurement.get(console, options, cell) for cell in cells]
        widest = max((size.maximum for size in sizes), default=0)
        longest_word = max((size.minimum for size in sizes), default=0)
        widths.append(widest)
        floors.append(widest if column.no_wrap else min(widest, max(_NARROWEST_TEXT, min(longest_word, _FOLDED_WORD))))
    # The padding of each column (not at the edges of a grid: pad_edge off) and the borders between and around.
    extra = (table.padding[1] + table.padding[3]) * len(widths)
    if not table.pad_edge:
        extra -= table.padding[1] + table.padding[3]
    if table.box:
        extra += len(widths) + 1 if table.show_edge else len(widths) - 1
    excess = sum(widths) + extra - console.width
    while excess > 0:
        shrinkable = [index for index, width in enumerate(widths) if width > floors[index]]
        if not shrinkable:
            return None
        widest = max(shrinkable, key=lambda index: widths[index])
        widths[widest] -= 1
        excess -= 1
    return widths


def number_column(table: Table, header: str) -> None:
    """A right-aligned column of numbers, never wrapped (a wrapped number reads as two)."""
    table.add_column(header, justify="right", no_wrap=True)
