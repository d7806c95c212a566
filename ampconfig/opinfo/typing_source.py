"""Where the decision core gets a node's type constraints from, as an injected dependency.

ONNX's own schemas (``onnx.defs``) type the default domain. Contrib ops (``com.microsoft::Attention``,
``SkipLayerNormalization``, ...) and the ops ONNX Runtime adds to the default domain (``SimplifiedLayerNormalization``)
are typed by ONNX Runtime's schema registry, which only :mod:`ampconfig.opinfo.ort_schemas` may read: the core never
imports onnxruntime, it is handed a :class:`TypingSource`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ampconfig.opinfo.schema import NodeTyping, node_typing


@runtime_checkable
class TypingSource(Protocol):
    """Types a node with ``n_inputs``/``n_outputs`` actual (positional) inputs/outputs; None for an op it does
    not know. The same key must give the same :class:`NodeTyping` object (they compare by identity)."""

    def typing(self, op_type: str, domain: str, opset: int, n_inputs: int, n_outputs: int) -> NodeTyping | None: ...


@dataclass(frozen=True)
class OnnxTyping:
    """The ``onnx.defs`` schemas: what :func:`ampconfig.opinfo.schema.node_typing` answers today."""

    def typing(self, op_type: str, domain: str, opset: int, n_inputs: int, n_outputs: int) -> NodeTyping | None:
        return node_typing(op_type, domain, opset, n_inputs, n_outputs)


@dataclass(frozen=True)
class ChainedTyping:
    """Asks each source in turn; the first that knows the op answers (``onnx.defs`` before ONNX Runtime, so the
    default domain keeps ONNX's own schemas even where ORT embeds an older ONNX)."""

    sources: tuple[TypingSource, ...]

    def typing(self, op_type: str, domain: str, opset: int, n_inputs: int, n_outputs: int) -> NodeTyping | None:
        for source in self.sources:
            found = source.typing(op_type, domain, opset, n_inputs, n_outputs)
            if found is not None:
                return found
        return None
