"""ONNX's own op domain, as models and tools spell it: "" or "ai.onnx". The one place those literals live (the
targets' names live in :mod:`ampconfig.opinfo.targets`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

#: The name ONNX Runtime's kernel registry and some exporters give ONNX's own domain.
ONNX_DOMAIN = "ai.onnx"
#: Both spellings of ONNX's own domain ("" is what ONNX's helpers write).
DEFAULT_DOMAINS = frozenset({"", ONNX_DOMAIN})


def is_default_domain(domain: str | None) -> bool:
    """``domain`` is ONNX's own (an op, an opset import or a kernel of it), however spelled."""
    return (domain or "") in DEFAULT_DOMAINS


class _OpsetImport(Protocol):
    """An entry of a model proto's ``opset_import`` (onnx's OperatorSetIdProto, which this module does not import)."""

    domain: str
    version: int


def onnx_opset(opset_import: Iterable[_OpsetImport]) -> int | None:
    """The version a model proto imports ONNX's own domain at, however spelled; None when it imports none."""
    return next((entry.version for entry in opset_import if is_default_domain(entry.domain)), None)


def canonical_domain(domain: str) -> str:
    """``domain`` as ONNX's helpers spell it: "" for ONNX's own, every other domain unchanged."""
    return "" if domain in DEFAULT_DOMAINS else domain
