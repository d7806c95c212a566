"""Does an execution provider have a native kernel for a model's nodes? Measured by building an ORT session.

The CPU provider does not fail on a float16 node it has no kernel for: ORT's InsertCastTransformer wraps the node
in ``InsertedPrecisionFreeCast_*`` Casts and runs it in float32. That is a fallback, not a kernel, so the check
writes the session's optimized graph (at ORT_DISABLE_ALL, where nothing else rewrites it) and looks for the
casts ORT inserted. The CUDA provider is checked with CPU fallback disabled, so a missing CUDA
kernel fails the session instead of silently running on the CPU. A function op that ORT inlines (Gelu, ...)
counts as native when every node of its body runs natively in that dtype: that is what precision needs.

Also here: :func:`kernel_table_dtypes`, reading ONNX Runtime's published kernel table (docs/OperatorKernels.md).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import onnx
import onnxruntime as ort
from onnx import helper

from ampconfig.errors import AmpconfigError
from ampconfig.op_schema import get_schema, node_typing

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
# ORT log severity 4 (fatal only): at 3 every refused probe still prints an ERROR line; the verdict carries it.
_QUIET = 4
_NO_KERNEL_MARKERS = (
    "Could not find an implementation",
    "NOT_IMPLEMENTED",
    "fallback to CPU EP has been explicitly disabled",
)


class KernelStatus(str, Enum):
    NATIVE = "native"  # the provider runs every node with its own kernel
    CAST_FALLBACK = "cast-fallback"  # loads, but only because ORT inserted casts to another dtype's kernel
    NO_KERNEL = "no-kernel"  # the provider has no kernel for some node
    FAILED = "failed"  # the session failed for another reason (invalid model, shape inference...)


@dataclass(frozen=True)
class KernelVerdict:
    status: KernelStatus
    provider: str
    message: str = ""

    @property
    def native(self) -> bool:
        return self.status is KernelStatus.NATIVE


def _session_options(provider: str) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.log_severity_level = _QUIET
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if provider != CPU:
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return options


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


def check_kernel(model: onnx.ModelProto, provider: str) -> KernelVerdict:
    """Build a session for ``model`` with ``provider`` alone and say whether its kernels are native.

    Raises AmpconfigError when the provider cannot create sessions at all on this machine.
    """
    options = _session_options(provider)
    with tempfile.TemporaryDirectory(prefix="ampconfig-kernel-") as folder:
        optimized = Path(folder) / "optimized.onnx"
        options.optimized_model_filepath = str(optimized)
        try:
            session = ort.InferenceSession(model.SerializeToString(), options, providers=[provider])
        except Exception as exc:  # ORT raises its own exception types (Fail, NotImplemented, InvalidGraph...)
            return _classify_failure(str(exc), provider)
        if provider not in session.get_providers():
            raise _unusable(provider, session.get_providers())
        if _inserted_casts(onnx.load(str(optimized)).graph) > _inserted_casts(model.graph):
            return KernelVerdict(KernelStatus.CAST_FALLBACK, provider, "ORT inserted Cast nodes around the op")
    return KernelVerdict(KernelStatus.NATIVE, provider)


def _unusable(provider: str, got: list[str]) -> AmpconfigError:
    return AmpconfigError(
        f"{provider} cannot create sessions here (the session got {', '.join(got) or 'no provider'})",
        hint="onnxruntime-gpu lists CUDAExecutionProvider even without the CUDA/cuDNN libraries; install them "
        "or probe another target",
    )


def _tiny_model() -> onnx.ModelProto:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "provider_check",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 10  # ORT 1.31 refuses onnx 1.23's default IR version
    return model


def require_provider(provider: str) -> None:
    """Fail with AmpconfigError unless ``provider`` really creates sessions (not just listed as available)."""
    if provider not in ort.get_available_providers():
        raise _unusable(provider, [])
    options = ort.SessionOptions()
    options.log_severity_level = 4  # the failed provider library load is reported below, not as a log line
    try:
        session = ort.InferenceSession(_tiny_model().SerializeToString(), options, providers=[provider])
    except Exception as exc:
        raise _unusable(provider, []) from exc
    if provider not in session.get_providers():
        raise _unusable(provider, session.get_providers())


def onnxruntime_version() -> str:
    return ort.__version__


# --------------------------------------------------------------------------------------------- kernel table

_ROW = re.compile(r"^\|(?P<op>[^|]*)\|(?P<params>[^|]*)\|(?P<versions>[^|]*)\|(?P<types>[^|]*)\|\s*$")
_DOMAIN = re.compile(r"\*\*Operator Domain:\*\* \*(?P<domain>[\w.]+)\*")
_SECTION = re.compile(r'^<a name="(?P<anchor>\w+)"/>')
_VAR_TYPES = re.compile(r"\*\*(?P<var>\w+)\*\* = (?P<types>[^<|]*)")
_PARAM = re.compile(r"\*(?P<dir>in|out)\* [\w.]+:\*\*(?P<type>[^*]+)\*\*")
_INNER = re.compile(r"tensor\((\w+)\)")
_TABLE_DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(bfloat16)": "bfloat16"}


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


def _read_rows(path: Path, provider: str) -> dict[tuple[str, str], list[_KernelRow]]:
    rows: dict[tuple[str, str], list[_KernelRow]] = {}
    in_section, domain, op = False, "", ""
    for line in path.read_text(encoding="utf-8").splitlines():
        section = _SECTION.match(line)
        if section:
            in_section = section["anchor"] == provider.lower()
            continue
        if not in_section:
            continue
        found_domain = _DOMAIN.search(line)
        if found_domain:
            domain = "" if found_domain["domain"] == "ai.onnx" else found_domain["domain"]
            continue
        row = _ROW.match(line)
        if row is None or row["versions"].strip() in ("", "OpSet Version") or set(row["versions"]) <= {"-"}:
            continue
        op = row["op"].strip() or op
        known = rows.setdefault((domain, op), [])
        known.append(_parse_row(row["params"], row["versions"], row["types"], known[-1] if known else None))
    return rows


def _row_for(rows: list[_KernelRow], opset: int) -> _KernelRow:
    """The row in force at ``opset``; the newest row when none covers it (ops that start later or end earlier)."""
    for row in rows:
        if row.low <= opset and (row.high is None or opset <= row.high):
            return row
    return max(rows, key=lambda row: row.low)


def _float_dtypes(types: frozenset[str]) -> list[str]:
    """Float dtypes named in a type list; ``seq(tensor(float16))`` counts as float16 (containers of it)."""
    inner = {f"tensor({m})" for t in types for m in _INNER.findall(t)}
    return [dtype for type_str, dtype in _TABLE_DTYPES.items() if type_str in inner]


def _primary_var(domain: str, op_type: str, row: _KernelRow, opset: int) -> str | None:
    """The variable of output 0 if it can be float, else of the first input that can (schema first, then row)."""
    candidates: list[str] = []
    schema = get_schema(op_type, domain, opset) if domain == "" else None
    if schema is not None:
        typing = node_typing(op_type, domain, opset, len(schema.inputs), len(schema.outputs))
        if typing is not None:
            candidates += [slot.type_var for slot in (*typing.outputs, *typing.inputs) if slot.type_var]
    # The row's own parameter list covers contrib ops and heterogeneous variadics (If/Loop outputs).
    candidates += [t for d, t in row.params if d == "out"][:1] + [t for d, t in row.params if d == "in"]
    for var in candidates:
        if _float_dtypes(row.types.get(var, frozenset())):
            return var
    return None


def kernel_table_dtypes(path: str | Path, provider: str, opset: int = 23) -> dict[str, list[str]]:
    """Float dtypes per op key that ``provider`` registers kernels for, read from a local copy of ONNX Runtime's
    ``docs/OperatorKernels.md`` (github.com/microsoft/onnxruntime).

    For each op the row in force at ``opset`` is read, and of it the types of the op's primary float type
    variable (output 0's, else the first input's: LayerNormalization's ``T``, not ``U``). Ops of the
    ``com.microsoft`` domain get ``com.microsoft::Op`` keys; internal layout domains are skipped.
    """
    path = Path(path)
    if not path.is_file():
        raise AmpconfigError("kernel table not found", file=str(path))
    rows = _read_rows(path, provider)
    if not rows:
        raise AmpconfigError(f"no {provider} section in the kernel table", file=str(path))
    result: dict[str, list[str]] = {}
    for (domain, op_type), op_rows in rows.items():
        if domain not in ("", "com.microsoft"):
            continue
        row = _row_for(op_rows, opset)
        var = _primary_var(domain, op_type, row, opset)
        key = op_type if domain == "" else f"{domain}::{op_type}"
        result[key] = _float_dtypes(row.types.get(var, frozenset())) if var else []
    return result
