"""ampconfig: NPU-style precision control (precision modes, modify_mixlist) for ONNX models."""

from __future__ import annotations

__version__ = "0.1.0"

from ampconfig.api import rewrite_model, rewrite_model_detailed
from ampconfig.gc_pause import gc_paused

__all__ = ["__version__", "gc_paused", "rewrite_model", "rewrite_model_detailed"]
