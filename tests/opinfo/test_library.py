"""opinfo.library: attribute variants narrow an op's kernel claim for the nodes whose attribute matches, and a
cubic Resize on the CPU stays float32 in a real run while a linear one is lowered."""

from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.errors import AmpconfigError
from ampconfig.opinfo.library import (
    OpInfo,
    OpInfoLibrary,
    OpInfoVariant,
    canonical_library,
    library_from_file,
    load_ops_info,
    ops_info_library,
    ops_info_path,
    parse_ops_info,
)
from ampconfig.opinfo.targets import TARGETS
from tests.fresh_process import script_in_fresh_process
from tests.graphs import resize_chain

runner = CliRunner()


def _scatter_library() -> OpInfoLibrary:
    variant = OpInfoVariant(attribute="reduction", values=["add", "mul"], dtypes=["float32"], source="probe")
    entry = OpInfo(dtypes=["float32", "float16"], dtype_source="probe", variants=[variant])
    return OpInfoLibrary("cpu", "CPUExecutionProvider", "test", {"ScatterND": entry})


@pytest.mark.parametrize(("reduction", "has_float16"), [("add", False), ("mul", False), ("none", True), (None, True)])
def test_a_variant_narrows_the_claim_for_matching_attribute_values_only(
    reduction: str | None, has_float16: bool
) -> None:
    library = _scatter_library()
    assert library.has_kernel("ScatterND", "float16", lambda name: reduction) is has_float16
    assert library.has_kernel("ScatterND", "float16") is True  # without attributes: the op's claim
    assert library.has_kernel("ScatterND", "float32", lambda name: reduction) is True


def test_a_variant_without_values_is_refused_naming_its_json_path() -> None:
    text = json.dumps(
        {
            "target": "cpu",
            "provider": "CPUExecutionProvider",
            "onnxruntime_version": "1.31.1",
            "ops": {"Resize": {"dtypes": ["float32"], "variants": [{"attribute": "mode", "values": [], "dtypes": []}]}},
        }
    )
    with pytest.raises(AmpconfigError) as caught:
        parse_ops_info(text, "ops.json")
    assert {p.json_path for p in caught.value.problems} >= {"$.ops.Resize.variants.0.values"}


def test_the_cpu_op_info_keeps_cubic_resize_and_scatter_reductions_from_float16() -> None:
    library = load_ops_info("cpu")
    modes = {"cubic": False, "linear": True, "nearest": True}
    for mode, lowered in modes.items():
        assert library.has_kernel("Resize", "float16", lambda name, mode=mode: mode) is lowered, mode
    variant = library.variant_for("Resize", lambda name: "cubic")
    assert variant is not None and "CPU-only onnxruntime 1.31.1" in variant.note
    for op in ("ScatterND", "ScatterElements"):
        assert library.has_kernel(op, "float16", lambda name: "add") is False
    assert load_ops_info("cuda").variant_for("Resize", lambda name: "cubic") is None  # measured on H100: unchanged


def _resize_model(mode: str) -> onnx.ModelProto:
    """x [8, 8] -> MatMul -> Reshape [1, 2, 4, 8] -> Resize (``mode``, half size) -> Relu -> y."""
    return resize_chain(mode, [1, 2, 4, 8], [1, 1, 0.5, 0.5], [1, 2, 2, 4], opset=18)


@pytest.mark.parametrize(("mode", "dtype", "rule"), [("cubic", "float32", "no_low_kernel"), ("linear", "float16", "")])
def test_force_fp16_on_the_cpu_keeps_a_cubic_resize_float32_and_explain_says_why(
    tmp_path: Path, mode: str, dtype: str, rule: str
) -> None:
    path = tmp_path / "resize.onnx"
    onnx.save_model(_resize_model(mode), path)
    out = tmp_path / "out.onnx"
    ran = runner.invoke(app, ["run", str(path), "-m", "force_fp16", "--target", "cpu", "-o", str(out)])
    assert ran.exit_code == 0, ran.output
    assert "PASS" in ran.output
    explained = runner.invoke(app, ["explain", str(path), "-m", "force_fp16", "--target", "cpu", "--json"])
    assert explained.exit_code == 0, explained.output
    node = next(n for n in json.loads(explained.output)["nodes"] if n["name"] == "resize")
    assert node["dtype"] == dtype
    if rule:
        assert node["rule"] == rule
        assert node["reason"].startswith("target 'cpu' has no float16 kernel for Resize with mode='cubic'")
    else:
        assert node["rule"] != "no_low_kernel"


def test_an_op_info_file_is_read_once_per_version(tmp_path: Path) -> None:
    """The library of a file is the same object while the file stays the same, and is read again once it is
    written: replaced (as `ops-info probe` writes, through a rename) or rewritten in place."""
    document = json.loads(ops_info_path("cpu").read_text(encoding="utf-8"))
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    first = ops_info_library(path)
    assert ops_info_library(path) is first and first.entries["Softmax"].dtypes == ["float32", "float16"]

    document["ops"]["Softmax"]["dtypes"] = ["float32"]
    replacement = tmp_path / "cpu.json.new"
    replacement.write_text(json.dumps(document), encoding="utf-8")
    os.replace(replacement, path)
    replaced = ops_info_library(path)
    assert replaced is not first and replaced.entries["Softmax"].dtypes == ["float32"]

    del document["ops"]["Abs"]
    path.write_text(json.dumps(document), encoding="utf-8")  # the same inode, written again
    assert "Abs" not in ops_info_library(path).entries


def test_the_packaged_op_info_is_the_same_object_while_its_file_is_unchanged() -> None:
    assert load_ops_info("cpu") is load_ops_info("cpu") is ops_info_library(ops_info_path("cpu"))


@pytest.mark.parametrize("target", TARGETS)
def test_the_packaged_op_info_reads_without_pydantic_exactly_as_its_pydantic_models_read_it(target: str) -> None:
    """The built-in op info is read without pydantic (a rewrite then loads none): for every op of every target,
    the library holds what the file's pydantic models give, field by field, with the same colour, and the same
    header."""
    path = ops_info_path(target)
    text = path.read_text(encoding="utf-8")
    checked = parse_ops_info(text, str(path))
    read = canonical_library(json.loads(text), str(path))
    assert read is not None  # the packaged file is what `ops-info` writes
    assert load_ops_info(target) == read
    assert (read.target, read.provider, read.onnxruntime_version) == (
        checked.target,
        checked.provider,
        checked.onnxruntime_version,
    )
    assert list(read.entries) == list(checked.ops)
    for key, entry in checked.ops.items():
        assert read.entries[key].as_json() == entry.model_dump(mode="json"), key
        assert read.entries[key].as_json(exclude_none=True) == entry.model_dump(mode="json", exclude_none=True), key
        assert read.entries[key].colour is entry.colour, key
    assert read.entries == library_from_file(checked, str(path)).entries


#: Values the file's pydantic models convert or refuse, each in an otherwise packaged entry: the reader without
#: pydantic hands such a file to them.
NOT_CANONICAL: list[tuple[str, object]] = [
    ("clear", "true"),  # a string pydantic reads as a boolean
    ("no_kernel_opsets", [22.0]),  # a float pydantic reads as an integer
    ("dtypes", ["float64"]),
    ("precision_reduce", {"flag": "true", "extra": 1}),
    ("unknown_field", 1),
    ("variants", [{"attribute": "mode", "values": [], "dtypes": [], "source": "probe"}]),
    ("variants", [{"attribute": "mode", "values": [True], "dtypes": [], "source": "probe"}]),
    ("accumulation", {"float32": "float32"}),
]


@pytest.mark.parametrize(("field", "value"), NOT_CANONICAL, ids=[f"{f}={v!r}" for f, v in NOT_CANONICAL])
def test_a_file_with_a_value_pydantic_would_convert_or_refuse_goes_to_the_pydantic_models(
    tmp_path: Path, field: str, value: object
) -> None:
    """Read from a file, such an entry gives what the pydantic models give: their value, or their located error."""
    document = json.loads(ops_info_path("cpu").read_text(encoding="utf-8"))
    document["ops"]["Relu"] = {**document["ops"]["Relu"], field: value}
    assert canonical_library(document, "cpu.json") is None
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    try:
        checked = parse_ops_info(path.read_text(encoding="utf-8"), str(path))
    except AmpconfigError as refused:
        with pytest.raises(AmpconfigError) as caught:
            ops_info_library(path)
        assert caught.value.problems == refused.problems and caught.value.problems[0].json_path.startswith("$.ops.Relu")
        return
    assert ops_info_library(path).entries["Relu"].as_json() == checked.ops["Relu"].model_dump(mode="json")


def test_an_op_both_clear_and_coloured_is_refused_as_the_models_refuse_it(tmp_path: Path) -> None:
    document = json.loads(ops_info_path("cpu").read_text(encoding="utf-8"))
    document["ops"]["Relu"] = {**document["ops"]["Relu"], "clear": True, "precision_reduce": {"flag": "true"}}
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(AmpconfigError, match="both clear and carry precision_reduce"):
        ops_info_library(path)


def test_reading_the_packaged_op_info_loads_no_pydantic() -> None:
    """On main at 73f8c17 ``opinfo.library`` imported pydantic, and ``import ampconfig.api`` with it."""
    done = script_in_fresh_process(
        "import sys; from ampconfig.opinfo.library import load_ops_info;"
        " print(len(load_ops_info('cpu').entries), len(load_ops_info('cuda').entries), 'pydantic' in sys.modules)"
    )
    assert done.returncode == 0, done.stderr
    cpu, cuda, pydantic_loaded = done.stdout.split()
    assert int(cpu) > 100 and int(cuda) > 100 and pydantic_loaded == "False"
