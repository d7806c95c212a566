"""Can an execution provider run a model's nodes, and with its own kernels? Measured with a real ORT session, built
and run in the worker process (:mod:`ampconfig.worker.client`): a probe that crashes ONNX Runtime fails its verdict,
not the command, and this process never imports onnxruntime.

The CPU provider does not fail on a float16 node it has no kernel for: ORT's InsertCastTransformer wraps the node
in ``InsertedPrecisionFreeCast_*`` Casts and runs it in float32. That is valid (and numerically what float16
storage gives) but not a native kernel, so the check writes the session's optimized graph (at ORT_DISABLE_ALL,
where nothing else rewrites it) and looks for the casts ORT inserted. Building the session is not enough either:
ScatterND with ``reduction`` loads in float16 and fails when run, so probes with inputs are run too. The CUDA
provider is checked with CPU fallback disabled, so a missing CUDA kernel fails the session instead of silently
running on the CPU. A function op that ORT inlines (Gelu, ...) counts as native when every node of its body runs
natively in that dtype: that is what precision needs.

:func:`measure_op` turns the verdicts of an op's probe models into its op info claim. Also here:
:func:`kernel_table_dtypes`, reading ONNX Runtime's published kernel table (docs/OperatorKernels.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import onnx

from ampconfig.domains import canonical_domain
from ampconfig.dtypes import FLOAT_DTYPES, Dtype
from ampconfig.errors import AmpconfigError
from ampconfig.files.bounded import read_text
from ampconfig.opinfo.kernel_claims import (
    COMMON_OPSETS,
    AcrossOpsets,
    OpsetResult,
    OpsetStatus,
    measure_across_opsets,
    serves,
)
from ampconfig.opinfo.ort_schemas import schema_at
from ampconfig.opinfo.probe_models import Feeds, op_since_versions, probe_models, split_key
from ampconfig.opinfo.schema import compute_variables, get_schema, node_typing
from ampconfig.opinfo.targets import CPU_PROVIDER, CUDA_PROVIDER
from ampconfig.worker import client as worker
from ampconfig.worker.channel import large_bytes
from ampconfig.worker.client import Phase, WorkerCrashed, WorkerRefused, cuda_unavailable_reason

_CONTRIB = "com.microsoft"

CPU, CUDA = CPU_PROVIDER, CUDA_PROVIDER
_NO_KERNEL_MARKERS = (
    "Could not find an implementation",
    "NOT_IMPLEMENTED",
    "fallback to CPU EP has been explicitly disabled",
)


class KernelStatus(str, Enum):
    NATIVE = "native"  # loads (and runs, when it has inputs) with the provider's own kernels
    EMULATED = "emulated"  # loads and runs only because ORT inserted casts to another dtype's kernel
    NO_KERNEL = "no_kernel"  # the provider has no kernel for some node
    FAILED = "fails"  # the session failed to load for another reason, or failed when run


@dataclass(frozen=True)
class KernelVerdict:
    status: KernelStatus
    provider: str
    message: str = ""
    ran: bool = False  # the session was run on inputs, not only loaded

    @property
    def native(self) -> bool:
        return self.status is KernelStatus.NATIVE

    @property
    def runs(self) -> bool:
        """The provider runs the model, with its own kernel or through inserted casts."""
        return self.status in (KernelStatus.NATIVE, KernelStatus.EMULATED)


def _open_arguments(model: onnx.ModelProto, provider: str) -> dict[str, object]:
    """The worker's ``open_optimized`` request for ``model`` on ``provider`` alone (a CUDA session may not fall back
    to the CPU), at ORT_DISABLE_ALL, where nothing but ORT's inserted casts changes the graph."""
    config = {} if provider == CPU else {"session.disable_cpu_ep_fallback": "1"}
    return {
        "model": large_bytes(model.SerializeToString()),
        "device": "cpu" if provider == CPU else "cuda",
        "tf32": False,
        "conv_algo_search": None,
        "config": config,
        "in_node_order": False,
        "folder": None,
        "optimization": "disabled",
    }


# ORT's InsertCastTransformer names the casts it adds around a float16 node without a kernel this way.
_INSERTED_CAST_PREFIX = "InsertedPrecisionFreeCast"


def _inserted_casts(graph: onnx.GraphProto) -> int:
    """Casts ORT inserted (by name, so casts inside inlined function bodies, e.g. LayerNorm's, do not count)."""
    count = 0
    for node in graph.node:
        count += node.op_type == "Cast" and node.name.startswith(_INSERTED_CAST_PREFIX)
        for attr in node.attribute:  # subgraph bodies get casts inserted too
            subgraphs = [attr.g] if attr.HasField("g") else []
            count += sum(_inserted_casts(sub) for sub in (*subgraphs, *attr.graphs))
    return count


def _classify_failure(message: str, provider: str) -> KernelVerdict:
    status = KernelStatus.NO_KERNEL if any(m in message for m in _NO_KERNEL_MARKERS) else KernelStatus.FAILED
    return KernelVerdict(status, provider, message.strip())


def check_kernel(model: onnx.ModelProto, provider: str, inputs: Feeds | None = None) -> KernelVerdict:
    """Build a session for ``model`` with ``provider`` alone in the worker, run it on ``inputs`` when given, and say
    whether it runs natively, through ORT-inserted casts, or not at all. A probe that crashes ONNX Runtime is a
    failed verdict: the worker died, not the probe.

    Raises AmpconfigError when the provider cannot create sessions at all on this machine.
    """
    what = f"a one-node probe model on {provider}"
    process = worker.current()
    try:
        answer = process.ask("open_optimized", _open_arguments(model, provider), Phase.LOAD, what)
    # ORT's own types (Fail, NotImplemented, InvalidGraph...): the verdict says it.
    except WorkerRefused as exc:
        return _classify_failure(str(exc), provider)
    except WorkerCrashed as exc:
        return KernelVerdict(KernelStatus.FAILED, provider, str(exc))
    try:
        if provider not in answer["providers"]:
            raise _unusable(provider, answer["providers"])
        emulated = _inserted_casts(onnx.load_from_string(answer["optimized"]).graph) > _inserted_casts(model.graph)
        if inputs is not None:
            try:
                process.ask("run_discarding", {"id": answer["id"], "feeds": dict(inputs)}, Phase.RUN, what)
            # A kernel that loads can still refuse the dtype at run time (or crash): the verdict says it.
            except (WorkerRefused, WorkerCrashed) as exc:
                return KernelVerdict(KernelStatus.FAILED, provider, f"run: {str(exc).strip()}", ran=True)
    finally:
        process.release(answer["id"])
    if emulated:
        message = "ORT inserted Cast nodes around the op"
        return KernelVerdict(KernelStatus.EMULATED, provider, message, ran=inputs is not None)
    return KernelVerdict(KernelStatus.NATIVE, provider, ran=inputs is not None)


# --------------------------------------------------------------------------------------------- op claims


@dataclass(frozen=True)
class OpMeasurement:
    """What the probe measured for one op: its claim and the verdicts behind it."""

    key: str
    dtypes: tuple[str, ...]  # runs (natively or emulated) wherever float32 runs
    native_dtypes: tuple[str, ...]  # runs natively wherever float32 runs
    verdicts: Mapping[str, Mapping[str, KernelVerdict]] = field(repr=False)  # dtype -> origin -> verdict

    @property
    def probed(self) -> bool:
        return any(self.verdicts.values())

    @property
    def low_dtype_probes(self) -> bool:
        """Some probe model could be retyped to a low dtype (control-flow / sequence ops cannot)."""
        return any(self.verdicts.get(dtype) for dtype in FLOAT_DTYPES if dtype != "float32")


def claim(verdicts: Mapping[str, Mapping[str, KernelVerdict]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The conservative claim from per-dtype, per-origin verdicts: ``(dtypes, native_dtypes)``.

    A dtype is claimed only when every probe model that runs in float32 and has a model in that dtype (the
    same origin, retyped) runs in it too: a float32 model that itself fails proves nothing and is not counted,
    and attributes matter (ScatterND's reduction cases fail in float16, so ScatterND has no float16). Natively
    likewise. A dtype with no probe model to compare is not claimed. When no float32 model runs because the
    provider has no float32 kernel (not because the model is bad), the low dtypes are claimed where every such
    model runs in them: an op with float16/bfloat16 kernels only.
    """
    float32 = verdicts.get("float32", {})
    baseline = {origin for origin, verdict in float32.items() if verdict.runs}
    if not baseline:  # no float32 kernel at all (GroupQueryAttention on CUDA): compare the models that have none
        baseline = {origin for origin, verdict in float32.items() if verdict.status is KernelStatus.NO_KERNEL}
    dtypes: list[str] = []
    native: list[str] = []
    for dtype in FLOAT_DTYPES:
        by_origin = verdicts.get(dtype, {})
        compared = [by_origin[origin] for origin in sorted(baseline) if origin in by_origin]
        if compared and all(verdict.runs for verdict in compared):
            dtypes.append(dtype)
            if all(verdict.native for verdict in compared):
                native.append(dtype)
    return tuple(dtypes), tuple(native)


def measure_op(
    key: str, provider: str, dtypes: Sequence[str] = FLOAT_DTYPES, opset: int | None = None
) -> OpMeasurement:
    """Probe op ``key`` on ``provider`` in each dtype (:mod:`ampconfig.opinfo.probe_models`) and derive its claim.
    ``opset``: the default-domain opset to stamp (None: each test case's own, clamped)."""
    verdicts = {
        dtype: {
            probe.origin: check_kernel(probe.model, provider, probe.inputs) for probe in probe_models(key, dtype, opset)
        }
        for dtype in dtypes
    }
    claimed, native = claim(verdicts)
    return OpMeasurement(key, claimed, native, verdicts)


def opset_result(measurement: OpMeasurement) -> OpsetResult:
    """One opset's measurement as :mod:`ampconfig.opinfo.kernel_claims` reads it: a kernel when some probe ran;
    "no kernel" when every float32 probe found none; otherwise unmeasurable, with the first failure's message
    (a float32 model that fails says nothing about kernels, and must not become "no dtype")."""
    every = [verdict for by_origin in measurement.verdicts.values() for verdict in by_origin.values()]
    if any(verdict.runs for verdict in every):
        tested = tuple(dtype for dtype, by_origin in measurement.verdicts.items() if by_origin)
        return OpsetResult(OpsetStatus.KERNEL, measurement.dtypes, measurement.native_dtypes, tested=tested)
    float32 = list(measurement.verdicts.get("float32", {}).values())
    if float32 and all(verdict.status is KernelStatus.NO_KERNEL for verdict in float32):
        return OpsetResult(OpsetStatus.NO_KERNEL, message=_first_line(float32[0].message))
    if not every:
        return OpsetResult(OpsetStatus.UNPROBED, message="no probe model could be built at this opset")
    failed = next((v for v in float32 if v.status is not KernelStatus.NO_KERNEL), every[0])
    return OpsetResult(OpsetStatus.UNPROBED, message=f"{failed.status.value}: {_first_line(failed.message)}")


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0][:300] if message.strip() else ""


@dataclass(frozen=True)
class OpsetMeasurements:
    """An op measured at several opsets (:func:`measure_op_across_opsets`): the combined claim and every
    opset's verdicts, for reports."""

    key: str
    across: AcrossOpsets
    measurements: Mapping[int, OpMeasurement] = field(repr=False)

    @property
    def low_dtype_probes(self) -> bool:
        return any(m.low_dtype_probes for m in self.measurements.values())


def measure_op_across_opsets(key: str, provider: str) -> OpsetMeasurements:
    """Probe op ``key`` at the opsets real models use (:func:`ampconfig.opinfo.kernel_claims.measure_across_opsets`:
    13, 17 and the newest schema version with a kernel), so that a kernel ORT registers only up to an older
    schema version is found instead of being recorded as no kernel at all."""
    measurements: dict[int, OpMeasurement] = {}

    def at(opset: int) -> OpsetResult:
        measurements[opset] = measure_op(key, provider, opset=opset if split_key(key)[0] != _CONTRIB else None)
        return opset_result(measurements[opset])

    versions = op_since_versions(key)
    contrib = split_key(key)[0] == _CONTRIB
    across = measure_across_opsets(versions, at, common=() if contrib else COMMON_OPSETS)
    if not versions:
        note = "no probe model: ONNX has no schema for this op and ampconfig has no probe signature for it"
        across = AcrossOpsets({}, note=note + " (an ORT kernel registry dump can say: ops-info import-kernels)")
    return OpsetMeasurements(key, across, measurements)


def _unusable(provider: str, got: list[str]) -> AmpconfigError:
    return AmpconfigError(
        f"{provider} cannot create sessions here (the session got {', '.join(got) or 'no provider'})",
        hint="onnxruntime-gpu lists CUDAExecutionProvider even without the CUDA/cuDNN libraries; install them "
        "or probe another target",
    )


def require_provider(provider: str) -> None:
    """Fail with AmpconfigError unless ``provider`` really creates sessions in the worker (not just listed as
    available). The CPU provider always does."""
    if provider == CPU:
        return
    reason = cuda_unavailable_reason() if provider == CUDA else f"ampconfig does not probe {provider}"
    if reason is not None:
        raise AmpconfigError(
            f"{provider} cannot create sessions here: {reason}",
            hint="onnxruntime-gpu lists CUDAExecutionProvider even without the CUDA/cuDNN libraries; install them "
            "or probe another target",
        )


def onnxruntime_version() -> str:
    """The version of the onnxruntime the worker runs."""
    return str(worker.current().ask("version", {}, Phase.LOAD, "the onnxruntime version request"))


# --------------------------------------------------------------------------------------------- kernel table

_ROW = re.compile(r"^\|(?P<op>[^|]*)\|(?P<params>[^|]*)\|(?P<versions>[^|]*)\|(?P<types>[^|]*)\|\s*$")
_DOMAIN = re.compile(r"\*\*Operator Domain:\*\* \*(?P<domain>[\w.]+)\*")
_SECTION = re.compile(r'^<a name="(?P<anchor>\w+)"/>')
_VAR_TYPES = re.compile(r"\*\*(?P<var>\w+)\*\* = (?P<types>[^<|]*)")
_PARAM = re.compile(r"\*(?P<dir>in|out)\* [\w.]+:\*\*(?P<type>[^*]+)\*\*")
_INNER = re.compile(r"tensor\((\w+)\)")
_TABLE_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(bfloat16)": "bfloat16"}
_FLOAT_TYPE = Dtype.FLOAT32.type_str


@dataclass(frozen=True)
class _KernelRow:
    low: int
    high: int | None  # None: open ended ("13+")
    types: Mapping[str, frozenset[str]]
    params: tuple[tuple[str, str], ...]  # (in/out, type variable or literal type), first signature only


def _version_range(text: str) -> tuple[int, int | None]:
    text = text.strip()
    if text.endswith("+"):
        return int(text[:-1]), None
    if text.startswith("["):
        low, high = (int(part) for part in text.strip("[]").split(","))
        return low, high
    return int(text), int(text)


def _parse_row(params: str, versions: str, types: str, previous: _KernelRow | None) -> _KernelRow:
    low, high = _version_range(versions)
    var_types = {m["var"]: frozenset(t.strip() for t in m["types"].split(",")) for m in _VAR_TYPES.finditer(types)}
    first_signature = params.split("<br><br>or<br><br>")[0]
    parsed = tuple((m["dir"], m["type"]) for m in _PARAM.finditer(first_signature))
    # Continuation rows ("|||[6, 12]|...") leave the parameters to the op's first row.
    return _KernelRow(low, high, var_types, parsed or (previous.params if previous else ()))


def _read_rows(text: str, provider: str) -> dict[tuple[str, str], list[_KernelRow]]:
    rows: dict[tuple[str, str], list[_KernelRow]] = {}
    in_section, domain, op = False, "", ""
    for line in text.splitlines():
        section = _SECTION.match(line)
        if section:
            in_section = section["anchor"] == provider.lower()
            continue
        if not in_section:
            continue
        found_domain = _DOMAIN.search(line)
        if found_domain:
            domain = canonical_domain(found_domain["domain"])
            continue
        row = _ROW.match(line)
        if row is None or row["versions"].strip() in ("", "OpSet Version") or set(row["versions"]) <= {"-"}:
            continue
        op = row["op"].strip() or op
        known = rows.setdefault((domain, op), [])
        known.append(_parse_row(row["params"], row["versions"], row["types"], known[-1] if known else None))
    return rows


def _row_for(rows: list[_KernelRow], op_type: str, domain: str, opset: int) -> _KernelRow | None:
    """The row ORT serves a node at ``opset`` with, by ORT's version rule (:func:`kernel_claims.serves`: an
    open-ended "6+" row serves only schema version 6); None when no row serves it. Ops whose schema versions
    are unknown here (contrib ops without a registry entry) take the newest row."""
    since = _since_at(op_type, domain, opset)
    if since is None:
        return max(rows, key=lambda row: row.low)
    return next((row for row in rows if serves(row.low, row.high, since)), None)


def _since_at(op_type: str, domain: str, opset: int) -> int | None:
    if domain == "":
        schema = get_schema(op_type, "", opset)
        if schema is not None:
            return schema.since_version
    found = schema_at(op_type, domain, opset if domain == "" else 10**6)
    return found.since_version if found is not None else None


def _float_dtypes(types: frozenset[str]) -> list[str]:
    """Float dtypes named in a type list; ``seq(tensor(float16))`` counts as float16 (containers of it)."""
    inner = {f"tensor({m})" for t in types for m in _INNER.findall(t)}
    return [dtype for type_str, dtype in _TABLE_DTYPES.items() if type_str in inner]


def _row_allows(row: _KernelRow, var: str, dtype: str) -> bool:
    return dtype in _float_dtypes(row.types.get(var, frozenset()))


def _schema_dtypes(op_type: str, row: _KernelRow, opset: int) -> list[str] | None:
    """Float dtypes of a default-domain op by the rewrite's rule: a dtype counts when the row registers it for
    every variable :func:`compute_variables` moves (LayerNormalization's ``T`` but not ``U``, Attention's ``T1``
    and ``T2``). Variables the row does not list are not required; None when the schema gives no float variable
    or the row does not list the primary one."""
    schema = get_schema(op_type, "", opset)
    typing = node_typing(op_type, "", opset, len(schema.inputs), len(schema.outputs)) if schema else None
    if typing is None:
        return None
    # The node the rewrite starts from: every parameter that can be float32 is float32.
    inputs = ["float32" if _FLOAT_TYPE in slot.allowed else None for slot in typing.inputs]
    outputs = ["float32" if _FLOAT_TYPE in slot.allowed else None for slot in typing.outputs]
    dtypes: list[str] = []
    for dtype in FLOAT_DTYPES:
        found = compute_variables(typing, inputs, outputs, dtype)
        if found is None or found[0] not in row.types:
            return None
        primary, variables = found
        listed = [var for var in variables if var == primary or var in row.types]
        if all(typing.var_allows(var, dtype) and _row_allows(row, var, dtype) for var in listed):
            dtypes.append(dtype)
    return dtypes


def _row_dtypes(row: _KernelRow) -> list[str]:
    """Contrib ops and heterogeneous variadics (If/Loop outputs) have no schema variable to go by: the float
    dtypes of the row's own first float parameter (output 0's, else the first input's)."""
    candidates = [t for d, t in row.params if d == "out"][:1] + [t for d, t in row.params if d == "in"]
    for var in candidates:
        found = _float_dtypes(row.types.get(var, frozenset()))
        if found:
            return found
    return []


def kernel_table_dtypes(path: str | Path, provider: str, opset: int = 23) -> dict[str, list[str]]:
    """Float dtypes per op key that ``provider`` registers kernels for, read from a local copy of ONNX Runtime's
    ``docs/OperatorKernels.md`` (github.com/microsoft/onnxruntime).

    For each op the row ORT serves at ``opset`` is read (an op with rows for other schema versions only gets no
    dtype: ORT's CUDA ``Elu`` is registered "6+", which does not serve ``Elu``-22); a dtype is listed when the
    row registers it for every
    type variable the rewrite moves (:func:`compute_variables`: LayerNormalization's ``T``, not ``U``). The
    table lists registered kernels, so these are native dtypes. Ops of the ``com.microsoft`` domain get
    ``com.microsoft::Op`` keys (typed by the row's own parameters); internal layout domains are skipped.
    """
    path = Path(path)
    rows = _read_rows(read_text(path, "kernel table", hint="give a local copy of OperatorKernels.md"), provider)
    if not rows:
        raise AmpconfigError(f"no {provider} section in the kernel table", file=str(path))
    result: dict[str, list[str]] = {}
    for (domain, op_type), op_rows in rows.items():
        if domain not in ("", "com.microsoft"):
            continue
        key = op_type if domain == "" else f"{domain}::{op_type}"
        row = _row_for(op_rows, op_type, domain, opset)
        if row is None:
            result[key] = []  # registered only for other schema versions: no kernel at this opset
            continue
        dtypes = _schema_dtypes(op_type, row, opset) if domain == "" else None
        result[key] = _row_dtypes(row) if dtypes is None else dtypes
    return result
