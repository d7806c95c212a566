"""ampconfig's decide-and-rewrite as an onnx-ir pass, for onnx-ir, onnxscript or Olive pipelines.

>>> import onnx_ir as ir, onnx_ir.passes.common as common
>>> from ampconfig import MixedPrecisionPass
>>> mixed = MixedPrecisionPass("allow_mix_precision", target="cuda")
>>> manager = ir.passes.PassManager([common.RemoveUnusedNodesPass(), mixed, common.TopologicalSortPass()])
>>> result = manager(ir.load("model.onnx"))  # doctest: +SKIP
>>> [d.name for d in mixed.result.decisions if d.changed]  # doctest: +SKIP

It follows onnx-ir's ``PassBase`` contract as a *functional* pass: the model handed in is left as it is and a new
one is returned. The pass runs :func:`ampconfig.rewrite_model_detailed` on it, so the returned model keeps every
promise a rewrite makes (docs/design.md §6: valid, graph I/O kept, one cast per value and dtype). What was decided
and why is on the result (:class:`MixedPrecisionResult` ``.rewrite``) and, since a ``PassManager`` hands back a
plain ``PassResult``, on the pass too (``.result``, the last run's).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from ampconfig.api import rewrite_model_detailed
from ampconfig.opinfo.targets import DEFAULT_TARGET
from ampconfig.rewrite.results import RewriteResult
from ampconfig.settings.modes import PrecisionMode


@dataclass
class MixedPrecisionResult(ir.passes.PassResult):
    """onnx-ir's result (``model``, ``modified``) with ampconfig's: every decision, the rewrite statistics, the
    casts and the warnings."""

    rewrite: RewriteResult | None = None


class MixedPrecisionPass(ir.passes.FunctionalPass):
    """Decide each node's dtype for a precision mode and rewrite the model (see the module's docstring).

    ``options`` are :func:`ampconfig.rewrite_model_detailed`'s keyword arguments (``modify_mixlist``,
    ``keep_dtype``, ``target``, ``keep_io_types``, ``overflow_nodes``, ``float16_encoder``, and ``judges``, the
    user's judgements of op types: :mod:`ampconfig.decide.judgements`); a name it does not take is a TypeError
    here, not at the first run. ``modified`` is whether the returned model differs from the one handed in.
    """

    def __init__(self, precision_mode: str | PrecisionMode, **options: Any) -> None:
        inspect.signature(rewrite_model_detailed).bind(None, precision_mode, **options)
        self.precision_mode = precision_mode
        self.options = options
        #: the last run's decisions, statistics and warnings
        self.result: RewriteResult | None = None

    def call(self, model: ir.Model) -> MixedPrecisionResult:
        given = ir.serde.serialize_model(model)  # the rewrite reads a copy: the model handed in stays as it is
        result = rewrite_model_detailed(given, self.precision_mode, **self.options)
        self.result = result
        modified = result.model.SerializeToString(deterministic=True) != given.SerializeToString(deterministic=True)
        return MixedPrecisionResult(result.ir_model, modified, result)

    def __repr__(self) -> str:
        mode = getattr(self.precision_mode, "value", self.precision_mode)
        return f"MixedPrecisionPass({mode!r}, target={self.options.get('target', DEFAULT_TARGET)!r})"
