"""ops-info import-ascend (issue 23): an edited Ascend ops-info file as the starting point of a target's op info."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.opinfo.library import load_ops_info

runner = CliRunner()

ASCEND_OPS_INFO = """{
  "Conv2D": {"precision_reduce": {"flag": "false"}, "input0": {"dtype": "float16,float", "format": "NC1HWC0"}},
  "MatMulV2": {"precision_reduce": {"flag": "true"}},
  "BatchMatMulV2": {"precision_reduce": {"flag": "true"}, "opFile": {"value": "batch_matmul_v2"}},
  "ReduceMeanD": {"dynamicShapeSupport": {"flag": "true"}},
  "Xlog1py": {"precision_reduce": {"flag": "false"}},
  "MyCustomOp": {"precision_reduce": {"flag": "true"}}
}
"""


def test_an_ascend_ops_info_file_sets_the_colours_of_the_onnx_ops(tmp_path: Path) -> None:
    source, out = tmp_path / "aic-ascend910-ops-info.json", tmp_path / "cuda.json"
    source.write_text(ASCEND_OPS_INFO, encoding="utf-8")
    result = runner.invoke(
        app, ["ops-info", "import-ascend", str(source), "--target", "cuda", "-o", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["mapped"]["Conv"] == {"colour": "black", "ascend_names": ["Conv2D"]}
    assert report["mapped"]["MatMul"] == {"colour": "white", "ascend_names": ["MatMulV2", "BatchMatMulV2"]}
    assert report["mapped"]["ReduceMean"]["colour"] == "gray"  # no precision_reduce: Ascend's gray list
    assert report["unmapped"] == ["Xlog1py", "MyCustomOp"]

    written = json.loads(out.read_text(encoding="utf-8"))
    built_in = load_ops_info("cuda")
    ops = written["ops"]
    assert ops["Conv"]["precision_reduce"] == {"flag": "false"} and "Ascend ops-info" in ops["Conv"]["reference"]
    assert ops["Conv"]["dtypes"] == list(built_in.entries["Conv"].dtypes)  # the target's kernels stay
    assert "precision_reduce" not in ops["ReduceMean"]
    untouched = {key for key in built_in.entries if key not in ("Conv", "MatMul", "ReduceMean")}
    assert all(ops[key] == built_in.entries[key].as_json(exclude_none=True) for key in untouched)
    assert runner.invoke(app, ["validate", str(out)]).exit_code == 0


def test_conflicting_names_take_the_colour_that_keeps_float32_and_say_so(tmp_path: Path) -> None:
    source, out = tmp_path / "ops.json", tmp_path / "out.json"
    source.write_text('{"MatMul": {"precision_reduce": {"flag": "true"}}, "BatchMatMulV2": {}}', encoding="utf-8")
    result = runner.invoke(app, ["ops-info", "import-ascend", str(source), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "'MatMul', 'BatchMatMulV2' all mean ONNX 'MatMul'" in result.stderr and "(gray)" in result.stderr
    assert "precision_reduce" not in json.loads(out.read_text())["ops"]["MatMul"]


def test_a_bad_flag_is_a_located_error_and_nothing_is_written(tmp_path: Path) -> None:
    source, out = tmp_path / "ops.json", tmp_path / "out.json"
    source.write_text('{\n  "Conv2D": {"precision_reduce": {"flag": true}}\n}\n', encoding="utf-8")
    result = runner.invoke(app, ["ops-info", "import-ascend", str(source), "-o", str(out)])
    assert result.exit_code == 2
    assert f"{source}:2" in result.stderr and 'must be "true" or "false"' in result.stderr
    assert not out.exists()
    refused = runner.invoke(app, ["ops-info", "import-ascend", str(source), "-o", str(source)])
    assert refused.exit_code == 2 and source.read_text().startswith("{")  # never over the input
