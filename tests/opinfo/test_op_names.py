"""TensorFlow and Ascend op names (docs/op-names.md): the table, Ascend's documentation example, TensorFlow's list
variables, ambiguous and unmappable names, keep_dtype OpType:: entries, on exporter-shaped models via the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import onnx.defs
import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.documents.mixlist_file import load_mixlist, mixlist_entries
from ampconfig.opinfo.library import load_ops_info
from ampconfig.opinfo.op_names import (
    _TRAINING_OP,
    AMBIGUOUS,
    OP_NAME_CHOICES,
    AmbiguousOpName,
    Vocabulary,
    foreign_ops,
    names_in,
    read_op_name,
    table_rows,
)
from ampconfig.settings.write_op_names import keep_dtype_lines_in, mixlist_in
from tests import exporter_models

runner = CliRunner()

#: Ascend's own modify_mixlist example (ATC --modify_mixlist documentation), comments removed.
ASCEND_DOC_EXAMPLE = """{
  "black-list": {"to-remove": ["Xlog1py"], "to-add": ["Matmul", "Cast"]},
  "white-list": {"to-remove": ["Conv2D"], "to-add": ["Bias"]}
}
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("exported")
    paths = {"cnn": folder / "cnn.onnx", "gpt2": folder / "gpt2.onnx"}
    onnx.save(exporter_models.cnn(), paths["cnn"])
    onnx.save(exporter_models.gpt2(), paths["gpt2"])
    return paths


def _write(folder: Path, name: str, content: Any) -> Path:
    path = folder / name
    path.write_text(content if isinstance(content, str) else json.dumps(content, indent=2), encoding="utf-8")
    return path


def _explain(model: Path, *args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["explain", str(model), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _dtypes(payload: dict[str, Any], op_type: str) -> set[str]:
    return {node["dtype"] for node in payload["nodes"] if node["op_type"] == op_type}


# ------------------------------------------------------------------------------------------------------ table
def test_table_names_are_unique_and_map_to_real_onnx_ops() -> None:
    names = [row.name for row in table_rows()]
    assert len(names) == len(set(names)) == len(foreign_ops())
    for row in table_rows():
        if row.onnx is not None:
            domain, _, op = row.onnx.rpartition("::")
            assert (not domain and onnx.defs.has(op)) or row.onnx in load_ops_info("cuda").entries, row
        else:  # a name without an ONNX equivalent must not be an ONNX op type itself
            assert not onnx.defs.has(row.name), row
        assert row.vocabularies <= {Vocabulary.TENSORFLOW, Vocabulary.ASCEND} and row.vocabularies


def test_the_ambiguous_names_are_exactly_those_onnx_spells_with_another_meaning() -> None:
    ambiguous = {row.name for row in table_rows() if row.onnx not in (None, row.name) and onnx.defs.has(row.name)}
    assert ambiguous == {"Max", "Min", "Mean", "Sum", "Where"} == AMBIGUOUS
    # Names read as training ops (gradients) are no ONNX op, at any opset and in any domain.
    assert not [s.name for s in onnx.defs.get_all_schemas_with_history() if _TRAINING_OP.match(s.name)]
    for name in ambiguous:
        with pytest.raises(AmbiguousOpName) as raised:
            read_op_name(name)
        assert "op_names: tensorflow" in raised.value.hint
        assert read_op_name(name, "onnx").onnx == name
        assert read_op_name(name, "tensorflow").onnx == foreign_ops()[name].onnx


@pytest.mark.parametrize("vocabulary", ["tensorflow", "ascend"])
def test_every_foreign_name_of_an_onnx_op_reads_back_as_that_op(vocabulary: str) -> None:
    """The round trip the writers rely on: ONNX op -> its names in a vocabulary -> the same ONNX op."""
    for onnx_key in {row.onnx for row in table_rows() if row.onnx is not None}:
        for name in names_in(vocabulary, onnx_key):
            assert read_op_name(name, vocabulary).onnx == onnx_key, (vocabulary, onnx_key, name)
    assert set(names_in("ascend", "MatMul")) >= {"MatMul", "MatMulV2", "BatchMatMul", "BatchMatMulV2"}
    assert names_in("onnx", "MatMul") == ("MatMul",)


@pytest.mark.parametrize(
    ("name", "onnx_op"),
    [
        ("Conv2D", "Conv"),
        ("Conv3D", "Conv"),
        ("DepthwiseConv2dNative", "Conv"),
        ("MatMulV2", "MatMul"),
        ("BatchMatMul", "MatMul"),
        ("BatchMatMulV2", "MatMul"),
        ("BiasAdd", "Add"),
        ("Relu", "Relu"),
        ("LayerNormalization", "LayerNormalization"),
        ("com.microsoft::FusedMatMul", "com.microsoft::FusedMatMul"),
        ("Xlog1py", None),
        ("Conv2DBackpropFilter", None),
    ],
)
def test_names_read_without_a_setting(name: str, onnx_op: str | None) -> None:
    assert read_op_name(name).onnx == onnx_op
    assert OP_NAME_CHOICES == ("tensorflow", "ascend", "onnx")


# ------------------------------------------------------------------------------ Ascend's documentation example
def test_ascend_documentation_example_moves_conv_out_of_the_white_list(tmp_path: Path, models: dict[str, Path]) -> None:
    mixlist = _write(tmp_path, "ops_info.json", ASCEND_DOC_EXAMPLE)
    plain = _explain(models["cnn"])
    edited = _explain(models["cnn"], "--modify-mixlist", str(mixlist))
    assert _dtypes(plain, "Conv") == {"float16"}
    assert {node["colour"] for node in edited["nodes"] if node["op_type"] == "Conv"} == {"gray"}
    assert "float32" in _dtypes(edited, "Conv")  # gray Convs follow their float32 inputs now
    assert f"{mixlist}:3: $.white-list.to-remove[0]: 'Conv2D' (TensorFlow/Ascend) is ONNX 'Conv'" in edited["notes"]
    assert any("'Bias' (Ascend) is ONNX 'Add'" in note for note in edited["notes"])
    warnings = "\n".join(edited["warnings"])
    assert "did you mean 'MatMul'?" in warnings  # the misspelt "Matmul" keeps its warning
    assert "'Xlog1py' (TensorFlow/Ascend) has no ONNX equivalent" in warnings

    html = tmp_path / "report.html"
    runner.invoke(app, ["explain", str(models["cnn"]), "--modify-mixlist", str(mixlist), "--html", str(html)])
    assert "note: " in html.read_text() and "Conv2D" in html.read_text()

    result = runner.invoke(app, ["validate", str(mixlist)])
    assert result.exit_code == 0, result.output
    assert f"{mixlist}:3: $.white-list.to-remove[0]: note: 'Conv2D'" in result.stdout
    lists = runner.invoke(app, ["lists", "--modify-mixlist", str(mixlist), "--json"])
    assert lists.exit_code == 0 and "Conv" in json.loads(lists.stdout)["gray"]
    assert "note: " in lists.stderr and "'Conv2D' (TensorFlow/Ascend) is ONNX 'Conv'" in lists.stderr


def test_matmulv2_and_batchmatmulv2_on_the_black_list_keep_every_matmul_float32(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    mixlist = _write(tmp_path, "mixlist.json", {"black-list": {"to-add": ["MatMulV2", "BatchMatMulV2"]}})
    assert _dtypes(_explain(models["gpt2"]), "MatMul") == {"float16"}
    payload = _explain(models["gpt2"], "--modify-mixlist", str(mixlist))
    assert _dtypes(payload, "MatMul") == {"float32"}
    assert not any("listed twice" in warning for warning in payload["warnings"])


def test_keep_dtype_op_type_entries_take_foreign_names(tmp_path: Path, models: dict[str, Path]) -> None:
    keep = _write(tmp_path, "keep_dtype.cfg", "OpType::BatchMatMulV2\nOpType::Xlog1py\n")
    payload = _explain(models["gpt2"], "--keep-dtype", str(keep))
    assert {node["rule"] for node in payload["nodes"] if node["op_type"] == "MatMul"} == {"keep_dtype"}
    assert f"{keep}:1: 'OpType::BatchMatMulV2' (TensorFlow/Ascend) is ONNX 'MatMul'" in payload["notes"]
    assert any(":2: 'OpType::Xlog1py'" in warning and "pins nothing" in warning for warning in payload["warnings"])


# ------------------------------------------------------------------------------------ TensorFlow's variables
TF_LISTS = """# exported from the training job's launch script
export TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD="BatchMatMulV2,Mean"
TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_INFERLIST_ADD=Tanh
"""


def test_tensorflow_list_variables_are_a_mixlist(tmp_path: Path, models: dict[str, Path]) -> None:
    lists = _write(tmp_path, "amp.env", TF_LISTS)
    payload = _explain(models["gpt2"], "--modify-mixlist", str(lists))
    assert _dtypes(payload, "MatMul") == {"float32"}
    assert {node["colour"] for node in payload["nodes"] if node["op_type"] == "ReduceMean"} == {"black"}
    # Mean is TensorFlow's reduction here: the file's names are TensorFlow's, so it is not ambiguous.
    assert any(":2: TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD: Mean: 'Mean'" in n for n in payload["notes"])
    result = runner.invoke(app, ["validate", str(lists)])
    assert result.exit_code == 0, result.output


def test_tensorflow_list_variables_inline_in_a_session_config(tmp_path: Path, models: dict[str, Path]) -> None:
    config = _write(
        tmp_path,
        "session.yaml",
        "precision_mode: allow_mix_precision\n"
        "modify_mixlist:\n"
        "  TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD: MatMul\n"
        "  TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_CLEARLIST_ADD: [Sum]\n",
    )
    payload = _explain(models["gpt2"], "--config", str(config))
    assert _dtypes(payload, "MatMul") == {"float32"}
    assert any(":4: " in warning and "no clear list" in warning for warning in payload["warnings"])
    result = runner.invoke(app, ["validate", str(config)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD=Exp\nnot an assignment\n", 2, "not a NAME=value line"),
        ("TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLST_ADD=Exp\n", 1, "did you mean"),
        (
            "TF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_DENYLIST_ADD=Exp\nTF_AUTO_MIXED_PRECISION_GRAPH_REWRITE_ALLOWLIST_ADD=Exp",
            1,
            "invalid mixlist combination",
        ),
    ],
)
def test_tensorflow_list_errors_are_located(tmp_path: Path, text: str, line: int, words: str) -> None:
    lists = _write(tmp_path, "amp.env", text)
    result = runner.invoke(app, ["validate", str(lists), "--format", "json"])
    assert result.exit_code in (1, 2), result.output
    errors = [p for p in json.loads(result.stdout)["problems"] if p["severity"] == "error"]
    assert errors and errors[0]["line"] == line and words in errors[0]["message"] + (errors[0]["hint"] or "")


# ------------------------------------------------------------------------------------------ ambiguous names
def test_an_ambiguous_name_is_an_error_listing_the_choices(tmp_path: Path, models: dict[str, Path]) -> None:
    """Where is ambiguous in a file that also uses TensorFlow/Ascend names (MatMulV2): the file says whose."""
    mixlist = _write(tmp_path, "mixlist.json", {"black-list": {"to-add": ["MatMulV2", "Where"]}})
    result = runner.invoke(app, ["validate", str(mixlist)])
    assert result.exit_code == 1
    assert "'Where' is ambiguous" in result.stdout
    assert all(choice in result.stdout for choice in ("op_names: tensorflow", "ascend", "onnx", "--op-names"))
    explain = runner.invoke(app, ["explain", str(models["gpt2"]), "--modify-mixlist", str(mixlist)])
    assert explain.exit_code == 2 and "'Where' is ambiguous" in explain.stderr

    # TensorFlow's Where is ONNX NonZero (none in the model); ONNX's Where is the select gpt2 masks with.
    as_tf = _explain(models["gpt2"], "--modify-mixlist", str(mixlist), "--op-names", "tensorflow")
    assert {n["colour"] for n in as_tf["nodes"] if n["op_type"] == "Where"} == {"clear"}
    assert any("'Where' (TensorFlow/Ascend) is ONNX 'NonZero'" in note for note in as_tf["notes"])
    config = _write(
        tmp_path, "s.yaml", f"precision_mode: allow_mix_precision\nop_names: onnx\nmodify_mixlist: {mixlist}\n"
    )
    as_onnx = _explain(models["gpt2"], "--config", str(config))
    assert {n["colour"] for n in as_onnx["nodes"] if n["op_type"] == "Where"} == {"black"}
    assert runner.invoke(app, ["validate", str(config)]).exit_code == 0
    bad = runner.invoke(app, ["lists", "--modify-mixlist", str(mixlist), "--op-names", "caffe"])
    assert bad.exit_code == 2 and "tensorflow, ascend, onnx" in bad.stderr


def test_an_onnx_file_naming_an_ambiguous_op_keeps_working_with_a_note(tmp_path: Path, models: dict[str, Path]) -> None:
    """A mixlist of ONNX names only (no TensorFlow/Ascend-only op) reads Where as ONNX's Where, as before op names
    existed, and says how to mean TensorFlow's."""
    mixlist = _write(tmp_path, "mixlist.json", {"black-list": {"to-add": ["MatMul", "Where"]}})
    result = runner.invoke(app, ["validate", str(mixlist), "--format", "json"])
    assert result.exit_code == 0, result.stdout
    (note,) = [p for p in json.loads(result.stdout)["problems"] if "'Where' is read as ONNX" in p["message"]]
    assert note["severity"] == "note" and note["line"] is not None and "op_names: tensorflow" in note["message"]
    explained = _explain(models["gpt2"], "--modify-mixlist", str(mixlist))
    assert {n["colour"] for n in explained["nodes"] if n["op_type"] == "Where"} == {"black"}
    keep = _write(tmp_path, "keep_dtype.cfg", "OpType::Max\n")
    assert runner.invoke(app, ["validate", str(keep)]).exit_code == 0


def test_ambiguous_keep_dtype_entry_is_an_error(tmp_path: Path) -> None:
    keep = _write(tmp_path, "keep_dtype.cfg", "node_a\nOpType::Max\nOpType::Conv2D\n")
    result = runner.invoke(app, ["validate", str(keep), "--format", "json"])
    assert result.exit_code == 1
    (error,) = [p for p in json.loads(result.stdout)["problems"] if p["severity"] == "error"]
    assert error["line"] == 2 and "ambiguous" in error["message"]
    assert runner.invoke(app, ["validate", str(keep), "--op-names", "ascend"]).exit_code == 0


def test_onnx_names_work_unchanged_and_name_no_note(tmp_path: Path) -> None:
    mixlist = _write(
        tmp_path, "m.json", {"black-list": {"to-add": ["MatMul", "Softmax", "com.microsoft::FusedMatMul"]}}
    )
    result = runner.invoke(app, ["validate", str(mixlist)])
    assert result.exit_code == 0 and "note" not in result.stdout


def test_the_docs_table_lists_every_name() -> None:
    text = (Path(__file__).parents[2] / "docs" / "op-names.md").read_text(encoding="utf-8")
    missing = [row.name for row in table_rows() if f"`{row.name}`" not in text]
    assert missing == []


# ------------------------------------------------------------------------------------------ the round trip
def _decisions(payload: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(n["name"], n["dtype"], n["colour"], n["rule"]) for n in payload["nodes"]]


def _onnx_data(mixlist_path: Path, op_names: str) -> dict[str, Any]:
    """A mixlist file read as ONNX op keys, as JSON data (what the ONNX side of a team holds)."""
    mixlist = load_mixlist(mixlist_path)
    data: dict[str, Any] = {}
    for entry in mixlist_entries(mixlist, op_names):
        ops = data.setdefault(entry.edit.list_key, {}).setdefault(entry.edit.action, [])
        if entry.op not in ops:
            ops.append(entry.op)
    return data


def test_round_trip_onnx_to_ascend_names_and_back_keeps_the_decisions(tmp_path: Path, models: dict[str, Path]) -> None:
    onnx_data = {
        "black-list": {"to-add": ["MatMul", "Where", "Softmax"]},
        "white-list": {"to-add": ["Add", "ReduceMean"], "to-remove": ["Conv"]},
        "gray-list": {"to-add": ["Mul"]},
    }
    ascend_data, warnings = mixlist_in(onnx_data, "ascend")
    assert warnings == []
    assert {"MatMul", "MatMulV2", "BatchMatMulV2"} <= set(ascend_data["black-list"]["to-add"])
    assert {"Select", "SelectV2"} <= set(ascend_data["black-list"]["to-add"])  # ONNX Where is Ascend's Select
    assert {"Conv2D", "DepthwiseConv2D"} <= set(ascend_data["white-list"]["to-remove"])
    onnx_file, ascend_file = _write(tmp_path, "onnx.json", onnx_data), _write(tmp_path, "atc.json", ascend_data)
    assert _onnx_data(ascend_file, "ascend") == onnx_data
    for model in (models["gpt2"], models["cnn"]):
        as_onnx = _explain(model, "--modify-mixlist", str(onnx_file), "--op-names", "onnx")
        as_ascend = _explain(model, "--modify-mixlist", str(ascend_file), "--op-names", "ascend")
        assert _decisions(as_ascend) == _decisions(as_onnx)
    lists = [
        runner.invoke(app, ["lists", "--modify-mixlist", str(path), "--op-names", names, "--json"])
        for path, names in ((onnx_file, "onnx"), (ascend_file, "ascend"))
    ]
    assert lists[0].exit_code == lists[1].exit_code == 0 and lists[0].stdout == lists[1].stdout


def test_round_trip_ascend_names_to_onnx_and_back(tmp_path: Path, models: dict[str, Path]) -> None:
    ascend = _write(
        tmp_path,
        "team.json",
        {
            "black-list": {"to-add": ["ReduceMeanD", "SoftmaxV2"]},
            "white-list": {"to-add": ["BiasAdd", "LayerNorm"], "to-remove": ["Conv2D"]},
        },
    )
    onnx_data = _onnx_data(ascend, "ascend")
    assert onnx_data == {
        "black-list": {"to-add": ["ReduceMean", "Softmax"]},
        "white-list": {"to-add": ["Add", "LayerNormalization"], "to-remove": ["Conv"]},
    }
    again = _write(tmp_path, "again.json", mixlist_in(onnx_data, "ascend")[0])
    assert _onnx_data(again, "ascend") == onnx_data
    for model in (models["gpt2"], models["cnn"]):
        first = _explain(model, "--modify-mixlist", str(ascend), "--op-names", "ascend")
        assert _decisions(_explain(model, "--modify-mixlist", str(again), "--op-names", "ascend")) == _decisions(first)
        assert _decisions(_explain(model, "--modify-mixlist", str(_write(tmp_path, "o.json", onnx_data)))) == (
            _decisions(first)
        )


def test_explain_shows_each_node_in_ascend_names(models: dict[str, Path]) -> None:
    payload = _explain(models["gpt2"], "--op-names", "ascend")
    assert payload["op_names"] == "ascend"
    matmul = next(node for node in payload["nodes"] if node["op_type"] == "MatMul")
    assert {"MatMulV2", "BatchMatMulV2"} <= set(matmul["op_type_names"])
    table = runner.invoke(app, ["explain", str(models["gpt2"]), "--op-names", "ascend"])
    assert table.exit_code == 0 and "MatMulV2" in table.stdout  # its Ascend names beside it (folded)
    assert "op_type_names" not in _explain(models["gpt2"])["nodes"][0]


def test_keep_dtype_lines_in_ascend_names() -> None:
    lines, warnings = keep_dtype_lines_in(["node_a", "OpType::Softmax", "OpType::Mean"], "ascend")
    assert lines[:3] == ["node_a", "OpType::Softmax", "OpType::SoftmaxV2"]
    assert warnings and "'Mean' has no ascend name" in warnings[0]  # ONNX's elementwise Mean reads as a reduction
