"""ampconfig: NPU-style precision control (precision modes, modify_mixlist) for ONNX models."""

from __future__ import annotations

__version__ = "0.1.0"
