"""``ampconfig compare``: per-node error of the rewritten model against fp32, and the first node that goes bad."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ampconfig.cli.options import SharedOptions
from ampconfig.cli.output import print_result, stdout
from ampconfig.cli.typer_app import command
from ampconfig.cli.workbench import workbench
from ampconfig.errors import EXIT_CHECK_FAILED, EXIT_OK

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads none of the runner
    from ampconfig.diagnose.reference_runs import CompareResult, Prepared

_HELP = """Run the fp32 model and its rewrite on the same inputs with every intermediate float tensor exposed,
align the tensors by name and rank the nodes by the error they add: a node's relative L2 error over the largest
error of its float inputs. Names the first node (topological order) whose error jumps above --threshold, and
every node that overflows (inf/NaN in the rewrite, or fp32 values beyond the low type's range).

Settings and inputs resolve as for [bold]ampconfig run[/bold]: --target (default cuda) decides, --device
(default auto: CUDA when a session really gets it, else the CPU) runs. Exit codes: 0 the outputs meet the tolerance,
1 they do not, 2 usage or input error.

[bold]Examples[/bold]

  ampconfig compare model.onnx -m allow_mix_precision --shape input_ids=1x128

  ampconfig compare model.onnx -m force_fp16 --inputs batch.npz --json

  ampconfig compare model.onnx -m force_fp16 --range-check --html report.html
"""


@command("compare", help=_HELP)
def compare(options: SharedOptions) -> None:
    from ampconfig.diagnose.reference_runs import compare_rewrite, prepare
    from ampconfig.report.compare import compare_payload, render_compare
    from ampconfig.report.html import render_html

    with workbench(options) as bench:
        prepared = prepare(bench.settings, command="compare", guard=bench.guard, progress=bench.progress)
        result = compare_rewrite(
            prepared,
            threshold=options.threshold,
            range_check=options.range_check,
            data_max=options.flags.data_max,
            progress=bench.progress,
        )
        payload = compare_payload(result, prepared)
        bench.write_html(lambda: render_html(_explained(result, prepared), payload, command="compare"))
    exit_code = EXIT_OK if result.passed else EXIT_CHECK_FAILED
    if options.json_output:
        print_result(payload, exit_code)
    else:
        render_compare(result, prepared, stdout)
    raise typer.Exit(exit_code)


def _explained(result: CompareResult, prepared: Prepared) -> dict[str, Any]:
    """The explain report of the rewrite compared, for the HTML report."""
    from ampconfig.report.explain import explain_payload

    ranges = result.range.to_dict() if result.range is not None else None
    return explain_payload(result.rewrite, model=str(prepared.request.model_path), range_report=ranges)
