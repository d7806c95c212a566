"""Writing models in one pass (model_io/skeleton.py): the bytes ``SerializeToString`` would give, each weight written
straight from its tensor, and the command's file equal to what the Python API returns."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from ampconfig import rewrite_model
from ampconfig.model_io.skeleton import STREAM_BYTES, skeleton_of
from ampconfig.rewrite.tensors import LAZY_CONVERSION_BYTES
from tests.graphs import make_model, run, tensor

WIDTH = 64


def _weights_model() -> onnx.ModelProto:
    """Every kind of initializer a rewrite writes: one converted when written (over LAZY_CONVERSION_BYTES), one
    converted during the rewrite, a float32 weight a pin keeps, a large int64 table, and small ones."""
    rng = np.random.default_rng(0)
    rows = LAZY_CONVERSION_BYTES // (4 * WIDTH) + 1
    large = rng.standard_normal((rows, WIDTH)).astype(np.float32)
    large[0, 0] = 1e6  # clamped when converted
    initializers = [
        numpy_helper.from_array(large, "large"),
        numpy_helper.from_array(np.arange(rows, dtype=np.int64) % 7, "table"),
        numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32), "medium"),
        numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32), "pinned"),
        numpy_helper.from_array(np.full((WIDTH,), 0.5, np.float32), "bias"),
    ]
    nodes = [
        oh.make_node("Gather", ["table", "ids"], ["rows"], name="gather_rows"),
        oh.make_node("Gather", ["large", "rows"], ["embedded"], name="embed"),
        oh.make_node("MatMul", ["embedded", "medium"], ["m"], name="fc"),
        oh.make_node("Add", ["m", "bias"], ["a"], name="add"),
        oh.make_node("MatMul", ["a", "pinned"], ["y"], name="kept"),
    ]
    return make_model(
        nodes,
        [tensor("ids", TensorProto.INT64, [3])],
        [tensor("y", TensorProto.FLOAT, [3, WIDTH])],
        initializers,
    )


def test_the_command_writes_the_bytes_the_api_returns(tmp_path: Path) -> None:
    model = _weights_model()
    source = tmp_path / "model.onnx"
    onnx.save(model, source)
    keep = tmp_path / "keep.cfg"
    keep.write_text("kept\n")
    out = tmp_path / "out.onnx"
    command = [sys.executable, "-m", "ampconfig", "rewrite", str(source), "-o", str(out), "-m", "force_fp16"]
    command.append("--clamp-values")  # the large weight's value beyond float16 is clamped (warned), not kept
    done = subprocess.run([*command, "--keep-dtype", str(keep)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "clamped to float16's largest finite value" in done.stderr
    api = rewrite_model(str(source), "force_fp16", keep_dtype=["kept"], clamp_values=True)
    assert out.read_bytes() == api.SerializeToString()
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    by_name = {t.name: t for t in written.graph.initializer}
    assert [t.name for t in written.graph.initializer][:2] == ["large", "table"]  # the input's order
    assert by_name["large"].data_type == TensorProto.FLOAT16 and by_name["pinned"].data_type == TensorProto.FLOAT
    assert numpy_helper.to_array(by_name["large"])[0, 0] == np.float16(65504)
    np.testing.assert_array_equal(
        numpy_helper.to_array(by_name["table"]), numpy_helper.to_array(model.graph.initializer[1])
    )
    ids = np.array([1, 2, 3], np.int64)  # rows other than the clamped one
    (want,) = run(model, {"ids": ids})
    (got,) = run(written, {"ids": ids})
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def _unusual_model() -> ir.Model:
    """A model with what a writer can get wrong: a large weight with a doc string and metadata, a large string
    tensor, an If whose branch holds its own large initializer, graph metadata and a model-local function."""
    rng = np.random.default_rng(1)
    big = numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "big")
    big.doc_string = "a documented weight"
    big.metadata_props.add(key="origin", value="test")
    words = numpy_helper.from_array(np.array([b"w%04d" % i for i in range(400)], dtype=object), "words")
    inner = numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "inner")
    branch = oh.make_graph(
        [oh.make_node("MatMul", ["x", "inner"], ["b_out"], name="branch_fc")],
        "branch",
        [],
        [oh.make_tensor_value_info("b_out", TensorProto.FLOAT, [2, 32])],
        [inner],
    )
    function = oh.make_function("local", "Twice", ["t"], ["u"], [oh.make_node("Add", ["t", "t"], ["u"])], [])
    nodes = [
        oh.make_node("MatMul", ["x", "big"], ["m"], name="fc"),
        oh.make_node("If", ["flag"], ["y"], name="choose", then_branch=branch, else_branch=branch),
        oh.make_node("Twice", ["m"], ["z"], name="twice", domain="local"),
        oh.make_node("Identity", ["words"], ["w"], name="names"),
    ]
    graph = oh.make_graph(
        nodes,
        "unusual",
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32]),
            oh.make_tensor_value_info("flag", TensorProto.BOOL, []),
        ],
        [
            oh.make_tensor_value_info("y", TensorProto.FLOAT, [2, 32]),
            oh.make_tensor_value_info("z", TensorProto.FLOAT, [2, 32]),
            oh.make_tensor_value_info("w", TensorProto.STRING, [400]),
        ],
        [big, words],
    )
    graph.metadata_props.add(key="stage", value="test")
    proto = oh.make_model(
        graph, opset_imports=[oh.make_opsetid("", 17), oh.make_opsetid("local", 1)], functions=[function]
    )
    proto.ir_version = 10
    proto.metadata_props.add(key="model", value="unusual")
    model = ir.serde.deserialize_model(proto)
    # As an array, not a wrapped proto: onnx-ir 1.1 writes a wrapped proto's metadata_props twice.
    value = model.graph.initializers["big"]
    read = value.const_value
    value.const_value = ir.Tensor(
        read.numpy(), name="big", doc_string=read.doc_string, metadata_props=dict(read.metadata_props)
    )
    return model


def test_the_writer_gives_the_serialised_bytes_of_the_whole_model() -> None:
    model = _unusual_model()
    skeleton = skeleton_of(model)
    assert [skeleton.proto.graph.initializer[i].name for i in skeleton.streamed] == ["big"]  # not the strings
    assert not skeleton.proto.graph.initializer[0].raw_data
    written = io.BytesIO()
    count = skeleton.write(written)
    expected = ir.serde.serialize_model(model).SerializeToString()
    assert written.getvalue() == expected and count == len(expected)
    assert skeleton.full_proto().SerializeToString() == expected
    assert not skeleton.proto.graph.initializer[0].raw_data  # completing a proto leaves the skeleton as it was


@pytest.mark.parametrize("elements", [STREAM_BYTES // 4, STREAM_BYTES // 4 + 1, 1 << 20])
def test_weights_at_the_streaming_bound_round_trip(elements: int) -> None:
    values = np.arange(elements, dtype=np.float32)
    proto = make_model(
        [oh.make_node("Add", ["x", "c"], ["y"], name="add")],
        [tensor("x", TensorProto.FLOAT, [elements])],
        [tensor("y", TensorProto.FLOAT, [elements])],
        [numpy_helper.from_array(values, "c")],
    )
    model = ir.serde.deserialize_model(proto)
    written = io.BytesIO()
    skeleton = skeleton_of(model)
    skeleton.write(written)
    assert len(skeleton.streamed) == (elements * 4 > STREAM_BYTES)
    assert written.getvalue() == ir.serde.serialize_model(model).SerializeToString()
    np.testing.assert_array_equal(
        numpy_helper.to_array(onnx.load_from_string(written.getvalue()).graph.initializer[0]), values
    )
