"""Single-file models read with their weights left in the file (model_io/mapped.py): the same rewrite, byte for byte,
as from a model read whole; anything not laid out for it is read whole."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from typer.testing import CliRunner

from ampconfig import rewrite_model, rewrite_model_detailed
from ampconfig.cli import app
from ampconfig.errors import AmpconfigError
from ampconfig.model_io import mapped
from ampconfig.model_io.models import open_model
from tests.graphs import make_model, run, tensor

WIDTH = 128


@pytest.fixture(autouse=True)
def _map_small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Map models of any size (the bound is 32 MiB; the test models are small)."""
    monkeypatch.setattr(mapped, "MAP_MIN_BYTES", 0)


def _model(opset: int = 17, clamped: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    large = rng.standard_normal((WIDTH * 2, WIDTH)).astype(np.float32) / 10  # 128 KiB: left in the file
    if clamped:
        large[5, 5] = 1e6  # clamped when converted
    initializers = [
        numpy_helper.from_array(large, "large"),
        numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32), "pinned"),  # 64 KiB
        numpy_helper.from_array(np.arange(WIDTH, dtype=np.float32), "small"),
        numpy_helper.from_array(np.arange(WIDTH * WIDTH, dtype=np.int64) % 3, "table"),  # 128 KiB of int64
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "large"], ["m"], name="fc"),
        oh.make_node("Add", ["m", "small"], ["a"], name="add"),
        oh.make_node("MatMul", ["a", "pinned"], ["p"], name="kept"),
        oh.make_node("Gather", ["table", "ids"], ["g"], name="gather"),
        oh.make_node("Cast", ["g"], ["gf"], name="to_float", to=TensorProto.FLOAT),
        oh.make_node("Add", ["p", "gf"], ["y"], name="out"),
    ]
    return make_model(
        nodes,
        [tensor("x", TensorProto.FLOAT, [2, WIDTH * 2]), tensor("ids", TensorProto.INT64, [WIDTH])],
        [tensor("y", TensorProto.FLOAT, [2, WIDTH])],
        initializers,
        opset=opset,
    )


def _saved(tmp_path: Path, model: onnx.ModelProto, name: str = "model.onnx") -> Path:
    path = tmp_path / name
    onnx.save(model, path)
    return path


def test_large_weights_stay_in_the_file(tmp_path: Path) -> None:
    path = _saved(tmp_path, _model())
    opened = open_model(path, map_weights=True)
    assert opened.mapped and not opened.external_files
    by_name = {t.name: t for t in opened.proto.graph.initializer}
    for name in ("large", "pinned", "table"):
        entries = {entry.key: entry.value for entry in by_name[name].external_data}
        assert by_name[name].data_location == TensorProto.EXTERNAL and entries["location"] == "model.onnx"
        start, length = int(entries["offset"]), int(entries["length"])
        assert path.read_bytes()[start : start + length] == numpy_helper.to_array(_model_tensor(name)).tobytes()
    assert by_name["small"].raw_data and not open_model(path).mapped  # parsed whole unless asked


def _model_tensor(name: str) -> onnx.TensorProto:
    return next(t for t in _model().graph.initializer if t.name == name)


@pytest.mark.parametrize("mode", ["force_fp16", "allow_mix_precision", "allow_mix_precision_bf16"])
def test_a_mapped_model_rewrites_as_one_read_whole(tmp_path: Path, mode: str) -> None:
    path = _saved(tmp_path, _model())
    # clamp_values: the out-of-range weight is clamped as it is converted from the mapped file (without it the
    # MatMul reading it stays float32, rule value_out_of_range, and nothing is converted).
    from_file = rewrite_model_detailed(str(path), mode, keep_dtype=["kept"], clamp_values=True)
    in_memory = rewrite_model(_model(), mode, keep_dtype=["kept"], clamp_values=True)
    assert from_file.model.SerializeToString() == in_memory.SerializeToString()
    assert from_file.stats.values_clamped == (1 if mode != "allow_mix_precision_bf16" else 0)
    onnx.checker.check_model(from_file.model, full_check=True)


def test_the_command_writes_a_mapped_model_in_one_file(tmp_path: Path) -> None:
    model = _model()
    path = _saved(tmp_path, model)
    before = path.read_bytes()
    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(app, ["rewrite", str(path), "-o", str(out), "-m", "force_fp16", "--target", "cpu"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "out.onnx"]  # no .data, nothing left over
    assert path.read_bytes() == before
    assert out.read_bytes() == rewrite_model(model, "force_fp16", target="cpu").SerializeToString()
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, WIDTH * 2)).astype(np.float32) / 10}
    feeds["ids"] = np.arange(WIDTH, dtype=np.int64)
    assert run(written, feeds)[0].shape == (2, WIDTH)


def test_an_old_opset_is_raised_for_bfloat16_on_a_mapped_model(tmp_path: Path) -> None:
    path = _saved(tmp_path, _model(opset=11))
    result = rewrite_model_detailed(str(path), "allow_mix_precision_bf16", target="cuda")
    assert result.stats.opset_raised_to == 13
    assert (
        result.model.SerializeToString()
        == rewrite_model(_model(opset=11), "allow_mix_precision_bf16").SerializeToString()
    )


def test_an_old_opset_is_raised_for_bfloat16_on_a_model_with_external_data(tmp_path: Path) -> None:
    """The raise converts a proto without the weights' bytes, so external data is no reason to keep the old opset
    (it was: every node then stayed float32 with no warning from rewrite)."""
    path = tmp_path / "model.onnx"
    onnx.save(_model(opset=11), str(path), save_as_external_data=True, location="model.data", size_threshold=0)
    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(app, ["rewrite", str(path), "-o", str(out), "-m", "allow_mix_precision_bf16"])
    assert result.exit_code == 0, result.output
    assert "opset raised from 11 to 13" in result.output
    in_memory = rewrite_model_detailed(_model(opset=11), "allow_mix_precision_bf16")
    assert in_memory.stats.opset_raised_to == 13
    written = onnx.load(out)  # its weights from out's own data file
    onnx.checker.check_model(written, full_check=True)
    for initializer in written.graph.initializer:
        initializer.ClearField("data_location")  # onnx.load marks what it read from external data
    assert written.SerializeToString() == in_memory.model.SerializeToString()


def test_weights_not_in_raw_data_are_read_whole(tmp_path: Path) -> None:
    model = _model()
    large = model.graph.initializer[0]
    values = numpy_helper.to_array(large)
    large.ClearField("raw_data")
    large.float_data.extend(values.reshape(-1).tolist())  # the other way to store a float tensor
    path = _saved(tmp_path, model)
    opened = open_model(path, map_weights=True)
    assert opened.mapped  # the others are still mapped
    kept = next(t for t in opened.proto.graph.initializer if t.name == "large")
    assert kept.data_location != TensorProto.EXTERNAL and len(kept.float_data) == values.size
    assert (
        rewrite_model(str(path), "force_fp16").SerializeToString()
        == rewrite_model(model, "force_fp16").SerializeToString()
    )


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_linked_files_are_read_whole(tmp_path: Path, link: str) -> None:
    path = _saved(tmp_path, _model(), "real.onnx")
    linked = tmp_path / "linked.onnx"
    (os.symlink if link == "symlink" else os.link)(path, linked)
    opened = open_model(linked, map_weights=True)
    assert not opened.mapped
    assert (
        rewrite_model(str(linked), "force_fp16").SerializeToString()
        == rewrite_model(_model(), "force_fp16").SerializeToString()
    )


def test_a_truncated_file_is_the_usual_error(tmp_path: Path) -> None:
    data = _model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) - 1000])
    with pytest.raises(AmpconfigError, match="cannot read model"):
        open_model(path, map_weights=True)


def test_run_reads_a_mapped_model_from_files(tmp_path: Path) -> None:
    """`run` hands ONNX Runtime files: the input itself, the rewrite in a temporary folder, and the CPU accuracy
    copy, whose weights are read from the rewrite's file; --output gets what `rewrite` writes."""
    path = _saved(tmp_path, _model(clamped=False))
    out = tmp_path / "out.onnx"
    keep = tmp_path / "keep.cfg"
    keep.write_text("kept\n")
    args = ["run", str(path), "-m", "force_fp16", "--target", "cpu", "--device", "cpu", "--keep-dtype", str(keep)]
    result = CliRunner().invoke(app, [*args, "--iterations", "1", "--warmup", "0", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert "accuracy measured on a copy" in result.output  # the copy reading the rewrite's weights ran
    expected = rewrite_model(_model(clamped=False), "force_fp16", target="cpu", keep_dtype=["kept"])
    assert out.read_bytes() == expected.SerializeToString()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.cfg", "model.onnx", "out.onnx"]
