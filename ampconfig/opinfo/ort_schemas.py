"""ONNX Runtime's own op schema registry, read into the typing the decision core uses (:class:`NodeTyping`).

``onnx.defs`` knows only ONNX's domains. The ops ORT's transformer optimizer writes (``com.microsoft::Attention``,
``SkipLayerNormalization``, ``FastGelu``, ...) and the ops ORT adds to the default domain
(``SimplifiedLayerNormalization``) are declared in ORT's registry:
``onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()``. It lists every version of every schema
(847 in onnxruntime 1.31.1: 637 default-domain, 136 ``com.microsoft``, 41 ``com.ms.internal.nhwc``, 25
``ai.onnx.ml``, 8 ``com.microsoft.nchwc``). The schemas are compiled into the ORT library itself, independent of
the execution providers: the CPU wheel ``onnxruntime`` and ``onnxruntime-gpu`` 1.31.1 return the same 847 schemas,
identical field by field (compared 2026-11-23), and reading them loads no CUDA library, so it works on a machine
without them. (``get_all_opkernel_def()``, the *kernel* registry, is another matter: it instantiates every
provider's kernel registrations and crashes onnxruntime-gpu without the CUDA libraries; see
``benchmarks/dump_kernels.py``.)

:class:`OrtSchemaTyping` implements :class:`ampconfig.opinfo.typing_source.TypingSource`; the registry is read once
per process.

It lives in opinfo/ because it is typing, like :mod:`ampconfig.opinfo.schema` beside it: it reads a registry
compiled into the library, never a model or a session (so not runner/, and not the worker's process), and its
users are the op info probes (:mod:`ampconfig.opinfo.kernels`, :mod:`ampconfig.opinfo.kernel_dump`) and the
engine's typing chain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ampconfig.domains import canonical_domain
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.schema import NodeTyping, Slot

_VARIADIC = "Variadic"


@dataclass(frozen=True)
class FormalParam:
    """One declared input or output of a schema."""

    name: str
    type_str: str  # a type variable ("T") or a literal type ("tensor(int32)")
    option: str  # "Single", "Optional" or "Variadic"
    homogeneous: bool


@dataclass(frozen=True)
class OrtSchema:
    """One version of one op schema from ORT's registry, as plain data."""

    name: str
    domain: str
    since_version: int
    inputs: tuple[FormalParam, ...]
    outputs: tuple[FormalParam, ...]
    type_constraints: Mapping[str, frozenset[str]]
    deprecated: bool = False


def _normal_domain(domain: str) -> str:
    return canonical_domain(domain)


def _param(raw: Any) -> FormalParam:
    option = raw.option
    return FormalParam(
        name=str(raw.name),
        type_str=str(raw.typeStr),
        option=str(getattr(option, "name", option)).rpartition(".")[2],
        homogeneous=bool(raw.isHomogeneous),
    )


def _schema(raw: Any) -> OrtSchema:
    constraints = {str(c.type_param_str): frozenset(c.allowed_type_strs) for c in raw.type_constraints}
    return OrtSchema(
        name=str(raw.name),
        domain=_normal_domain(str(raw.domain)),
        since_version=int(raw.since_version),
        inputs=tuple(_param(p) for p in raw.inputs),
        outputs=tuple(_param(p) for p in raw.outputs),
        type_constraints=constraints,
        deprecated=bool(getattr(raw, "deprecated", False)),
    )


def _raw_schemas() -> list[Any]:
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as pybind
    except ImportError as exc:  # pragma: no cover - onnxruntime is a dependency
        raise AmpconfigError("onnxruntime is not importable", hint="pip install onnxruntime") from exc
    reader = getattr(pybind, "get_all_operator_schema", None)
    if reader is None:
        raise AmpconfigError(
            "this onnxruntime build has no schema registry (get_all_operator_schema): contrib ops cannot be typed",
            hint="install the standard onnxruntime or onnxruntime-gpu wheel (minimal builds leave it out)",
        )
    return list(reader())


@cache
def ort_schemas() -> Mapping[tuple[str, str], tuple[OrtSchema, ...]]:
    """Every schema version in ORT's registry by ``(domain, op type)``, oldest first (read once per process)."""
    by_op: dict[tuple[str, str], list[OrtSchema]] = {}
    for raw in _raw_schemas():
        schema = _schema(raw)
        by_op.setdefault((schema.domain, schema.name), []).append(schema)
    return {key: tuple(sorted(versions, key=lambda s: s.since_version)) for key, versions in by_op.items()}


def schema_at(op_type: str, domain: str, opset: int) -> OrtSchema | None:
    """The schema in force at ``opset`` of ``domain`` (the newest version not after it), or None."""
    versions = ort_schemas().get((_normal_domain(domain), op_type), ())
    in_force = [schema for schema in versions if schema.since_version <= opset]
    return in_force[-1] if in_force else None


def _slots(params: Sequence[FormalParam], count: int, allowed_by_var: Mapping[str, frozenset[str]]) -> tuple[Slot, ...]:
    """Slots of ``count`` actual parameters: the same rule as :mod:`ampconfig.opinfo.schema` applies to
    ``onnx.defs`` (a trailing variadic parameter repeats; a heterogeneous one binds no shared variable)."""
    slots: list[Slot] = []
    for index in range(count):
        if not params:
            break
        param = params[min(index, len(params) - 1)]
        variadic = param.option == _VARIADIC
        if index >= len(params) and not variadic:
            break
        var = param.type_str if param.type_str in allowed_by_var else None
        allowed = allowed_by_var[var] if var is not None else frozenset({param.type_str})
        homogeneous = not variadic or param.homogeneous
        slots.append(Slot(var if homogeneous else None, allowed, homogeneous))
    return tuple(slots)


@cache
def ort_node_typing(op_type: str, domain: str, opset: int, n_inputs: int, n_outputs: int) -> NodeTyping | None:
    """Typing of a node from ORT's registry; one object per key, as ``node_typing`` hands out."""
    schema = schema_at(op_type, domain, opset)
    if schema is None:
        return None
    return NodeTyping(
        inputs=_slots(schema.inputs, n_inputs, schema.type_constraints),
        outputs=_slots(schema.outputs, n_outputs, schema.type_constraints),
        since_version=schema.since_version,
    )


@dataclass(frozen=True)
class OrtSchemaTyping:
    """A :class:`ampconfig.opinfo.typing_source.TypingSource` backed by ORT's schema registry.

    ``domains`` limits which domains it answers for (None: every domain ORT knows). The core chains it after
    ``onnx.defs`` (:class:`ampconfig.opinfo.typing_source.ChainedTyping`), so it types what ONNX does not know.
    """

    domains: frozenset[str] | None = None

    def typing(self, op_type: str, domain: str, opset: int, n_inputs: int, n_outputs: int) -> NodeTyping | None:
        if self.domains is not None and _normal_domain(domain) not in self.domains:
            return None
        return ort_node_typing(op_type, _normal_domain(domain), opset, n_inputs, n_outputs)
