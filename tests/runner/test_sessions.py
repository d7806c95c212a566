"""The runner: inputs, device choice, real ONNX Runtime CPU sessions, timing, the two-model proof."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ampconfig.errors import AmpconfigError
from ampconfig.inputs.feeds import (
    DEFAULT_BATCH_DIM,
    DEFAULT_OTHER_DIM,
    gather_table_rows,
    model_input_specs,
    prepare_inputs,
)
from ampconfig.prove.accuracy import compare_outputs
from ampconfig.runner.proof import prove
from ampconfig.runner.sessions import (
    CPU_PROVIDER,
    DeviceChoice,
    choose_device,
    create_session,
    cuda_unavailable_reason,
    normalize_device,
    run_once,
)
from ampconfig.runner.timing import measure, speedup, summarize
from ampconfig.settings.input_options import parse_input_option, parse_shape_option

IR_VERSION = 10
OPSET = 17


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    return model


def mlp(dtype: int = TensorProto.FLOAT, batch: int | str = "batch") -> onnx.ModelProto:
    """x [batch, 8] -> MatMul -> Add -> Relu -> MatMul -> y [batch, 4]; with dtype FLOAT16 the weights and the
    arithmetic are fp16 between a Cast in and a Cast out (a hand-made mixed-precision model)."""
    rng = np.random.default_rng(7)
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    w1 = numpy_helper.from_array((rng.standard_normal((8, 16)) / 3).astype(np_dtype), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(16).astype(np_dtype), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((16, 4)) / 4).astype(np_dtype), "w2")
    nodes = [
        helper.make_node("MatMul", ["xc", "w1"], ["h"], name="mm1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="add"),
        helper.make_node("Relu", ["hb"], ["hr"], name="relu"),
        helper.make_node("MatMul", ["hr", "w2"], ["yc"], name="mm2"),
    ]
    if dtype == TensorProto.FLOAT:
        nodes.insert(0, helper.make_node("Identity", ["x"], ["xc"], name="in"))
        nodes.append(helper.make_node("Identity", ["yc"], ["y"], name="out"))
    else:
        nodes.insert(0, helper.make_node("Cast", ["x"], ["xc"], name="in", to=dtype))
        nodes.append(helper.make_node("Cast", ["yc"], ["y"], name="out", to=TensorProto.FLOAT))
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        [w1, b1, w2],
    )


def token_model(vocab: int = 50) -> onnx.ModelProto:
    """input_ids int64 [batch, seq] -> Cast(int32) -> Gather(table [vocab, 8]) -> ReduceSum -> y."""
    table = numpy_helper.from_array(np.arange(vocab * 8, dtype=np.float32).reshape(vocab, 8), "table")
    axes = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids32"], to=TensorProto.INT32),
        helper.make_node("Gather", ["table", "ids32"], ["emb"], axis=0),
        helper.make_node("ReduceSum", ["emb", "axes"], ["y"], keepdims=0),
    ]
    return _model(
        nodes,
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("flags", TensorProto.BOOL, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])],
        [table, axes],
    )


# ---------------------------------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("input_ids=1x128", ("input_ids", [1, 128])),
        ("x=2,3,4", ("x", [2, 3, 4])),
        (" x = 5 ", ("x", [5])),
        ("scalar=", ("scalar", [])),
        ("a.b:0=2x2", ("a.b:0", [2, 2])),
        ("z=0x8", ("z", [0, 8])),  # an empty dimension
    ],
)
def test_parse_shape_option(text: str, expected: tuple[str, list[int]]) -> None:
    assert parse_shape_option(text) == expected


@pytest.mark.parametrize("text", ["x", "x=1xa", "=1x2", "x=1x", "x=-3x3", "x=-1"])
def test_parse_shape_option_rejects(text: str) -> None:
    with pytest.raises(AmpconfigError, match="--shape"):
        parse_shape_option(text)


def test_parse_input_option() -> None:
    assert parse_input_option("ids=data/ids.npy") == ("ids", Path("data/ids.npy"))
    with pytest.raises(AmpconfigError, match=r"NAME=FILE\.npy"):
        parse_input_option("ids.npy")


# ----------------------------------------------------------------------------------------------------- inputs


def test_input_specs_skip_initializer_inputs() -> None:
    model = mlp()
    model.graph.input.append(helper.make_tensor_value_info("w1", TensorProto.FLOAT, [8, 16]))
    specs = model_input_specs(model)
    assert [s.name for s in specs] == ["x"]
    assert specs[0].dims == ("batch", 8)


def test_generated_inputs_default_dynamic_dims() -> None:
    result = prepare_inputs(mlp(), seed=3)
    x = result.feeds["x"]
    assert x.shape == (DEFAULT_BATCH_DIM, 8) and x.dtype == np.float32
    assert result.inputs[0].defaulted_dims == {"batch": DEFAULT_BATCH_DIM}
    assert result.inputs[0].source == "generated"
    assert result.defaulted


def test_other_dims_default_and_symbols_are_shared() -> None:
    result = prepare_inputs(token_model())
    shapes = {name: array.shape for name, array in result.feeds.items()}
    assert shapes == {name: (DEFAULT_BATCH_DIM, DEFAULT_OTHER_DIM) for name in shapes}
    # the first input defaults the symbols; the others reuse them without a default of their own
    assert result.inputs[0].defaulted_dims == {"batch": 1, "seq": 16}
    assert result.inputs[1].defaulted_dims == {}


def test_explicit_shape_binds_symbols_for_other_inputs() -> None:
    result = prepare_inputs(token_model(), shapes={"input_ids": [2, 5]})
    assert all(array.shape == (2, 5) for array in result.feeds.values())
    assert not result.defaulted


def test_explicit_shape_errors() -> None:
    with pytest.raises(AmpconfigError, match="rank 2"):
        prepare_inputs(mlp(), shapes={"x": [1, 8, 1]})
    with pytest.raises(AmpconfigError, match="fixed to 8"):
        prepare_inputs(mlp(), shapes={"x": [1, 9]})
    with pytest.raises(AmpconfigError, match="no input named 'nope'") as info:
        prepare_inputs(mlp(), shapes={"nope": [1]})
    assert "x" in str(info.value)  # the hint lists the real inputs


def test_generation_is_seeded_and_per_input() -> None:
    a = prepare_inputs(mlp(), seed=1).feeds["x"]
    b = prepare_inputs(mlp(), seed=1).feeds["x"]
    c = prepare_inputs(mlp(), seed=2).feeds["x"]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_token_ids_stay_inside_the_gather_table() -> None:
    model = token_model(vocab=7)
    assert gather_table_rows(model, "input_ids") == 7  # found through the Cast
    result = prepare_inputs(model, shapes={"input_ids": [4, 64]})
    ids = result.feeds["input_ids"]
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 7
    assert len(np.unique(ids)) == 7  # 256 draws cover the whole table
    assert "[0, 7)" in result.inputs[0].values
    assert np.all(result.feeds["attention_mask"] == 1)
    flags = result.feeds["flags"]
    assert flags.dtype == np.bool_ and flags.any() and not flags.all()


def test_config_int_range_when_no_table_is_known() -> None:
    model = _model(
        [helper.make_node("Cast", ["ids"], ["y"], to=TensorProto.FLOAT)],
        [helper.make_tensor_value_info("ids", TensorProto.INT32, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
    )
    default = prepare_inputs(model).feeds["ids"]
    assert default.min() >= 0 and default.max() < 100 and default.max() >= 50
    ranged = prepare_inputs(model, int_low=-3, int_high=3).feeds["ids"]
    assert ranged.dtype == np.int32 and ranged.min() >= -3 and ranged.max() < 3


def test_npz_inputs(tmp_path: Path) -> None:
    x = np.arange(24, dtype=np.float64).reshape(3, 8)  # float64 on disk: converted to the model's float32
    path = tmp_path / "inputs.npz"
    np.savez(path, x=x)
    result = prepare_inputs(mlp(), npz=path)
    assert result.feeds["x"].dtype == np.float32
    np.testing.assert_array_equal(result.feeds["x"], x.astype(np.float32))
    assert result.inputs[0].source == f"npz:{path}"


def test_npz_missing_input_names_file_and_input(tmp_path: Path) -> None:
    path = tmp_path / "partial.npz"
    np.savez(path, other=np.zeros(3))
    with pytest.raises(AmpconfigError) as info:
        prepare_inputs(mlp(), npz=path)
    text = str(info.value)
    assert "partial.npz" in text and "'x'" in text and "other" in text


def test_missing_files(tmp_path: Path) -> None:
    with pytest.raises(AmpconfigError, match=r"nothere\.npz"):
        prepare_inputs(mlp(), npz=tmp_path / "nothere.npz")
    with pytest.raises(AmpconfigError, match=r"x\.npy"):
        prepare_inputs(mlp(), arrays={"x": tmp_path / "x.npy"})


def test_npy_overrides_and_checks(tmp_path: Path) -> None:
    good = tmp_path / "x.npy"
    np.save(good, np.ones((2, 8), dtype=np.float32))
    result = prepare_inputs(mlp(), arrays={"x": good})
    assert result.feeds["x"].shape == (2, 8) and result.inputs[0].source.startswith("npy:")
    bad = tmp_path / "bad.npy"
    np.save(bad, np.ones((2, 9), dtype=np.float32))
    with pytest.raises(AmpconfigError, match="fixes it to 8"):
        prepare_inputs(mlp(), arrays={"x": bad})
    wrong_kind = tmp_path / "ints.npy"
    np.save(wrong_kind, np.ones((2, 8), dtype=np.int64))
    with pytest.raises(AmpconfigError, match="expects float32"):
        prepare_inputs(mlp(), arrays={"x": wrong_kind})


# --------------------------------------------------------------------------------------------------- sessions


def test_cpu_session_reports_cpu_provider() -> None:
    session = create_session(mlp(), "cpu")
    assert session.providers == [CPU_PROVIDER]
    assert session.tf32 is None
    outputs = run_once(session, {"x": np.ones((2, 8), dtype=np.float32)})
    assert outputs["y"].shape == (2, 4)


def test_choose_device() -> None:
    assert choose_device("cpu") == DeviceChoice("cpu", "cpu")
    assert normalize_device(None) == "auto" and normalize_device("CUDA") == "cuda"
    with pytest.raises(AmpconfigError, match="unknown device"):
        normalize_device("npu")
    auto = choose_device(None)
    if cuda_unavailable_reason() is None:
        assert auto.device == "cuda"
    else:
        assert auto.device == "cpu" and "CUDA not used" in auto.notes[0]


def test_explicit_cuda_without_cuda_is_an_error() -> None:
    if cuda_unavailable_reason() is None:
        pytest.skip("CUDA works on this machine")
    with pytest.raises(AmpconfigError, match="device cuda was asked for but CUDA cannot be used"):
        choose_device("cuda")


def test_broken_model_is_a_clear_error() -> None:
    with pytest.raises(AmpconfigError, match="could not load"):
        create_session(b"not a model", "cpu")


# ----------------------------------------------------------------------------------------------------- timing


def test_measure_counts_runs_and_reports_progress() -> None:
    calls: list[int] = []
    events: list[tuple[str, int, int]] = []
    latency = measure(
        lambda: calls.append(1),
        warmup=2,
        iterations=5,
        label="m",
        progress=lambda *e: events.append(e),
    )
    assert len(calls) == 7
    assert latency.iterations == 5 and latency.warmup == 2
    assert events[0] == ("m", 0, 7) and events[-1] == ("m", 7, 7) and len(events) == 8
    assert 0 <= latency.min_ms <= latency.median_ms <= latency.p90_ms


def test_summarize_median_and_p90() -> None:
    latency = summarize([float(v) for v in range(1, 11)], warmup=0)
    assert latency.median_ms == 5.5
    assert latency.p90_ms == pytest.approx(9.1)
    assert latency.min_ms == 1.0
    assert speedup(latency, summarize([2.75], 0)) == pytest.approx(2.0)


def test_measure_rejects_bad_counts() -> None:
    with pytest.raises(AmpconfigError, match="iterations"):
        measure(lambda: None, warmup=0, iterations=0)
    with pytest.raises(AmpconfigError, match="warmup"):
        measure(lambda: None, warmup=-1, iterations=1)


# ------------------------------------------------------------------------------------------------------ proof


def test_reference_against_itself_is_exact() -> None:
    model = mlp()
    feeds = prepare_inputs(model, shapes={"x": [4, 8]}).feeds
    proof = prove(model, model, feeds, DeviceChoice("cpu", "cpu"), warmup=1, iterations=2)
    assert proof.reference.providers == [CPU_PROVIDER] == proof.rewritten.providers
    metrics = compare_outputs(proof.reference.outputs, proof.rewritten.outputs, proof.output_names)
    assert metrics[0].rel_l2 == 0.0 and metrics[0].shape == (4, 4)
    assert proof.reference.latency.iterations == 2


def test_hand_made_fp16_model_differs_a_little() -> None:
    reference, low = mlp(), mlp(TensorProto.FLOAT16)
    feeds = prepare_inputs(reference, shapes={"x": [16, 8]}).feeds
    events: list[str] = []
    proof = prove(
        reference,
        low,
        feeds,
        DeviceChoice("cpu", "cpu"),
        warmup=1,
        iterations=2,
        progress=lambda label, done, total: events.append(label),
    )
    (metrics,) = compare_outputs(proof.reference.outputs, proof.rewritten.outputs)
    assert 1e-5 < metrics.rel_l2 < 1e-2
    assert metrics.nonfinite == 0
    assert set(events) == {"fp32 reference", "rewritten"}
    assert proof.rewritten.latency.median_ms > 0


def test_feeds_follow_each_models_input_dtype() -> None:
    # A rewrite without keep_io_types takes fp16 inputs: the same feeds are converted for it.
    low_io = mlp(TensorProto.FLOAT16)
    low_io.graph.input[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    low_io.graph.node[0].op_type = "Identity"
    del low_io.graph.node[0].attribute[:]
    onnx.checker.check_model(low_io, full_check=True)
    reference = mlp()
    feeds = prepare_inputs(reference).feeds
    proof = prove(reference, low_io, feeds, DeviceChoice("cpu", "cpu"), warmup=0, iterations=1)
    (metrics,) = compare_outputs(proof.reference.outputs, proof.rewritten.outputs)
    assert metrics.rel_l2 < 1e-2
