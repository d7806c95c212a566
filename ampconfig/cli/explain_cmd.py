"""``ampconfig explain``: every node's decision and why, with summary counts; optionally an HTML report."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ampconfig.cli.options import SharedOptions
from ampconfig.cli.output import print_result, stdout
from ampconfig.cli.typer_app import command
from ampconfig.cli.workbench import Workbench, workbench

_HELP = """Explain how MODEL is rewritten for a precision mode: every node with its op type, name, scope, dtype
before and after, list colour, the rule that decided it and the neighbour that caused it; then counts per
colour, dtype and rule, and the casts inserted. Nothing is run unless --range-check or --compare asks for it.

--range-check runs the fp32 model once on calibration inputs (--inputs/--input/--shape, as for run; --data or
--calibration-data for a data set) and keeps in float32 every node whose values leave the low type's range (rule
range_exceeds). Values given imply it: any input option, or --ranges FILE (read instead of running the model), so
explain decides as run does on the same values. --compare also runs the
rewritten model and adds each node's error to the report (see ampconfig compare). --html FILE writes one
self-contained HTML file (a picture of the model, one mark per node coloured by dtype with the casts drawn; a
searchable node table; with --compare an error plot), and the terminal gets the summary only; it may not be
any input of the call (refused with exit 2 before any work), a FIFO or /dev/null gets it as a stream.

--op-names ascend (or tensorflow) reads the mixlist and keep_dtype with those names and shows each node's op
type in them too (JSON: op_type_names), as a list for ATC names it; docs/op-names.md has the table.

Settings resolve as for every command: flags over --config over defaults. --target (default cuda) says
whose op info decides; deciding needs no device, and explain without --range-check/--compare loads no ONNX
Runtime. --device (default auto: CUDA when a session really gets it, else the CPU) says where
--range-check/--compare run the models.

[bold]Examples[/bold]

  ampconfig explain model.onnx --precision-mode allow_mix_precision

  ampconfig explain model.onnx -m allow_mix_precision --modify-mixlist mixlist.json --json

  ampconfig explain model.onnx -m force_fp16 --range-check --compare --html report.html

  ampconfig explain model.onnx --modify-mixlist ops_info.json --customize-dtypes customize.cfg --op-names ascend
"""


@command("explain", help=_HELP)
def explain(
    options: SharedOptions,
    *,
    compare: Annotated[bool, typer.Option("--compare", help="Also run both models and report per-node error.")] = False,
) -> None:
    from ampconfig.prove.calibration import has_value_inputs
    from ampconfig.report.explain import render_explain
    from ampconfig.report.html import render_html

    with workbench(options) as bench:
        # Values given (a ranges file, data, inputs) decide, as in every deciding command; so they do where the
        # fp32 model runs anyway (--compare).
        settings = bench.settings
        given_values = settings.ranges is not None or has_value_inputs(settings)
        if options.range_check or given_values or compare:
            payload, compare_data = _explain_with_runs(bench, options, compare)
        else:
            payload, compare_data = _explain_decisions(bench), None
        bench.write_html(lambda: render_html(payload, compare_data))
    if options.json_output:
        print_result(payload)
    else:  # with --html the node table is in the report, searchable; the terminal gets the summary
        table_in = None if bench.html is None else "the HTML report" if bench.html.is_stdout else str(options.html)
        render_explain(payload, stdout, table_in=table_in)


def _explain_decisions(bench: Workbench) -> dict[str, Any]:
    """Decide and rewrite only: no device and no ONNX Runtime (except to convert large weights quickly)."""
    from ampconfig.engine.in_place import rewrite_with_options
    from ampconfig.model_io.models import open_model
    from ampconfig.report.explain import explain_payload
    from ampconfig.settings.declared_files import declare_model

    settings = bench.settings
    model = open_model(settings.model_path, map_weights=True)
    declare_model(bench.guard, model)
    rewrite = rewrite_with_options(model, settings.rewrite_options)
    return explain_payload(rewrite, model=str(settings.model_path), op_names=settings.op_names)


def _explain_with_runs(
    bench: Workbench, options: SharedOptions, compare: bool
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """--range-check and/or --compare: calibration runs on the device (ONNX Runtime loads here). A data set given
    or --compare implies the range check."""
    from ampconfig.diagnose.reference_runs import compare_rewrite, prepare, range_report
    from ampconfig.prove.calibration import calibrate
    from ampconfig.report.compare import compare_payload
    from ampconfig.report.explain import explain_payload

    prepared = prepare(
        bench.settings, command="explain --range-check/--compare", guard=bench.guard, progress=bench.progress
    )
    compare_data: dict[str, Any] | None = None
    if compare:
        result = compare_rewrite(
            prepared,
            threshold=options.threshold,
            range_check=True,
            data_max=options.flags.data_max,
            progress=bench.progress,
        )
        rewrite, ranges = result.rewrite, result.range
        compare_data = compare_payload(result, prepared)
    else:
        # the calibration run makes (its numbers only: nothing kept but them), unless a ranges file is given
        measured = bench.settings.ranges is not None
        calibration = None if measured else calibrate(prepared, bench.progress)
        ranges = range_report(prepared, calibration, options.flags.data_max) if measured or calibration else None
        rewrite = prepared.rewrite(ranges.ranges if ranges is not None else None)
    payload = explain_payload(
        rewrite,
        model=str(bench.settings.model_path),
        range_report=ranges.to_dict() if ranges is not None else None,
        op_names=bench.settings.op_names,
    )
    payload["warnings"].extend([*prepared.inputs.warnings, *prepared.notes])
    if compare_data is not None:
        payload["compare"] = compare_data
    return payload, compare_data
