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

from ampconfig.report.tables import number_column, print_table
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
    """The ``--json`` object of ``ampconfig explain``: ``nodes`` (one per node, decision order) and ``summary``.
    With ``op_names`` tensorflow or ascend, each node also carries ``op_type_names``: its op type in that
    vocabulary (every name it has there, as a mixlist for ATC would list it; docs/op-names.md)."""
    foreign = op_names if op_names in ("tensorflow", "ascend") else None
    nodes = []
    for index, decision in enumerate(result.decisions):
        item = decision.to_dict()
        item["index"] = index
        item["changed"] = decision.changed
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
    elif (note := activations_note(result)) is not None:
        payload["notes"].append(note)
    return payload


def activations_note(result: RewriteResult) -> str | None:
    """What a decision made without data could not check (None when nothing was lowered)."""
    if not result.low_precision_nodes:
        return None
    return (
        f"values: constants were checked against {result.low_dtype}'s range; activations were not (no data ran): "
        "run, tune, compare and explain --range-check/--data check them on the float32 model's values"
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
    }


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{key} {value}" for key, value in counts.items()) or "-"


def render_explain(payload: Mapping[str, Any], console: Console) -> None:
    """Print the explain report for people: the node table, then the summary."""
    table = Table(title=f"decisions ({payload['precision_mode']}, target {payload['target']})", title_justify="left")
    number_column(table, "#")
    for header in ("node", "op", "colour", "dtype", "rule", "cause", "reason"):
        table.add_column(header, overflow="fold")
    for node in payload["nodes"]:
        name = f"{node['scope']}/{node['name']}" if node["scope"] else node["name"]
        before, after = node["original_dtype"] or "-", node["dtype"] or "-"
        dtype = Text(after if before == after else f"{before} -> {after}", style="" if before == after else "bold")
        colour = node["colour"] or "-"
        names = [n for n in node.get("op_type_names", ()) if n != node["op_type"]]
        table.add_row(
            str(node["index"]),
            name,
            node["op_type"] + (f" ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})" if names else ""),
            Text(colour, style=_COLOUR_STYLES.get(colour, "")),
            dtype,
            node["rule"],
            node["cause"] or "-",
            node["reason"],
        )
    print_table(console, table)
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
        f"{summary['initializers_converted']} initializers and {summary['constants_converted']} constants "
        f"converted, {summary['values_clamped']} values clamped",
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
            grid.add_row("", f"{island['casts']} casts (~{island['cast_us']:.0f} us) around {nodes}; {rules}")
    ranges = payload.get("range_analysis")
    if ranges is not None:
        kept = ranges["overflow_nodes"]
        grid.add_row(
            "range analysis",
            f"margin {ranges['data_max']:.6g} on {ranges['calibration']}; {len(kept)} node(s) beyond it: "
            + (", ".join(kept) or "none"),
        )
    print_table(console, grid)
    for note in payload.get("notes", ()):
        console.print(Text("note: " + note))
    for warning in payload["warnings"]:
        console.print(Text("warning: " + warning, style="yellow"))
