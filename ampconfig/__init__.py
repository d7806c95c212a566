"""ampconfig: NPU-style precision control (precision modes, modify_mixlist) for ONNX models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Judgement",
    "MixedPrecisionPass",
    "MixedPrecisionResult",
    "__version__",
    "gc_paused",
    "rewrite_model",
    "rewrite_model_detailed",
]

if TYPE_CHECKING:
    from ampconfig.api import rewrite_model, rewrite_model_detailed
    from ampconfig.decide.judgements import Judgement
    from ampconfig.gc_pause import gc_paused
    from ampconfig.ir_pass import MixedPrecisionPass, MixedPrecisionResult


def __getattr__(name: str) -> Any:
    """The public API, imported on first use: ``import ampconfig.cli`` (and ``ampconfig --help``) must not pay for
    onnx, onnx-ir and the decision engine, which ``ampconfig.api`` imports. onnx-ir's sympy import is deferred
    while they are imported (:func:`~ampconfig.deferred_imports.unused_imports_deferred`)."""
    from ampconfig.deferred_imports import unused_imports_deferred

    if name in ("rewrite_model", "rewrite_model_detailed"):
        with unused_imports_deferred():
            from ampconfig import api

        return getattr(api, name)
    if name in ("MixedPrecisionPass", "MixedPrecisionResult"):
        with unused_imports_deferred():
            from ampconfig import ir_pass

        return getattr(ir_pass, name)
    if name == "Judgement":
        with unused_imports_deferred():
            from ampconfig.decide.judgements import Judgement

        return Judgement
    if name == "gc_paused":
        from ampconfig.gc_pause import gc_paused

        return gc_paused
    raise AttributeError(f"module 'ampconfig' has no attribute {name!r}")
