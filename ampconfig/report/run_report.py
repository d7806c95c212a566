"""Reports for people (rich tables) and for programs (one JSON object).

``run``: :class:`~ampconfig.prove.outcome.RunReport` holds everything a run found; :func:`run_payload` is its JSON
form and :func:`render_run` prints it as tables.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ampconfig.files.guard import shown_path
from ampconfig.inputs.feeds import PreparedInput
from ampconfig.prove.accuracy import OutputMetrics, OutputSpread, output_failures
from ampconfig.prove.outcome import RunReport
from ampconfig.report.tables import number_column, print_table
from ampconfig.report.words import counted

if TYPE_CHECKING:
    from ampconfig.diagnose.tune.forecast import FixForecast

# ------------------------------------------------------------------------------------------------------ JSON


def run_payload(report: RunReport, fix: FixForecast | None = None) -> dict[str, Any]:
    """The ``--json`` object of ``ampconfig run``."""
    return {
        "model": report.model,
        "example": report.example,
        "precision_mode": report.precision_mode,
        "precision_mode_source": report.mode_source,
        "low_dtype": report.low_dtype,
        "target": report.target,
        "device": report.device,
        "device_requested": report.device_requested,
        "provider": report.provider,
        "providers": report.providers,
        "tf32": report.tf32,
        "inputs": [item.to_dict() for item in report.inputs],
        "outputs": [item.to_dict() for item in report.outputs],
        "samples": report.samples,
        "spread": [item.to_dict() for item in report.spreads],
        "latency_ms": {
            "reference": report.latency_reference.to_dict(),
            "rewritten": report.latency_rewritten.to_dict(),
        },
        "speedup": _round(report.speedup),
        "nodes": report.nodes,
        "low_precision_nodes": report.low_precision_nodes,
        "dtype_counts": report.dtype_counts,
        "casts": report.casts,
        "casts_retargeted": report.casts_retargeted,
        "values_clamped": report.values_clamped,
        "tolerance": report.tolerance.to_dict(),
        "passed": report.passed,
        "failures": report.failures,
        "output": report.output_path,
        "notes": report.notes,
        "warnings": report.warnings,
        "fix": fix.to_dict() if fix is not None else None,
    }


def _round(value: float | None, digits: int = 4) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


# ----------------------------------------------------------------------------------------------------- tables


def _num(value: float | None, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return format(value, spec)


def _summary_table(report: RunReport) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    model = report.model + (f"  (bundled example {report.example!r})" if report.example else "")
    grid.add_row("model", model)
    grid.add_row("precision mode", f"{report.precision_mode}  ({report.mode_source}; low dtype {report.low_dtype})")
    grid.add_row("provider", _provider_line(report))
    for item in report.inputs:
        grid.add_row("input", _input_line(item))
    total = report.nodes
    grid.add_row(
        "rewrite",
        f"{report.low_precision_nodes} of {total} nodes in low precision, {counted(report.casts, 'cast')} inserted"
        + (f", {report.casts_retargeted} retargeted" if report.casts_retargeted else "")
        + (f", {report.values_clamped} constant values clamped" if report.values_clamped else ""),
    )
    if report.output_path:
        grid.add_row("written", shown_path(report.output_path))
    return grid


def _provider_line(report: RunReport) -> str:
    line = f"{report.provider}  (device {report.device}, asked {report.device_requested}; decided for {report.target})"
    if report.device == "cuda":
        ref_tf32 = "on" if report.tf32.get("reference") else "off"
        rew_tf32 = "on" if report.tf32.get("rewritten") else "off"
        line += f"; TF32 reference {ref_tf32}, rewritten {rew_tf32}"
    return line


def _input_line(item: PreparedInput) -> str:
    shape = "[" + ", ".join(str(d) for d in item.shape) + "]"
    line = f"{item.name}  {item.dtype} {shape}  {item.values}"
    if item.defaulted_dims:
        line += "  (defaulted: " + ", ".join(f"{k}={v}" for k, v in item.defaulted_dims.items()) + ")"
    return line


def _outputs_table(report: RunReport) -> Table:
    table = Table(title="accuracy vs fp32 reference", title_justify="left")
    table.add_column("output")
    table.add_column("shape")
    for header in ("rel L2", "max abs", "cosine", "non-finite", "arg-max agree"):
        number_column(table, header)
    table.add_column("result", no_wrap=True)
    for item in report.outputs:
        ok = not output_failures(item, report.tolerance)
        table.add_row(
            item.name,
            output_shape(item),
            _num(item.rel_l2),
            _num(item.max_abs),
            _num(item.cosine, ".6f"),
            str(item.nonfinite),
            "-" if item.argmax_agreement is None else f"{item.argmax_agreement:.1%}",
            Text("ok", style="green") if ok else Text("FAIL", style="bold red"),
        )
    return table


def output_shape(item: OutputMetrics) -> str:
    """The output's shape; "reference -> rewritten" where the rewrite changed it."""
    shape = "[" + ", ".join(str(d) for d in item.shape) + "]"
    if item.rewritten_shape is None:
        return shape
    return shape + " -> [" + ", ".join(str(d) for d in item.rewritten_shape) + "]"


def spread_table(spreads: list[OutputSpread]) -> Table:
    """Each output's relative L2 error over the samples of a data set."""
    samples = spreads[0].samples if spreads else 0
    table = Table(
        title=f"rel L2 over {samples} samples (each output's row above is its worst sample)", title_justify="left"
    )
    table.add_column("output")
    for header in ("worst", "p95", "median", "worst sample", "failing samples"):
        number_column(table, header)
    for item in spreads:
        table.add_row(
            item.name,
            _num(item.worst),
            _num(item.p95),
            _num(item.median),
            str(item.worst_sample),
            f"{item.failing_samples} of {item.samples}",
        )
    return table


def _latency_table(report: RunReport) -> Table:
    table = Table(title="latency (ms)", title_justify="left")
    table.add_column("model")
    for header in ("median", "p90", "runs"):
        number_column(table, header)
    for label, latency in (
        ("fp32 reference", report.latency_reference),
        ("rewritten", report.latency_rewritten),
    ):
        runs = f"{latency.warmup} warm-up + {latency.iterations}"
        table.add_row(label, f"{latency.median_ms:.3f}", f"{latency.p90_ms:.3f}", runs)
    return table


def _verdict(report: RunReport) -> Text:
    tol = report.tolerance
    bounds = [f"rel_l2 <= {tol.rel_l2:g}"]
    if tol.max_abs is not None:
        bounds.append(f"max_abs <= {tol.max_abs:g}")
    if tol.min_cosine is not None:
        bounds.append(f"cosine >= {tol.min_cosine:g}")
    text = Text()
    if report.passed:
        text.append("PASS", style="bold green")
        text.append(f"  every output within tolerance ({', '.join(bounds)})")
    else:
        text.append("FAIL", style="bold red")
        text.append(f"  tolerance ({', '.join(bounds)}) not met: " + "; ".join(report.failures))
    worst = worst_output(report.outputs)
    if worst is not None:  # the verdict line alone, as CI logs keep it, still says how close it was
        text.append(f"; worst output {worst.name}: " + metrics_line(worst))
    return text


def worst_output(outputs: Sequence[OutputMetrics]) -> OutputMetrics | None:
    """The float output with the largest relative L2 error (an undefined error counts as the largest)."""
    measured = [item for item in outputs if item.rel_l2 is not None]
    return max(measured, key=_error_rank, default=None)


def _error_rank(item: OutputMetrics) -> float:
    error = item.rel_l2
    return error if error is not None and math.isfinite(error) else math.inf


def metrics_line(item: OutputMetrics) -> str:
    """An output's errors on one line ("rel L2 0.000345, max abs 0.00138, cosine 0.999999")."""
    return f"rel L2 {_num(item.rel_l2)}, max abs {_num(item.max_abs)}, cosine {_num(item.cosine, '.6f')}"


def render_run(report: RunReport, console: Console, fix: FixForecast | None = None) -> None:
    """Print the report of ``ampconfig run`` for people."""
    print_table(console, _summary_table(report))
    console.print()
    print_table(console, _outputs_table(report))
    if report.spreads:
        print_table(console, spread_table(report.spreads))
    print_table(console, _latency_table(report))
    speed = "-" if report.speedup is None else f"{report.speedup:.2f}x"
    console.print(f"speedup (reference median / rewritten median): {speed} on {report.provider}")
    for note in report.notes:
        console.print(Text("note: " + note, style="dim"))
    for warning in report.warnings:
        console.print(Text("warning: " + warning, style="yellow"))
    console.print(_verdict(report))
    for line in fix_lines(fix):
        console.print(line, markup=False, highlight=False)


def fix_lines(fix: FixForecast | None) -> list[str]:
    """After a FAIL, the last lines: where the error is, and the tune command that would fix it."""
    if fix is None:
        return []
    lines = []
    if fix.first_bad is not None:
        lines.append(
            f"first bad node: {fix.first_bad} (rel L2 {_num(fix.first_bad_input_error)} at its input, "
            f"{_num(fix.first_bad_error)} at its output)"
        )
    if fix.contributors:
        named = ", ".join(f"{item.name} ({item.op_type}, {_num(item.contribution)})" for item in fix.contributors)
        lines.append(f"the error comes most from: {named}")
    command = " ".join(shlex.quote(part) for part in fix.command) if fix.command else "ampconfig tune"
    if fix.runs is not None:
        lines.append(
            f"fix: {command}  (predicted: {fix.runs} model runs, {len(fix.pins)} node(s) kept float32, "
            f"{fix.low_nodes} of {fix.low_nodes_all_low} low-precision nodes kept low, rel L2 about "
            f"{_num(fix.predicted_error)})"
        )
    else:
        lines.append(f"fix: {command}  (no prediction: {fix.reason})")
    lines.append(f"(measured with {fix.measured_runs} more model runs, as tune measures)")
    return lines
