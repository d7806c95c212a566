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
    AttributeVariant,
    OpInfoEntry,
    OpInfoLibrary,
    load_ops_info,
    ops_info_library,
    ops_info_path,
    parse_ops_info,
)
from tests.graphs import resize_chain

runner = CliRunner()


def _scatter_library() -> OpInfoLibrary:
    variant = AttributeVariant(attribute="reduction", values=["add", "mul"], dtypes=["float32"], source="probe")
    entry = OpInfoEntry(dtypes=["float32", "float16"], dtype_source="probe", variants=[variant])
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
