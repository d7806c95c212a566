"""``--help`` of a command, laid out for the terminal's width: nothing is cut and no line is wider than it.

typer's rich help puts each option in a table of five columns (long name, short name, ``--no-`` name, value type,
help); in an 80-column terminal the columns together are wider than the panel and rich shortens each cell with an
ellipsis ("--customize-dty…", "allow_mix_precis…"). Here an option is its click help record, two columns: the
names with the value type, and the help. A name wider than a third of the panel stands on its own line with its
help below, indented as the others; words too long for their column fold. The rest of the page (usage, prose,
examples, a group's commands) looks as typer draws it, at the terminal's width as it is now (typer's own group help
reads TERMINAL_WIDTH once, at import). Only public click and rich API is used, so any supported typer renders
alike.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Iterator
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

#: What typer calls the panels; an option or argument may name its own (``rich_help_panel``).
ARGUMENTS_PANEL = "Arguments"
OPTIONS_PANEL = "Options"
#: The columns between a name and its help, and the indent of an example line's continuation.
_GAP = 2
_CONTINUATION = "    "
#: Narrower than this, an option's or command's help goes below its name, not beside it.
STACKED_BELOW = 40
#: A comment in an example line (``  ampconfig run  [dim]# what it does[/dim]``): where it starts.
_COMMENT_MARKS = ("[dim]#", "# ")


def help_console() -> Console:
    """The console help is printed on: as wide as the terminal (``COLUMNS``), or ``TERMINAL_WIDTH`` as typer
    reads it."""
    width = os.environ.get("TERMINAL_WIDTH", "")
    return Console(width=int(width) if width.isdigit() and int(width) > 0 else None, highlight=False)


def print_command_help(command: Any, ctx: Any, console: Console | None = None) -> None:
    """The whole ``--help`` page of one (click) command or group (a group lists its commands last)."""
    console = console or help_console()
    console.print(Padding(Text(command.get_usage(ctx), style="bold"), 1))
    if command.help:
        console.print(Padding(Group(*_prose(command.help, console.width - 2)), (0, 1, 1, 1)))
    for title, records in _panels(command, ctx):
        console.print(_panel(title, records, console.width))
    if hasattr(command, "list_commands"):
        console.print(_commands_panel(command, ctx, console.width))
    if command.epilog:
        console.print(Padding(Group(*_prose(command.epilog, console.width - 2)), 1))


def _panels(command: Any, ctx: Any) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """Each panel's title and its parameters' help records (names with value type, help), arguments first."""
    arguments: dict[str, list[tuple[str, str]]] = {ARGUMENTS_PANEL: []}
    options: dict[str, list[tuple[str, str]]] = {OPTIONS_PANEL: []}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:  # an argument of plain click (no help of its own)
            record = (param.make_metavar(ctx) if _takes_context(param.make_metavar) else param.make_metavar(), "")
        panels = arguments if param.param_type_name == "argument" else options
        default = ARGUMENTS_PANEL if panels is arguments else OPTIONS_PANEL
        panels.setdefault(getattr(param, "rich_help_panel", None) or default, []).append(record)
    for panels in (arguments, options):
        yield from ((title, records) for title, records in panels.items() if records)


def _takes_context(method: Any) -> bool:
    return "ctx" in inspect.signature(method).parameters


def _panel(title: str, records: list[tuple[str, str]], width: int) -> RenderableType:
    """One panel: names in a column as wide as the widest name that fits a third of it, help beside them. Below
    :data:`STACKED_BELOW` columns each option's help goes on the lines below its names (beside them it would be a
    column of a few letters), and the panel has no border (its four columns are the help's)."""
    inner = width - 4  # the border and one column of padding on each side
    fitting = [len(names) for names, _ in records if len(names) <= max(inner // 3, 12)]
    name_width = max(fitting, default=0) if width >= STACKED_BELOW else 0
    rows: list[RenderableType] = []
    for names, help_text in records:
        help_cell = Text(help_text, overflow="fold")
        if len(names) <= name_width:
            row = Table.grid(padding=(0, _GAP), expand=True)
            row.add_column(width=name_width, no_wrap=True)
            row.add_column(ratio=1, overflow="fold")
            row.add_row(_names(names), help_cell)
            rows.append(row)
        else:  # the names alone on a line; the help below, where the others' help starts
            rows.append(_names(names))
            if help_text:
                rows.append(Padding(help_cell, (0, 0, 0, name_width + _GAP)))
    return _framed(title, rows, width)


def _framed(title: str, rows: list[RenderableType], width: int) -> RenderableType:
    """``rows`` in a panel titled ``title``; below :data:`STACKED_BELOW` columns, under the title without a border."""
    if width < STACKED_BELOW:
        return Padding(Group(Text(title, style="bold"), *rows), (0, 0, 1, 0))
    return Panel(Group(*rows), title=title, title_align="left", border_style="dim")


def _commands_panel(group: Any, ctx: Any, console_width: int) -> RenderableType:
    """A group's commands, each with the first paragraph of its help."""
    commands = [group.get_command(ctx, name) for name in group.list_commands(ctx)]
    shown = [command for command in commands if command is not None and not command.hidden]
    width = max((len(command.name or "") for command in shown), default=0)
    if console_width < STACKED_BELOW:  # each command's name on its own line, its help below
        rows: list[RenderableType] = []
        for command in shown:
            rows.append(Text(command.name or "", style="bold cyan"))
            rows.append(Padding(Text.from_markup(_first_paragraph(command), overflow="fold"), (0, 0, 0, _GAP)))
        return _framed("Commands", rows, console_width)
    table = Table.grid(padding=(0, _GAP), expand=True)
    table.add_column(width=width, no_wrap=True, style="bold cyan")
    table.add_column(ratio=1, overflow="fold")
    for command in shown:
        table.add_row(command.name or "", Text.from_markup(_first_paragraph(command)))
    return Panel(table, title="Commands", title_align="left", border_style="dim")


def _first_paragraph(command: Any) -> str:
    return inspect.cleandoc(command.short_help or command.help or "").split("\n\n", 1)[0].replace("\n", " ")


def _names(names: str) -> Text:
    """An option's names styled as typer styles them (names cyan, value type yellow), folded if wider than the
    column."""
    text = Text(overflow="fold")
    for index, word in enumerate(names.split(" ")):
        if index:
            text.append(" ")
        text.append(word, style="bold cyan" if word.startswith("-") else "bold yellow")
    return text


def _prose(help_text: str, width: int) -> Iterable[Text]:
    """A command's help as typer shows it (rich markup; the first paragraph plain, the rest dim), its examples
    (indented lines) fitted to ``width``: a comment that would not fit goes on its own line above its command, and
    a command too long for one line continues on the next, indented."""
    first, *rest = inspect.cleandoc(help_text).partition("\f")[0].split("\n\n")
    yield Text.from_markup(first.replace("\n", " "))
    for paragraph in rest:
        yield Text("")
        lines = paragraph.splitlines()
        if not any(line.startswith("  ") for line in lines):
            yield Text.from_markup(paragraph, style="dim")
            continue
        for line in lines:
            yield from _example_line(line, width)


def _example_line(line: str, width: int) -> Iterator[Text]:
    if Text.from_markup(line).cell_len <= width:
        yield Text.from_markup(line, style="dim")
        return
    indent = line[: len(line) - len(line.lstrip())]
    code, comment = line, ""
    for mark in _COMMENT_MARKS:
        if mark in line:
            code, comment = line[: line.index(mark)].rstrip(), line[line.index(mark) :]
            break
    if comment:
        yield Text.from_markup(indent + comment, style="dim")
    words, current = code.split(), indent
    for word in words:
        candidate = f"{current} {word}" if current.strip() else current + word
        if Text.from_markup(candidate).cell_len > width and current.strip():
            yield Text.from_markup(current, style="dim")
            candidate = indent + _CONTINUATION + word
        current = candidate
    yield Text.from_markup(current, style="dim")
