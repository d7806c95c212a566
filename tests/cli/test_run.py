"""`ampconfig run` end to end: real models, real rewrites, real ONNX Runtime CPU sessions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.examples import DEFAULT_EXAMPLE, example_names, example_path

FAST = ["--warmup", "1", "--iterations", "2"]
runner = CliRunner()

# A mixlist that moves LayerNormalization (black by default) to the white list: the tests then cover a mixlist
# changing what the CPU target lowers, on top of the MatMuls the built-in lists already lower.
LN_WHITE = {
    "black-list": {"to-remove": ["LayerNormalization"]},
    "white-list": {"to-add": ["LayerNormalization"]},
}


def _save(tmp_path: Path, name: str, nodes, inputs, outputs, initializers) -> Path:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save_model(model, path)
    return path


@pytest.fixture
def mixlist_path(tmp_path: Path) -> Path:
    path = tmp_path / "ln_white.json"
    path.write_text(json.dumps(LN_WHITE))
    return path


@pytest.fixture
def mlp_path(tmp_path: Path) -> Path:
    """x float [batch, 8] -> LayerNormalization -> MatMul -> Add -> Relu -> MatMul -> y [batch, 4]."""
    rng = np.random.default_rng(11)
    inits = [
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(8)).astype(np.float32), "ln_scale"),
        numpy_helper.from_array((0.1 * rng.standard_normal(8)).astype(np.float32), "ln_bias"),
        numpy_helper.from_array((rng.standard_normal((8, 32)) / 3).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((32, 4)) / 6).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ln_scale", "ln_bias"], ["xn"], name="ln", axis=-1),
        helper.make_node("MatMul", ["xn", "w1"], ["h"], name="mm1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="add1"),
        helper.make_node("Relu", ["hb"], ["hr"], name="relu1"),
        helper.make_node("MatMul", ["hr", "w2"], ["y"], name="mm2"),
    ]
    return _save(
        tmp_path,
        "mlp",
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        inits,
    )


@pytest.fixture
def token_path(tmp_path: Path) -> Path:
    """input_ids int64 [batch, seq] -> Gather(table [30, 16]) -> MatMul -> logits [batch, seq, 5]."""
    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.standard_normal((30, 16)).astype(np.float32), "table"),
        numpy_helper.from_array((rng.standard_normal((16, 5)) / 4).astype(np.float32), "head"),
    ]
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["emb"], name="embed", axis=0),
        helper.make_node("MatMul", ["emb", "head"], ["logits"], name="head_mm"),
    ]
    return _save(
        tmp_path,
        "tokens",
        nodes,
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", 5])],
        inits,
    )


def invoke(*args: str):
    return runner.invoke(app, ["run", *args])


def run_json(*args: str, exit_code: int = 0) -> dict:
    result = invoke(*args, *FAST, "--json")
    assert result.exit_code == exit_code, result.output
    return json.loads(result.stdout)


# ------------------------------------------------------------------------------------------------ pass / fail


def mixed(mlp_path: Path, mixlist_path: Path) -> list[str]:
    """A mixed-precision run of the test MLP with LayerNormalization on the white list."""
    return [str(mlp_path), "--precision-mode", "allow_mix_precision", "--modify-mixlist", str(mixlist_path)]


def test_mixed_precision_run_passes_default_tolerance(mlp_path: Path, mixlist_path: Path) -> None:
    result = invoke(*mixed(mlp_path, mixlist_path), *FAST)
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout
    assert "CPUExecutionProvider" in result.stdout
    assert "rel L2" in result.stdout and "median" in result.stdout


def test_tiny_tolerance_fails_with_exit_1(mlp_path: Path, mixlist_path: Path) -> None:
    result = invoke(*mixed(mlp_path, mixlist_path), "--tolerance", "1e-12", *FAST)
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.stdout and "rel_l2" in result.stdout


def test_json_payload(mlp_path: Path, mixlist_path: Path) -> None:
    payload = run_json(*mixed(mlp_path, mixlist_path), "--shape", "x=3x8")
    for key in (
        "model",
        "precision_mode",
        "provider",
        "outputs",
        "latency_ms",
        "speedup",
        "passed",
        "target",
        "low_precision_nodes",
        "casts",
        "tolerance",
        "inputs",
    ):
        assert key in payload, key
    assert payload["precision_mode"] == "allow_mix_precision"
    assert payload["provider"] == payload["providers"]["rewritten"][0]
    if payload["device"] == "cpu":
        assert payload["provider"] == "CPUExecutionProvider"
    assert payload["passed"] is True and payload["failures"] == []
    (output,) = payload["outputs"]
    assert output["name"] == "y" and output["shape"] == [3, 4]
    assert 0 < output["rel_l2"] < 1e-2
    assert set(output) >= {"rel_l2", "max_abs", "cosine", "nonfinite", "argmax_agreement"}
    for side in ("reference", "rewritten"):
        latency = payload["latency_ms"][side]
        assert 0 < latency["median"] <= latency["p90"]
        assert latency["iterations"] == 2 and latency["warmup"] == 1
    assert payload["speedup"] > 0
    assert payload["low_precision_nodes"] >= 1  # at least the LayerNormalization
    assert payload["dtype_counts"].get("float16", 0) == payload["low_precision_nodes"]
    assert payload["casts"] >= 2  # into the low region and back out
    assert payload["tolerance"] == {"rel_l2": 0.01, "max_abs": None, "min_cosine": None}
    assert payload["inputs"][0]["shape"] == [3, 8] and payload["inputs"][0]["defaulted_dims"] == {}


def test_keep_dtype_pins_the_lowered_node(mlp_path: Path, mixlist_path: Path, tmp_path: Path) -> None:
    # Pinning every node (by name) keeps the whole model fp32: the run is then exact.
    keep = tmp_path / "keep_dtype.cfg"
    keep.write_text("".join(f"{node.name}\n" for node in onnx.load(str(mlp_path)).graph.node))
    payload = run_json(*mixed(mlp_path, mixlist_path), "--keep-dtype", str(keep), "--tolerance", "1e-12")
    assert payload["outputs"][0]["rel_l2"] == 0.0 and payload["passed"] is True
    assert payload["low_precision_nodes"] == 0


def test_default_mode_is_allow_mix_precision_and_said(mlp_path: Path) -> None:
    payload = run_json(str(mlp_path))
    assert payload["precision_mode"] == "allow_mix_precision"
    assert payload["precision_mode_source"].startswith("default")
    assert any("default" in note for note in payload["notes"])
    assert payload["inputs"][0]["defaulted_dims"] == {"batch": 1}


def test_force_fp32_is_exact(mlp_path: Path) -> None:
    payload = run_json(str(mlp_path), "--precision-mode", "force_fp32", "--tolerance", "1e-12")
    assert payload["outputs"][0]["rel_l2"] == 0.0
    assert payload["low_precision_nodes"] == 0 and payload["passed"] is True


# ----------------------------------------------------------------------------------------------------- inputs


def test_npz_inputs(mlp_path: Path, tmp_path: Path) -> None:
    npz = tmp_path / "batch.npz"
    np.savez(npz, x=np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32))
    payload = run_json(str(mlp_path), "--inputs", str(npz))
    assert payload["inputs"][0]["source"] == f"npz:{npz}"
    assert payload["outputs"][0]["shape"] == [5, 4]


def test_npy_input(mlp_path: Path, tmp_path: Path) -> None:
    npy = tmp_path / "x.npy"
    np.save(npy, np.ones((2, 8), dtype=np.float32))
    payload = run_json(str(mlp_path), "--input", f"x={npy}")
    assert payload["inputs"][0]["source"] == f"npy:{npy}"


def test_npz_missing_an_input_is_exit_2(mlp_path: Path, tmp_path: Path) -> None:
    npz = tmp_path / "wrong.npz"
    np.savez(npz, not_x=np.zeros((1, 8), dtype=np.float32))
    result = invoke(str(mlp_path), "--inputs", str(npz), *FAST)
    assert result.exit_code == 2
    assert "wrong.npz" in result.stderr and "'x'" in result.stderr


def test_missing_input_files_are_exit_2(mlp_path: Path, tmp_path: Path) -> None:
    result = invoke(str(mlp_path), "--inputs", str(tmp_path / "absent.npz"), *FAST)
    assert result.exit_code == 2 and "absent.npz" in result.stderr
    result = invoke(str(mlp_path), "--input", f"x={tmp_path / 'absent_x.npy'}", *FAST)
    assert result.exit_code == 2 and "absent_x.npy" in result.stderr


def test_dynamic_shape_flag(token_path: Path) -> None:
    payload = run_json(str(token_path), "--shape", "input_ids=2x7")
    assert payload["inputs"][0]["shape"] == [2, 7]
    assert payload["outputs"][0]["shape"] == [2, 7, 5]
    assert payload["outputs"][0]["argmax_agreement"] is not None


def test_token_ids_are_drawn_within_the_embedding(token_path: Path) -> None:
    # Ids >= 30 would make ONNX Runtime's Gather fail: the run only works if the table size was honoured.
    payload = run_json(str(token_path), "--shape", "input_ids=4x64")
    assert "[0, 30)" in payload["inputs"][0]["values"]
    assert payload["passed"] is True


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--shape", "x=1by8"], "--shape"),
        (["--shape", "nope=1x8"], "nope"),
        (["--input", "nope=a.npy"], "nope"),
        (["--shape", "x=1x9"], "fixed to 8"),
        (["--iterations", "0"], "--iterations"),
        (["--target", "tpu"], "tpu"),
        (["--precision-mode", "fastest"], "fastest"),
    ],
)
def test_usage_errors_are_exit_2(mlp_path: Path, args: list[str], needle: str) -> None:
    result = invoke(str(mlp_path), *args)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr


def test_missing_model_is_exit_2(tmp_path: Path) -> None:
    result = invoke(str(tmp_path / "ghost.onnx"), *FAST)
    assert result.exit_code == 2 and "ghost.onnx" in result.stderr


def test_mixlist_with_a_non_mixed_mode_is_exit_2(mlp_path: Path, tmp_path: Path) -> None:
    mixlist = tmp_path / "mixlist.json"
    mixlist.write_text(json.dumps({"black-list": {"to-add": ["MatMul"]}}))
    result = invoke(str(mlp_path), "--precision-mode", "force_fp16", "--modify-mixlist", str(mixlist), *FAST)
    assert result.exit_code == 2 and "mixlist" in result.stderr


def test_explicit_cuda_device_without_cuda_is_exit_2(mlp_path: Path) -> None:
    from ampconfig.runner.sessions import cuda_unavailable_reason

    if cuda_unavailable_reason() is None:
        pytest.skip("CUDA works on this machine")
    result = invoke(str(mlp_path), "--device", "cuda", *FAST)
    assert result.exit_code == 2 and "device cuda was asked for but CUDA cannot be used" in result.stderr


def test_target_cuda_alone_decides_for_cuda_and_runs_where_it_can(mlp_path: Path) -> None:
    """--target only picks the op info: it never asks for a device (auto runs where a session really loads)."""
    result = invoke(str(mlp_path), "--target", "cuda", "--precision-mode", "force_fp16", "--json", *FAST)
    assert result.exit_code in (0, 1), result.output
    payload = json.loads(result.stdout)
    assert payload["target"] == "cuda" and payload["device_requested"] == "auto"
    assert payload["device"] in ("cpu", "cuda") and payload["low_precision_nodes"] > 0


# ----------------------------------------------------------------------------------------------------- output


def test_output_writes_a_valid_model(mlp_path: Path, mixlist_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "mlp.fp16.onnx"
    payload = run_json(*mixed(mlp_path, mixlist_path), "--output", str(out))
    assert payload["output"] == str(out)
    onnx.checker.check_model(str(out), full_check=True)
    written = onnx.load(str(out))
    types = {init.data_type for init in written.graph.initializer}
    assert TensorProto.FLOAT16 in types
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temp file left behind


def test_output_refuses_to_overwrite_the_input(mlp_path: Path) -> None:
    before = mlp_path.read_bytes()
    result = invoke(str(mlp_path), "--output", str(mlp_path), *FAST)
    assert result.exit_code == 2
    assert "overwrite" in result.stderr
    assert mlp_path.read_bytes() == before
    # the same file through another spelling of the path
    other = mlp_path.parent / "." / mlp_path.name
    assert invoke(str(mlp_path), "--output", str(other), *FAST).exit_code == 2
    assert mlp_path.read_bytes() == before


# ----------------------------------------------------------------------------------------------------- config


def test_config_alone_is_enough_and_flags_override(mlp_path: Path, tmp_path: Path) -> None:
    config = tmp_path / "session.yaml"
    config.write_text(
        "precision_mode: allow_mix_precision\n"
        f"model: {mlp_path.name}\n"  # relative to the config's folder
        f"modify_mixlist: {json.dumps(LN_WHITE)}\n"  # inline mixlist
        "tolerance: {rel_l2: 1.0e-12}\n"
        "run: {warmup: 1, iterations: 2, shapes: {x: [2, 8]}}\n"
    )
    result = invoke("--config", str(config), "--json")
    assert result.exit_code == 1, result.output  # the config's tolerance is not met
    payload = json.loads(result.stdout)
    assert payload["model"] == str(mlp_path)
    assert payload["inputs"][0]["shape"] == [2, 8]
    assert payload["latency_ms"]["reference"]["iterations"] == 2
    assert payload["precision_mode_source"].startswith("config")
    assert payload["low_precision_nodes"] >= 1
    # the command line wins over the file
    payload = run_json("--config", str(config), "--tolerance", "0.05", "--precision-mode", "allow_mix_precision_fp16")
    assert payload["passed"] is True and payload["precision_mode"] == "allow_mix_precision_fp16"
    assert payload["tolerance"]["rel_l2"] == 0.05
    # a mode that takes no mixlist, over a config that has one, is a usage error (as on Ascend)
    result = invoke("--config", str(config), "--precision-mode", "force_fp32", *FAST)
    assert result.exit_code == 2 and "modify_mixlist" in result.stderr


def test_bundled_examples_are_valid_and_small() -> None:
    assert DEFAULT_EXAMPLE == "transformer_block"
    for name in example_names():
        path = example_path(name)
        assert path.stat().st_size < 1_000_000
        onnx.checker.check_model(str(path), full_check=True)
        model = onnx.load(str(path))
        assert model.ir_version == 10
    ops = {node.op_type for node in onnx.load(str(example_path("transformer_block"))).graph.node}
    assert {"Gather", "LayerNormalization", "MatMul", "Softmax", "Erf", "Div"} <= ops
    ops = {node.op_type for node in onnx.load(str(example_path("small_convnet"))).graph.node}
    assert {"Conv", "BatchNormalization", "Relu", "MaxPool", "GlobalAveragePool", "Gemm"} <= ops


def test_no_model_runs_the_bundled_example() -> None:
    result = invoke(*FAST)
    assert result.exit_code == 0, result.output
    assert "bundled example" in result.stderr
    assert "transformer_block" in result.stdout and "PASS" in result.stdout


def test_bundled_example_json() -> None:
    payload = run_json("--precision-mode", "allow_mix_precision")
    assert payload["example"] == "transformer_block"
    assert payload["outputs"][0]["name"] == "logits"
    assert payload["outputs"][0]["shape"] == [1, 16, 1000]  # batch 1, seq 16 by default
    assert payload["inputs"][0]["defaulted_dims"] == {"batch": 1, "seq": 16}
    assert payload["nodes"] == sum(payload["dtype_counts"].values()) > 0
    # The CPU op info counts float16 ops ONNX Runtime runs through its own casts, so the example is lowered on
    # the CPU too, and accuracy comes from the copy that keeps float16 rounding.
    assert 0 < payload["low_precision_nodes"] <= payload["nodes"]
    assert any("explicit float16 casts" in note for note in payload["notes"])


def test_small_convnet_example(tmp_path: Path) -> None:
    payload = run_json(str(example_path("small_convnet")), "--shape", "image=2x3x32x32")
    assert payload["outputs"][0]["shape"] == [2, 10] and payload["passed"] is True


def test_help_teaches() -> None:
    result = runner.invoke(app, ["run", "--help"])
    assert result.exit_code == 0
    text = result.stdout
    assert "allow_mix_precision" in text and "Examples" in text and "--shape" in text
