"""``ampconfig ops-info probe`` (measure the target's kernels in ONNX Runtime) and ``import-table`` (read them from
ONNX Runtime's published kernel table, for targets that cannot be measured here)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from ampconfig.cli import ops_info_cmd as ops_info
from ampconfig.cli.options import count_between, output_option
from ampconfig.cli.output import output_guard, stderr

#: probe's --target: the target measured, by default the one every machine has.
_MEASURED_TARGET = Annotated[
    str,
    typer.Option(
        "--target",
        "-t",
        metavar="cpu|cuda",
        help="Execution target to measure: cpu or cuda. Probing runs every op, so the default is the target "
        "every machine has (cpu); --target cuda needs a GPU.",
    ),
]


@ops_info.writing_subcommand("probe", _MEASURED_TARGET, "cpu")
def probe_command(
    written: ops_info.WrittenOpInfo,
    ops: Annotated[
        str | None,
        typer.Option("--ops", help="Comma-separated op keys to probe (default: every op of the strategy)."),
    ] = None,
    details: Annotated[
        Path | None,
        output_option("--details", help="Also write every probe verdict (op, opset, dtype, model, status, message)."),
    ] = None,
) -> None:
    """Measure which float dtypes the target runs each op in, and which natively; write its op info file.

    For every op (or those in --ops) and each of float32/float16/bfloat16, one-node probe models (ONNX's node
    test cases retyped as the rewrite retypes, else a model built from the schema) are loaded in ONNX Runtime
    with the target's provider alone and run on the test case's data (or random inputs where shapes are known).
    A dtype goes into `dtypes` when every probe that runs in float32 also runs in it, natively or through casts
    ORT inserts (ORT CPU's fp16 fallback); into `native_dtypes` when every one runs without inserted casts.
    Control-flow and sequence ops, which cannot be retyped, stay float32 only. Colours come from the built-in
    strategy.

    Each op is measured at opsets 13 and 17 and at its newest schema version (up to 23) the provider has a kernel
    for: ONNX Runtime serves an open-ended kernel registration only for the schema version it starts at, so an
    op can have a kernel at opset 17 and none at 22. `dtypes` holds at every measured opset with a kernel,
    `dtypes_by_opset` and `no_kernel_opsets` say what each opset gave. An op no float32 model could be measured
    for is 'not-probed' with the reason in `note`, never an empty claim.

    With --ops and an existing file of the same target at the output path, the other entries are kept.

    Examples:

      ampconfig ops-info probe --target cpu

      ampconfig ops-info probe --target cpu --ops Relu,MatMul --output /tmp/cpu.json
    """
    from ampconfig.opinfo.build import probe_document, probed, selected_keys
    from ampconfig.opinfo.kernels import measure_op_across_opsets, onnxruntime_version, require_provider

    target, provider = written.target, written.provider
    require_provider(provider)  # onnxruntime-gpu lists CUDA even where its libraries are missing
    keys = selected_keys(ops)
    path = written.path()
    with output_guard() as guard:
        destination = guard.output(ops_info.OUTPUT_ROLE, path)  # checked before minutes of probing
        details_destination = guard.output("probe details (--details)", details) if details is not None else None
        started, version = time.monotonic(), onnxruntime_version()
        found = probed(keys, target, version, lambda key: measure_op_across_opsets(key, provider))
        existing = (
            ops_info.read_ops_info(destination.path) if ops and destination.path.is_file() else None
        )  # a partial probe keeps the other ops
        ops_info.write_ops_info(probe_document(found, target, provider, version, ops, existing), destination, guard)
        if details_destination is not None:
            guard.write_text(details_destination, json.dumps(found.verdicts, indent=1) + "\n")
        ops_info.report_written(found.entries, destination.path, time.monotonic() - started)
    if found.float32_only:
        stderr.print(
            f"float32 only, no probe model retypes to a low dtype (control flow, sequences, or a schema that "
            f"allows float32 only) ({len(found.float32_only)}): " + ", ".join(found.float32_only),
            markup=False,
        )


@ops_info.writing_subcommand("import-table")
def import_table_command(
    written: ops_info.WrittenOpInfo,
    table: Annotated[Path, typer.Argument(help="Local copy of onnxruntime's docs/OperatorKernels.md.")],
    ort_version: Annotated[
        str, typer.Option("--ort-version", help="ONNX Runtime version the table documents.")
    ] = "1.31.1",
    opset: Annotated[
        int,
        typer.Option("--opset", help="Read the kernel rows in force at this opset.", callback=count_between(1, 1000)),
    ] = 23,
) -> None:
    """Write a target's op info from ONNX Runtime's published kernel table instead of measuring it.

    For targets this machine cannot run (CUDA without a GPU). dtype_source is 'kernel-table'; ops of the
    strategy the table does not list are 'not-probed'. The table lists registered kernels, so its dtypes are
    native ones (native_dtypes = dtypes; CUDA sessions run with CPU fallback disabled), but it can claim a dtype
    that a real session still refuses; prefer `probe` where the provider works.

    Example:

      ampconfig ops-info import-table OperatorKernels.md --target cuda
    """
    from ampconfig.opinfo.build import table_document
    from ampconfig.opinfo.kernels import kernel_table_dtypes

    target, provider, path = written.target, written.provider, written.path()
    with output_guard() as guard:
        guard.read("kernel table (TABLE)", table)
        destination = guard.output(ops_info.OUTPUT_ROLE, path)
        listed = kernel_table_dtypes(table, provider, opset)
        document = table_document(table.name, listed, target, provider, ort_version, opset)
        ops_info.write_ops_info(document, destination, guard)
    ops_info.report_written(document.ops, destination.path, 0.0)
