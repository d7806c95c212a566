"""``compare``: the per-node error report as one JSON-ready dict and as rich tables. Pure data in, data out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ampconfig.diagnose.locate import NodeError
from ampconfig.prove.accuracy import OutputMetrics, Tolerance
from ampconfig.report.explain import explain_summary
from ampconfig.report.run_report import metrics_line, spread_table, worst_output
from ampconfig.report.tables import number_column, print_table

if TYPE_CHECKING:
    from ampconfig.diagnose.reference_runs import CompareResult, Prepared

#: Ranked nodes shown in the table (the JSON lists every node).
TOP_NODES = 15


def compare_payload(result: CompareResult, prepared: Prepared) -> dict[str, Any]:
    """The ``--json`` object of ``ampconfig compare``."""
    request = prepared.request
    rewrite = result.rewrite
    first = result.localization.first_bad
    return {
        "model": str(request.model_path),
        "precision_mode": rewrite.precision_mode,
        "target": rewrite.target,
        "low_dtype": rewrite.low_dtype,
        "device": prepared.device.device,
        "providers": {"reference": result.reference.providers, "rewritten": result.rewritten.providers},
        "inputs": [item.to_dict() for item in prepared.inputs.inputs],
        "outputs": [item.to_dict() for item in result.outputs],
        "samples": result.samples,
        "spread": [item.to_dict() for item in result.spreads],
        "tolerance": request.tolerance.to_dict(),
        "passed": result.passed,
        "failures": result.failures,
        "first_bad_node": first.name if first is not None else None,
        "localization": result.localization.to_dict(),
        "range_analysis": result.range.to_dict() if result.range is not None else None,
        "rewrite": explain_summary(rewrite),
        "notes": result.notes,
        "warnings": list(rewrite.warnings),
    }


def _num(value: float | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return format(value, ".3g")


def _node_row(rank: int, node: NodeError, first_bad: str | None) -> list[Any]:
    marker = Text(" first bad", style="bold red") if node.name == first_bad else Text("")
    name = Text(node.name, style="bold red" if node.name == first_bad else "")
    name.append_text(marker)
    if node.scope:
        name.append(f" (in {node.scope})", style="dim")
    return [
        str(rank),
        name,
        node.op_type,
        node.dtype or "-",
        _num(node.error),
        _num(node.input_error),
        _num(node.gain),
        _num(node.reference_max_abs),
        Text("; ".join(node.overflow), style="red") if node.overflow else "-",
    ]


def render_compare(result: CompareResult, prepared: Prepared, console: Console, top: int = TOP_NODES) -> None:
    """Print the compare report for people: the verdict, the first bad node, the ranked nodes, the outputs."""
    localization = result.localization
    first = localization.first_bad
    console.print(
        f"model {prepared.request.model_path}  ({result.rewrite.precision_mode}, target {result.rewrite.target}, "
        f"{result.rewritten.providers[0]})"
    )
    if first is not None:
        where = f", in {first.scope}" if first.scope else ""
        console.print(
            Text.assemble(
                ("first bad node: ", "bold"),
                (first.name, "bold red"),
                f" ({first.op_type}, {first.dtype}{where}): rel L2 {_num(first.error)} from inputs at "
                f"{_num(first.input_error)} (threshold {localization.threshold:g})",
            )
        )
    else:
        console.print(f"no node's error jumps above the threshold {localization.threshold:g}")
    table = Table(title="nodes ranked by the error they add", title_justify="left")
    for header in ("rank", "node", "op", "dtype", "rel L2", "input rel L2", "gain", "fp32 max |x|", "overflow"):
        if header in ("node", "op", "dtype", "overflow"):
            table.add_column(header, overflow="fold")
        else:
            number_column(table, header)
    name = first.name if first is not None else None
    for rank, node in enumerate(localization.ranked()[:top], start=1):
        table.add_row(*_node_row(rank, node, name))
    print_table(console, table)
    outputs = Table(title="outputs vs fp32", title_justify="left")
    outputs.add_column("output")
    for header in ("rel L2", "max abs", "cosine", "non-finite"):
        number_column(outputs, header)
    for item in result.outputs:
        outputs.add_row(item.name, _num(item.rel_l2), _num(item.max_abs), _num(item.cosine), str(item.nonfinite))
    print_table(console, outputs)
    if result.spreads:
        print_table(console, spread_table(result.spreads))
    if result.range is not None:
        kept = result.range.overflow_nodes
        console.print(f"range analysis kept {len(kept)} node(s) float32: " + (", ".join(kept) or "none"))
    for warning in result.rewrite.warnings:
        console.print(Text("warning: " + warning, style="yellow"))
    for note in result.notes:
        console.print(Text("note: " + note, style="dim"))
    _verdict(result.failures, prepared.request.tolerance, result.outputs, console)


def _verdict(failures: list[str], tolerance: Tolerance, outputs: Sequence[OutputMetrics], console: Console) -> None:
    if failures:
        line = Text.assemble(("FAIL", "bold red"), "  " + "; ".join(failures))
    else:
        line = Text.assemble(("PASS", "bold green"), f"  every output within rel_l2 <= {tolerance.rel_l2:g}")
    worst = worst_output(outputs)
    if worst is not None:  # the verdict line alone, as CI logs keep it, still says how close it was
        line.append(f"; worst output {worst.name}: " + metrics_line(worst))
    console.print(line)
