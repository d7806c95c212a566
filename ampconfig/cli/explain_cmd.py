"""``ampconfig explain``: every node's decision and why, with summary counts; optionally an HTML report."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ampconfig.cli.app import command
from ampconfig.cli.options import (
    HTML_ROLE,
    ConfigOpt,
    DataMaxOpt,
    HtmlOpt,
    InputFilesOpt,
    InputsOpt,
    JsonOpt,
    KeepDtypeOpt,
    MixlistOpt,
    ModelArg,
    ModeOpt,
    SeedOpt,
    ShapesOpt,
    TargetOpt,
    ThresholdOpt,
)
from ampconfig.cli.output import print_json, stderr, stdout
from ampconfig.diagnose.locate import DEFAULT_THRESHOLD

_HELP = """Explain how MODEL is rewritten for a precision mode: every node with its op type, name, scope, dtype
before and after, list colour, the rule that decided it and the neighbour that caused it; then counts per
colour, dtype and rule, and the casts inserted. Nothing is run unless --range-check or --compare asks for it.

--range-check runs the fp32 model once on calibration inputs (--inputs/--shape, as for run) and keeps in
float32 every node whose values leave the low type's range (rule range_overflow). --compare also runs the
rewritten model and adds each node's error to the report (see ampconfig compare). --html FILE writes one
self-contained HTML file (searchable node table; with --compare an error plot); it may not be any input of
the call (refused with exit 2 before any work), a FIFO or /dev/null gets it as a stream.

Settings resolve as for [bold]ampconfig run[/bold]: flags over --config over defaults.

[bold]Examples[/bold]

  ampconfig explain model.onnx --precision-mode allow_mix_precision

  ampconfig explain model.onnx -m allow_mix_precision --modify-mixlist mixlist.json --json

  ampconfig explain model.onnx -m force_fp16 --range-check --compare --html report.html
"""


@command("explain", help=_HELP)
def explain(
    model: ModelArg = None,
    config: ConfigOpt = None,
    precision_mode: ModeOpt = None,
    modify_mixlist: MixlistOpt = None,
    keep_dtype: KeepDtypeOpt = None,
    target: TargetOpt = None,
    inputs_npz: InputsOpt = None,
    input_files: InputFilesOpt = None,
    shapes: ShapesOpt = None,
    seed: SeedOpt = None,
    range_check: Annotated[
        bool,
        typer.Option("--range-check/--no-range-check", help="Keep nodes whose calibration values overflow fp32."),
    ] = False,
    data_max: DataMaxOpt = None,
    compare: Annotated[bool, typer.Option("--compare", help="Also run both models and report per-node error.")] = False,
    threshold: ThresholdOpt = DEFAULT_THRESHOLD,
    json_output: JsonOpt = False,
    html: HtmlOpt = None,
) -> None:
    from ampconfig.diagnose.calibrate import compare_rewrite, prepare, range_report, reference_run
    from ampconfig.files.guard import OutputGuard
    from ampconfig.prove.request_files import declare_inputs
    from ampconfig.prove.run import RunFlags, resolve_request
    from ampconfig.report.compare import compare_payload
    from ampconfig.report.explain import explain_payload, render_explain
    from ampconfig.report.html import render_html

    flags = RunFlags(
        model=model,
        config=config,
        precision_mode=precision_mode,
        modify_mixlist=modify_mixlist,
        keep_dtype=keep_dtype,
        target=target,
        inputs_npz=inputs_npz,
        input_files=list(input_files or []),
        shapes=list(shapes or []),
        seed=seed,
    )
    request = resolve_request(flags)
    with OutputGuard() as guard:
        declare_inputs(guard, request, flags)
        report = guard.output(HTML_ROLE, html) if html is not None else None  # refused before any work
        prepared = prepare(
            request, need_inputs=range_check or compare, command="explain --range-check/--compare", guard=guard
        )
        compare_data: dict[str, Any] | None = None
        ranges = None
        if compare:
            result = compare_rewrite(prepared, threshold=threshold, range_check=range_check, data_max=data_max)
            rewrite, ranges = result.rewrite, result.range
            compare_data = compare_payload(result, prepared)
        elif range_check:
            ranges = range_report(prepared, reference_run(prepared), data_max)
            rewrite = prepared.rewrite(ranges.overflow_nodes)
        else:
            rewrite = prepared.rewrite()
        payload = explain_payload(
            rewrite, model=str(request.model_path), range_report=ranges.to_dict() if ranges is not None else None
        )
        if compare_data is not None:
            payload["compare"] = compare_data
        if report is not None:
            written = guard.write_text(report, render_html(payload, compare_data))
            stderr.print(f"wrote {written}", markup=False)
    if json_output:
        print_json(payload)
    else:
        render_explain(payload, stdout)
