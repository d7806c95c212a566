"""What measurements found about one model, kept apart from what the user chose
(:class:`~ampconfig.decide.rewrite_options.RewriteOptions`): the float32 model's value ranges on data, the nodes
a range analysis says overflow, and the nodes ONNX Runtime refused or crashed on in a lower dtype (the safety
net's findings). A decision reads both; only the facts change between one attempt and the next."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ampconfig.decide.value_limits import ValueRanges
from ampconfig.errors import AmpconfigError


@dataclass(frozen=True)
class MeasuredFacts:
    """``value_ranges``: the float32 model's values on data (None: activations not checked). ``overflow_nodes`` and
    ``runtime_refused`` map node names to why each keeps its dtype (a range analysis; ONNX Runtime). It holds
    read-only copies of the mappings it is given."""

    value_ranges: ValueRanges | None = None
    overflow_nodes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    runtime_refused: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for name in _MAPPINGS:  # None is accepted for the mappings, as the API's keywords have always accepted it
            if getattr(self, name) is None:
                object.__setattr__(self, name, MappingProxyType({}))
        for name, (accepts, expected) in _EXPECTED.items():
            check_option(name, getattr(self, name), accepts, expected)
        for name in _MAPPINGS:
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def refusing(self, kept: Mapping[str, str]) -> MeasuredFacts:
        """These facts with the nodes in ``kept`` refused by ONNX Runtime too (the safety net's next attempt)."""
        return replace(self, runtime_refused={**self.runtime_refused, **kept})


#: The facts that are mappings: each held as a read-only copy.
_MAPPINGS = ("overflow_nodes", "runtime_refused")


def _is_text_mapping(value: object) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


_EXPECTED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "value_ranges": (lambda v: v is None or isinstance(v, ValueRanges), "a ValueRanges, or None"),
    "overflow_nodes": (_is_text_mapping, "a mapping of node names to reasons"),
    "runtime_refused": (_is_text_mapping, "a mapping of node names to reasons"),
}


def check_option(name: str, value: object, accepts: Callable[[Any], bool], expected: str) -> None:
    """Refuse a keyword of the API of the wrong type, naming it, what it must be and what it got (exit 2 in the
    CLI)."""
    if not accepts(value):
        from ampconfig.documents.parsing import describe_value

        raise AmpconfigError(
            f"{name} must be {expected}, got {describe_value(value)}",
            hint=f"see ampconfig.rewrite_model_detailed's {name}",
        )
