"""ampconfig: NPU-style precision control (precision modes, modify_mixlist) for ONNX models.

This module imports nothing when it runs: the ``ampconfig`` console script imports it before its entry
(:mod:`ampconfig.entry`) can answer Ctrl-C, so an import here would be a moment where Ctrl-C prints a
``KeyboardInterrupt`` traceback. Every public name, ``__version__`` included, is imported on first use.
"""

# typing's own constant, spelt out: importing typing is an import step (type checkers read the name itself)
TYPE_CHECKING = False

__all__ = [
    "Judgement",
    "MixedPrecisionPass",
    "MixedPrecisionResult",
    "__version__",
    "calibrate_model",
    "close",
    "gc_paused",
    "merge_ranges",
    "onnx_runtime_worker",
    "rewrite_model",
    "rewrite_model_detailed",
]

if TYPE_CHECKING:
    from typing import Any

    from ampconfig.api import close, onnx_runtime_worker, rewrite_model, rewrite_model_detailed
    from ampconfig.decide.user_judgements import Judgement
    from ampconfig.gc_pause import gc_paused
    from ampconfig.ir_pass import MixedPrecisionPass, MixedPrecisionResult
    from ampconfig.prove.calibration import calibrate_model, merge_ranges
    from ampconfig.version import __version__


#: Where each public name is defined.
_PUBLIC_MODULES = {
    "__version__": "ampconfig.version",
    "rewrite_model": "ampconfig.api",
    "rewrite_model_detailed": "ampconfig.api",
    "close": "ampconfig.api",
    "onnx_runtime_worker": "ampconfig.api",
    "MixedPrecisionPass": "ampconfig.ir_pass",
    "MixedPrecisionResult": "ampconfig.ir_pass",
    "Judgement": "ampconfig.decide.user_judgements",
    "gc_paused": "ampconfig.gc_pause",
    "calibrate_model": "ampconfig.prove.calibration",
    "merge_ranges": "ampconfig.prove.calibration",
}


def __getattr__(name: str) -> "Any":
    """The public API, imported on first use: ``import ampconfig.cli`` (and ``ampconfig --help``) must not pay for
    onnx, onnx-ir and the decision engine, which ``ampconfig.api`` imports."""
    module_name = _PUBLIC_MODULES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'ampconfig' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
