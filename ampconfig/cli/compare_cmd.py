"""``ampconfig compare``: per-node error of the rewritten model against fp32, and the first node that goes bad."""

from __future__ import annotations

import typer

from ampconfig.cli.app import command
from ampconfig.cli.options import (
    HTML_ROLE,
    CalibrationDataOpt,
    ClampValuesOpt,
    ConfigOpt,
    CustomizeDtypesOpt,
    DataMaxOpt,
    DataOpt,
    DeviceOpt,
    HtmlOpt,
    InputFilesOpt,
    InputsOpt,
    JsonOpt,
    KeepDtypeOpt,
    KeepIoTypesOpt,
    MixlistOpt,
    ModelArg,
    ModeOpt,
    OpNamesOpt,
    RangeCheckOpt,
    SeedOpt,
    ShapesOpt,
    TargetOpt,
    ThresholdOpt,
    ToleranceOpt,
    resolved_settings,
)
from ampconfig.cli.output import output_guard, print_json, stderr, stdout
from ampconfig.cli.progress import progress_bar, shown
from ampconfig.errors import EXIT_CHECK_FAILED, EXIT_OK
from ampconfig.settings.values import DEFAULT_THRESHOLD

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
def compare(
    ctx: typer.Context,
    model: ModelArg = None,
    config: ConfigOpt = None,
    precision_mode: ModeOpt = None,
    modify_mixlist: MixlistOpt = None,
    keep_dtype: KeepDtypeOpt = None,
    customize_dtypes: CustomizeDtypesOpt = None,
    op_names: OpNamesOpt = None,
    target: TargetOpt = None,
    device: DeviceOpt = None,
    keep_io_types: KeepIoTypesOpt = None,
    inputs_npz: InputsOpt = None,
    data: DataOpt = None,
    calibration_data: CalibrationDataOpt = None,
    input_files: InputFilesOpt = None,
    shapes: ShapesOpt = None,
    seed: SeedOpt = None,
    tolerance: ToleranceOpt = None,
    threshold: ThresholdOpt = DEFAULT_THRESHOLD,
    range_check: RangeCheckOpt = True,
    data_max: DataMaxOpt = None,
    clamp_values: ClampValuesOpt = None,
    json_output: JsonOpt = False,
    html: HtmlOpt = None,
) -> None:
    from ampconfig.diagnose.calibrate import compare_rewrite, prepare
    from ampconfig.prove.request_files import declare_inputs
    from ampconfig.report.compare import compare_payload, render_compare
    from ampconfig.report.explain import explain_payload
    from ampconfig.report.html import render_html

    request = resolved_settings(ctx)
    with output_guard() as guard, progress_bar(shown(json_output)) as progress:
        declare_inputs(guard, request)
        report = guard.output(HTML_ROLE, html) if html is not None else None  # refused before any work
        prepared = prepare(request, command="compare", guard=guard)
        result = compare_rewrite(
            prepared, threshold=threshold, range_check=range_check, data_max=data_max, progress=progress
        )
        payload = compare_payload(result, prepared)
        if report is not None:
            explained = explain_payload(
                result.rewrite,
                model=str(prepared.request.model_path),
                range_report=result.range.to_dict() if result.range is not None else None,
            )
            written = guard.write_text(report, render_html(explained, payload, command="compare"))
            stderr.print(f"wrote {written}", markup=False)
    if json_output:
        print_json(payload)
    else:
        render_compare(result, prepared, stdout)
    raise typer.Exit(EXIT_OK if result.passed else EXIT_CHECK_FAILED)
