"""The one rewrite path: an input source admitted (repaired, its opset raised for bfloat16), then the pipeline's steps
(:mod:`ampconfig.rewrite.pipeline`), in place, and the result with everything it said.

Every caller ends here: the API and the commands (:func:`rewrite_with_options`: a path or proto opened once), and
the onnx-ir pass (:func:`rewrite_ir_model`: the ``ir.Model`` it is handed). Each hands the user's choices
(:class:`~ampconfig.decide.rewrite_options.RewriteOptions`) and what measurements found
(:class:`~ampconfig.decide.measured_facts.MeasuredFacts`) apart.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
import onnx_ir as ir

from ampconfig.decide.decisions import nothing_lowered
from ampconfig.decide.measured_facts import MeasuredFacts
from ampconfig.decide.ranges_input import coverage_warnings, read_ranges
from ampconfig.decide.rewrite_options import RewriteOptions
from ampconfig.decide.value_limits import ValueRanges
from ampconfig.engine.read_settings import ReadOptions, read_options
from ampconfig.engine.sources import InputSource, IrSource, ProtoSource, Runnable
from ampconfig.errors import AmpconfigError
from ampconfig.model_io.ir_version import output_ir_version
from ampconfig.model_io.models import OpenedModel, light_proto, open_model
from ampconfig.model_io.node_checks import NodePieces
from ampconfig.precision_modes import PrecisionMode
from ampconfig.rewrite.names import with_node_names
from ampconfig.rewrite.pipeline import PipelineOutcome, admit_input, run_pipeline
from ampconfig.rewrite.results import RewriteResult
from ampconfig.rewrite.steps.run_context import Admission, InputAdmission

if TYPE_CHECKING:
    from ampconfig.runner.acceptance import LoadCheck

log = logging.getLogger(__name__)


def rewrite_with_options(
    model: str | Path | onnx.ModelProto | OpenedModel,
    options: RewriteOptions,
    facts: MeasuredFacts | None = None,
    *,
    ranges: Path | None = None,
) -> RewriteResult:
    """The rewrite of ``model`` with the user's ``options`` and what measurements found (``facts``): ``model``
    opened (a path or proto read into an ``ir.Model`` once), ``ranges`` (a value ranges file, the API's) read
    against it, then rewritten in place (:func:`rewrite_in_place`)."""
    if not isinstance(model, (str, os.PathLike, onnx.ModelProto, OpenedModel)):
        from ampconfig.documents.parsing import describe_value  # the file formats: only for the message

        raise AmpconfigError(
            f"model must be a model file's path, an onnx.ModelProto or an opened model, got {describe_value(model)}",
            hint="see ampconfig.rewrite_model_detailed's model",
        )
    read = read_options(options)
    source = ProtoSource(open_model(model, map_weights=True))
    result, _ = rewrite_in_place(source, read, _with_ranges(facts or MeasuredFacts(), ranges, options, source))
    return result


def rewrite_ir_model(
    model: ir.Model, options: RewriteOptions, facts: MeasuredFacts | None = None, ranges: Path | None = None
) -> tuple[RewriteResult, bool]:
    """Rewrite ``model`` in place (what :class:`ampconfig.MixedPrecisionPass` runs), and whether it changed: the one
    path, on ``model`` itself. Its admission reads a light proto of it (graph, types and shapes; its large weights
    stay where they are), and no proto of its weights is made, except for an input the ONNX checker rejects: ONNX
    Runtime then judges it, from its bytes."""
    read = read_options(options)
    source = IrSource(model)
    return rewrite_in_place(source, read, _with_ranges(facts or MeasuredFacts(), ranges, options, source))


def _with_ranges(
    facts: MeasuredFacts, ranges: Path | None, options: RewriteOptions, source: InputSource
) -> MeasuredFacts:
    """``facts`` with the ranges file read for the input as handed in (checked against the source's identity, made
    only when there is a ranges file), else the ranges given, with the margin ``data_max``."""
    if ranges is not None:
        proto, path, left_out = source.identity()
        value_ranges = read_ranges(ranges, proto, options.data_max, model_path=path, left_out=left_out)
    elif facts.value_ranges is not None and options.data_max is not None:
        value_ranges = replace(facts.value_ranges, margin=options.data_max)
    else:
        return facts
    return replace(facts, value_ranges=value_ranges)


def _raises_opset(mode: PrecisionMode) -> bool:
    """Whether the mode lowers nodes to bfloat16 (which needs opset 13): not allow_fp32_to_bf16, which only keeps
    what is bfloat16 already."""
    return mode.low_dtype == "bfloat16" and mode is not PrecisionMode.ALLOW_FP32_TO_BF16


def rewrite_in_place(source: InputSource, read: ReadOptions, facts: MeasuredFacts) -> tuple[RewriteResult, bool]:
    """The one rewrite path, in place on ``source.model``: admitted (repaired, its opset raised for bfloat16), then
    the pipeline's steps. Returns the result and whether the model changed."""
    model, options, warnings = source.model, read.options, read.warnings
    value_ranges = facts.value_ranges
    if value_ranges is not None and value_ranges.file is not None:  # said by every command, the API and the pass
        from ampconfig.instrument.expose import measured_value_keys  # instrument/: only with a ranges file

        warnings.extend(coverage_warnings(value_ranges, measured_value_keys(source.light, source.constant_names())))
    ir_version = output_ir_version(source.declared(), source.path)
    admission = InputAdmission(source.light)

    def accept(admitted: ir.Model, admission: InputAdmission) -> tuple[Runnable, LoadCheck]:
        # The rare path: the checker rejects the (repaired) input, so ONNX Runtime decides (imported only here).
        from ampconfig.runner.acceptance import require_onnx_runtime_loads

        repaired = any(repair.changed for repair in admission.repairs)
        runnable = source.for_onnx_runtime(admitted, repaired, ir_version.version)
        return runnable, require_onnx_runtime_loads(runnable, admission.checker_errors, source.path, options.target)

    raise_opset = _raises_opset(options.precision_mode)
    admitted, accepted = admit_input(model, admission, raise_opset=raise_opset, accept=accept)
    warnings.extend(repair.message() for repair in admission.repairs)
    warnings.extend(source.dropped())
    warnings.extend(admission.warnings)
    input_light = admission.light
    checked = Admission(
        admission.types,
        input_passes=not admission.checker_errors,
        input_pieces=lambda: NodePieces(with_node_names(light_proto(input_light))),
    )
    outcome = run_pipeline(model, read.setup(facts), checked, source.restart(raise_opset), ir_version.version)
    if accepted is not None:  # the checker rejected the input: ONNX Runtime judged it, and judges the output
        from ampconfig.runner.acceptance import confirm_output_runs

        runtime_input, input_check = accepted
        skeleton = outcome.run.skeleton
        assert skeleton is not None  # the check step made it
        written = source.output_for_check(skeleton)
        note = confirm_output_runs(
            runtime_input, admission.checker_errors, source.path, outcome.model, written, options.target, input_check
        )
        outcome.warnings.append(note)
    result = _result(outcome, read, value_ranges, source.external_files, ir_version.note, admission.opset_raised)
    _log_summary(result)
    return result, admitted or outcome.modified


def _result(
    outcome: PipelineOutcome,
    read: ReadOptions,
    value_ranges: ValueRanges | None,
    input_files: frozenset[Path],
    ir_version_note: str | None,
    opset_raised: int | None,
) -> RewriteResult:
    run = outcome.run
    stats = run.stats
    assert stats is not None  # the apply step made them
    warnings = [*read.warnings, *outcome.warnings]
    if ir_version_note:
        warnings.append(ir_version_note)
    stats.opset_raised_to = opset_raised
    stats.layer_norms_folded = len(run.folded)
    warnings.extend(run.keep_warnings)
    warnings.extend(value_ranges.notes if value_ranges is not None else ())
    # Counted while the tensors were converted (the large ones while the output was serialised for its check).
    warnings.extend(clamped.warning() for clamped in stats.clamped)
    mode = read.options.precision_mode
    if mode.is_mixed or mode is PrecisionMode.FORCE_FP16:  # the modes that lower nodes by themselves
        nothing = nothing_lowered(run.decisions, mode.low_dtype)
        warnings.extend([nothing] if nothing else [])
    return RewriteResult(
        ir_model=outcome.model,
        decisions=run.decisions,
        stats=stats,
        precision_mode=mode.value,
        target=read.library.target,
        low_dtype=mode.low_dtype,
        warnings=warnings,
        notes=[*read.notes, *([run.metadata_note] if run.metadata_note else [])],
        metadata_note=run.metadata_note,
        input_files=input_files,
        cost=run.cost,
        skeleton=run.skeleton,
        value_ranges=value_ranges,
    )


def _log_summary(result: RewriteResult) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    by_dtype = ", ".join(f"{count} {dtype}" for dtype, count in sorted(result.count_by_dtype().items()))
    stats = result.stats
    log.info(
        "decided %d nodes for %s on target %s: %s; casts: %d inserted, %d retargeted",
        len(result.decisions),
        result.precision_mode,
        result.target,
        by_dtype or "no float nodes",
        stats.casts_inserted,
        stats.casts_retargeted,
    )
