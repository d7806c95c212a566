"""The Python API: ``rewrite_model`` and ``rewrite_model_detailed``, a facade over the engine
(:mod:`ampconfig.engine`), and ``close``/``onnx_runtime_worker``, which end the worker process that runs ONNX
Runtime's sessions for the API. Nothing inside the package imports this module: it is for the package's users.

>>> import ampconfig
>>> model = ampconfig.rewrite_model("model.onnx", precision_mode="allow_mix_precision")  # doctest: +SKIP
>>> result = ampconfig.rewrite_model_detailed("model.onnx", precision_mode="force_fp16")  # doctest: +SKIP
>>> [d.name for d in result.decisions if d.dtype == "float16"]  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from ampconfig.decide.rewrite_options import KeepDtypeInput, MixlistInput, from_keywords
from ampconfig.decide.user_judgements import Judges
from ampconfig.decide.value_limits import ValueRanges
from ampconfig.engine.in_place import rewrite_with_options
from ampconfig.model_io.models import OpenedModel
from ampconfig.opinfo.library import DEFAULT_TARGET, OpInfoLibrary
from ampconfig.precision_modes import PrecisionMode
from ampconfig.rewrite.results import RewriteResult
from ampconfig.rewrite.tensors import Float16Encoder

if TYPE_CHECKING:  # the file formats (pydantic's models): imported when a file is given
    from ampconfig.documents.customize_dtypes_file import CustomizeFile

__all__ = ["close", "onnx_runtime_worker", "rewrite_model", "rewrite_model_detailed"]


def close() -> None:
    """End the worker process that runs ONNX Runtime for this process's API calls, now (it also ends by itself once
    idle for ``AMPCONFIG_WORKER_IDLE`` seconds with no session held, 60 by default, and when this process ends). The
    next call that runs a model starts a new one."""
    from ampconfig.worker import client as worker  # the worker's process machinery: only once something ends it

    worker.shutdown()


@contextmanager
def onnx_runtime_worker() -> Iterator[None]:
    """``with ampconfig.onnx_runtime_worker(): ...``: the calls inside share one ONNX Runtime worker process, ended
    (:func:`close`) when the block ends."""
    try:
        yield
    finally:
        close()


def rewrite_model_detailed(
    model: str | Path | onnx.ModelProto | OpenedModel,
    precision_mode: str | PrecisionMode,
    *,
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
    ranges: str | Path | None = None,
    data_max: float | None = None,
    with_cost: bool = True,
    runtime_refused: Mapping[str, str] | None = None,
    decision_metadata: bool = True,
    load_check: bool = True,
) -> RewriteResult:
    """Decide every node's dtype for ``precision_mode`` on ``target`` and rewrite the model.

    Stale or contradictory value declarations of the input are repaired in the copy that is rewritten (each said in
    ``warnings``). The returned model has no ``onnx.checker.check_model(full_check=True)`` complaint that the
    (repaired) input did not have: for an input that passes the checker it passes too; for one that does not, ONNX
    Runtime loaded the input and loaded and ran the output. Its IR version is one the installed ONNX Runtime loads,
    where the model allows it. Each decided node carries its decision in its ``metadata_props``
    (``ampconfig.rule``, ``ampconfig.cause``, ``ampconfig.precision_mode``: what Netron shows beside it) in a model
    of IR version 10 or later (a note says so for an older one).

    Args:
        model: a path, an ``onnx.ModelProto`` (never modified) or a model already opened with
            :func:`~ampconfig.model_io.models.open_model`.
        precision_mode: the precision mode (``allow_mix_precision``, ``force_fp16``, ...; v2 names too).
        modify_mixlist: a path to a mixlist JSON or the mixlist as a dict.
        keep_dtype: a path to a keep_dtype file or a list of node names (``OpType::name`` allowed).
        target: the device whose op info (its kernels per dtype) says what can compute low (``cuda``, ``cpu``).
        keep_io_types: whether the graph's inputs and outputs keep their float32 types.
        overflow_nodes: node names mapped to a reason they must stay float32 (range analysis: calibration saw
            values beyond the low type's range); such float32 nodes keep float32 under rule ``range_exceeds``.
        float16_encoder: converts float32 weights to float16; the default, the one every command uses too, is
            :func:`ampconfig.rewrite.float_cast.float32_to_float16`: ONNX Runtime's Cast kernel for large weights
            (10-20x numpy's cast; onnxruntime is imported only once such a weight is converted), numpy's cast for
            small ones or where onnxruntime cannot be imported. The bits are the same either way.
        op_names: whose op type names the mixlist and keep_dtype use (``tensorflow``, ``ascend``, ``onnx``; None:
            each name by the table of docs/op-names.md); each name mapped is in ``notes``.
        op_info: replaces the built-in op info of ``target`` (another release's, or one written by
            ``ampconfig ops-info``).
        customize_dtypes: the path of an Ascend customize_dtypes file: the nodes it names compute in the dtypes it
            gives them (rule ``customized``), over keep_dtype, over the mode and mixlist; an entry that does not fit
            the model (no such node, a dtype count or a dtype its schema or the target's kernels refuse) raises.
        judges: op keys mapped to the user's judgements of their nodes (colour, inputs that keep their dtype:
            :mod:`ampconfig.decide.user_judgements`), for custom and contrib ops ampconfig knows little about.
        value_ranges: the float32 model's value ranges on data (:class:`~ampconfig.decide.value_limits.ValueRanges`):
            a node whose values passed the margin keeps float32 (rule ``range_exceeds``).
        clamp_values: a node reading a constant beyond the low type's range keeps float32 (rule
            ``value_out_of_range``) unless this is set, when the constant is clamped instead; every clamped tensor
            is a warning.
        ranges: the path of a value ranges file (``ampconfig calibrate``, ``run --ranges-out``), read as every
            command reads ``--ranges`` (a file measured on another model structure raises).
        data_max: the range rule's margin (None: half the low type's largest value).
        with_cost: False leaves ``cost`` None: the casts, estimated time and float32 islands are a report, and a
            caller that shows none of it saves their walk over the graph (a quarter of a second on 25k nodes).
        runtime_refused: node names mapped to what ONNX Runtime did with them in another dtype (``run``'s safety
            net, :mod:`ampconfig.engine.safety_net`): they keep their dtype under rule ``runtime_refuses``.
        decision_metadata: False writes no decision into the nodes' ``metadata_props`` and takes out those of an
            earlier rewrite.
        load_check: load the rewritten model once in ONNX Runtime (in a worker process, on its target's provider,
            at the default optimisation level) before it is returned; nodes whose low dtype makes ONNX Runtime
            crash keep their dtype (rule ``runtime_refuses``, a warning each), and a crash no node explains raises.
            For a target whose provider cannot be used here (cuda without a GPU) a note says the model was not
            loaded. False skips it.

    Returns:
        The rewritten model with every decision and the rewrite statistics.

    Raises:
        AmpconfigError: bad input (:class:`~ampconfig.errors.AmpconfigError`).
    """
    options, facts, ranges_file = from_keywords(
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
    result = rewrite_with_options(model, options, facts, ranges=ranges_file)
    if not load_check:
        return result
    from ampconfig.engine.load_check import load_checked

    def keeping(kept: Mapping[str, str]) -> RewriteResult:
        return rewrite_with_options(model, options, facts.refusing(kept), ranges=ranges_file)

    return load_checked(result, keeping, file=_file_of(model))


def _file_of(model: str | Path | onnx.ModelProto | OpenedModel) -> str | None:
    """The input's file, for a located message (None for a model in memory)."""
    if isinstance(model, OpenedModel):
        return model.path
    return None if isinstance(model, onnx.ModelProto) else str(model)


def rewrite_model(
    model: str | Path | onnx.ModelProto,
    precision_mode: str | PrecisionMode,
    *,
    modify_mixlist: MixlistInput = None,
    keep_dtype: KeepDtypeInput = None,
    target: str = DEFAULT_TARGET,
    keep_io_types: bool = True,
    clamp_values: bool = False,
    ranges: str | Path | None = None,
    data_max: float | None = None,
    decision_metadata: bool = True,
    load_check: bool = True,
) -> onnx.ModelProto:
    """Like :func:`rewrite_model_detailed`, returning only the rewritten ``onnx.ModelProto``.

    Args:
        model: a path or an ``onnx.ModelProto`` (never modified).
        precision_mode: the precision mode (``allow_mix_precision``, ``force_fp16``, ...; v2 names too).
        modify_mixlist: a path to a mixlist JSON or the mixlist as a dict.
        keep_dtype: a path to a keep_dtype file or a list of node names (``OpType::name`` allowed).
        target: the device whose op info (its kernels per dtype) says what can compute low (``cuda``, ``cpu``).
        keep_io_types: whether the graph's inputs and outputs keep their float32 types.
        clamp_values: clamp constants beyond the low type's range instead of keeping their readers float32.
        ranges: the path of a value ranges file, read as every command reads ``--ranges``.
        data_max: the range rule's margin (None: half the low type's largest value).
        decision_metadata: False writes no decision into the nodes' ``metadata_props``.
        load_check: load the rewritten model once in ONNX Runtime before it is returned (False skips it).

    Returns:
        The rewritten model.

    Raises:
        AmpconfigError: bad input (:class:`~ampconfig.errors.AmpconfigError`).
    """
    return rewrite_model_detailed(
        model,
        precision_mode,
        modify_mixlist=modify_mixlist,
        keep_dtype=keep_dtype,
        target=target,
        keep_io_types=keep_io_types,
        clamp_values=clamp_values,
        ranges=ranges,
        data_max=data_max,
        decision_metadata=decision_metadata,
        load_check=load_check,
        with_cost=False,  # only the model is returned
    ).model
