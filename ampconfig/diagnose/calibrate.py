"""The runs behind ``explain --range-check``, ``compare`` and ``tune``: one calibration run of the fp32 model and
one of the rewritten model, both with every intermediate float tensor exposed, on the same inputs.

Settings come from :func:`ampconfig.settings.resolve.resolve` (the same flags and config as every command);
inputs from :func:`ampconfig.runner.inputs.inputs_for`. The analysis itself is pure
(:mod:`ampconfig.diagnose.locate`, :mod:`ampconfig.diagnose.ranges`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from ampconfig.api import rewrite_with_settings
from ampconfig.decide.decisions import RewriteResult
from ampconfig.diagnose.graph_values import float_constants, graph_nodes, with_node_names
from ampconfig.diagnose.locate import DEFAULT_THRESHOLD, Localization, locate
from ampconfig.diagnose.ranges import RangeFinding, check_data_max, overflow_nodes, range_findings
from ampconfig.errors import AmpconfigError
from ampconfig.files import models as model_io
from ampconfig.files.guard import OutputGuard
from ampconfig.files.models import load_model, open_model
from ampconfig.prove.accuracy import OutputMetrics
from ampconfig.prove.judge import Judge, accuracy_model
from ampconfig.prove.request_files import declare_model
from ampconfig.runner.float_cast import float32_to_float16
from ampconfig.runner.inputs import InputSet, inputs_for
from ampconfig.runner.intermediates import IntermediateRun, run_with_intermediates
from ampconfig.runner.sessions import DeviceChoice, choose_device
from ampconfig.settings.customize_dtypes import CustomizeFile, load_customize_dtypes
from ampconfig.settings.resolve import Settings


@dataclass
class Prepared:
    """The resolved settings of a request (``request``) with its model (nodes named as the rewrite names them),
    inputs and device.

    ``source`` is what the rewrite reads: ``model`` itself, or the model's path for a model too large to hold in
    memory (then ``model`` lacks its external tensor data, and nothing may run it).
    """

    request: Settings
    model: onnx.ModelProto
    inputs: InputSet
    device: DeviceChoice
    source: onnx.ModelProto | Path | None = None

    @property
    def low_dtype(self) -> str:
        return self.request.precision_mode.low_dtype

    def rewrite(
        self,
        overflow: Mapping[str, str] | None = None,
        modify_mixlist: Any = None,
        keep_dtype: Any = None,
        *,
        use_request_lists: bool = True,
        op_names: str | None = None,
    ) -> RewriteResult:
        """The rewrite for this request; ``use_request_lists=False`` takes ``modify_mixlist``/``keep_dtype`` as
        given instead of the request's, their op types named as ``op_names`` says (docs/op-names.md)."""
        settings = self.request
        if not use_request_lists:
            # The customize_dtypes file stays the request's, read with the request's op names.
            customize = settings.customize_dtypes
            if customize is not None and not isinstance(customize, CustomizeFile) and op_names != settings.op_names:
                customize = load_customize_dtypes(customize, settings.op_names)
            settings = replace(
                settings,
                modify_mixlist=modify_mixlist,
                keep_dtype=keep_dtype,
                op_names=op_names,
                customize_dtypes=customize,
            )
        return rewrite_with_settings(
            self.source if self.source is not None else self.model,
            settings,
            overflow_nodes=overflow,
            float16_encoder=float32_to_float16,
        )


def prepare(
    request: Settings, *, need_inputs: bool = True, command: str = "this command", guard: OutputGuard | None = None
) -> Prepared:
    """The request's model, named, with inputs when ``need_inputs`` (something will run). The model's external
    data files are declared to ``guard`` as inputs as soon as they are known, before anything runs.

    Runs here (exposed intermediates, tune's trials) hand ONNX Runtime in-memory protos, so a model larger than
    :data:`~ampconfig.files.models.IN_MEMORY_LIMIT` with its external data is refused when something would run it;
    without runs it is rewritten from its path, its tensors left on disk.
    """
    opened = open_model(request.model_path)
    if guard is not None:
        declare_model(guard, opened)
    if not opened.fits_in_memory():
        if need_inputs:
            raise AmpconfigError(
                f"models over {model_io.IN_MEMORY_LIMIT / (1 << 30):.1f} GiB (external data included) are not "
                f"supported by {command} yet: it runs in-memory copies of the model, and this one holds "
                f"{opened.stored_bytes() / (1 << 30):.2f} GiB",
                file=str(request.model_path),
                hint="ampconfig run, ampconfig rewrite and explain without --range-check/--compare work from files",
            )
        return Prepared(
            request,
            with_node_names(opened.proto),
            InputSet({}, []),
            choose_device(request.device),
            source=request.model_path,
        )
    model = load_model(request.model_path)[0] if opened.external_files else opened.proto
    named = with_node_names(model)
    inputs = inputs_for(named, request.inputs) if need_inputs else InputSet({}, [])
    return Prepared(request, named, inputs, choose_device(request.device))


@dataclass
class RangeReport:
    findings: list[RangeFinding]
    data_max: float
    low_dtype: str
    calibration: str  # where the calibration inputs came from, in words

    @property
    def overflow_nodes(self) -> dict[str, str]:
        return overflow_nodes(self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "data_max": self.data_max,
            "low_dtype": self.low_dtype,
            "calibration": self.calibration,
            "overflow_nodes": self.overflow_nodes,
            "findings": [finding.to_dict() for finding in self.findings],
        }


def reference_judge(prepared: Prepared) -> Judge:
    """One plain run of the fp32 model: the reference every rewrite of this request is judged against, as by
    ``run``."""
    request = prepared.request
    return Judge.from_reference_run(
        prepared.model, prepared.inputs.feeds, prepared.device.device, request.tolerance, allow_tf32=request.allow_tf32
    )


def rounding_note(wrapped: int) -> list[str]:
    """What ``run`` says when accuracy comes from the CPU rounding copy."""
    if not wrapped:
        return []
    return [
        f"accuracy measured on a copy of the rewritten model in which {wrapped} node(s) without a native CPU "
        "float16 kernel compute between explicit float16 casts, as run measures it"
    ]


def reference_run(prepared: Prepared) -> IntermediateRun:
    """The fp32 model once, every intermediate exposed (the calibration run and the compare reference)."""
    return run_with_intermediates(prepared.model, prepared.inputs.feeds, prepared.device.device)


def range_report(prepared: Prepared, reference: IntermediateRun, data_max: float | None = None) -> RangeReport:
    limit = check_data_max(data_max, prepared.low_dtype)
    findings = range_findings(graph_nodes(prepared.model), reference.values, float_constants(prepared.model), limit)
    sources = sorted({item.source.split(":", 1)[0] for item in prepared.inputs.inputs}) or ["none"]
    return RangeReport(findings, limit, prepared.low_dtype, "inputs: " + ", ".join(sources))


@dataclass
class CompareResult:
    rewrite: RewriteResult
    reference: IntermediateRun
    rewritten: IntermediateRun
    localization: Localization
    outputs: list[OutputMetrics]
    failures: list[str]
    range: RangeReport | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def compare_rewrite(
    prepared: Prepared,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    range_check: bool = False,
    data_max: float | None = None,
    reference: IntermediateRun | None = None,
) -> CompareResult:
    """Rewrite (with range-analysis pins when asked), judge it as ``run`` does, and run both models exposing
    intermediates to locate the error.

    The verdict comes from plain runs (:class:`~ampconfig.prove.judge.Judge`); the per-node error from runs of
    the same models with every intermediate exposed: on the CPU the rewritten side is the same rounding copy
    that is judged, so the node that overflows is the node that breaks the outputs.
    """
    judge = reference_judge(prepared)
    reference = reference if reference is not None else reference_run(prepared)
    ranges = range_report(prepared, reference, data_max) if range_check else None
    result = prepared.rewrite(ranges.overflow_nodes if ranges is not None else None)
    judged_model, wrapped = accuracy_model(result.model, prepared.device.device)
    judgement = judge.judge_outputs(judge.run_accuracy_model(judged_model))
    rewritten = run_with_intermediates(
        judged_model, prepared.inputs.feeds, prepared.device.device, names=list(reference.values)
    )
    localization = locate(
        graph_nodes(prepared.model),
        reference.values,
        rewritten.values,
        result.decisions,
        low_dtype=result.low_dtype,
        threshold=threshold,
    )
    return CompareResult(
        rewrite=result,
        reference=reference,
        rewritten=rewritten,
        localization=localization,
        outputs=judgement.outputs,
        failures=judgement.failures,
        range=ranges,
        notes=[*prepared.device.notes, *rounding_note(wrapped)],
    )
