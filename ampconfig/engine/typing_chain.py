"""How the engine types nodes: ONNX's own schemas first, then ONNX Runtime's schema registry for the ops ONNX does
not define (contrib ops such as ``com.microsoft::Attention``; onnxruntime is imported only when such an op is met)."""

from __future__ import annotations

from ampconfig.opinfo.ort_schemas import OrtSchemaTyping
from ampconfig.opinfo.typing_source import ChainedTyping, OnnxTyping

#: How the rewrite types nodes: ONNX's schemas first, then ONNX Runtime's.
TYPING = ChainedTyping((OnnxTyping(), OrtSchemaTyping()))
