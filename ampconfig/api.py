"""The Python API: ``rewrite_model`` and ``rewrite_model_detailed``.

>>> import ampconfig
>>> model = ampconfig.rewrite_model("model.onnx", precision_mode="allow_mix_precision")  # doctest: +SKIP
>>> result = ampconfig.rewrite_model_detailed("model.onnx", precision_mode="force_fp16")  # doctest: +SKIP
>>> [d.name for d in result.decisions if d.dtype == "float16"]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx
import onnx_ir as ir

from ampconfig.decide.decisions import nothing_lowered
from ampconfig.decide.judgements import Judges
from ampconfig.decide.ranges_input import coverage_warnings, read_ranges
from ampconfig.decide.value_ranges import ValueRanges
from ampconfig.errors import AmpconfigError, Problem, Severity
from ampconfig.files.ir_bridge import to_ir, to_proto
from ampconfig.files.ir_version import output_ir_version
from ampconfig.files.models import (
    OpenedModel,
    light_proto,
    light_proto_of_ir,
    open_model,
    save_model_sharing_data,
    weightless_proto,
)
from ampconfig.files.node_checks import NodePieces
from ampconfig.opinfo.library import DEFAULT_TARGET, OpInfoLibrary, OpLists, load_ops_info
from ampconfig.opinfo.schema import NodeTyping
from ampconfig.opinfo.typing_source import ChainedTyping, OnnxTyping
from ampconfig.rewrite.expose import measured_value_keys
from ampconfig.rewrite.names import with_node_names
from ampconfig.rewrite.pipeline import MAX_CHECKER_REPAIRS as MAX_CHECKER_REPAIRS
from ampconfig.rewrite.pipeline import PipelineOutcome, admit_input, restart_from_copy, run_pipeline
from ampconfig.rewrite.results import RewriteResult
from ampconfig.rewrite.rounding import round_like_low_precision
from ampconfig.rewrite.steps.raise_opset import BF16_MIN_OPSET as BF16_MIN_OPSET
from ampconfig.rewrite.steps.state import Admission, InputAdmission, RewriteSetup
from ampconfig.rewrite.tensors import Float16Encoder
from ampconfig.rewrite.types import annotate_dtypes
from ampconfig.runner.float_cast import float32_to_float16
from ampconfig.settings.customize_dtypes import CustomizeFile, load_customize_dtypes
from ampconfig.settings.documents import describe_value
from ampconfig.settings.modes import PrecisionMode
from ampconfig.settings.rewrite_options import KeepDtypeInput as KeepDtypeInput
from ampconfig.settings.rewrite_options import MixlistInput as MixlistInput
from ampconfig.settings.rewrite_options import RewriteOptions

if TYPE_CHECKING:
    from ampconfig.runner.acceptance import Runnable
    from ampconfig.settings.resolve import Settings

log = logging.getLogger(__name__)


class _OnnxRuntimeTyping:
    """ONNX Runtime's schema registry (contrib ops such as ``com.microsoft::Attention``), consulted only for ops
    ONNX's own schemas do not know: a model without them never loads onnxruntime to be decided."""

    def typing(self, op_type: str, domain: str, opset: int, n_inputs: int, n_outputs: int) -> NodeTyping | None:
        from ampconfig.runner.schemas import ort_node_typing

        return ort_node_typing(op_type, domain, opset, n_inputs, n_outputs)


#: How the rewrite types nodes: ONNX's schemas first, then ONNX Runtime's.
TYPING = ChainedTyping((OnnxTyping(), _OnnxRuntimeTyping()))


def effective_lists(
    mode: PrecisionMode, library: OpInfoLibrary, modify_mixlist: MixlistInput = None, op_names: str | None = None
) -> tuple[OpLists, list[str], list[str]]:
    """The op lists after the mixlist (if any), the mixlist's warnings, and its notes (each TensorFlow/Ascend op
    name read as its ONNX op, with file and line) as text. ``op_names``: whose names the mixlist uses."""
    from ampconfig.settings.config import check_mode_accepts_mixlist
    from ampconfig.settings.mixlist import Mixlist, apply_mixlist, load_mixlist, parse_mixlist

    if modify_mixlist is None:
        return library.lists(), [], []
    source = "<inline mixlist>" if isinstance(modify_mixlist, Mapping) else str(modify_mixlist)
    check_mode_accepts_mixlist(mode, True, source)
    if isinstance(modify_mixlist, Mixlist):
        mixlist = modify_mixlist
    elif isinstance(modify_mixlist, Mapping):
        mixlist = parse_mixlist(json.dumps(dict(modify_mixlist)), source)
    else:
        mixlist = load_mixlist(modify_mixlist)
    lists, problems = apply_mixlist(library.lists(), mixlist, op_names)
    return (
        lists,
        [p.format() for p in problems if p.severity is Severity.WARNING],
        [p.format() for p in problems if p.severity is Severity.NOTE],
    )


def _keep_dtype_entries(
    keep_dtype: KeepDtypeInput, op_names: str | None = None
) -> tuple[list[Any], str | None, list[Problem]]:
    """The entries, the file they came from, and what reading their op names found (notes, warnings); an
    ambiguous op name raises."""
    from ampconfig.settings.documents import SourceMap
    from ampconfig.settings.keep_dtype import keep_dtype_from_config, read_keep_dtype_names

    if keep_dtype is None:
        return [], None, []
    source = None if isinstance(keep_dtype, Sequence) and not isinstance(keep_dtype, str) else str(keep_dtype)
    value = Path(keep_dtype) if isinstance(keep_dtype, str) else keep_dtype
    entries, problems = read_keep_dtype_names(list(keep_dtype_from_config(value)), op_names, SourceMap(source))
    errors = [problem for problem in problems if problem.severity is Severity.ERROR]
    if errors:
        raise AmpconfigError(errors[0].message, file=source, line=errors[0].line, hint=errors[0].hint, problems=errors)
    return entries, source, problems


def _customize_file(customize_dtypes: str | Path | CustomizeFile | None, op_names: str | None) -> CustomizeFile | None:
    """The customize_dtypes file read and its format checked (errors raise, each at its line); None without one.
    A file already read (with the op names it was written in) is taken as it is."""
    if customize_dtypes is None or isinstance(customize_dtypes, CustomizeFile):
        return customize_dtypes
    return load_customize_dtypes(customize_dtypes, op_names)


def _training_info_dropped(proto: onnx.ModelProto) -> list[str]:
    """The warning for a model with training information, which the rewrite does not carry over: its training
    graphs compute and update weights in their stored dtypes, which the rewrite changes."""
    if not proto.training_info:
        return []
    graphs = [
        f"{part} {graph.name!r}" if graph.name else part
        for info in proto.training_info
        for part, graph in (("initialization", info.initialization), ("algorithm", info.algorithm))
        if graph.node or graph.output
    ]
    updated = sorted({binding.key for info in proto.training_info for binding in info.update_binding})
    updates = f", updating {', '.join(updated)}" if updated else ""
    return [
        f"training_info dropped ({len(proto.training_info)} entry(ies): {', '.join(graphs) or 'empty'}{updates}): "
        "the rewritten model is for inference; train the original, then rewrite it"
    ]


def rewrite_model_detailed(
    model: str | Path | onnx.ModelProto | OpenedModel,
    precision_mode: str | PrecisionMode,
    modify_mixlist: MixlistInput = None,
    keep_dtype: KeepDtypeInput = None,
    target: str = DEFAULT_TARGET,
    keep_io_types: bool = True,
    overflow_nodes: Mapping[str, str] | None = None,
    float16_encoder: Float16Encoder | None = None,
    op_names: str | None = None,
    op_info: OpInfoLibrary | None = None,
    customize_dtypes: str | Path | CustomizeFile | None = None,
    judges: Judges | None = None,
    value_ranges: ValueRanges | None = None,
    clamp_values: bool = False,
    *,
    ranges: str | Path | None = None,
    data_max: float | None = None,
    with_cost: bool = True,
    runtime_refused: Mapping[str, str] | None = None,
    decision_metadata: bool = True,
) -> RewriteResult:
    """Decide every node's dtype for ``precision_mode`` on ``target`` and rewrite the model.

    ``model`` is a path, an ``onnx.ModelProto`` (never modified) or a model already opened with
    :func:`~ampconfig.files.models.open_model`. ``modify_mixlist`` is a path to a mixlist JSON
    or the mixlist as a dict; ``keep_dtype`` a path to a keep_dtype file or a list of node names
    (``OpType::name`` allowed). Returns the rewritten model with every decision and the rewrite statistics.
    ``overflow_nodes`` maps node names to a reason they must stay float32 (range analysis: calibration saw
    values beyond the low type's range); such float32 nodes keep float32 under rule ``range_exceeds``.
    ``value_ranges`` (:class:`~ampconfig.decide.value_ranges.ValueRanges`) are the float32 model's value ranges on data:
    a node whose values passed the margin keeps float32 (rule ``range_exceeds``). A node reading a constant beyond
    the low type's range keeps float32 (rule ``value_out_of_range``) unless ``clamp_values``, when the constant is
    clamped instead; every clamped tensor is a warning. ``ranges`` is the path of a value ranges file
    (``ampconfig calibrate``, ``run --ranges-out``), read as every command reads ``--ranges`` (a file measured on
    another model structure raises); ``data_max`` is the range rule's margin (None: half the low type's largest
    value).
    ``float16_encoder`` converts float32 weights to float16; the default, the one every command uses too, is
    :func:`ampconfig.runner.float_cast.float32_to_float16`: ONNX Runtime's Cast kernel for large weights (10-20x
    numpy's cast; onnxruntime is imported only once such a weight is converted), numpy's cast for small ones or
    where onnxruntime cannot be imported. The bits are the same either way. ``op_names`` says whose op type names
    the mixlist and keep_dtype use (``tensorflow``, ``ascend``, ``onnx``; None: each name by the table of
    docs/op-names.md); each name mapped is in ``notes``. ``op_info`` replaces the built-in op info of ``target``
    (another release's, or one written by ``ampconfig ops-info``).
    ``customize_dtypes`` is the path of an Ascend customize_dtypes file: the nodes it names compute in the dtypes
    it gives them (rule ``customized``), over keep_dtype, over the mode and mixlist; an entry that does not fit
    the model (no such node, a dtype count or a dtype its schema or the target's kernels refuse) raises.
    ``judges`` maps op keys to the user's judgements of their nodes (colour, inputs that keep their dtype:
    :mod:`ampconfig.decide.judgements`), for custom and contrib ops ampconfig knows little about.
    Raises :class:`~ampconfig.errors.AmpconfigError` for bad input. Stale or contradictory value declarations of
    the input are repaired in the copy that is rewritten (each said in ``warnings``). The returned model has no
    ``onnx.checker.check_model(full_check=True)`` complaint that the (repaired) input did not have: for an input
    that passes the checker it passes too; for one that does not, ONNX Runtime loaded the input and loaded and ran
    the output. Its IR version is one the installed ONNX Runtime loads, where the model allows it.
    ``with_cost=False`` leaves ``cost`` None: the casts, estimated time and float32 islands are a report, and a
    caller that shows none of it saves their walk over the graph (a quarter of a second on 25k nodes).
    ``runtime_refused`` maps node names to what ONNX Runtime did with them in another dtype (``run``'s safety
    net, :mod:`ampconfig.prove.safety_net`): they keep their dtype under rule ``runtime_refuses``.
    Each decided node carries its decision in its ``metadata_props`` (``ampconfig.rule``, ``ampconfig.cause``,
    ``ampconfig.precision_mode``: what Netron shows beside it) in a model of IR version 10
    or later (a note says so for an older one); ``decision_metadata=False`` writes none and takes out those of an
    earlier rewrite.
    """
    options = RewriteOptions.of(
        precision_mode,
        modify_mixlist=modify_mixlist,
        keep_dtype=keep_dtype,
        target=target,
        keep_io_types=keep_io_types,
        overflow_nodes=overflow_nodes,
        float16_encoder=float16_encoder,
        op_names=op_names,
        op_info=op_info,
        customize_dtypes=customize_dtypes,
        judges=judges,
        value_ranges=value_ranges,
        clamp_values=clamp_values,
        ranges=ranges,
        data_max=data_max,
        with_cost=with_cost,
        runtime_refused=runtime_refused,
        decision_metadata=decision_metadata,
    )
    return rewrite_with_options(model, options)


@dataclass
class _ReadOptions:
    """The options with their files read (the mixlist applied to the op lists, keep_dtype and customize_dtypes
    read), and what reading them said."""

    options: RewriteOptions
    library: OpInfoLibrary
    lists: OpLists
    keep_entries: list[Any]
    keep_source: str | None
    customize: CustomizeFile | None
    warnings: list[str]
    notes: list[str]

    def setup(self, value_ranges: ValueRanges | None) -> RewriteSetup:
        options = self.options
        return RewriteSetup(
            options,
            options.precision_mode,
            self.library,
            self.lists,
            self.keep_entries,
            self.keep_source,
            self.customize,
            value_ranges,
            TYPING,
            options.float16_encoder or float32_to_float16,
        )


def _read_options(options: RewriteOptions) -> _ReadOptions:
    mode = options.precision_mode
    library = options.op_info if options.op_info is not None else load_ops_info(options.target)
    lists, warnings, notes = effective_lists(mode, library, options.modify_mixlist, options.op_names)
    entries, keep_source, keep_names = _keep_dtype_entries(options.keep_dtype, options.op_names)
    customize = _customize_file(options.customize_dtypes, options.op_names)
    if customize is not None:
        warnings.extend(p.format() for p in customize.notes if p.severity is Severity.WARNING)
        notes.extend(p.format() for p in customize.notes if p.severity is Severity.NOTE)
    warnings.extend(p.format() for p in keep_names if p.severity is Severity.WARNING)
    notes.extend(p.format() for p in keep_names if p.severity is Severity.NOTE)
    return _ReadOptions(options, library, lists, entries, keep_source, customize, warnings, notes)


def _value_ranges(options: RewriteOptions, identity: Callable[[], _Identity]) -> ValueRanges | None:
    """The ranges file read for the input as handed in (``identity`` gives a proto of it, its path and any weights
    that proto holds without bytes: made only when there is a ranges file), else the ranges given, with
    ``data_max``."""
    if options.ranges is not None:
        proto, path, left_out = identity()
        return read_ranges(Path(options.ranges), proto, options.data_max, model_path=path, left_out=left_out)
    if options.value_ranges is not None and options.data_max is not None:
        return replace(options.value_ranges, margin=options.data_max)
    return options.value_ranges


#: What a ranges file is checked against: a proto of the input, its path, and the weights it holds without bytes.
_Identity = tuple[onnx.ModelProto, "str | None", "Mapping[str, ir.TensorProtocol] | None"]


def _raises_opset(mode: PrecisionMode) -> bool:
    """Whether the mode lowers nodes to bfloat16 (which needs opset 13): not allow_fp32_to_bf16, which only keeps
    what is bfloat16 already."""
    return mode.low_dtype == "bfloat16" and mode is not PrecisionMode.ALLOW_FP32_TO_BF16


def rewrite_with_options(model: str | Path | onnx.ModelProto | OpenedModel, options: RewriteOptions) -> RewriteResult:
    """:func:`rewrite_model_detailed` with its options as one object: ``model`` opened (a path or proto read into
    an ``ir.Model`` once), then admitted and rewritten in place by the pipeline (:func:`_rewrite_in_place`, what
    :class:`ampconfig.MixedPrecisionPass` runs too)."""
    if not isinstance(model, (str, os.PathLike, onnx.ModelProto, OpenedModel)):
        raise AmpconfigError(
            f"model must be a model file's path, an onnx.ModelProto or an opened model, got {describe_value(model)}",
            hint="see ampconfig.rewrite_model_detailed's model",
        )
    read = _read_options(options)
    opened = open_model(model, map_weights=True)
    result, _ = _rewrite_in_place(opened.to_ir(), read, light_proto(opened.proto), opened)
    return result


def rewrite_ir_model(model: ir.Model, options: RewriteOptions) -> tuple[RewriteResult, bool]:
    """Rewrite ``model`` in place (what :class:`ampconfig.MixedPrecisionPass` runs), and whether it changed: the
    pipeline the API runs (:func:`_rewrite_in_place`), on ``model`` itself. Its admission reads a light proto of it
    (graph, types and shapes; its large weights stay where they are), and no proto of its weights is made, except
    for an input the ONNX checker rejects: ONNX Runtime then judges it, from its bytes."""
    return _rewrite_in_place(model, _read_options(options), light_proto_of_ir(model), None)


def _rewrite_in_place(
    model: ir.Model, read: _ReadOptions, light: onnx.ModelProto, opened: OpenedModel | None
) -> tuple[RewriteResult, bool]:
    """The one rewrite path, in place: ``model`` admitted (repaired, its opset raised for bfloat16), then the
    pipeline's steps (:mod:`ampconfig.rewrite.pipeline`). ``light`` is a light proto of ``model`` as handed in (a
    copy the admission repairs). ``opened`` is the proto the API opened ``model`` from (its path, its external
    data, its training information), None for an ``ir.Model`` handed in. Returns the result and whether the model
    changed."""
    options = read.options
    warnings = read.warnings
    source = opened.proto if opened is not None else light

    def identity() -> _Identity:
        if opened is not None:
            return opened.proto, opened.path, None
        proto, left_out = weightless_proto(model)
        return proto, None, left_out

    value_ranges = _value_ranges(options, identity)
    if value_ranges is not None and value_ranges.file is not None:  # said by every command, the API and the pass
        constants = opened.proto.graph.initializer if opened is not None else model.graph.initializers.values()
        keys = measured_value_keys(light, (constant.name or "" for constant in constants))
        warnings.extend(coverage_warnings(value_ranges, keys))
    ir_version = output_ir_version(source, opened.path if opened is not None else None)
    admission = InputAdmission(light)
    runtime_input: list[Runnable] = []

    def accept(admitted: ir.Model, admission: InputAdmission) -> None:
        # The rare path: the checker rejects the (repaired) input, so ONNX Runtime decides (imported only here).
        from ampconfig.runner.acceptance import input_for_onnx_runtime, require_onnx_runtime_loads

        repaired = any(repair.changed for repair in admission.repairs)
        runtime_input.append(input_for_onnx_runtime(admitted, repaired, opened, ir_version.version))
        require_onnx_runtime_loads(runtime_input[0], admission.checker_errors, opened.path if opened else None)

    raise_opset = _raises_opset(options.precision_mode)
    admitted = admit_input(model, admission, raise_opset=raise_opset, accept=accept)
    warnings.extend(repair.message() for repair in admission.repairs)
    if opened is not None:
        warnings.extend(_training_info_dropped(opened.proto))
    warnings.extend(admission.warnings)
    input_light = admission.light
    checked = Admission(
        admission.types,
        input_passes=not admission.checker_errors,
        input_pieces=lambda: NodePieces(with_node_names(light_proto(input_light))),
    )
    restart = restart_from_copy(model) if opened is None else _readmit(opened, raise_opset)
    outcome = run_pipeline(model, read.setup(value_ranges), checked, restart, ir_version.version)
    if admission.checker_errors:
        from ampconfig.runner.acceptance import confirm_output_runs

        skeleton = outcome.run.skeleton
        assert skeleton is not None  # the check step made it
        written = None if opened is not None and opened.external_files else skeleton.full_proto()
        path = opened.path if opened is not None else None
        note = confirm_output_runs(runtime_input[0], admission.checker_errors, path, outcome.model, written)
        outcome.warnings.append(note)
    input_files = opened.external_files if opened is not None else frozenset()
    result = _result(outcome, read, value_ranges, input_files, ir_version.note, admission.opset_raised)
    _log_summary(result)
    return result, admitted or outcome.modified


def _readmit(opened: OpenedModel, raise_opset: bool) -> Callable[[], ir.Model]:
    """The API's restart for a checker repair: the opened proto read into an ``ir.Model`` again and admitted again
    (the same deterministic steps; ONNX Runtime judged the input already). Unlike the pass, which holds only the
    ``ir.Model`` it was handed and so clones it before the steps change it (:func:`restart_from_copy`), the API can
    make the admitted input again from its proto when a repair needs it: an up-front clone would cost every call
    (0.4-0.6 s on a 25k-node graph), to serve the rare call whose output the checker rejects."""

    def restart() -> ir.Model:
        model = opened.to_ir()
        admit_input(model, InputAdmission(light_proto(opened.proto)), raise_opset=raise_opset, accept=_accepted)
        return model

    return restart


def _accepted(model: ir.Model, admission: InputAdmission) -> None:
    """Nothing to judge: ONNX Runtime accepted this input before the first attempt."""


def _result(
    outcome: PipelineOutcome,
    read: _ReadOptions,
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


def rewrite_with_settings(
    model: str | Path | onnx.ModelProto | OpenedModel,
    settings: Settings,
    *,
    overflow_nodes: Mapping[str, str] | None = None,
    float16_encoder: Float16Encoder | None = None,
    op_info: OpInfoLibrary | None = None,
    value_ranges: ValueRanges | None = None,
    with_cost: bool = True,
    runtime_refused: Mapping[str, str] | None = None,
) -> RewriteResult:
    """:func:`rewrite_model_detailed` with resolved settings (:func:`ampconfig.settings.resolve.resolve`): their
    precision mode, decision target, mixlist, keep_dtype and keep_io_types. ``model`` is what to read (the
    settings' model, opened or in memory)."""
    options = replace(
        settings.rewrite_options,
        overflow_nodes=overflow_nodes or {},
        float16_encoder=float16_encoder,
        op_info=op_info,
        value_ranges=value_ranges,
        with_cost=with_cost,
        runtime_refused=runtime_refused or {},
    )
    return rewrite_with_options(model, options)


def _round_like_cpu_low_precision(ir_model: ir.Model) -> int:
    """Wrap the low-precision nodes without a native CPU kernel (see ``round_like_low_precision``): those the CPU
    provider would run in float32 without rounding, and those it cannot run in that dtype at all (a model decided
    for another target, such as a bfloat16 MatMul decided for cuda)."""
    annotate_dtypes(ir_model, typing_source=TYPING)
    cpu = load_ops_info("cpu")
    return round_like_low_precision(ir_model, lambda key, dtype: not cpu.is_native(key, dtype), TYPING)


def low_precision_rounding_model(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of a rewritten model whose CPU run rounds every float16 value as float16 hardware stores it.

    ONNX Runtime's CPU provider drops that rounding for ops it has no native float16 kernel for (see
    :func:`ampconfig.rewrite.rounding.round_like_low_precision`); ``run`` measures accuracy on this copy on the CPU.
    Returns the copy and how many nodes compute in float32 between explicit casts in it.
    """
    ir_model = to_ir(model)
    wrapped = _round_like_cpu_low_precision(ir_model)
    return to_proto(ir_model), wrapped


def save_low_precision_rounding_copy(source: str | Path, destination: str | Path) -> int:
    """:func:`low_precision_rounding_model` for a rewritten model saved at ``source``, without reading its
    tensors: the copy is written to ``destination`` (in the same folder), its weights still those of ``source``
    (in its external data file, or in ``source`` itself for a large single file). Writes nothing when no node
    needs rounding; returns how many nodes were wrapped."""
    ir_model = open_model(source, map_weights=True).to_ir()  # tensors stay on disk (mapped only when read)
    wrapped = _round_like_cpu_low_precision(ir_model)
    if wrapped:
        save_model_sharing_data(ir_model, destination)
    return wrapped


def rewrite_model(
    model: str | Path | onnx.ModelProto,
    precision_mode: str | PrecisionMode,
    modify_mixlist: MixlistInput = None,
    keep_dtype: KeepDtypeInput = None,
    target: str = DEFAULT_TARGET,
    keep_io_types: bool = True,
    *,
    clamp_values: bool = False,
    ranges: str | Path | None = None,
    data_max: float | None = None,
    decision_metadata: bool = True,
) -> onnx.ModelProto:
    """Like :func:`rewrite_model_detailed`, returning only the rewritten ``onnx.ModelProto``."""
    return rewrite_model_detailed(
        model,
        precision_mode,
        modify_mixlist,
        keep_dtype,
        target,
        keep_io_types,
        clamp_values=clamp_values,
        ranges=ranges,
        data_max=data_max,
        decision_metadata=decision_metadata,
        with_cost=False,  # only the model is returned
    ).model
