"""Models with external data: read lazily, written with their weights next to them, locations kept inside."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as oh
from onnx import numpy_helper
from typer.testing import CliRunner

from ampconfig import rewrite_model_detailed
from ampconfig.cli import app
from ampconfig.errors import AmpconfigError
from ampconfig.model_io.models import save_model_atomic
from tests.graphs import FLOAT, make_model, rel_l2, run, tensor

runner = CliRunner()


def _external_model(folder: Path, name: str = "big.onnx", location: str | None = None) -> Path:
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((256, 256)) * 0.05).astype(np.float32), f"w{i}") for i in range(3)
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "w0"], ["a"], name="fc0"),
        oh.make_node("Relu", ["a"], ["b"], name="relu"),
        oh.make_node("MatMul", ["b", "w1"], ["c"], name="fc1"),
        oh.make_node("MatMul", ["c", "w2"], ["y"], name="fc2"),
    ]
    model = make_model(nodes, [tensor("x", FLOAT, [4, 256])], [tensor("y", FLOAT, [4, 256])], weights)
    path = folder / name
    onnx.save(
        model,
        path,
        save_as_external_data=True,
        location=location or f"{name}.weights",
        size_threshold=1024,
    )
    return path


def test_external_data_model_is_rewritten_with_data_next_to_it(tmp_path: Path) -> None:
    source = _external_model(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    result = runner.invoke(app, ["rewrite", str(source), "-o", str(out_dir / "mixed.onnx"), "-m", "force_fp16"])
    assert result.exit_code == 0, result.output
    written = out_dir / "mixed.onnx"
    data = out_dir / "mixed.onnx.data"
    assert data.is_file() and data.stat().st_size >= 3 * 256 * 256 * 2  # three fp16 weights
    assert written.stat().st_size < 64 * 1024  # the weights are not inside the .onnx file
    onnx.checker.check_model(str(written), full_check=True)
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    want = run(onnx.load(str(source)), {"x": x})[0]
    got = run(onnx.load(str(written)), {"x": x})[0]
    assert rel_l2(got, want) < 1e-2
    assert not list(out_dir.glob("*.tmp"))


def test_external_tensors_are_converted_lazily(tmp_path: Path) -> None:
    import onnx_ir as ir

    result = rewrite_model_detailed(_external_model(tmp_path), "force_fp16")
    initializers = result.ir_model.graph.initializers.values()
    assert all(isinstance(v.const_value, ir.LazyTensor) for v in initializers)
    saved = save_model_atomic(result.ir_model, tmp_path / "o.onnx", input_files=result.input_files)
    assert (tmp_path / "o.onnx.data").is_file() and saved.is_file()


def test_in_memory_model_with_large_weights_is_written_as_one_file(tmp_path: Path) -> None:
    """Weights of 1 MiB or more convert when serialised (LazyTensor); that must not make ``rewrite`` split an
    ordinary model into .onnx + .data, nor convert them a second time for the file."""
    from ampconfig.rewrite.tensors import LAZY_CONVERSION_BYTES

    rows = LAZY_CONVERSION_BYTES // (4 * 256) + 1
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((rows, 256)).astype(np.float32), "w")
    model = make_model(
        [oh.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
        [tensor("x", FLOAT, [2, rows])],
        [tensor("y", FLOAT, [2, 256])],
        [weight],
    )
    source = tmp_path / "m.onnx"
    onnx.save(model, source)
    result = runner.invoke(app, ["rewrite", str(source), "-o", str(tmp_path / "o.onnx"), "-m", "force_fp16"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "o.onnx"]
    written = onnx.load(str(tmp_path / "o.onnx"))
    assert written.graph.initializer[0].data_type == onnx.TensorProto.FLOAT16
    onnx.checker.check_model(written, full_check=True)


def test_a_proto_over_the_external_data_threshold_is_written_with_its_data_next_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ampconfig.model_io import models as model_io

    proto = onnx.load(str(_external_model(tmp_path)))  # weights read into the proto
    monkeypatch.setattr(model_io, "EXTERNAL_DATA_THRESHOLD", proto.ByteSize() // 2)
    (tmp_path / "out").mkdir()
    saved = save_model_atomic(proto, tmp_path / "out" / "o.onnx")
    assert (tmp_path / "out" / "o.onnx.data").stat().st_size >= 3 * 256 * 256 * 4
    assert saved.stat().st_size < 64 * 1024
    onnx.checker.check_model(str(saved), full_check=True)


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd"])
def test_locations_outside_the_model_folder_are_refused(tmp_path: Path, location: str) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    path = _external_model(inner)
    model = onnx.load(str(path), load_external_data=False)
    for init in model.graph.initializer:
        for entry in init.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, path)
    result = runner.invoke(app, ["rewrite", str(path), "-o", str(tmp_path / "o.onnx"), "-m", "force_fp16"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert ("outside the model's folder" in result.output) or ("not a path relative" in result.output)
    assert not (tmp_path / "o.onnx").exists()


def test_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    path = _external_model(inner, location="big.onnx.weights")
    real = tmp_path / "elsewhere.bin"
    os.replace(inner / "big.onnx.weights", real)
    os.symlink(real, inner / "big.onnx.weights")
    with pytest.raises(AmpconfigError, match="outside the model's folder"):
        rewrite_model_detailed(path, "force_fp16")


def test_output_never_overwrites_the_inputs_external_data(tmp_path: Path) -> None:
    path = _external_model(tmp_path, name="m.onnx", location="o.onnx.data")
    result = runner.invoke(app, ["rewrite", str(path), "-o", str(tmp_path / "o.onnx"), "-m", "force_fp16"])
    assert result.exit_code == 2
    assert "external data" in result.output
    assert not (tmp_path / "o.onnx").exists()
