"""Which kernel ONNX Runtime picks for a node at a given opset, and how per-opset measurements become one claim.

Pure logic, no ONNX Runtime here: :mod:`ampconfig.opinfo.kernels` measures, this decides what the measurements say.

**ORT's version rule.** A node's schema has a ``since_version`` (the newest schema version not after the model's
opset). ORT serves the node with a kernel registered as ``[start, end]`` only when ``start == since_version``, or
when the kernel has an explicit end and ``start < since_version <= end``
(``onnxruntime/core/framework/kernel_registry.cc``, ``VerifyKernelDef``). An open-ended registration ("6+" in
``docs/OperatorKernels.md``) therefore serves only the schema version it starts at: ORT CUDA's ``Elu`` ("6+") has no
kernel for ``Elu``-22, so a model at opset 22 has no CUDA Elu at all, while one at opset 13 or 17 does. Measured on
the CPU provider too: ``GlobalLpPool`` ("2+") loads at opset 21 and is refused at opset 22.

**Opsets measured.** A claim is measured at the opsets real models use: 13 and 17 (where the op exists), and the
newest schema version up to :data:`OPSET_CAP` that the provider has a kernel for (walking down from the newest when
the newest has none). The claim is what holds at every measured opset where the op has a kernel, so it is safe for
a model at any of them; ``dtypes_by_opset`` keeps each opset's own answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from ampconfig.dtypes import FLOAT_DTYPES

#: ORT's "no end version" (INT_MAX) in kernel version ranges.
OPEN_END = 2**31 - 1
#: Opsets most exported models use: measured whenever the op exists there.
COMMON_OPSETS: tuple[int, ...] = (13, 17)
#: The newest default-domain opset measured (the newest ampconfig targets).
OPSET_CAP = 23
FLOAT_ORDER = FLOAT_DTYPES  # the order dtypes are listed in


def serves(start: int, end: int | None, since_version: int) -> bool:
    """Does a kernel registered for ``[start, end]`` (None or OPEN_END: open-ended) serve a node whose schema is
    ``since_version``? ORT's rule, see the module docstring."""
    if start == since_version:
        return True
    return end is not None and end != OPEN_END and start < since_version <= end


def since_in_force(since_versions: Iterable[int], opset: int) -> int | None:
    """The schema version a model at ``opset`` uses: the newest ``since_version`` not after it."""
    found = [version for version in since_versions if version <= opset]
    return max(found) if found else None


class OpsetStatus(str, Enum):
    KERNEL = "kernel"  # some dtype ran (or is registered) at this opset
    NO_KERNEL = "no-kernel"  # the provider has no kernel for the op's schema at this opset
    UNPROBED = "unprobed"  # nothing could be measured here (no model, or the float32 model itself failed)


@dataclass(frozen=True)
class OpsetResult:
    """What one opset says: the dtypes that run there, which of them natively, and why when nothing does."""

    status: OpsetStatus
    dtypes: tuple[str, ...] = ()
    native_dtypes: tuple[str, ...] = ()
    message: str = ""
    tested: tuple[str, ...] | None = None  # dtypes this opset could test (its schema allows); None: all

    def tests(self, dtype: str) -> bool:
        return self.tested is None or dtype in self.tested


@dataclass(frozen=True)
class AcrossOpsets:
    """Per-opset results of one op and the claim they make together."""

    by_opset: Mapping[int, OpsetResult] = field(default_factory=dict)
    note: str = ""  # why nothing could be measured at all, when by_opset is empty

    @property
    def measured(self) -> dict[int, OpsetResult]:
        return {opset: r for opset, r in self.by_opset.items() if r.status is OpsetStatus.KERNEL}

    @property
    def no_kernel_opsets(self) -> list[int]:
        return sorted(opset for opset, r in self.by_opset.items() if r.status is OpsetStatus.NO_KERNEL)

    @property
    def known(self) -> bool:
        """Something was measured: a kernel somewhere, or a definite "no kernel" everywhere probed."""
        return bool(self.measured) or bool(self.no_kernel_opsets)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return _common(self.measured.values(), lambda r: r.dtypes)

    @property
    def native_dtypes(self) -> tuple[str, ...]:
        return _common(self.measured.values(), lambda r: r.native_dtypes)

    def reason(self) -> str:
        """Why nothing is claimed (or what was left out), for the op info's note."""
        if not self.by_opset:
            return self.note or "no probe model could be built for this op"
        unprobed = {o: r for o, r in self.by_opset.items() if r.status is OpsetStatus.UNPROBED}
        parts = []
        if self.no_kernel_opsets:
            parts.append("no kernel at opset " + ", ".join(map(str, self.no_kernel_opsets)))
        if unprobed:
            first = unprobed[min(unprobed)]
            listed = ", ".join(map(str, sorted(unprobed)))
            parts.append(f"not measurable at opset {listed}: {first.message or 'no float32 model ran'}"[:400])
        return "; ".join(parts)


def _common(results: Iterable[OpsetResult], claimed: Callable[[OpsetResult], tuple[str, ...]]) -> tuple[str, ...]:
    """A dtype holds when every opset that could test it (its schema version allows it there) has it, and at
    least one could: IsInf-10 allows no float16, so opsets 13/17 say nothing about IsInf-20's float16 kernel.
    The rewrite checks the schema in force for each node itself."""
    results = list(results)
    common = []
    for dtype in FLOAT_ORDER:
        testing = [r for r in results if r.tests(dtype)]
        if testing and all(dtype in claimed(r) for r in testing):
            common.append(dtype)
    return tuple(common)


def measure_across_opsets(
    since_versions: Sequence[int],
    measure: Callable[[int], OpsetResult],
    common: Sequence[int] = COMMON_OPSETS,
    cap: int = OPSET_CAP,
) -> AcrossOpsets:
    """Measure an op at the common opsets and at the newest schema version (up to ``cap``) with a kernel.

    ``measure(opset)`` is called at most once per schema version: opsets whose schema in force is the same share
    one result. Walking down from the newest version stops at the first with a kernel, or at a version the common
    opsets already measured.
    """
    versions = sorted({v for v in since_versions if v <= cap})
    if not versions:
        later = min(since_versions, default=None)
        note = f"introduced at opset {later}, after the newest opset measured ({cap})" if later else ""
        return AcrossOpsets({}, note=note)
    by_since: dict[int, OpsetResult] = {}
    by_opset: dict[int, OpsetResult] = {}

    def at(opset: int) -> OpsetResult:
        since = since_in_force(versions, opset)
        assert since is not None
        if since not in by_since:
            by_since[since] = measure(opset)
        return by_since[since]

    for opset in common:
        if since_in_force(versions, opset) is not None and opset <= cap:
            by_opset[opset] = at(opset)
    for since in reversed(versions):  # down to the newest version with a kernel (a probe model valid there)
        if since in by_since:
            if by_since[since].status is OpsetStatus.KERNEL:
                break  # the common opsets already measured it
            continue
        result = at(since)
        by_opset[since] = result
        if result.status is OpsetStatus.KERNEL:
            break
    return AcrossOpsets(dict(sorted(by_opset.items())))


# --------------------------------------------------------------------------------------------- kernel registries


@dataclass(frozen=True)
class KernelRow:
    """One kernel registration: an op of a domain on a provider for ``[start, end]`` with its type constraints."""

    op_type: str
    domain: str
    provider: str
    start: int
    end: int | None
    types: Mapping[str, frozenset[str]]


_TYPE_STR = {"float32": "tensor(float)", "float16": "tensor(float16)", "bfloat16": "tensor(bfloat16)"}


def row_accepts(row: KernelRow, variables: Iterable[str], dtype: str) -> bool:
    """Does the kernel take ``dtype`` for every variable the rewrite moves? A variable the kernel does not
    constrain accepts anything (ORT matches only the constraints a kernel declares)."""
    type_str = _TYPE_STR[dtype]
    return all(var not in row.types or type_str in row.types[var] for var in variables)


def registered_dtypes(
    rows: Sequence[KernelRow], since_version: int, variables_for: Callable[[str], Iterable[str] | None]
) -> OpsetResult:
    """The float dtypes registered kernels serve for a node of schema ``since_version``.

    ``variables_for(dtype)`` gives the type variables the rewrite moves to ``dtype`` (None: it cannot move the
    node there). A dtype counts when one serving kernel accepts it for all of them; ORT registers one kernel per
    type combination (SkipLayerNormalization: four rows), so rows are not merged. Registered kernels are native.
    """
    serving = [row for row in rows if serves(row.start, row.end, since_version)]
    if not serving:
        return OpsetResult(OpsetStatus.NO_KERNEL, message=f"no kernel registered for schema version {since_version}")
    dtypes, tested = [], []
    for dtype in FLOAT_ORDER:
        variables = variables_for(dtype)
        if variables is None:
            continue  # the schema in force does not let the rewrite move the node to this dtype
        tested.append(dtype)
        if any(row_accepts(row, variables, dtype) for row in serving):
            dtypes.append(dtype)
    return OpsetResult(OpsetStatus.KERNEL, tuple(dtypes), tuple(dtypes), tested=tuple(tested))
