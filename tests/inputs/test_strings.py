"""STRING inputs (issue 35, item 2): text arrays from .npz/.npy/data sets converted once to a plain ``<U`` array,
text files of one string a line, strings generated from the model's LabelEncoder or CategoryMapper keys, and
located errors for what cannot be fed. Real models (tests/input_models.py), real ONNX Runtime sessions, real files.
"""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from ampconfig.cli import app
from ampconfig.errors import AmpconfigError
from ampconfig.files.bounded import MAX_DOCUMENT_BYTES
from ampconfig.inputs.datasets import load_data
from ampconfig.inputs.feeds import adapt_feeds, prepare_inputs
from ampconfig.inputs.strings import read_text_lines, text_array, vocabulary
from ampconfig.prove.calibration import calibrate_model
from tests.graphs import run
from tests.input_models import (
    PHONEMES,
    category_model,
    normalized_phoneme_model,
    phoneme_model,
    phoneme_strings,
)

runner = CliRunner()
RUN_FAST = ["--warmup", "0", "--iterations", "1"]  # the default target (cuda): its op info lowers in bfloat16 too


# ----------------------------------------------------------------------------------------------- text arrays
def test_unicode_and_utf8_byte_arrays_become_one_unicode_array() -> None:
    unicode = np.array([["sh", "ü"], ["AP", "a"]])
    assert text_array("phs", unicode, "f").dtype.kind == "U"
    decoded = text_array("phs", np.char.encode(unicode, "utf-8"), "f")
    assert decoded.dtype.kind == "U" and decoded.tolist() == unicode.tolist()


@pytest.mark.parametrize(
    ("array", "fragment"),
    [
        (np.array([b"ok", b"\xff\xfe"]), "bytes that are not UTF-8 at index [1] (byte 0xff"),
        (np.array([["a", "b"], ["c", "d\x00e"]]), "a NUL character in a string at index [1, 1]"),
        (np.array("x\x00y"), "a NUL character in a string; ONNX Runtime would cut"),
        (np.array(["fine", "\udcff"]), "a string at index [1] that UTF-8 cannot encode"),
        (np.array(["a"], dtype=object), "is Python objects but the model expects strings"),
        (np.array([1, 2], dtype=np.int64), "is int64 but the model expects strings"),
    ],
    ids=["not_utf8", "nul", "nul_scalar", "surrogate", "objects", "numbers"],
)
def test_text_arrays_that_onnx_runtime_would_misread_are_located_errors(array: np.ndarray, fragment: str) -> None:
    with pytest.raises(AmpconfigError) as caught:
        text_array("phs", array, "batch.npz")
    assert caught.value.message.startswith("batch.npz: input 'phs'") and fragment in caught.value.message


def test_a_trailing_nul_is_no_part_of_a_numpy_string() -> None:
    """numpy drops trailing NULs itself: the string ONNX Runtime gets is the one numpy holds."""
    assert text_array("phs", np.array(["ab\x00"]), "f").tolist() == ["ab"]


# ----------------------------------------------------------------------------------------------- text files
def test_a_text_file_gives_one_string_a_line(tmp_path: Path) -> None:
    path = tmp_path / "phs.txt"
    path.write_bytes("\ufeffsh\r\nang\n\nü\n".encode())  # a byte-order mark, Windows line ends, an empty string
    lines = read_text_lines(path, "phs", "--input phs")
    assert lines.dtype.kind == "U" and lines.tolist() == ["sh", "ang", "", "ü"]
    path.write_text("AP\nSP", encoding="utf-8")  # no newline after the last line
    assert read_text_lines(path, "phs", "--input phs").tolist() == ["AP", "SP"]


@pytest.mark.parametrize(
    ("content", "fragment", "line"),
    [
        (b"", "the text file is empty", None),
        (b"sh\nang\n\xff\xfe\n", "not UTF-8 text: byte 0xff at line 3", 3),
        (b"sh\na\x00ng\n", "holds a NUL byte at line 2", 2),
        (
            b"a\n" * (MAX_DOCUMENT_BYTES // 2 + 1),
            "is too large: 4,194,306 bytes (4.0 MiB); ampconfig reads files up to 4,194,304 bytes (4.0 MiB)",
            None,
        ),
        # 1 MiB of one-character lines and one line of 1 MiB: as one <U array, 2 TiB
        (b"a\n" * (1 << 19) + b"b" * (1 << 20), "needs 2048.0 GiB", None),
        ("sh\nang\n".encode("utf-16"), "the text file is UTF-16 text (it starts with a UTF-16 byte-order", 1),
        ("sh\nang\n".encode("utf-32"), "the text file is UTF-32 text (it starts with a UTF-32 byte-order", 1),
    ],
    ids=["empty", "not_utf8", "nul", "huge", "wide", "utf16", "utf32"],
)
def test_bad_text_files_are_located_errors(tmp_path: Path, content: bytes, fragment: str, line: int | None) -> None:
    path = tmp_path / "phs.txt"
    path.write_bytes(content)
    with pytest.raises(AmpconfigError) as caught:
        read_text_lines(path, "phs", "--input phs")
    assert fragment in caught.value.message and caught.value.file == str(path) and caught.value.line == line


def test_cr_only_line_ends_are_read_as_lines_with_a_note(tmp_path: Path) -> None:
    """On main the file was one string holding the CRs, without a word."""
    path = tmp_path / "phs.txt"
    path.write_bytes(b"sh\rang\rAP\r")
    notes: list[str] = []
    assert read_text_lines(path, "phs", "--input phs", notes).tolist() == ["sh", "ang", "AP"]
    assert notes == ["--input phs: phs.txt ends its lines with CR alone (classic Mac OS): read as lines"]
    path.write_bytes(b"sh\r\nang\r\n")  # Windows line ends: lines, nothing to say
    notes.clear()
    assert read_text_lines(path, "phs", "--input phs", notes).tolist() == ["sh", "ang"] and not notes


def test_a_folder_or_a_fifo_is_refused_unread(tmp_path: Path) -> None:
    with pytest.raises(AmpconfigError, match="is a directory"):
        read_text_lines(tmp_path, "phs", "--input phs")
    if not hasattr(os, "mkfifo"):
        return
    fifo = tmp_path / "phs.txt"
    os.mkfifo(fifo)
    with pytest.raises(AmpconfigError, match="not a regular file"):  # opening it would wait for a writer
        read_text_lines(fifo, "phs", "--input phs")


# ------------------------------------------------------------------------------------------------ vocabulary
@pytest.mark.parametrize(
    ("model", "op_type"),
    [
        (phoneme_model(), "LabelEncoder"),
        (phoneme_model(keys="keys_tensor", through_reshape=True), "LabelEncoder"),
        (category_model(), "CategoryMapper"),
    ],
    ids=["keys_strings", "keys_tensor_through_reshape", "cats_strings"],
)
def test_the_vocabulary_is_the_keys_of_the_node_that_reads_the_input(model: onnx.ModelProto, op_type: str) -> None:
    found = vocabulary(model, model.graph.input[0].name)
    assert found is not None and found.op_type == op_type and found.strings == PHONEMES


def test_no_vocabulary_through_an_op_that_changes_the_strings() -> None:
    assert vocabulary(normalized_phoneme_model(), "phs") is None


def test_generated_strings_come_from_the_vocabulary_and_run_in_onnx_runtime() -> None:
    model = phoneme_model(keys="keys_tensor", through_reshape=True)
    inputs = prepare_inputs(model, shapes={"phs": [2, 40]}, seed=7)
    phs = inputs.feeds["phs"]
    assert phs.dtype.kind == "U" and phs.shape == (2, 40) and set(phs.ravel()) <= set(PHONEMES)
    assert len(set(phs.ravel())) > len(PHONEMES) // 2  # drawn from the whole vocabulary, not one key
    assert inputs.inputs[0].dtype == "string" and "16 keys of LabelEncoder 'phoneme_ids'" in inputs.inputs[0].values
    np.testing.assert_array_equal(prepare_inputs(model, shapes={"phs": [2, 40]}, seed=7).feeds["phs"], phs)
    assert prepare_inputs(model, shapes={"phs": [2, 40]}, seed=8).feeds["phs"].tolist() != phs.tolist()
    (output,) = run(model, inputs.feeds)
    assert output.shape == (2, 40, 4) and np.isfinite(output).all()
    assert adapt_feeds(inputs.feeds, model)["phs"] is phs  # fed as it is, never turned into Python objects


@pytest.mark.parametrize(("rank", "option"), [(1, "--input phs=FILE.txt"), (2, "--input phs=FILE.npy")])
def test_a_string_input_without_vocabulary_names_how_to_give_it(rank: int, option: str) -> None:
    model = normalized_phoneme_model() if rank == 1 else phoneme_model()
    if rank == 2:
        model.graph.node[0].domain = "ai.onnx.ml"
        model.graph.node[0].op_type = "LabelEncoder"
        del model.graph.node[0].attribute[:]  # an encoder with no string keys: nothing to draw from
    with pytest.raises(AmpconfigError) as caught:
        prepare_inputs(model)
    assert "input 'phs' takes strings" in caught.value.message
    assert "--inputs FILE.npz with a text array" in (caught.value.hint or "") and option in (caught.value.hint or "")


# -------------------------------------------------------------------------------------- ampconfig run, end to end
def _run(args: list[str | Path]) -> dict:
    result = runner.invoke(app, ["run", *[str(arg) for arg in args], *RUN_FAST, "--json"])
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    report = json.loads(result.stdout)
    assert report["passed"] and report["low_precision_nodes"] > 0
    return report


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("string_models")
    paths = {}
    for name, model in (("rank2", phoneme_model()), ("rank1", phoneme_model(rank=1)), ("pinyin", category_model())):
        paths[name] = folder / f"{name}.onnx"
        onnx.save(model, paths[name])
    return paths


def _polygraphy(array: np.ndarray) -> dict[str, str]:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return {"array": base64.b64encode(buffer.getvalue()).decode("ascii")}


SOURCES = ("npz_unicode", "npz_bytes", "npy", "txt", "data_folder", "data_stacked", "polygraphy_json", "plain_json")


@pytest.mark.parametrize("source", SOURCES)
def test_run_passes_on_strings_from_every_kind_of_file(models: dict[str, Path], tmp_path: Path, source: str) -> None:
    phs = phoneme_strings(12).reshape(1, 12)
    model = models["rank2"]
    if source == "npz_unicode":
        np.savez(tmp_path / "in.npz", phs=phs)
        args: list[str | Path] = ["--inputs", tmp_path / "in.npz"]
    elif source == "npz_bytes":
        np.savez(tmp_path / "in.npz", phs=np.char.encode(phs, "utf-8"))
        args = ["--inputs", tmp_path / "in.npz"]
    elif source == "npy":
        np.save(tmp_path / "phs.npy", phs)
        args = ["--input", f"phs={tmp_path / 'phs.npy'}"]
    elif source == "txt":
        model, phs = models["rank1"], phs[0]
        (tmp_path / "phs.txt").write_text("\n".join(phs) + "\n", encoding="utf-8")
        args = ["--input", f"phs={tmp_path / 'phs.txt'}"]
    elif source == "data_folder":
        (tmp_path / "data").mkdir()
        for index in range(3):
            np.savez(tmp_path / "data" / f"{index}.npz", phs=phoneme_strings(12, seed=index).reshape(1, 12))
        args = ["--data", tmp_path / "data"]
    elif source == "data_stacked":
        np.savez(tmp_path / "data.npz", phs=np.stack([phoneme_strings(12, seed=i).reshape(1, 12) for i in range(3)]))
        args = ["--data", tmp_path / "data.npz"]
    elif source == "polygraphy_json":
        feeds = [{"phs": _polygraphy(phoneme_strings(12, seed=i).reshape(1, 12))} for i in range(3)]
        (tmp_path / "feeds.json").write_text(json.dumps(feeds), encoding="utf-8")
        args = ["--data", tmp_path / "feeds.json"]
    else:
        feeds = [{"phs": phoneme_strings(12, seed=i).reshape(1, 12).tolist()} for i in range(3)]
        (tmp_path / "feeds.json").write_text(json.dumps(feeds), encoding="utf-8")
        args = ["--data", tmp_path / "feeds.json"]
    report = _run([model, "-m", "force_fp16", *args])
    (fed,) = report["inputs"]
    assert fed["name"] == "phs" and fed["dtype"] == "string" and fed["shape"] == list(phs.shape)
    assert fed["source"] != "generated"
    assert report["samples"] == (3 if source.startswith(("data", "polygraphy", "plain")) else 1)


@pytest.mark.parametrize("mode", ["force_fp16", "allow_mix_precision", "allow_mix_precision_bf16"])
@pytest.mark.parametrize("name", ["rank2", "pinyin"])
def test_run_passes_on_generated_strings_in_every_lowering_mode(models: dict[str, Path], name: str, mode: str) -> None:
    # bfloat16 keeps 8 bits of mantissa: a few roundings of a 1-frame output reach rel-L2 0.016
    tolerance = ["--tolerance", "5e-2"] if mode.endswith("bf16") else []
    report = _run([models[name], "-m", mode, *tolerance])
    (fed,) = report["inputs"]
    assert fed["source"] == "generated" and fed["dtype"] == "string" and "keys of" in fed["values"]


def test_run_on_a_string_input_without_vocabulary_is_exit_2_with_how_to_give_it(tmp_path: Path) -> None:
    path = tmp_path / "normalized.onnx"
    onnx.save(normalized_phoneme_model(), path)
    result = runner.invoke(app, ["run", str(path), *RUN_FAST])
    assert result.exit_code == 2 and "input 'phs' takes strings" in result.stderr
    assert "--inputs FILE.npz" in result.stderr and "--input phs=FILE.txt" in result.stderr
    (tmp_path / "phs.txt").write_text("SP\nAP\n", encoding="utf-8")
    given = runner.invoke(app, ["run", str(path), *RUN_FAST, "--input", f"phs={tmp_path / 'phs.txt'}"])
    assert given.exit_code == 0, given.stderr


def test_the_api_takes_strings_from_npz_and_data_sets(models: dict[str, Path], tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", phs=np.char.encode(phoneme_strings(10).reshape(1, 10), "utf-8"))
    ranges = calibrate_model(models["rank2"], tmp_path / "from_npz.json", inputs=tmp_path / "in.npz")
    assert "embedded" in ranges.values and ranges.data.samples == 1
    (tmp_path / "data").mkdir()
    for index in range(2):
        np.savez(tmp_path / "data" / f"{index}.npz", phs=phoneme_strings(10, seed=index).reshape(1, 10))
    ranges = calibrate_model(models["rank2"], tmp_path / "from_data.json", data=tmp_path / "data")
    assert ranges.data.samples == 2
    generated = calibrate_model(models["rank2"], tmp_path / "generated.json", shapes={"phs": [1, 10]})
    assert generated.data.samples == 1 and "embedded" in generated.values
    samples = load_data(tmp_path / "data", onnx.load(models["rank2"]))
    assert all(sample["phs"].dtype.kind == "U" for sample in samples.samples)
