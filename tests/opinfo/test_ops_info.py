"""The packaged op info files: they load, cover every op, keep the strategy's colours, and their kernel claims
hold both ways in real ONNX Runtime CPU sessions on one-node models retyped as the rewrite retypes them."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.dtypes import Dtype
from ampconfig.opinfo.colours import STRATEGY
from ampconfig.opinfo.kernels import CUDA, kernel_table_dtypes
from ampconfig.opinfo.library import Colour, load_ops_info, parse_ops_info
from ampconfig.opinfo.numerics import target_colour
from ampconfig.opinfo.probe_models import default_domain_op_types
from ampconfig.opinfo.schema import compute_variables, node_typing
from tests.package_readings import is_emulated

runner = CliRunner()
F32, I64, BOOL = onnx.TensorProto.FLOAT, onnx.TensorProto.INT64, onnx.TensorProto.BOOL
OPSET = 23


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_packaged_files_load_and_cover_every_op(target: str) -> None:
    library = load_ops_info(target)
    assert library.target == target
    assert [op for op in default_domain_op_types() if not library.knows(op)] == []
    assert set(STRATEGY) <= set(library.entries)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_colours_are_the_strategy_and_invariants_hold(target: str) -> None:
    library = load_ops_info(target)
    for key, entry in library.entries.items():
        # The packaged colours are derived: the reference lists' colour, made gray where the target's kernels
        # accumulate in float32 (`ampconfig ops-info apply-strategy` rewrites them after a change of either table).
        derived = target_colour(
            key, STRATEGY[key].colour, target, entry.dtypes, entry.native_dtypes, library.onnxruntime_version
        )
        assert entry.colour is derived.colour, key
        assert (entry.colour_note or "") == derived.note, key
        assert entry.reference == STRATEGY[key].reference
        assert not (entry.clear and entry.precision_reduce is not None)
        assert entry.native_dtypes is not None, key  # both sources say what is native
        assert set(entry.native_dtypes) <= set(entry.dtypes), key
        if entry.dtype_source == "not-probed":
            assert entry.dtypes == [], key  # unknown, not "no kernel"
    lists = library.lists()
    assert {"MatMul", "Gemm", "Conv"} <= set(lists.members(Colour.WHITE))
    assert {"Exp", "Pow", "ReduceSum", "ReduceMean"} <= set(lists.members(Colour.BLACK))
    # Both targets' float16 LayerNorm and Softmax kernels sum in float32 (cited in the op info).
    assert {"Softmax", "LayerNormalization"} <= set(lists.members(Colour.GRAY))
    # (The H100 probe found no bfloat16 LayerNormalization that runs, so cuda lists float16 only.)
    assert library.entries["LayerNormalization"].accumulation == {"float16": "float32"}


def test_sources_per_target() -> None:
    cpu, cuda = load_ops_info("cpu"), load_ops_info("cuda")
    assert cpu.provider == "CPUExecutionProvider" and cuda.provider == "CUDAExecutionProvider"
    assert {e.dtype_source for e in cpu.entries.values()} <= {"probe", "not-probed"}
    # cuda: measured on an H100 (docs/data/ort-1.31.1-cuda-probe-h100.json) where the probe could, else ORT's
    # kernel registry as dumped there (docs/data/ort-1.31.1-kernels-h100.json).
    assert {e.dtype_source for e in cuda.entries.values()} <= {"probe", "kernel-registry", "not-probed"}
    assert cuda.has_kernel("MatMul", "float16") and cuda.has_kernel("MatMul", "bfloat16")
    assert cuda.has_kernel("com.microsoft::SkipLayerNormalization", "float16")
    # The probe's opset-22 failures were probe artifacts (ORT serves an open-ended kernel only for its start
    # version): these ops run in float16 at the opsets real models use.
    for key in ("MaxPool", "Elu", "Selu", "InstanceNormalization"):
        assert cuda.has_kernel(key, "float16"), key
    # CUDA sessions run with CPU fallback disabled: what runs is native, never emulated.
    assert all(e.native_dtypes == e.dtypes for e in cuda.entries.values())
    assert not any(is_emulated(cuda, key, "float16") for key in cuda.entries)
    # ORT CPU runs float16 MatMul only through the casts it inserts; LayerNormalization natively.
    assert is_emulated(cpu, "MatMul", "float16") and not is_emulated(cpu, "LayerNormalization", "float16")
    for key in ("MatMul", "Add", "Softmax", "LayerNormalization"):
        assert cpu.has_kernel(key, "float16"), key


# --------------------------------------------------------------------------------------------- one-node models


@dataclass(frozen=True)
class Case:
    """A one-node float32 model: float inputs get random values, others the given ``values``."""

    op: str
    inputs: dict[str, tuple[int, ...]]
    outputs: tuple[str, ...] = ("Y",)
    attrs: dict[str, object] = field(default_factory=dict)
    values: dict[str, np.ndarray] = field(default_factory=dict)


CLAIMED_FP16 = [
    Case("MatMul", {"A": (2, 3), "B": (3, 4)}),
    Case("Add", {"A": (2, 3), "B": (2, 3)}),
    Case("Softmax", {"X": (2, 4)}, attrs={"axis": -1}),
    Case("LayerNormalization", {"X": (2, 4), "Scale": (4,), "B": (4,)}),
    Case("Conv", {"X": (1, 1, 4, 4), "W": (1, 1, 3, 3)}),
    Case("Gemm", {"A": (2, 3), "B": (3, 4), "C": (4,)}),
    Case("Relu", {"X": (2, 3)}),
    Case("Sigmoid", {"X": (2, 3)}),
    Case("Erf", {"X": (2, 3)}),
    Case("ReduceMean", {"X": (2, 4), "axes": (1,)}, values={"axes": np.array([1], np.int64)}),
    Case("Transpose", {"X": (2, 3)}, attrs={"perm": [1, 0]}),
    Case("Concat", {"A": (2, 3), "B": (1, 3)}, attrs={"axis": 0}),
    Case("Gather", {"X": (3, 4), "i": (2,)}, values={"i": np.array([0, 2], np.int64)}),
    Case("Where", {"c": (2, 3), "X": (2, 3), "Z": (2, 3)}, values={"c": np.array([[1, 0, 1], [0, 1, 0]], bool)}),
    Case(
        "Resize",
        {"X": (1, 1, 2, 2), "roi": (0,), "scales": (4,)},  # scales are tensor(float) whatever X is: they stay
        attrs={"mode": "nearest"},
        values={"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)},
    ),
]
# ScatterND / ScatterElements with a reduction load in float16 on ORT CPU but fail when run.
SCATTER_REDUCTIONS = [
    Case(
        "ScatterND",
        {"data": (4, 4), "indices": (2, 1), "updates": (2, 4)},
        attrs={"reduction": "add"},
        values={"indices": np.array([[0], [2]], np.int64)},
    ),
    Case(
        "ScatterElements",
        {"data": (3, 3), "indices": (1, 2), "updates": (1, 2)},
        attrs={"reduction": "mul", "axis": 0},
        values={"indices": np.array([[1, 2]], np.int64)},
    ),
]
# Rewrite-style Attention nodes: V (T2) moves with Q/K, and present_value with it.
ATTENTION = [
    Case("Attention", {"Q": (1, 1, 2, 4), "K": (1, 1, 3, 4), "V": (1, 1, 3, 4)}),
    Case("Attention", {"Q": (1, 1, 2, 4), "K": (1, 1, 3, 4), "V": (1, 1, 3, 4)}, ("Y", "present_k", "present_v")),
]
RMS_NORM = Case("RMSNormalization", {"X": (2, 4), "scale": (4,)})


def _elem(case: Case, name: str) -> int:
    if name in case.values:
        return helper.np_dtype_to_tensor_dtype(case.values[name].dtype)
    return F32


def _float32_model(case: Case) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(n, _elem(case, n), shape) for n, shape in case.inputs.items()]
    outputs = [helper.make_tensor_value_info(n, F32, None) for n in case.outputs]
    node = helper.make_node(case.op, list(case.inputs), list(case.outputs), **case.attrs)
    model = helper.make_model(helper.make_graph([node], case.op, inputs, outputs))
    model.opset_import[0].version = OPSET
    model.ir_version = 10  # ORT 1.31 refuses onnx 1.23's default IR version
    return model


def _rewrite_retyped(case: Case, dtype: str) -> onnx.ModelProto:
    """The model with the tensors of :func:`compute_variables` moved to ``dtype``, as the rewrite moves them."""
    model = _float32_model(case)
    node = model.graph.node[0]
    typing = node_typing(case.op, "", OPSET, len(node.input), len(node.output))
    assert typing is not None
    elems = {v.name: v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output)}
    as_dtype = {F32: "float32"}
    found = compute_variables(
        typing, [as_dtype.get(elems[n]) for n in node.input], [as_dtype.get(elems[n]) for n in node.output], dtype
    )
    assert found is not None and all(typing.var_allows(var, dtype) for var in found[1]), case.op
    pairs = [*zip(node.input, typing.inputs), *zip(node.output, typing.outputs)]
    moved = {name for name, slot in pairs if slot.type_var in found[1] and elems[name] == F32}
    for value in (*model.graph.input, *model.graph.output):
        if value.name in moved:
            value.type.tensor_type.elem_type = Dtype(dtype).elem_type
    return model


def _feeds(case: Case, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.input:
        np_dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        given = case.values.get(value.name)
        array = given if given is not None else rng.random(case.inputs[value.name])
        feeds[value.name] = array.astype(np_dtype)  # float16 for the inputs the rewrite moved
    return feeds


def _run_on_cpu(case: Case, model: onnx.ModelProto) -> int:
    """Load and run ``model`` on ORT CPU; return how many casts ORT inserted (raises when it cannot run)."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with tempfile.TemporaryDirectory() as folder:
        options.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        optimized = onnx.load(options.optimized_model_filepath)
    session.run(None, _feeds(case, model))
    return sum(n.op_type == "Cast" and n.name.startswith("InsertedPrecisionFreeCast") for n in optimized.graph.node)


@pytest.mark.parametrize("case", CLAIMED_FP16, ids=lambda case: case.op)
def test_float16_claims_load_and_run_natively_or_through_inserted_casts(case: Case) -> None:
    library = load_ops_info("cpu")
    assert library.has_kernel(case.op, "float16"), case.op
    casts = _run_on_cpu(case, _rewrite_retyped(case, "float16"))
    if is_emulated(library, case.op, "float16"):
        assert casts > 0, f"{case.op}: claimed emulated, but ORT inserted no casts"
    else:
        assert casts == 0, f"{case.op}: claimed native, but ORT inserted {casts} casts"


@pytest.mark.parametrize("case", SCATTER_REDUCTIONS, ids=lambda case: case.op)
def test_scatter_with_reduction_has_no_float16_and_really_fails(case: Case) -> None:
    assert not load_ops_info("cpu").has_kernel(case.op, "float16")
    _run_on_cpu(case, _float32_model(case))  # the same node in float32 runs
    with pytest.raises(Exception, match="MLFloat16"):
        _run_on_cpu(case, _rewrite_retyped(case, "float16"))


def test_absent_bfloat16_claims_fail_in_ort_cpu() -> None:
    library = load_ops_info("cpu")
    for case in CLAIMED_FP16[:3]:  # MatMul, Add, Softmax
        assert not library.has_kernel(case.op, "bfloat16"), case.op
        with pytest.raises(Exception, match="NOT_IMPLEMENTED"):
            _run_on_cpu(case, _rewrite_retyped(case, "bfloat16"))


@pytest.mark.parametrize("cases", [ATTENTION, [RMS_NORM]], ids=["Attention", "RMSNormalization"])
def test_second_variable_claims_agree_with_the_rewrite_style_model(cases: list[Case]) -> None:
    library = load_ops_info("cpu")
    op = cases[0].op
    outcomes = []
    for case in cases:
        model = _rewrite_retyped(case, "float16")
        elems = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
        assert set(elems.values()) == {onnx.TensorProto.FLOAT16}, elems  # V / scale moved with the data
        try:
            outcomes.append(_run_on_cpu(case, model))
        except Exception:  # ORT's own exception types: a refusal, which the claim must then reflect
            outcomes.append(None)
    claimed = library.has_kernel(op, "float16")
    assert claimed == all(outcome is not None for outcome in outcomes), (op, outcomes)
    if claimed:
        assert (not is_emulated(library, op, "float16")) == all(outcome == 0 for outcome in outcomes), outcomes


# --------------------------------------------------------------------------------------------- kernel table

_TABLE = """
<a name="cudaexecutionprovider"/>

## Operators implemented by CUDAExecutionProvider

| Op Name | Parameters | OpSet Version | Types Supported |
|---------|------------|---------------|-----------------|
|**Operator Domain:** *ai.onnx*||||
|LayerNormalization|*in* X:**T**<br> *in* Scale:**T**<br> *in* B:**T**<br> *out* Y:**T**<br> *out* Mean:**U**<br> \
*out* InvStdDev:**U**|17+|**T** = tensor(bfloat16), tensor(float), tensor(float16)<br/> **U** = tensor(float)|
|Relu|*in* X:**T**<br> *out* Y:**T**|14+|**T** = tensor(float), tensor(float16)|
|||[6, 13]|**T** = tensor(float)|
|**Operator Domain:** *com.microsoft*||||
|FusedMatMul|*in* A:**T**<br> *in* B:**T**<br> *out* Y:**T**|1+|**T** = tensor(bfloat16), tensor(float)|
"""


def test_kernel_table_reader_requires_every_moving_variable(tmp_path: Path) -> None:
    table = tmp_path / "OperatorKernels.md"
    table.write_text(_TABLE, encoding="utf-8")
    listed = kernel_table_dtypes(table, CUDA, opset=23)
    # U has no float16 in the schema (stays float32) but moves in bfloat16, where the row has no U kernel.
    assert listed["LayerNormalization"] == ["float32", "float16"]
    assert listed["Relu"] == ["float32", "float16"]
    assert kernel_table_dtypes(table, CUDA, opset=13)["Relu"] == ["float32"]
    assert listed["com.microsoft::FusedMatMul"] == ["float32", "bfloat16"]


def test_import_table_writes_native_dtypes(tmp_path: Path) -> None:
    table, out = tmp_path / "OperatorKernels.md", tmp_path / "cuda.json"
    table.write_text(_TABLE, encoding="utf-8")
    result = runner.invoke(app, ["ops-info", "import-table", str(table), "--target", "cuda", "--output", str(out)])
    assert result.exit_code == 0, result.output
    entries = parse_ops_info(out.read_text(encoding="utf-8"), str(out)).ops
    assert entries["Relu"].dtypes == entries["Relu"].native_dtypes == ["float32", "float16"]
    assert entries["MatMul"].dtype_source == "not-probed" and entries["MatMul"].native_dtypes == []


def test_show_prints_native_and_emulated() -> None:
    result = runner.invoke(app, ["ops-info", "show", "MatMul", "NoSuchOp", "--target", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    assert '"colour": "white"' in result.stdout and '"NoSuchOp"' in result.stdout
    assert '"emulated_dtypes": [\n        "float16"\n      ]' in result.stdout
    table = runner.invoke(app, ["ops-info", "show", "LayerNormalization", "--target", "cpu"])
    assert table.exit_code == 0 and "emulated" in table.stdout
