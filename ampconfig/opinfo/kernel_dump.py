"""Op info dtypes from a dump of ONNX Runtime's kernel registry (``get_all_opkernel_def()``).

The registry lists, per execution provider, every registered kernel: op, domain, version range and type
constraints. That is the provider's ground truth, and unlike the published table it is exactly the installed
build's. It must be dumped in a subprocess: in onnxruntime-gpu 1.31.1 on a machine without the CUDA libraries,
``get_all_opkernel_def()`` crashes the process (segmentation fault). ``benchmarks/dump_kernels.py`` (and
``benchmarks/gpu_models.py --op-kernels``) write the dump; this module reads it:

``{"onnxruntime": "1.31.1", "kernels": {"CUDAExecutionProvider": [{"op": "Elu", "domain": "ai.onnx",
"provider": "CUDAExecutionProvider", "since": 6, "until": 2147483647, "types": {"T": ["tensor(float)", ...]}}]}}``

(also accepted: ``kernels`` as one list, ``op_name``/``version_range`` keys, a bare list of rows).
Claims follow :mod:`ampconfig.opinfo.kernel_claims`: ORT's version rule, the opsets real models use, and the
rewrite's rule for which type variables must accept a dtype (:func:`ampconfig.opinfo.schema.compute_variables`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampconfig.domains import canonical_domain
from ampconfig.dtypes import Dtype
from ampconfig.errors import AmpconfigError
from ampconfig.files.paths import open_regular
from ampconfig.opinfo.kernel_claims import (
    COMMON_OPSETS,
    FLOAT_ORDER,
    OPEN_END,
    OPSET_CAP,
    AcrossOpsets,
    KernelRow,
    OpsetResult,
    OpsetStatus,
    measure_across_opsets,
    registered_dtypes,
    serves,
    since_in_force,
)
from ampconfig.opinfo.ort_schemas import OrtSchemaTyping, ort_schemas
from ampconfig.opinfo.schema import NodeTyping, compute_variables
from ampconfig.opinfo.typing_source import ChainedTyping, OnnxTyping

#: Domains whose ops get op info entries (the others are ORT-internal layouts: nhwc, nchwc).
IMPORTED_DOMAINS = ("", "com.microsoft")
_TYPING = ChainedTyping((OnnxTyping(), OrtSchemaTyping()))
_FLOAT32 = Dtype.FLOAT32.type_str


@dataclass(frozen=True)
class KernelDump:
    onnxruntime_version: str | None
    rows: tuple[KernelRow, ...]

    def providers(self) -> list[str]:
        return sorted({row.provider for row in self.rows})


def _field(row: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if name in row:
            return row[name]
    return None


def _row(raw: Any, provider: str | None, where: str) -> KernelRow:
    if not isinstance(raw, Mapping):
        raise AmpconfigError("a kernel row is not a JSON object", file=where, hint="rows: {op, domain, since, ...}")
    op = _field(raw, "op", "op_name", "name")
    version_range = _field(raw, "version_range")
    start = _field(raw, "since", "start", "since_version")
    end = _field(raw, "until", "end", "end_version")
    if version_range is not None:
        start, end = version_range
    types = _field(raw, "types", "type_constraints") or {}
    row_provider = _field(raw, "provider") or provider
    if not isinstance(op, str) or not isinstance(start, int) or not row_provider:
        raise AmpconfigError(
            f"a kernel row lacks op, provider or a version: {json.dumps(raw)[:200]}",
            file=where,
            hint="each row needs op (or op_name), provider, since/until (or version_range) and types",
        )
    domain = str(_field(raw, "domain") or "")
    return KernelRow(
        op_type=op,
        domain=canonical_domain(domain),
        provider=str(row_provider),
        start=start,
        end=None if end in (None, OPEN_END) else int(end),
        types={str(var): frozenset(allowed) for var, allowed in types.items()},
    )


def _raw_rows(data: Any) -> Iterable[tuple[Any, str | None]]:
    kernels = data.get("kernels") if isinstance(data, Mapping) else data
    if isinstance(kernels, Mapping):  # {provider: [rows]}
        for provider, rows in kernels.items():
            for raw in rows or []:
                yield raw, str(provider)
    elif isinstance(kernels, list):
        for raw in kernels:
            yield raw, None


def read_kernel_dump(path: str | Path) -> KernelDump:
    """Read a kernel registry dump; AmpconfigError with the file named when it is missing or malformed."""
    path = Path(path)
    where = str(path)
    try:
        with open_regular(path, "the kernel dump") as file:
            text = file.read().decode("utf-8")
    except OSError as exc:
        raise AmpconfigError(f"cannot read the kernel dump: {exc.strerror or exc}", file=where) from None
    except UnicodeDecodeError:
        raise AmpconfigError("the kernel dump is not UTF-8 text", file=where, hint="give the JSON dump") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AmpconfigError(f"not valid JSON: {exc.msg}", file=where, line=exc.lineno) from None
    rows = tuple(_row(raw, provider, where) for raw, provider in _raw_rows(data))
    if not rows:
        raise AmpconfigError(
            "the kernel dump lists no kernels",
            file=where,
            json_path="$.kernels",
            hint="dump on a machine where get_all_opkernel_def() works: python benchmarks/dump_kernels.py OUT.json",
        )
    version = data.get("onnxruntime") if isinstance(data, Mapping) else None
    return KernelDump(str(version) if version else None, rows)


def _key(domain: str, op_type: str) -> str:
    return op_type if domain == "" else f"{domain}::{op_type}"


def _declared_typing(op_type: str, domain: str, opset: int) -> NodeTyping | None:
    """The node the rewrite starts from: every declared input and output present."""
    versions = ort_schemas().get((domain, op_type), ())
    counts = (len(versions[-1].inputs), len(versions[-1].outputs)) if versions else None
    if domain == "":
        import onnx.defs

        try:
            schema = onnx.defs.get_schema(op_type, opset, "")
            counts = (len(schema.inputs), len(schema.outputs))
        except onnx.defs.SchemaError:
            pass
    if counts is None:
        return None
    return _TYPING.typing(op_type, domain, opset, *counts)


def _variables(typing: NodeTyping | None, dtype: str) -> frozenset[str] | None:
    """Type variables the rewrite moves to ``dtype`` in a node whose float-capable tensors are all float32."""
    if typing is None:
        return None
    inputs = ["float32" if _FLOAT32 in slot.allowed else None for slot in typing.inputs]
    outputs = ["float32" if _FLOAT32 in slot.allowed else None for slot in typing.outputs]
    found = compute_variables(typing, inputs, outputs, dtype)
    if found is None or not all(typing.var_allows(var, dtype) for var in found[1]):
        return None
    return found[1]


def _container_dtypes(rows: Sequence[KernelRow], since: int) -> OpsetResult:
    """Ops with no movable float variable (If/Loop outputs, sequences): the float types the kernels list."""
    serving = [row for row in rows if serves(row.start, row.end, since)]
    if not serving:
        return OpsetResult(OpsetStatus.NO_KERNEL, message=f"no kernel registered for schema version {since}")
    listed = {t for row in serving for allowed in row.types.values() for t in allowed}
    dtypes = tuple(d for d in FLOAT_ORDER if any(Dtype(d).type_str in t for t in listed))
    return OpsetResult(OpsetStatus.KERNEL, dtypes, dtypes)


def _since_versions(op_type: str, domain: str) -> tuple[int, ...]:
    """Schema versions as ORT resolves them (its own registry decides a node's since_version)."""
    versions = {schema.since_version for schema in ort_schemas().get((domain, op_type), ())}
    if not versions and domain == "":
        import onnx.defs

        versions = {s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op_type}
    return tuple(sorted(versions))


def op_claims(rows: Sequence[KernelRow], op_type: str, domain: str) -> AcrossOpsets:
    """What the registered kernels of one op on one provider claim, at the opsets real models use."""
    versions = _since_versions(op_type, domain)
    if not versions:
        return AcrossOpsets({}, note="ONNX Runtime declares no schema for this op: it cannot be typed")

    def at(opset: int) -> OpsetResult:
        since = since_in_force(versions, opset)
        assert since is not None
        typing = _declared_typing(op_type, domain, opset)
        if _variables(typing, "float32") is None and typing is not None and not _movable_anywhere(typing):
            return _container_dtypes(rows, since)
        return registered_dtypes(rows, since, lambda dtype: _variables(typing, dtype))

    if domain == "":
        return measure_across_opsets(versions, at, COMMON_OPSETS, OPSET_CAP)
    return measure_across_opsets(versions, at, (), max(versions))


def _movable_anywhere(typing: NodeTyping) -> bool:
    return any(_variables(typing, dtype) is not None for dtype in FLOAT_ORDER)


def dump_claims(dump: KernelDump, provider: str) -> dict[str, AcrossOpsets]:
    """Claims per op key for ``provider``: default-domain and com.microsoft ops of the dump."""
    by_op: dict[tuple[str, str], list[KernelRow]] = {}
    for row in dump.rows:
        if row.provider == provider and row.domain in IMPORTED_DOMAINS:
            by_op.setdefault((row.domain, row.op_type), []).append(row)
    if not by_op:
        raise AmpconfigError(
            f"the kernel dump has no {provider} kernels",
            hint="providers in the dump: " + (", ".join(dump.providers()) or "none"),
        )
    return {_key(domain, op): op_claims(rows, op, domain) for (domain, op), rows in sorted(by_op.items())}
