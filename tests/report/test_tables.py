"""print_table: in a terminal too narrow for a table, text folds to its width and numbers stay whole; in a pipe the
table keeps its natural width, one line per row."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from ampconfig.report.tables import number_column, print_table

_REASON = "every consumer of this node computes in float16, so it follows them " * 3
_ERROR = "0.000123456789"


def _table() -> Table:
    table = Table(title="nodes")
    number_column(table, "error")
    for header in ("node", "reason"):
        table.add_column(header)
    table.add_row(_ERROR, "a_really_long_node_name_without_any_space/MatMul", _REASON)
    return table


def _printed(terminal: bool, width: int) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, color_system=None, soft_wrap=True)
    print_table(console, _table())
    return out.getvalue().splitlines()


def test_a_narrow_terminal_gets_the_table_folded_to_its_width_with_numbers_whole() -> None:
    lines = _printed(terminal=True, width=60)
    assert max(len(line) for line in lines) <= 60
    assert not any("…" in line for line in lines)
    assert any(_ERROR in line for line in lines)
    folded = "".join(line.split("│")[2].strip() for line in lines if line.count("│") == 4)
    assert "a_really_long_node_name_without_any_space/MatMul" in folded


def test_a_pipe_gets_the_natural_width_one_line_per_row() -> None:
    lines = _printed(terminal=False, width=60)
    row = [line for line in lines if _ERROR in line]
    assert len(row) == 1 and "a_really_long_node_name_without_any_space/MatMul" in row[0] and _REASON.strip() in row[0]


def test_a_terminal_too_narrow_even_for_the_numbers_gets_the_table_whole() -> None:
    lines = _printed(terminal=True, width=14)
    assert any(_ERROR in line for line in lines) and not any("…" in line for line in lines)


def test_a_terminal_too_narrow_for_the_columns_gets_one_record_per_row() -> None:
    """At 30 columns the number, a 48-character name and the reason cannot stand side by side: each row is its
    first cell, then a ``header: value`` line per other cell, wrapped at words, nothing cut, nothing wider."""
    lines = _printed(terminal=True, width=30)
    assert max(len(line) for line in lines) <= 30 and not any("…" in line for line in lines)
    assert lines[0].strip() == "nodes" and lines[1].strip() == _ERROR
    assert lines[2].startswith("  node: ")
    text = "".join(line.strip() for line in lines)
    assert "a_really_long_node_name_without_any_space/MatMul" in text.replace(" ", "")
    assert any(line.startswith("  reason: every consumer") for line in lines)


def test_a_table_whose_text_columns_can_give_way_is_folded_with_its_words_whole() -> None:
    table = Table(title="latency (ms)")
    table.add_column("model")
    for header in ("median", "p90", "runs"):
        number_column(table, header)
    table.add_row("fp32 reference", "0.133", "0.169", "0 warm-up + 2")
    out = io.StringIO()
    console = Console(file=out, width=46, force_terminal=True, color_system=None)
    print_table(console, table)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 46
    assert any("reference" in line for line in lines) and any("0 warm-up + 2" in line for line in lines)
