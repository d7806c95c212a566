"""ampconfig's decide-and-rewrite as an onnx-ir pass, for onnx-ir, onnxscript or Olive pipelines.

>>> import onnx_ir as ir, onnx_ir.passes.common as common
>>> from ampconfig import MixedPrecisionPass
>>> mixed = MixedPrecisionPass("allow_mix_precision", target="cuda")
>>> manager = ir.passes.PassManager([common.RemoveUnusedNodesPass(), mixed, common.TopologicalSortPass()])
>>> result = manager(ir.load("model.onnx"))  # doctest: +SKIP
>>> [d.name for d in MixedPrecisionPass.result_of(result.model).decisions if d.changed]  # doctest: +SKIP

It is an *in-place* pass, as onnx-ir defines it: the model handed in is rewritten and returned. It runs the
pipeline every command runs (:mod:`ampconfig.rewrite.pipeline`: admit, raise the opset for bfloat16; name, fold,
type, decide, apply, check) on that model itself, serialising none of its weights (except, for an input the ONNX
checker rejects, once for ONNX Runtime to judge it), so the result keeps every promise a rewrite makes
(docs/design.md §6: valid, graph I/O kept, one cast per value and dtype), and is the model ``ampconfig rewrite``
writes. ``modified`` says what the steps changed
(nodes named, LayerNorms folded, values typed, dtypes, casts, tensors, the IR version). What was decided and why
is on the result (:class:`MixedPrecisionResult` ``.rewrite``) and, since a ``PassManager`` hands back a plain
``PassResult``, on the model rewritten (:meth:`MixedPrecisionPass.result_of`, from the model's ``meta``, which is
never serialised). The pass object itself keeps nothing of a run, so one pass may rewrite several models at once,
from several threads. Wrap it in ``ir.passes.functionalize`` for a pass that leaves its input as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import onnx_ir as ir

from ampconfig.decide.rewrite_options import from_keywords
from ampconfig.engine.in_place import rewrite_ir_model
from ampconfig.errors import AmpconfigError
from ampconfig.precision_modes import PrecisionMode
from ampconfig.rewrite.results import RewriteResult

#: Where a run leaves its result on the model it rewrote (``Model.meta``, never serialised).
_RESULT_KEY = "ampconfig.rewrite_result"


@dataclass
class MixedPrecisionResult(ir.passes.PassResult):
    """onnx-ir's result (``model``, ``modified``) with ampconfig's: every decision, the rewrite statistics, the
    casts and the warnings."""

    rewrite: RewriteResult | None = None


class MixedPrecisionPass(ir.passes.InPlacePass):
    """Decide each node's dtype for a precision mode and rewrite the model in place (see the module's docstring).

    Args:
        precision_mode: the precision mode (``allow_mix_precision``, ``force_fp16``, ...; v2 names too).
        load_check: (default on) load the rewritten model once in ONNX Runtime before the pass returns, as
            :func:`ampconfig.rewrite_model_detailed` does; nodes whose low dtype makes it crash keep their dtype.
            The check keeps a copy of the input's graph (its tensors shared, not copied) to rewrite again from.
        options: the keywords of :func:`ampconfig.rewrite_model_detailed` (``modify_mixlist``, ``keep_dtype``,
            ``target``, ``keep_io_types``, ``overflow_nodes``, ``float16_encoder``, and ``judges``, the user's
            judgements of op types: :mod:`ampconfig.decide.user_judgements`), split once into the user's choices
            and what measurements found (:func:`~ampconfig.decide.rewrite_options.from_keywords`); a name it does
            not take is a TypeError here, not at the first run.
    """

    def __init__(self, precision_mode: str | PrecisionMode, *, load_check: bool = True, **options: Any) -> None:
        super().__init__()
        self.options, self.facts, self.ranges = from_keywords(precision_mode, **options)
        self.load_check = load_check

    @property
    def precision_mode(self) -> PrecisionMode:
        return self.options.precision_mode

    def call(self, model: ir.Model) -> MixedPrecisionResult:
        original = _copy_of(model) if self.load_check else None
        result, modified = rewrite_ir_model(model, self.options, self.facts, self.ranges)
        if self.load_check:
            result = self._load_checked(model, original, result)
        model.meta[_RESULT_KEY] = result  # on the model of this call: the pass object keeps nothing of it
        return MixedPrecisionResult(model, modified, result)

    def _load_checked(self, model: ir.Model, original: ir.Model | None, result: RewriteResult) -> RewriteResult:
        """The load check (:func:`ampconfig.engine.load_check.load_checked`); a rewrite the net repaired, made from a
        copy of ``original``, is moved into ``model``, which the pass must return."""
        from ampconfig.engine.load_check import load_checked

        def keeping(kept: Mapping[str, str]) -> RewriteResult:
            assert original is not None
            return rewrite_ir_model(original.clone(), self.options, self.facts.refusing(kept), self.ranges)[0]

        checked = load_checked(result, keeping if original is not None else _no_copy)
        if checked.ir_model is model:
            return checked
        repaired = checked.ir_model
        model.graph = repaired.graph
        model.ir_version = repaired.ir_version
        model.functions.clear()
        model.functions.update(repaired.functions)
        model.metadata_props.clear()
        model.metadata_props.update(repaired.metadata_props)
        return replace(checked, ir_model=model)

    @staticmethod
    def result_of(model: ir.Model) -> RewriteResult:
        """The decisions, statistics and warnings of the last MixedPrecisionPass run on ``model``: what is left to
        read after a ``PassManager``, which hands back a plain ``PassResult``. Raises LookupError when none ran on
        it."""
        result = model.meta.get(_RESULT_KEY)
        if not isinstance(result, RewriteResult):
            raise LookupError("no MixedPrecisionPass has rewritten this model")
        return result

    def __repr__(self) -> str:
        return f"MixedPrecisionPass({self.options.precision_mode.value!r}, target={self.options.target!r})"


def _copy_of(model: ir.Model) -> ir.Model | None:
    """A copy of ``model``'s graph to rewrite again from, its tensors shared (not copied). onnx-ir clones a graph in
    topological order only: one out of order is sorted for the copy, then put back as it was handed in (the
    admission sorts it, and says so). None when no copy can be made (the admission then says what is wrong)."""
    try:
        return model.clone()
    except RuntimeError:
        pass
    orders = [(graph, list(graph)) for graph in model.graphs()]
    try:
        model.graph.sort()
        return model.clone()
    except Exception:  # noqa: BLE001 (onnx-ir's errors here share no base; the admission words the defect)
        return None
    finally:
        for graph, nodes in orders:
            graph.remove(nodes)
            graph.extend(nodes)


def _no_copy(kept: Mapping[str, str]) -> RewriteResult:
    raise AmpconfigError(
        "the safety net cannot rewrite the model again: no copy of its graph could be made before the rewrite",
        hint="pass the model in topological order",
    )
