"""``ampconfig ops-info import-ascend`` (the list colours of an Ascend ops-info file) and ``import-kernels`` (a
target's op info from a dump of ONNX Runtime's kernel registry)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ampconfig.cli import ops_info_cmd as ops_info
from ampconfig.cli.options import output_option
from ampconfig.cli.output import output_guard, print_json, print_warning, stderr
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.targets import DEFAULT_TARGET

if TYPE_CHECKING:  # imported where used: `ampconfig --help` loads none of the settings machinery
    from ampconfig.documents.ascend_ops_info import AscendImport


@ops_info.subcommand("import-ascend")
def import_ascend_command(
    ascend_file: Annotated[
        Path, typer.Argument(metavar="FILE", help="An Ascend ops-info JSON (aic-<soc>-ops-info.json), edited or not.")
    ],
    output: Annotated[
        Path,
        output_option("--output", "-o", help="The op info file to write.", show_default=False),
    ],
    target: Annotated[
        str, typer.Option("--target", "-t", metavar="cpu|cuda", help="Whose op info it starts from: cpu or cuda.")
    ] = DEFAULT_TARGET,
    op_names: Annotated[
        str,
        typer.Option("--op-names", metavar="ascend|tensorflow|onnx", help="Whose op type names FILE uses."),
    ] = "ascend",
    json_output: Annotated[bool, typer.Option("--json", help="Print what was mapped as one JSON object.")] = False,
) -> None:
    """Start a target's op info from an Ascend ops-info file: its list colours, on the target's kernels.

    Each op's "precision_reduce": {"flag": "true"} makes it white, "false" black, and no flag gray, as on
    Ascend; every other field is Ascend's kernel description and is ignored. Op names are read as Ascend's and
    mapped to ONNX op types (Conv2D -> Conv, MatMulV2 and BatchMatMulV2 -> MatMul; docs/op-names.md); the names
    with no ONNX op are reported and left out. The target's op info (dtypes, kernel facts) is kept; only the
    colours of the ops the file names change. Check the result with `ampconfig validate OUT`.

    Example:

      ampconfig ops-info import-ascend aic-ascend910-ops-info.json --target cuda -o cuda-from-ascend.json
    """
    from ampconfig.documents.ascend_ops_info import ascend_colours, with_ascend_colours
    from ampconfig.documents.parsing import parse_document, read_text
    from ampconfig.opinfo.library import ops_info_path
    from ampconfig.opinfo.op_names import OP_NAME_CHOICES

    target = ops_info.check_target(target)
    if op_names not in OP_NAME_CHOICES:
        raise AmpconfigError(f"unknown --op-names {op_names!r}", hint="choices: " + ", ".join(OP_NAME_CHOICES))
    with output_guard() as guard:
        guard.read("Ascend ops-info file (FILE)", ascend_file)
        destination = guard.output(ops_info.OUTPUT_ROLE, output)
        document = parse_document(read_text(ascend_file, "Ascend ops-info file"), str(ascend_file), "json")
        found = ascend_colours(document, op_names)
        errors = [problem for problem in found.problems if problem.severity.value == "error"]
        if errors:
            raise AmpconfigError(errors[0].message, file=errors[0].file, line=errors[0].line, problems=errors)
        base = ops_info.read_ops_info(ops_info_path(target))
        ops_info.write_ops_info(with_ascend_colours(base, found, ascend_file.name), destination, guard)
    if json_output:
        print_json({"ok": True, "exit_code": 0, "output": str(output), "target": target, **found.to_dict()})
        return
    for problem in found.problems:
        print_warning(problem.format())
    stderr.print(f"wrote {output}: {target} op info with " + _ascend_summary(found, ascend_file.name), markup=False)


def _ascend_summary(found: AscendImport, name: str) -> str:
    from ampconfig.opinfo.library import Colour

    counts = {colour: sum(1 for c in found.colours.values() if c is colour) for colour in Colour}
    unmapped = ": " + ", ".join(found.unmapped) if found.unmapped else ""
    return (
        f"the colours of {len(found.colours)} ONNX ops from {name} ({counts[Colour.WHITE]} white, "
        f"{counts[Colour.BLACK]} black, {counts[Colour.GRAY]} gray); {len(found.unmapped)} Ascend op(s) unmapped"
        + unmapped
    )


@ops_info.writing_subcommand("import-kernels")
def import_kernels_command(
    written: ops_info.WrittenOpInfo,
    dump: Annotated[Path, typer.Argument(help="Kernel registry dump (benchmarks/dump_kernels.py).")],
    probe: Annotated[
        Path | None,
        typer.Option(
            "--probe",
            help="An op info file `ops-info probe` measured on the same target: its measured claims win.",
        ),
    ] = None,
) -> None:
    """Write a target's op info from a dump of ONNX Runtime's registered kernels.

    The dump is ORT's own kernel registry (op, domain, provider, version range, type constraints), written by
    `python benchmarks/dump_kernels.py DUMP.json` on a machine where it works (for cuda: one with the CUDA
    libraries; listing the registry crashes onnxruntime-gpu without them, so the script lists it in a child
    process). Per op, the dtypes registered kernels serve at opsets 13, 17 and the newest schema version with a
    kernel (ORT serves an open-ended registration only for the schema version it starts at); a dtype counts when
    one kernel accepts it for every type variable the rewrite moves. dtype_source is 'kernel-registry' and the
    file records the dump's ORT version. Registered kernels are native kernels. Strategy ops the dump does not
    list are 'not-probed'.

    With --probe, an op the probe measured (real sessions, run on data) keeps the probe's claim: a registered
    kernel can still refuse a dtype at run time (CUDA Resize reads a non-empty roi as float32). Ops the probe could
    not measure take the registry's claim, with the probe's reason in `note`.

    Example:

      python benchmarks/dump_kernels.py kernels.json && ampconfig ops-info import-kernels kernels.json --target cuda

      ampconfig ops-info import-kernels kernels.json --target cuda --probe cuda-probe.json
    """
    from ampconfig.opinfo.build import registry_document
    from ampconfig.opinfo.kernel_dump import dump_claims, read_kernel_dump

    target, provider = written.target, written.provider
    with output_guard() as guard:
        guard.read("kernel dump (DUMP)", dump)
        guard.read("measured op info (--probe)", probe)
        destination = guard.output(ops_info.OUTPUT_ROLE, written.path())
        loaded = read_kernel_dump(dump)
        version = loaded.onnxruntime_version or "unknown"
        measured = (probe, ops_info.read_ops_info(probe, "measured op info")) if probe is not None else None
        document = registry_document(dump.name, dump_claims(loaded, provider), target, provider, version, measured)
        ops_info.write_ops_info(document, destination, guard)
    ops_info.report_written(document.ops, destination.path, 0.0)
    if loaded.onnxruntime_version is None:
        print_warning(f"{dump} does not say which onnxruntime it was dumped from; recorded as 'unknown'")
