"""``explain``: every node's decision (op type, name, scope, dtype before/after, list colour, rule, the neighbour
that caused it) with summary counts, as one JSON-ready dict and as rich tables.

Pure: a :class:`~ampconfig.rewrite.results.RewriteResult` (plus the optional range report) in, data out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ampconfig.decide.log_domain import unmeasured_reads
from ampconfig.decide.quantized import quantized_model
from ampconfig.decide.ranges_input import NOT_CHECKED
from ampconfig.report.tables import fits, number_column, print_table
from ampconfig.report.words import counted
from ampconfig.rewrite.results import RewriteResult
from ampconfig.settings.write_op_names import written_names

#: How a node without a list colour (not a float node) is counted in the summary.
NO_COLOUR = "none"
NO_DTYPE = "none"

_COLOUR_STYLES = {"white": "bold", "black": "red", "gray": "yellow", "clear": "cyan"}


def explain_payload(
    result: RewriteResult,
    *,
    model: str,
    range_report: Mapping[str, Any] | None = None,
    op_names: str | None = None,
) -> dict[str, Any]:
    """The ``--json`` object of ``ampconfig explain``: ``nodes`` (one per node, decision order, each with the Casts
    the rewrite added on its inputs and outputs: ``casts_in``, ``casts_out``) and ``summary``.
    With ``op_names`` tensorflow or ascend, each node also carries ``op_type_names``: its op type in that
    vocabulary (every name it has there, as a mixlist for ATC would list it; docs/op-names.md)."""
    foreign = op_names if op_names in ("tensorflow", "ascend") else None
    casts = result.casts_around()
    nodes = []
    for index, decision in enumerate(result.decisions):
        item = decision.to_dict()
        item["index"] = index
        item["changed"] = decision.changed
        item["casts_in"], item["casts_out"] = casts.get(decision.name, (0, 0))
        if foreign is not None:
            item["op_type_names"] = written_names(decision.op_type, foreign)
        nodes.append(item)
    payload: dict[str, Any] = {
        "model": model,
        "precision_mode": result.precision_mode,
        "target": result.target,
        "low_dtype": result.low_dtype,
        "nodes": nodes,
        "summary": explain_summary(result),
        "warnings": list(result.warnings),
        "notes": list(result.notes),
    }
    if foreign is not None:
        payload["op_names"] = foreign
    if range_report is not None:
        payload["range_analysis"] = dict(range_report)
    elif result.value_ranges is None and result.low_precision_nodes and NOT_CHECKED not in payload["warnings"]:
        payload["warnings"].append(NOT_CHECKED)  # decided without values: say so as every deciding command does
    if result.value_ranges is None:
        _mark_unmeasured_log_reads(result, payload)
    return payload


def _mark_unmeasured_log_reads(result: RewriteResult, payload: dict[str, Any]) -> None:
    """Decided without values: the low-precision values on paths into log-domain readers, which the rule
    log_domain_precision judges only with data, listed (``log_domain_unmeasured``) and said in a warning."""
    low = {decision.name for decision in result.decisions if decision.dtype == result.low_dtype}
    reads = unmeasured_reads(result.ir_model.graph, low) if low else []
    if not reads:
        return
    payload["log_domain_unmeasured"] = [read.to_dict() for read in reads]
    readers = sorted({read.reader for read in reads})
    payload["warnings"].append(
        f"{counted(len(reads), 'value')} computed in {result.low_dtype} feed log-domain readers "
        f"({', '.join(repr(name) for name in readers[:3])}{', ...' if len(readers) > 3 else ''}), which weigh every "
        "element alike, and were not measured: rule log_domain_precision judges their precision only with data "
        "(give --data or --ranges FILE)"
    )


def explain_summary(result: RewriteResult) -> dict[str, Any]:
    decisions = result.decisions
    stats = result.stats
    return {
        "nodes": len(decisions),
        "changed": sum(1 for d in decisions if d.changed),
        "low_precision_nodes": result.low_precision_nodes,
        "by_colour": dict(sorted(Counter(d.colour or NO_COLOUR for d in decisions).items())),
        "by_dtype": dict(sorted(Counter(d.dtype or NO_DTYPE for d in decisions).items())),
        "by_original_dtype": dict(sorted(Counter(d.original_dtype or NO_DTYPE for d in decisions).items())),
        "by_rule": dict(sorted(Counter(d.rule.value for d in decisions).items())),
        "casts_inserted": stats.casts_inserted,
        "casts_retargeted": stats.casts_retargeted,
        "casts_removed": stats.casts_removed,
        "initializers_converted": stats.initializers_converted,
        "constants_converted": stats.constants_converted,
        "values_clamped": stats.values_clamped,
        "opset_raised_to": stats.opset_raised_to,
        "cost": result.cost.to_dict() if result.cost is not None else None,
        "quantized": quantized.to_dict() if (quantized := quantized_model(decisions)) is not None else None,
        "quantized_note": quantized.describe(result.low_dtype) if quantized is not None else None,
    }


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{key} {value}" for key, value in counts.items()) or "-"


def _node_cells(node: Mapping[str, Any]) -> dict[str, Any]:
    """The node's name, op type (with its names in the foreign vocabulary), colour and dtype, as shown."""
    name = f"{node['scope']}/{node['name']}" if node["scope"] else node["name"]
    before, after = node["original_dtype"] or "-", node["dtype"] or "-"
    dtype = Text(after if before == after else f"{before} -> {after}", style="" if before == after else "bold")
    colour = node["colour"] or "-"
    names = [n for n in node.get("op_type_names", ()) if n != node["op_type"]]
    op = node["op_type"] + (f" ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})" if names else "")
    return {"node": name, "op": op, "colour": Text(colour, style=_COLOUR_STYLES.get(colour, "")), "dtype": dtype}


def _narrow_decisions(payload: Mapping[str, Any]) -> Table:
    """The decisions for a narrow terminal: per node its index, then two lines, ``name  op, colour  dtype`` and
    ``rule (cause): reason``; nothing left out, long names folded."""
    table = Table.grid(padding=(0, 1))
    number_column(table, "#")
    table.add_column(overflow="fold")
    for node in payload["nodes"]:
        cells = _node_cells(node)
        what = Text.assemble((cells["node"], "bold"), "  ", cells["op"], ", ", cells["colour"], "  ", cells["dtype"])
        cause = f" ({node['cause']})" if node["cause"] else ""
        why = Text.assemble(node["rule"], cause, ": ", (node["reason"], "dim"))
        table.add_row(str(node["index"]), Text("\n").join([what, why]))
    return table


def render_explain(payload: Mapping[str, Any], console: Console, *, table_in: str | None = None) -> None:
    """Print the explain report for people: the node table, then the summary. In a terminal too narrow for the
    table (its eight columns need about 140), each node is two lines instead: what it is and its dtype, then why.
    ``table_in`` names where the node table is instead (the HTML report): one line says so and only the summary
    follows (rich lays out a table of 20,000 rows in about 15 s, several times the decision's own time)."""
    title = f"decisions ({payload['precision_mode']}, target {payload['target']})"
    if table_in is not None:
        console.print(Text(f"{title}: every node's row is in {table_in}"), soft_wrap=not console.is_terminal)
    else:
        _print_decisions(payload, console, title)
    _print_summary(payload, console)


def _print_decisions(payload: Mapping[str, Any], console: Console, title: str) -> None:
    table = Table(title=title, title_justify="left")
    number_column(table, "#")
    for header in ("node", "op", "colour", "dtype", "rule", "cause", "reason"):
        table.add_column(header, overflow="fold")
    for node in payload["nodes"]:
        cells = _node_cells(node)
        table.add_row(
            str(node["index"]),
            cells["node"],
            cells["op"],
            cells["colour"],
            cells["dtype"],
            node["rule"],
            node["cause"] or "-",
            node["reason"],
        )
    if console.is_terminal:  # the title wraps as any line does (a table's title does not)
        console.print(Text(title, style="italic"))
        table.title = None
    if console.is_terminal and not fits(console, table):
        print_table(console, _narrow_decisions(payload))
    else:
        print_table(console, table)


def _print_summary(payload: Mapping[str, Any], console: Console) -> None:
    summary = payload["summary"]
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("nodes", f"{summary['nodes']} ({summary['changed']} changed dtype)")
    grid.add_row("by colour", _counts(summary["by_colour"]))
    grid.add_row("by dtype", _counts(summary["by_dtype"]))
    grid.add_row("by rule", _counts(summary["by_rule"]))
    grid.add_row(
        "casts",
        f"{summary['casts_inserted']} inserted, {summary['casts_retargeted']} retargeted"
        + (f", {summary['casts_removed']} removed (no-ops)" if summary.get("casts_removed") else "")
        + "; "
        f"{counted(summary['initializers_converted'], 'initializer')} and "
        f"{counted(summary['constants_converted'], 'constant')} converted, "
        f"{counted(summary['values_clamped'], 'value')} clamped",
    )
    cost = summary.get("cost")
    if cost is not None:
        grid.add_row(
            "estimated time",
            f"{cost['estimated_us']:.0f} us, {cost['estimated_cast_us']:.0f} of it in casts, against "
            f"{cost['estimated_float32_us']:.0f} us all float32 ({cost['basis']})",
        )
        islands = cost["costliest_islands"]
        grid.add_row(
            "float32 islands",
            f"{cost['float32_islands']}" + ("; most casts first:" if islands else ""),
        )
        for island in islands:
            rules = ", ".join(f"{rule} {count}" for rule, count in island["rules"].items())
            nodes = ", ".join(island["nodes"][:6]) + (
                f" ... ({len(island['nodes'])} nodes)" if len(island["nodes"]) > 6 else ""
            )
            casts = counted(island["casts"], "cast")
            grid.add_row("", f"{casts} (~{island['cast_us']:.0f} us) around {nodes}; {rules}")
    if summary.get("quantized_note"):
        grid.add_row("quantized", summary["quantized_note"])
    ranges = payload.get("range_analysis")
    if ranges is not None:
        kept = ranges["overflow_nodes"]
        grid.add_row(
            "range analysis",
            f"margin {ranges['data_max']:.6g} on {ranges['calibration']}; {len(kept)} node(s) beyond it: "
            + (", ".join(kept) or "none"),
        )
    print_table(console, grid)
    wrap = console.is_terminal  # in a terminal a long line wraps at words; a pipe keeps it one line for grep
    for note in payload.get("notes", ()):
        console.print(Text("note: " + note), soft_wrap=not wrap)
    for warning in payload["warnings"]:
        console.print(Text("warning: " + warning, style="yellow"), soft_wrap=not wrap)
