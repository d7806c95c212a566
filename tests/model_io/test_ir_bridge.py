"""The crossings between protos and onnx-ir (``ampconfig/model_io/ir_bridge.py``): external tensors are read only
from inside their model's folder, by ampconfig's own check on every read (onnx-ir's private methods untouched), and
a data file with a second hard link is read, as ONNX Runtime reads it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import helper as oh
from onnx import numpy_helper

from ampconfig.errors import AmpconfigError
from ampconfig.model_io.ir_bridge import external_data_folder
from ampconfig.model_io.models import open_model
from tests.graphs import FLOAT, make_model, tensor

WEIGHT = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096


def _model_with_external_data(folder: Path) -> Path:
    model = make_model(
        [oh.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
        [tensor("x", FLOAT, [1, 64])],
        [tensor("y", FLOAT, [1, 64])],
        [numpy_helper.from_array(WEIGHT, "w")],
    )
    path = folder / "model.onnx"
    onnx.save(model, path, save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    return path


def _weight(model: ir.Model) -> ir.ExternalTensor:
    tensor = model.graph.initializers["w"].const_value
    assert isinstance(tensor, ir.ExternalTensor)
    return tensor


def test_an_external_tensor_reads_its_data_from_the_models_folder(tmp_path: Path) -> None:
    path = _model_with_external_data(tmp_path)
    weight = _weight(open_model(path).to_ir())
    assert weight.location == "model.onnx.data"  # written back as the model names it
    assert Path(external_data_folder(weight)).resolve() == tmp_path.resolve()
    np.testing.assert_array_equal(weight.numpy(), WEIGHT)


def test_a_data_file_with_a_second_hard_link_is_read(tmp_path: Path) -> None:
    path = _model_with_external_data(tmp_path)
    os.link(tmp_path / "model.onnx.data", tmp_path / "second_link.data")
    np.testing.assert_array_equal(_weight(open_model(path).to_ir()).numpy(), WEIGHT)


def test_a_data_file_turned_into_a_symlink_out_of_the_folder_after_opening_is_refused_when_read(
    tmp_path: Path,
) -> None:
    """The model is opened while its data is in place (the opening checks it too); the data file then becomes a
    symlink to a file outside the folder: the read, which checks again, refuses it."""
    inner = tmp_path / "inner"
    inner.mkdir()
    path = _model_with_external_data(inner)
    weight = _weight(open_model(path).to_ir())
    outside = tmp_path / "outside.data"
    os.replace(inner / "model.onnx.data", outside)
    os.symlink(outside, inner / "model.onnx.data")
    with pytest.raises(AmpconfigError, match="outside the model's folder"):
        weight.numpy()
