"""ONNX's own op domain, as models and tools spell it: "" or "ai.onnx". The one place those literals live (the
targets' names live in :mod:`ampconfig.opinfo.targets`)."""

from __future__ import annotations

#: The name ONNX Runtime's kernel registry and some exporters give ONNX's own domain.
ONNX_DOMAIN = "ai.onnx"
#: Both spellings of ONNX's own domain ("" is what ONNX's helpers write).
DEFAULT_DOMAINS = frozenset({"", ONNX_DOMAIN})


def is_default_domain(domain: str | None) -> bool:
    """``domain`` is ONNX's own (an op, an opset import or a kernel of it), however spelled."""
    return (domain or "") in DEFAULT_DOMAINS


def canonical_domain(domain: str) -> str:
    """``domain`` as ONNX's helpers spell it: "" for ONNX's own, every other domain unchanged."""
    return "" if domain in DEFAULT_DOMAINS else domain
