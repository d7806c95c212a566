"""Inputs of every type a model takes besides float32 and strings (issue 35, item 2): bool, every integer width and
float16, the same way through --inputs, --input, --data and generated inputs; integers converted to another width
only when every value fits. Real models (tests/input_models.py), real ONNX Runtime sessions, real files.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.errors import AmpconfigError
from ampconfig.inputs.datasets import load_data
from ampconfig.inputs.feeds import InputSpec, coerce_input, prepare_inputs
from tests.graphs import IR_VERSION, run
from tests.input_models import TYPED_INPUTS, TYPED_WIDTH, typed_inputs_model, typed_values

runner = CliRunner()
RUN_FAST = ["--target", "cpu", "--warmup", "0", "--iterations", "1"]
INTEGERS = [name for name in TYPED_INPUTS if name not in ("bool", "float16")]


def _spec(dtype: str, dims: tuple[int | str, ...] = ("n",)) -> InputSpec:
    return InputSpec("x", onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), dims)


# ------------------------------------------------------------------------------------------ integer widths
@pytest.mark.parametrize("target", INTEGERS)
@pytest.mark.parametrize("stored", INTEGERS)
def test_integers_change_width_only_when_every_value_fits(stored: str, target: str) -> None:
    stored_info, target_info = np.iinfo(stored), np.iinfo(target)
    low, high = max(int(stored_info.min), int(target_info.min)), min(int(stored_info.max), int(target_info.max))
    fitting = np.array([low, 0, 1, high], dtype=stored)
    converted, warning = coerce_input(_spec(target), fitting, "ids.npy")
    assert converted.dtype == np.dtype(target) and warning is None
    assert [int(value) for value in converted] == [low, 0, 1, high]
    beyond = [int(stored_info.min)] if stored_info.min < target_info.min else []
    beyond += [int(stored_info.max)] if stored_info.max > target_info.max else []
    for value in beyond:
        with pytest.raises(AmpconfigError) as caught:
            coerce_input(_spec(target), np.array([0, value], dtype=stored), "ids.npy")
        message = caught.value.message
        assert message.startswith("ids.npy: input 'x' holds") and f"{value} at index [1]" in message
        assert f"its range is {int(target_info.min)} to {int(target_info.max)}" in message


@pytest.mark.parametrize(
    ("stored", "target"),
    [("float32", "int64"), ("int64", "float32"), ("int32", "bool"), ("bool", "int64"), ("float16", "uint8")],
)
def test_kinds_are_never_mixed(stored: str, target: str) -> None:
    with pytest.raises(AmpconfigError, match=f"is {stored} but the model expects {target}"):
        coerce_input(_spec(target), np.zeros(3, dtype=stored), "ids.npy")


@pytest.mark.parametrize("stored", ["float32", "float64"])
def test_floats_for_a_float16_input_are_converted_with_a_warning_when_a_value_changes(stored: str) -> None:
    exact = np.array([0.5, -2.0, 1024.0], dtype=stored)
    converted, warning = coerce_input(_spec("float16"), exact, "x.npy")
    assert converted.dtype == np.float16 and warning is None
    converted, warning = coerce_input(_spec("float16"), np.array([0.1, 1e5], dtype=stored), "x.npy")
    assert converted.dtype == np.float16 and warning is not None
    assert "2 of 2 value(s) changed, by up to inf" in warning  # 1e5 passes float16's range


def test_a_float16_input_in_a_file_is_fed_as_it_is() -> None:
    values = np.array([0.1, 65504.0], dtype=np.float16)
    converted, warning = coerce_input(_spec("float16"), values, "x.npy")
    assert converted is values and warning is None


# ------------------------------------------------------------------------------------------------ generation
def test_generated_inputs_take_every_declared_type_and_run_in_onnx_runtime() -> None:
    model = typed_inputs_model()
    inputs = prepare_inputs(model, shapes={"bool": [3, TYPED_WIDTH]}, seed=2)
    for name in TYPED_INPUTS:
        array = inputs.feeds[name]
        assert array.dtype == np.dtype(name) and array.shape == (3, TYPED_WIDTH), name
    for name in INTEGERS:
        assert int(inputs.feeds[name].min()) >= 0 and int(inputs.feeds[name].max()) < 100
    assert set(np.unique(inputs.feeds["bool"]).tolist()) == {False, True}
    (output,) = run(model, inputs.feeds)
    assert output.shape == (3, 4) and np.isfinite(output).all()


@pytest.mark.parametrize("dtype", [TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16])
def test_generated_ids_of_a_narrow_input_stay_in_its_range(dtype: int) -> None:
    """Token ids for a 1000-row table in an int8 input were drawn in [0, 1000) and wrapped round to negatives."""
    table = numpy_helper.from_array(np.arange(1000 * 4, dtype=np.float32).reshape(1000, 4), "table")
    nodes = [
        oh.make_node("Cast", ["ids"], ["ids64"], to=TensorProto.INT64),
        oh.make_node("Gather", ["table", "ids64"], ["rows"]),
    ]
    graph = oh.make_graph(
        nodes,
        "narrow_ids",
        [oh.make_tensor_value_info("ids", dtype, [64])],
        [oh.make_tensor_value_info("rows", TensorProto.FLOAT, [64, 4])],
        [table],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    inputs = prepare_inputs(model)
    ids = inputs.feeds["ids"]
    limit = min(1000, int(np.iinfo(ids.dtype).max) + 1)
    assert int(ids.min()) >= 0 and int(ids.max()) < limit
    assert f"token ids in [0, {limit})" in inputs.inputs[0].values
    (rows,) = run(model, inputs.feeds)
    np.testing.assert_array_equal(rows[:, 0], ids.astype(np.float32) * 4)


# ------------------------------------------------------------------------------------------------ data sets
def test_plain_json_lists_are_read_in_their_own_type_and_converted_like_files(tmp_path: Path) -> None:
    model = typed_inputs_model()
    values = typed_values(batch=1)
    feed = {name: array.tolist() for name, array in values.items()}
    path = tmp_path / "feeds.json"
    path.write_text(json.dumps([feed]), encoding="utf-8")
    (sample,) = load_data(path, model).samples
    for name, array in values.items():
        assert sample[name].dtype == array.dtype, name
        np.testing.assert_array_equal(sample[name], array)
    for name, bad, fragment in (
        ("int8", [[300] * TYPED_WIDTH], "holds 300 at index [0, 0], which int8"),
        ("uint16", [[-1] * TYPED_WIDTH], "holds -1 at index [0, 0], which uint16"),
        ("int64", [[1.5] * TYPED_WIDTH], "is float64 but the model expects int64"),
        ("bool", [[0] * TYPED_WIDTH], "is int64 but the model expects bool"),
        ("int32", [[1, 2]], "has 2 at axis 1; the model fixes it to 8"),
        ("int32", [[1, "2"] * 4], "not a rectangular array of numbers"),
        ("uint64", [[2**70] * TYPED_WIDTH], "not a rectangular array of numbers"),
    ):
        path.write_text(json.dumps([{**feed, name: bad}]), encoding="utf-8")
        with pytest.raises(AmpconfigError) as caught:
            load_data(path, model)
        assert str(path) in caught.value.message and fragment in caught.value.message, (name, caught.value.message)


# ----------------------------------------------------------------------------------- ampconfig run, end to end
@pytest.fixture(scope="module")
def typed_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("typed") / "typed.onnx"
    onnx.save(typed_inputs_model(), path)
    return path


def _polygraphy(array: np.ndarray) -> dict[str, str]:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return {"array": base64.b64encode(buffer.getvalue()).decode("ascii")}


@pytest.mark.parametrize("source", ["generated", "npz", "npy", "data_folder", "polygraphy_json"])
def test_run_feeds_every_type_through_every_input_option(typed_model: Path, tmp_path: Path, source: str) -> None:
    values = typed_values(batch=2)
    args: list[str] = []
    if source == "npz":
        np.savez(tmp_path / "in.npz", **values)
        args = ["--inputs", str(tmp_path / "in.npz")]
    elif source == "npy":
        for name, array in values.items():
            np.save(tmp_path / f"{name}.npy", array)
            args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    elif source == "data_folder":
        (tmp_path / "data").mkdir()
        for index in range(2):
            np.savez(tmp_path / "data" / f"{index}.npz", **typed_values(batch=2, seed=index))
        args = ["--data", str(tmp_path / "data")]
    elif source == "polygraphy_json":
        feeds = [{name: _polygraphy(array) for name, array in typed_values(seed=i).items()} for i in range(2)]
        (tmp_path / "feeds.json").write_text(json.dumps(feeds), encoding="utf-8")
        args = ["--data", str(tmp_path / "feeds.json")]
    result = runner.invoke(app, ["run", str(typed_model), "-m", "force_fp16", *RUN_FAST, *args, "--json"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    report = json.loads(result.stdout)
    assert report["passed"] and report["low_precision_nodes"] > 0 and report["warnings"] == []
    fed = {item["name"]: item for item in report["inputs"]}
    assert {name: fed[name]["dtype"] for name in TYPED_INPUTS} == {name: name for name in TYPED_INPUTS}
    assert all((fed[name]["source"] == "generated") == (source == "generated") for name in TYPED_INPUTS)


def test_run_converts_a_narrower_integer_file_and_refuses_one_that_does_not_fit(
    typed_model: Path, tmp_path: Path
) -> None:
    values = typed_values(batch=2)
    values["int64"] = values["int64"].astype(np.int32)  # int32 data for the int64 input: every value fits
    values["uint16"] = values["uint16"].astype(np.uint8)
    np.savez(tmp_path / "narrow.npz", **values)
    result = runner.invoke(app, ["run", str(typed_model), *RUN_FAST, "--inputs", str(tmp_path / "narrow.npz")])
    assert result.exit_code == 0, result.stderr
    values["int16"] = values["int16"].astype(np.int32)
    values["int16"][1, 3] = 40_000  # beyond int16: numpy would have fed -25536
    np.savez(tmp_path / "wide.npz", **values)
    result = runner.invoke(app, ["run", str(typed_model), *RUN_FAST, "--inputs", str(tmp_path / "wide.npz")])
    assert result.exit_code == 2
    assert f"{tmp_path / 'wide.npz'}: input 'int16' holds 40000 at index [1, 3]" in result.stderr
