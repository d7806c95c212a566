"""Models ONNX Runtime runs that ampconfig once ended on with "internal error" or "this is a bug" (issue 18), through
the command line: sparse constants and initializers and ZipMap's sequence of maps are kept exactly as they are,
the nodes that touch them keep their dtype under a rule that says why, and every output is valid."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from ampconfig.prove.accuracy import compare_output
from tests.graphs import MODES
from tests.hostile.test_inputs import assert_refused, invoke
from tests.unusual_models import (
    SPARSE_AND_MAP_MODELS,
    bfloat16_io_model,
    constant_of_shape_model,
    float32_island_model,
    training_info_model,
    zero_size_model,
)

RUN_FAST = ["--warmup", "0", "--iterations", "1"]


def saved(folder: Path, build: Callable[[], onnx.ModelProto], name: str) -> Path:
    path = folder / f"{name}.onnx"
    if not path.exists():
        onnx.save(build(), path)
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("unusual_models")


def as_onnx_runtime_reads_it(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose sparse initializers are the dense initializers ONNX Runtime makes of them."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for sparse in copy.graph.sparse_initializer:
        dense = np.zeros(list(sparse.dims), numpy_helper.to_array(sparse.values).dtype)
        dense.ravel()[numpy_helper.to_array(sparse.indices)] = numpy_helper.to_array(sparse.values)
        copy.graph.initializer.append(numpy_helper.from_array(dense, sparse.values.name))
    del copy.graph.sparse_initializer[:]
    return copy


def outputs(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    values = session.run(None, {"x": x})
    # ZipMap's maps become rows of probabilities in class order.
    return [np.array([[row[k] for k in sorted(row)] for row in v]) if isinstance(v, list) else v for v in values]


def kept_parts(model: onnx.ModelProto) -> list[bytes]:
    """What must survive a rewrite byte for byte: sparse tensors, and the graph outputs that are not tensors."""
    parts = [sparse.SerializeToString() for sparse in model.graph.sparse_initializer]
    for node in model.graph.node:
        parts.extend(a.SerializeToString() for a in node.attribute if a.type == onnx.AttributeProto.SPARSE_TENSOR)
    parts.extend(v.SerializeToString() for v in model.graph.output if not v.type.HasField("tensor_type"))
    return parts


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", sorted(SPARSE_AND_MAP_MODELS))
def test_rewrite_keeps_sparse_tensors_and_maps(folder: Path, kind: str, mode: str, target: str) -> None:
    original = SPARSE_AND_MAP_MODELS[kind]()
    out = folder / f"{kind}.{mode}.{target}.onnx"
    result = invoke(
        ["rewrite", saved(folder, SPARSE_AND_MAP_MODELS[kind], kind), "-m", mode, "--target", target, "-o", out]
    )
    assert result.exit_code == 0, result.stdout
    rewritten = onnx.load(out)
    assert kept_parts(rewritten) == kept_parts(original)
    onnx.checker.check_model(as_onnx_runtime_reads_it(rewritten), full_check=True)
    if target == "cpu":  # decided for cuda, a model may hold bfloat16 ops the CPU provider lacks
        x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
        for got, want in zip(outputs(rewritten, x), outputs(original, x), strict=True):
            np.testing.assert_allclose(got, want, rtol=0.05, atol=0.05)


#: node -> the rule that keeps its dtype, per model.
KEPT_BY = {
    "sparse_constant": {"sparse_const": "sparse_tensor", "add": "sparse_tensor"},
    "sparse_initializer": {"add": "sparse_tensor"},
    "zipmap_classifier": {"zipmap": "non_tensor"},
}


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("kind", sorted(SPARSE_AND_MAP_MODELS))
def test_explain_says_why_they_keep_their_dtype(folder: Path, kind: str, target: str) -> None:
    path = saved(folder, SPARSE_AND_MAP_MODELS[kind], kind)
    result = invoke(["explain", path, "-m", "force_fp16", "--target", target, "--json"])
    assert result.exit_code == 0, result.stdout
    nodes = {node["name"]: node for node in json.loads(result.stdout)["nodes"]}
    for name, rule in KEPT_BY[kind].items():
        assert nodes[name]["rule"] == rule, nodes[name]
        assert nodes[name]["dtype"] == nodes[name]["original_dtype"] == "float32", nodes[name]
    assert nodes["mm"]["dtype"] == "float16"  # the rest of the model is still decided


@pytest.mark.parametrize("kind", sorted(SPARSE_AND_MAP_MODELS))
def test_run_compare_and_tune_measure_them(folder: Path, kind: str) -> None:
    path = saved(folder, SPARSE_AND_MAP_MODELS[kind], kind)
    common = [path, "-m", "allow_mix_precision", "--target", "cpu"]
    for mode in ("force_fp16", "allow_mix_precision_bf16"):
        ran = invoke(["run", path, "-m", mode, "--target", "cpu", *RUN_FAST, "--json"])
        assert ran.exit_code == 0, ran.stdout
        report = json.loads(ran.stdout)
        assert report["passed"] is True, report
    compared = invoke(["compare", *common])
    assert compared.exit_code == 0, compared.stdout
    tuned = invoke(["tune", *common, "--keep-dtype-out", folder / f"{kind}.keep.cfg"])
    assert tuned.exit_code == 0, tuned.stdout


def test_probability_maps_are_compared_by_class() -> None:
    """ZipMap's output is judged by its probabilities (rows of the maps' values in class order), not as opaque
    objects that either match exactly or not."""
    reference = [{0: 0.25, 1: 0.75}, {0: 0.5, 1: 0.5}]
    candidate = [{1: 0.7501, 0: 0.2499}, {0: 0.5, 1: 0.5}]
    metrics = compare_output("probability_maps", reference, candidate)
    assert metrics.shape == (2, 2)
    assert metrics.rel_l2 is not None and 0 < metrics.rel_l2 < 1e-3
    assert metrics.mismatches is None


# ------------------------------------------------------------------------------------------------ inputs
def run_json(*args: object) -> dict:
    result = invoke(["run", *args, "-m", "allow_mix_precision_bf16", "--target", "cpu", *RUN_FAST, "--json"])
    assert result.exit_code == 0, result.stdout
    return json.loads(result.stdout)


def test_bfloat16_inputs_are_generated(folder: Path) -> None:
    report = run_json(saved(folder, bfloat16_io_model, "bfloat16_io"))
    assert report["passed"] is True
    (fed,) = report["inputs"]
    assert (fed["dtype"], fed["source"], fed["values"]) == ("bfloat16", "generated", "standard normal")


def test_bfloat16_inputs_are_read_from_npy_and_npz(folder: Path) -> None:
    """numpy saves an ml_dtypes bfloat16 array as raw 2-byte values (|V2): they are read back as bfloat16."""
    path = saved(folder, bfloat16_io_model, "bfloat16_io")
    values = np.random.default_rng(1).standard_normal((3, 8)).astype(ml_dtypes.bfloat16)
    np.save(folder / "x_bf16.npy", values)
    np.savez(folder / "inputs_bf16.npz", x=values)
    for option in (["--input", f"x={folder / 'x_bf16.npy'}"], ["--inputs", folder / "inputs_bf16.npz"]):
        report = run_json(path, *option)
        assert report["inputs"][0]["dtype"] == "bfloat16" and report["inputs"][0]["shape"] == [3, 8], report
        assert report["outputs"][0]["shape"] == [3, 4] and report["warnings"] == [], report


def test_float32_values_for_a_bfloat16_input_are_converted_with_a_warning(folder: Path) -> None:
    path = saved(folder, bfloat16_io_model, "bfloat16_io")
    exact, inexact = folder / "x_exact.npy", folder / "x_inexact.npy"
    np.save(exact, np.full((2, 8), 0.5, np.float32))  # bfloat16 holds 0.5 exactly
    np.save(inexact, np.full((2, 8), 0.1, np.float32))
    report = run_json(path, "--input", f"x={exact}")
    assert report["inputs"][0]["values"] == f"from {exact} (float32 converted to bfloat16)"
    assert report["warnings"] == []
    report = run_json(path, "--input", f"x={inexact}")
    (warning,) = report["warnings"]
    assert f"--input x={inexact}: float32 values converted to bfloat16, the type of input 'x'" in warning
    assert "16 of 16 value(s) changed, by up to 9.77e-05" in warning  # 0.1 in bfloat16 is 0.10009765625


def test_raw_two_byte_values_for_a_float32_input_are_refused(folder: Path) -> None:
    path = saved(folder, SPARSE_AND_MAP_MODELS["sparse_constant"], "sparse_constant")
    np.save(folder / "raw.npy", np.zeros((2, 8), ml_dtypes.bfloat16))
    result = invoke(["run", path, "--input", f"x={folder / 'raw.npy'}", *RUN_FAST])
    assert_refused(result, f"--input x={folder / 'raw.npy'}: input 'x' holds raw 2-byte values")


@pytest.mark.parametrize("command", ["compare", "tune"])
def test_bfloat16_models_are_compared_and_tuned(folder: Path, command: str) -> None:
    path = saved(folder, bfloat16_io_model, "bfloat16_io")
    extra = ["--keep-dtype-out", folder / "bf16.keep.cfg"] if command == "tune" else []
    result = invoke([command, path, "-m", "allow_mix_precision_bf16", "--target", "cpu", *extra])
    assert result.exit_code == 0, result.stdout


def test_float64_values_for_a_float32_input_are_narrowed_with_one_warning(folder: Path) -> None:
    path = saved(folder, SPARSE_AND_MAP_MODELS["sparse_constant"], "sparse_constant")
    wide, whole = folder / "x64.npy", folder / "x64_whole.npy"
    np.save(wide, np.random.default_rng(2).standard_normal((2, 8)))
    np.save(whole, np.arange(16, dtype=np.float64).reshape(2, 8))  # float32 holds these exactly
    report = run_json(path, "--input", f"x={wide}")
    warnings = [w for w in report["warnings"] if "input 'x'" in w]
    assert len(warnings) == 1, report["warnings"]
    assert warnings[0].startswith(f"--input x={wide}: float64 values converted to float32, the type of input 'x'")
    assert "by up to" in warnings[0]
    assert not [w for w in run_json(path, "--input", f"x={whole}")["warnings"] if "input 'x'" in w]


def test_a_zero_size_dimension_is_generated_and_accepted_by_shape(folder: Path) -> None:
    path = saved(folder, zero_size_model, "zero_size")
    report = run_json(path)
    shapes = {fed["name"]: fed["shape"] for fed in report["inputs"]}
    assert shapes == {"z": [0, 8], "x": [1, 8]}
    assert {out["name"]: out["shape"] for out in report["outputs"]} == {"z_out": [0, 4], "y": [1, 4]}
    report = run_json(path, "--shape", "z=0x8", "--shape", "x=0x8")
    assert {fed["name"]: fed["shape"] for fed in report["inputs"]} == {"z": [0, 8], "x": [0, 8]}
    refused = invoke(["run", path, "--shape", "x=-2x8", *RUN_FAST])
    assert_refused(refused, "--shape 'x=-2x8': dimension -2 is negative")


# ------------------------------------------------------------------------------------------------ rewrites
def rewrite(source: Path, out: Path, mode: str, target: str = "cuda") -> dict:
    result = invoke(["rewrite", source, "-o", out, "-m", mode, "--target", target, "--json"])
    assert result.exit_code == 0, result.stdout
    return json.loads(result.stdout)


def value_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.output, *graph.value_info)}
    return types | {tensor.name: tensor.data_type for tensor in graph.initializer}


def no_op_casts(model: onnx.ModelProto) -> list[str]:
    types = value_types(model)
    return [n.name for n in model.graph.node if n.op_type == "Cast" and types[n.input[0]] == types[n.output[0]]]


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("opset", [13, 17, 20])
def test_constant_of_shape_follows_its_schema_in_bfloat16(folder: Path, opset: int, target: str) -> None:
    path = saved(folder, lambda: constant_of_shape_model(opset), f"constant_of_shape_{opset}")
    out = folder / f"constant_of_shape_{opset}.{target}.bf16.onnx"
    rewrite(path, out, "allow_mix_precision_bf16", target)
    rewritten = onnx.load(out)
    onnx.checker.check_model(rewritten, full_check=True)
    (node,) = [n for n in rewritten.graph.node if n.op_type == "ConstantOfShape"]
    value_type = next(a.t.data_type for a in node.attribute if a.name == "value")
    explained = invoke(["explain", path, "-m", "allow_mix_precision_bf16", "--target", target, "--json"])
    (decision,) = [d for d in json.loads(explained.stdout)["nodes"] if d["name"] == "ones"]
    if opset < 20 and decision["dtype"] != "bfloat16":
        assert value_type == onnx.TensorProto.FLOAT
        if target == "cuda":  # the Mul goes bfloat16 on cuda: the constant stays float32 and a Cast follows it
            assert decision["rule"] == "schema_forbids", decision
            assert "no bfloat16 output" in decision["reason"]
    if target == "cpu":
        x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
        np.testing.assert_allclose(outputs(rewritten, x)[0], outputs(constant_of_shape_model(opset), x)[0], rtol=0.05)


@pytest.mark.parametrize("second", ["force_fp16", "force_fp32", "allow_mix_precision", "allow_mix_precision_bf16"])
def test_rewriting_a_rewritten_model_leaves_no_no_op_casts(folder: Path, second: str) -> None:
    """A mixed rewrite casts around its float32 island (Cast_m_to_fp32, Cast_e_to_fp16); rewriting that model
    again must not leave those casts as float16 -> float16 or float32 -> float32 ones, and is idempotent."""
    path = saved(folder, float32_island_model, "float32_island")
    once = folder / "island.mixed.onnx"
    rewrite(path, once, "allow_mix_precision")
    assert {n.name for n in onnx.load(once).graph.node} >= {"Cast_m_to_fp32", "Cast_e_to_fp16"}
    twice, thrice = folder / f"island.mixed.{second}.onnx", folder / f"island.mixed.{second}.again.onnx"
    summary = rewrite(once, twice, second)
    rewritten = onnx.load(twice)
    onnx.checker.check_model(rewritten, full_check=True)
    assert no_op_casts(rewritten) == []
    if second != "allow_mix_precision_bf16":  # decided for cuda: bfloat16 MatMuls the CPU provider lacks
        x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
        np.testing.assert_allclose(outputs(rewritten, x)[0], outputs(float32_island_model(), x)[0], rtol=0.05)
    if second == "force_fp32":  # every cast of the first rewrite is gone: back to the original's three nodes
        assert [n.op_type for n in rewritten.graph.node] == ["MatMul", "Exp", "MatMul"]
        assert summary["stats"]["casts_removed"] == 4, summary["stats"]
    rewrite(twice, thrice, second)
    again = onnx.load(thrice)
    assert [(n.op_type, list(n.input), list(n.output)) for n in again.graph.node] == [
        (n.op_type, list(n.input), list(n.output)) for n in rewritten.graph.node
    ]


def test_training_info_is_dropped_with_a_warning(folder: Path) -> None:
    path = saved(folder, training_info_model, "training_info")
    out = folder / "training_info.fp16.onnx"
    summary = rewrite(path, out, "force_fp16")
    (warning,) = [w for w in summary["warnings"] if "training_info" in w]
    assert warning.startswith("training_info dropped (1 entry(ies): algorithm 'train', updating w1)"), warning
    rewritten = onnx.load(out)
    assert len(rewritten.training_info) == 0
    onnx.checker.check_model(rewritten, full_check=True)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(outputs(rewritten, x)[0], outputs(training_info_model(), x)[0], rtol=0.05)
