"""Hostile inputs through every command (issue 10, "located errors only"): each must end with exit 2 and a message
that names the file or flag and what to do — never a traceback or the generic "internal error … this is a bug".

Each case below reproduces one of the inputs that used to end in "internal error": deeply nested documents
(RecursionError), recursive YAML aliases, external-data offsets and lengths that are too big, negative or not
numbers (ValueError/SerdeError), a symbolic link loop (RuntimeError), a generated input of 47.7 GiB (MemoryError),
huge dimensions (ValueError), empty .npy/.npz files (EOFError), a binary kernel table (UnicodeDecodeError), counts
that never finish (--warmup 10**20), and option values that were silently accepted (NaN, infinity, 0, negative).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import socket
import threading
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from typer.testing import CliRunner, Result

from ampconfig.cli import app
from ampconfig.documents.ranges_file import MAX_RANGES_BYTES, RANGES_FORMAT_VERSION
from ampconfig.files.bounded import MAX_DOCUMENT_BYTES
from tests.graphs import IR_VERSION
from tests.input_models import normalized_phoneme_model, phoneme_model

runner = CliRunner()
FAST = ["--target", "cpu"]
RUN_FAST = ["--warmup", "0", "--iterations", "1"]
MODEL_COMMANDS = ("run", "rewrite", "explain", "compare", "tune")


# ------------------------------------------------------------------------------------------------ harness
def _stderr(result: Result) -> str:
    with contextlib.suppress(ValueError):  # older click mixes stderr into stdout and raises here
        return result.stderr
    return result.stdout


def invoke(args: Sequence[str | Path]) -> Result:
    """Run the CLI; whatever the input, no traceback and no internal error."""
    result = runner.invoke(app, [str(arg) for arg in args])
    text = result.stdout + _stderr(result)
    assert "Traceback" not in text, text
    assert "internal error" not in text, text
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def assert_refused(result: Result, *fragments: str) -> None:
    """Exit 2 with every fragment (the file or flag, and what is wrong) in the message."""
    message = _stderr(result)
    assert result.exit_code == 2, (result.exit_code, message, result.stdout)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def command_args(command: str, model: Path, out: Path) -> list[str | Path]:
    """A valid invocation of ``command`` on ``model``, to which a case adds its hostile part."""
    if command == "rewrite":
        return ["rewrite", model, "-m", "force_fp16", *FAST, "-o", out]
    if command == "run":
        return ["run", model, "-m", "force_fp16", *FAST, *RUN_FAST]
    if command == "tune":
        return ["tune", model, "-m", "force_fp16", *FAST, "--keep-dtype-out", out.with_suffix(".cfg")]
    return [command, model, "-m", "force_fp16", *FAST]


# ------------------------------------------------------------------------------------------------ fixtures
def small_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        oh.make_node("Add", ["h", "b"], ["a"], name="add"),
        oh.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    weights = [
        numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w"),
        numpy_helper.from_array(np.zeros(64, np.float32), "b"),
    ]
    graph = oh.make_graph(
        nodes,
        "hostile_inputs",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
        weights,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile_inputs")


@pytest.fixture(scope="module")
def model(folder: Path) -> Path:
    path = folder / "model.onnx"
    onnx.save(small_model(), path)
    return path


def symlink_loop(folder: Path, name: str) -> Path:
    """``name`` -> ``name.other`` -> ``name``: opening either never reaches a file."""
    path, other = folder / name, folder / f"{name}.other"
    if not path.is_symlink():
        os.symlink(other.name, path)
        os.symlink(path.name, other)
    return path


# ------------------------------------------------------------------------------------------------ documents
HOSTILE_CONFIGS = {
    "deep.json": '{"precision_mode": "force_fp16", "run": ' + "[" * 50_000 + "]" * 50_000 + "}",
    "deep.yaml": "precision_mode: force_fp16\nrun: " + "[" * 50_000 + "]" * 50_000 + "\n",
    "deep_block.yaml": "".join(" " * level + f"k{level}:\n" for level in range(300)) + " " * 300 + "v: 1\n",
    "deep.toml": "precision_mode = 'force_fp16'\nrun = " + "[" * 50_000 + "]" * 50_000 + "\n",
    "recursive.yaml": "precision_mode: force_fp16\nrun: &a\n  shapes: *a\n",
    "recursive_list.yaml": "precision_mode: force_fp16\nloop: &a [1, *a]\n",
}
CONFIG_LINES = {  # where each refusal points
    "deep.json": ("nesting too deep", 1),
    "deep.yaml": ("nesting too deep", 2),
    "deep_block.yaml": ("nesting too deep", 65),  # the 65th mapping starts on line 65
    "deep.toml": ("nesting too deep", 2),
    "recursive.yaml": ("YAML alias *a is inside the value it refers to", 3),
    "recursive_list.yaml": ("YAML alias *a is inside the value it refers to", 2),
}


@pytest.mark.parametrize("command", [*MODEL_COMMANDS, "validate"])
@pytest.mark.parametrize("name", list(HOSTILE_CONFIGS))
def test_hostile_config_is_refused_with_file_and_line(folder: Path, model: Path, command: str, name: str) -> None:
    config = folder / name
    config.write_text(HOSTILE_CONFIGS[name])
    fragment, line = CONFIG_LINES[name]
    args = ["validate", config] if command == "validate" else [*command_args(command, model, folder / "o.onnx")]
    if command != "validate":
        args += ["--config", config]
    result = invoke(args)
    if command == "validate":  # validate reports on stdout, one line per problem
        assert result.exit_code == 2 and f"{config}:{line}: error: {fragment}" in result.stdout, result.stdout
    else:
        assert_refused(result, f"{config}:{line}: {fragment}")


@pytest.mark.parametrize("command", [*MODEL_COMMANDS, "lists", "validate"])
def test_deeply_nested_mixlist_is_refused_with_file_and_line(folder: Path, model: Path, command: str) -> None:
    mixlist = folder / "deep_mixlist.json"
    mixlist.write_text('{\n"black-list": {"to-add": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    if command == "validate":
        result = invoke(["validate", mixlist])
        assert result.exit_code == 2 and f"{mixlist}:2: error: nesting too deep" in result.stdout
        return
    if command == "lists":
        args: list[str | Path] = ["lists", "--precision-mode", "allow_mix_precision"]
    else:
        args = [a if a != "force_fp16" else "allow_mix_precision" for a in command_args(command, model, folder / "o")]
    assert_refused(invoke([*args, "--modify-mixlist", mixlist]), f"{mixlist}:2: nesting too deep")


# ------------------------------------------------------------------------------------------------ external data
EXTENT_CASES = {
    "offset_too_big": ("offset", "99999999999", "runs past the end of model.onnx.data"),
    "offset_negative": ("offset", "-5", "has offset '-5': expected a whole number of bytes"),
    "offset_not_a_number": ("offset", "abc", "has offset 'abc': expected a whole number of bytes"),
    "length_too_big": ("length", "99999999999", "runs past the end of model.onnx.data"),
    "length_negative": ("length", "-5", "has length '-5': expected a whole number of bytes"),
    "length_not_a_number": ("length", "1e3", "has length '1e3': expected a whole number of bytes"),
    "length_wrong": ("length", "64", "has length 64 bytes, but a 64x64 float tensor takes 16384"),
}


def external_model(folder: Path, key: str, value: str) -> Path:
    """A model with its weights in model.onnx.data, then ``key`` of tensor ``w``'s external data set to ``value``."""
    folder.mkdir(exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(small_model(), path, save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    proto = onnx.load(path, load_external_data=False)
    tensor = next(t for t in proto.graph.initializer if t.name == "w")
    entries = {entry.key: entry for entry in tensor.external_data}
    if key in entries:
        entries[key].value = value
    else:
        tensor.external_data.add(key=key, value=value)
    path.write_bytes(proto.SerializeToString())
    return path


@pytest.mark.parametrize("command", MODEL_COMMANDS)
@pytest.mark.parametrize("case", list(EXTENT_CASES))
def test_external_data_offset_and_length_are_checked_against_the_file(folder: Path, command: str, case: str) -> None:
    key, value, fragment = EXTENT_CASES[case]
    path = external_model(folder / f"ext_{case}", key, value)
    result = invoke(command_args(command, path, folder / f"ext_{case}" / "out.onnx"))
    assert_refused(result, f"{path}: external data of tensor 'w'", fragment)
    assert not (folder / f"ext_{case}" / "out.onnx").exists()


def test_external_data_at_an_unaligned_offset_that_fits_is_read(folder: Path) -> None:
    """The checks refuse only what cannot be read: an offset inside the file with the right length is valid."""
    path = external_model(folder / "ext_unaligned", "offset", "8")
    data = path.parent / "model.onnx.data"
    with data.open("ab") as handle:  # room for the shifted tensor
        handle.write(b"\0" * 8)
    result = invoke(command_args("rewrite", path, path.parent / "out.onnx"))
    assert result.exit_code == 0, _stderr(result)


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_external_data_with_a_second_hard_link_is_read(folder: Path, command: str) -> None:
    """ONNX Runtime reads a data file that has another hard link in the folder (a copy made with cp -l, a
    deduplicating store); onnx and onnx-ir refuse it as a "hard link attack". ampconfig reads it."""
    path = external_model(folder / f"hard_link_{command}", "location", "model.onnx.data")
    os.link(path.parent / "model.onnx.data", path.parent / "second_link.data")
    result = invoke(command_args(command, path, path.parent / "out.onnx"))
    assert result.exit_code == 0, _stderr(result)


def _escaping_model(folder: Path, how: str) -> Path:
    """A model whose external data lies outside its folder: by ``..``, an absolute path or a symbolic link."""
    outside = folder.parent / f"{folder.name}.outside.data"
    if how != "symlink":
        return external_model(folder, "location", f"../{outside.name}" if how == "parent" else str(outside))
    path = external_model(folder, "location", "model.onnx.data")
    os.replace(path.parent / "model.onnx.data", outside)
    os.symlink(outside, path.parent / "model.onnx.data")
    return path


@pytest.mark.parametrize("command", MODEL_COMMANDS)
@pytest.mark.parametrize("how", ["parent", "absolute", "symlink"])
def test_external_data_outside_the_models_folder_is_refused(folder: Path, command: str, how: str) -> None:
    path = _escaping_model(folder / f"escape_{how}_{command}", how)
    result = invoke(command_args(command, path, path.parent / "out.onnx"))
    assert_refused(result, str(path), "external data of tensor 'w'")
    assert not (path.parent / "out.onnx").exists()


# ------------------------------------------------------------------------------------------------ paths
@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_model_that_is_a_symlink_loop(folder: Path, command: str) -> None:
    loop = symlink_loop(folder, "loop.onnx")
    assert_refused(invoke(command_args(command, loop, folder / "o.onnx")), str(loop), "symbolic link")


@pytest.mark.parametrize(
    ("option", "name"),
    [
        ("--config", "loop.yaml"),
        ("--modify-mixlist", "loop.json"),
        ("--keep-dtype", "loop.cfg"),
        ("--inputs", "loop.npz"),
        ("--input", "loop.npy"),
    ],
)
def test_input_files_that_are_symlink_loops(folder: Path, model: Path, option: str, name: str) -> None:
    loop = symlink_loop(folder, name)
    value = f"x={loop}" if option == "--input" else str(loop)
    mode = "allow_mix_precision" if option == "--modify-mixlist" else "force_fp16"
    args = ["run", model, "-m", mode, *FAST, *RUN_FAST, option, value]
    assert_refused(invoke(args), str(loop), "symbolic link")


def test_validate_and_import_table_on_symlink_loops(folder: Path) -> None:
    loop = symlink_loop(folder, "loop_validate.yaml")
    result = invoke(["validate", loop])
    assert result.exit_code == 2 and f"{loop}: error: file is a symbolic link" in result.stdout
    table = symlink_loop(folder, "loop_table.md")
    assert_refused(invoke(["ops-info", "import-table", table, "-o", folder / "oi.json"]), str(table), "symbolic")


#: Every path a session config holds, and what a name no file can have is reported as in each.
CONFIG_PATHS = (
    "model",
    "output",
    "modify_mixlist",
    "keep_dtype",
    "customize_dtypes",
    "run.inputs",
    "run.data",
    "run.calibration_data",
    "ranges",
)
#: The config paths each command opens (or writes).
#: The config's data (run.*) and ranges file decide in every deciding command: rewrite and lock read them too.
_DATA = {"run.inputs", "run.data", "run.calibration_data", "ranges"}
READ_BY = {
    "validate": {"model", "output", "modify_mixlist", "keep_dtype", *_DATA},
    "rewrite": {"model", "output", "modify_mixlist", "keep_dtype", *_DATA},
    "run": {"model", "output", "modify_mixlist", "keep_dtype", *_DATA},
    "lock": {"model", "modify_mixlist", "keep_dtype", *_DATA},
}
UNNAMEABLE_PATHS = {"nul": ("x\0y.npz", "NUL character"), "too_long": ("a" * 300 + ".npz", "longer than the file")}


@pytest.mark.parametrize("command", ["validate", "rewrite", "run", "lock"])
@pytest.mark.parametrize("kind", list(UNNAMEABLE_PATHS))
@pytest.mark.parametrize("field", CONFIG_PATHS)
def test_config_paths_no_file_can_have(folder: Path, model: Path, command: str, kind: str, field: str) -> None:
    """A NUL (os.stat's ValueError) or a name over 255 bytes (ENAMETOOLONG, which Path.is_dir raises) in any path
    of a config ended in "internal error" in validate, rewrite, run, lock, explain and compare (issue 31)."""
    name, fragment = UNNAMEABLE_PATHS[kind]
    data: dict = {"model": str(model), "precision_mode": "allow_mix_precision", "run": {}}
    section, _, key = field.rpartition(".")
    (data["run"] if section else data)[key] = name
    config = folder / f"paths_{kind}_{field}.json"
    config.write_text(json.dumps(data), encoding="utf-8")
    out = folder / f"paths_{kind}_{field}.{command}.out"
    args: list[str | Path] = {
        "validate": ["validate", config],
        "rewrite": ["rewrite", "--config", config, *FAST] + ([] if field == "output" else ["-o", out]),
        "run": ["run", "--config", config, *FAST, *RUN_FAST],
        "lock": ["lock", "--config", config, "-o", out],
    }[command]
    result = invoke(args)
    message = result.stdout + _stderr(result)
    assert "\0" not in message, message  # shown escaped: a raw NUL garbles the terminal
    if field == "customize_dtypes":  # a value that is no file is read as the lines themselves
        assert result.exit_code in (1, 2) and "customize_dtypes" in message, message
    elif field in READ_BY[command]:
        assert result.exit_code in (1, 2), message
        assert fragment in message or "File name too long" in message, message  # the output guard: the OS's words
    else:  # a path this command does not use
        assert result.exit_code == 0, message


@pytest.mark.parametrize("command", ["rewrite", "run"])
def test_model_that_is_a_directory_or_a_device(folder: Path, command: str) -> None:
    directory = folder / "a_directory.onnx"
    directory.mkdir(exist_ok=True)
    assert_refused(invoke(command_args(command, directory, folder / "o.onnx")), str(directory), "is a directory")
    if Path("/dev/zero").exists():  # onnx.load would read it for ever
        assert_refused(invoke(command_args(command, Path("/dev/zero"), folder / "o.onnx")), "not a regular file")


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root reads any file")
@pytest.mark.parametrize("name", ["locked.onnx", "locked.yaml", "locked.npy"])
def test_unreadable_files(folder: Path, model: Path, name: str) -> None:
    locked = folder / name
    locked.write_bytes(b"x")
    locked.chmod(0)
    try:
        if name.endswith(".onnx"):
            args = command_args("rewrite", locked, folder / "o.onnx")
        elif name.endswith(".yaml"):
            args = [*command_args("rewrite", model, folder / "o.onnx"), "--config", locked]
        else:
            args = [*command_args("run", model, folder / "o.onnx"), "--input", f"x={locked}"]
        assert_refused(invoke(args), str(locked))
    finally:
        locked.chmod(0o600)


#: Files that are not models, given where the model goes (the arguments swapped): name -> (text, what it looks like).
NOT_MODELS = {
    "session.json": ('{"precision_mode": "force_fp16", "model": "model.onnx"}\n', "JSON"),
    "mixlist.json": ('{"black-list": {"to-add": ["Erf"]}}\n', "JSON"),
    "session.yaml": ("precision_mode: force_fp16\nmodel: model.onnx\n", "YAML"),
    "session.toml": ('precision_mode = "force_fp16"\n', "TOML"),
    "notes.textproto": ('precision_mode: "force_fp16"\nrun { shapes: 1 }\n', "the protobuf text of something else"),
    "notes.onnxtxt": ("hello, I am not a model\n", "text"),
    "keep_dtype.cfg": ("mm\nOpType::Softmax\n", "text"),
}


@pytest.mark.parametrize("command", MODEL_COMMANDS)
@pytest.mark.parametrize("name", list(NOT_MODELS))
def test_a_text_file_given_as_the_model(folder: Path, command: str, name: str) -> None:
    text, kind = NOT_MODELS[name]
    path = folder / name
    path.write_text(text)
    result = invoke(command_args(command, path, folder / "o.onnx"))
    assert_refused(result, f"{path}: not an ONNX model (it looks like {kind})")


@pytest.mark.parametrize("suffix", [".onnxtxt", ".textproto", ".json"])
def test_onnx_text_formats_are_still_models(folder: Path, suffix: str) -> None:
    """ONNX's own text and JSON serialisations are models: they are read, not refused as text."""
    path = folder / f"text_model{suffix}"
    onnx.save(small_model(), path, format={".onnxtxt": "onnxtxt", ".textproto": "textproto", ".json": "json"}[suffix])
    out = folder / f"text_model{suffix}.out.onnx"
    result = invoke(command_args("rewrite", path, out))
    assert result.exit_code == 0, _stderr(result)
    onnx.checker.check_model(onnx.load(out), full_check=True)


# ------------------------------------------------------------------------------------------------ shapes and memory
@pytest.mark.parametrize("command", ["run", "compare", "tune", "explain"])
@pytest.mark.parametrize("shape", ["x=100000000x64", "x=99999999999999999999x64"])
def test_huge_shape_is_refused_before_allocating(folder: Path, model: Path, command: str, shape: str) -> None:
    args = [*command_args(command, model, folder / "o.onnx"), "--shape", shape]
    if command == "explain":
        args.append("--range-check")  # explain generates inputs only to run the model
    name = shape.split("=")[0]
    assert_refused(invoke(args), f"generating input '{name}' of shape", "GiB", f"--shape {name}=")


def test_huge_shape_from_the_config_is_refused(folder: Path, model: Path) -> None:
    config = folder / "huge_shape.yaml"
    config.write_text(f"precision_mode: force_fp16\nmodel: {model}\nrun:\n  shapes: {{x: [100000000, 64]}}\n")
    # 6.4e9 float32 values, drawn as float64 first: 71.5 GiB while generating.
    assert_refused(invoke(["run", "--config", config, *FAST, *RUN_FAST]), "71.5 GiB", "run.shapes")


@pytest.mark.parametrize("shape", ["x=-1x64", "x=1x-64", "x=1x64x", "x=abc", "=1x64"])
def test_malformed_shapes_name_the_flag(model: Path, shape: str) -> None:
    assert_refused(invoke(["run", model, "-m", "force_fp16", *FAST, *RUN_FAST, "--shape", shape]), "--shape")


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (["--shape", "x=1x64", "--shape", "x=2x64"], "--shape x is given twice"),
        (["--inputs", "batch.npz", "--input", "x=x.npy"], "--inputs and --input are given together"),
    ],
)
@pytest.mark.parametrize("command", ["run", "compare"])
def test_input_options_given_twice_are_usage_errors(
    model: Path, command: str, options: list[str], fragment: str
) -> None:
    """They were accepted silently: the last --shape won, and --input quietly overrode the archive."""
    result = invoke([command, model, "-m", "force_fp16", *FAST, *options, "--json"])
    assert_refused(result, fragment)
    assert json.loads(result.stdout)["error"]["message"].startswith(fragment)


# ------------------------------------------------------------------------------------------------ array files
def _npy_bytes(array: np.ndarray) -> bytes:
    path_like = __import__("io").BytesIO()
    np.save(path_like, array)
    return path_like.getvalue()


def _npy_header_only(shape: tuple[int, ...]) -> bytes:
    """A valid .npy header declaring ``shape`` float32, followed by 16 bytes of data."""
    buffer = __import__("io").BytesIO()
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + b"\0" * 16


NPY_CASES = {
    "empty": (b"", "not a .npy array"),
    "not_npy": (b"hello, this is text\n" * 10, "not a .npy array"),
    "huge_header": (_npy_header_only((100_000_000_000, 64)), "the file is truncated or damaged"),
    "truncated": (_npy_bytes(np.zeros((2, 64), np.float32))[:-100], "the file is truncated or damaged"),
    "pickled_objects": (None, "holds Python objects"),
    "complex_values": (_npy_bytes(np.zeros((2, 64), np.complex64)), "is complex64 but the model expects float32"),
    "strings": (_npy_bytes(np.full((2, 64), "a")), "is <U1 but the model expects float32"),
    "wrong_rank": (_npy_bytes(np.zeros((2, 64, 1), np.float32)), "has shape [2, 64, 1] but the model expects rank 2"),
    "wrong_dim": (_npy_bytes(np.zeros((2, 3), np.float32)), "has 3 at axis 1; the model fixes it to 64"),
}


@pytest.mark.parametrize("case", list(NPY_CASES))
def test_bad_npy_input(folder: Path, model: Path, case: str) -> None:
    content, fragment = NPY_CASES[case]
    path = folder / f"{case}.npy"
    if content is None:
        np.save(path, np.array([None, 1], dtype=object), allow_pickle=True)
    else:
        path.write_bytes(content)
    args = ["run", model, "-m", "force_fp16", *FAST, *RUN_FAST, "--input", f"x={path}"]
    assert_refused(invoke(args), str(path), "--input x", fragment)


def _npz(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("empty", "as a .npz archive"),
        ("member_not_npy", "member 'x.npy': not a .npy array"),
        ("member_truncated", "member 'x.npy': the header declares a 100000000000x64 float32 array"),
        ("member_objects", "holds Python objects"),
        ("truncated_archive", "as a .npz archive"),
    ],
)
def test_bad_npz_inputs(folder: Path, model: Path, case: str, fragment: str) -> None:
    path = folder / f"{case}.npz"
    if case == "empty":
        path.write_bytes(b"")
    elif case == "member_not_npy":
        _npz(path, {"x.npy": b"not an array"})
    elif case == "member_truncated":
        _npz(path, {"x.npy": _npy_header_only((100_000_000_000, 64))})
    elif case == "member_objects":
        np.savez(path, x=np.array([None], dtype=object))
    else:
        np.savez(path, x=np.zeros((2, 64), np.float32))
        path.write_bytes(path.read_bytes()[:-40])
    args = ["run", model, "-m", "force_fp16", *FAST, *RUN_FAST, "--inputs", path]
    assert_refused(invoke(args), str(path), fragment)


def _npz_bytes(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


#: A Polygraphy data set (.json) whose input ``x`` holds these bytes as ``{"array": base64}``.
POLYGRAPHY_CASES = {
    "zip_magic_only": (b"PK\x03\x04 and then no archive", "not a .npy array"),  # was BadZipFile
    "empty_npz": (_npz_bytes(), "a .npz archive of 0 arrays"),  # was StopIteration
    "two_array_npz": (_npz_bytes(a=np.zeros((1, 64), np.float32), b=np.ones((1, 64), np.float32)), "of 2 arrays"),
    "huge_header": (_npy_header_only((100_000_000_000, 64)), "the file is truncated or damaged"),  # was MemoryError
    "npz_huge_member": (None, "member 'x.npy': the header declares"),
}


@pytest.mark.parametrize("command", ["run", "compare", "explain", "tune"])
@pytest.mark.parametrize("case", [*POLYGRAPHY_CASES, "deep"])
def test_bad_polygraphy_data_sets(folder: Path, model: Path, command: str, case: str) -> None:
    path = folder / f"polygraphy_{case}.json"
    if case == "deep":  # was RecursionError in json.loads
        path.write_text("[" * 5000 + "]" * 5000, encoding="utf-8")
        fragment = "nesting too deep"
    else:
        content, fragment = POLYGRAPHY_CASES[case]
        if content is None:
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w") as archive:
                archive.writestr("x.npy", _npy_header_only((100_000_000_000, 64)))
            content = buffer.getvalue()
        feed = {"x": {"array": base64.b64encode(content).decode("ascii")}}
        path.write_text(json.dumps([feed]), encoding="utf-8")
    args = [*command_args(command, model, folder / f"{case}.{command}.out"), "--data", path]
    assert_refused(invoke(args), str(path), fragment)


# ------------------------------------------------------------------------------------------------ kernel table
@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("binary", "not UTF-8 text"),
        ("latin1", "not UTF-8 text"),
        ("empty", "no CUDAExecutionProvider section in the kernel table"),
        ("directory", "is a directory"),
        ("missing", "kernel table not found"),
    ],
)
def test_import_table_refuses_what_is_not_a_kernel_table(folder: Path, case: str, fragment: str) -> None:
    table = folder / f"table_{case}.md"
    if case == "binary":
        table.write_bytes(bytes(range(256)) * 20)
    elif case == "latin1":
        table.write_bytes("| Op | café |\n".encode("latin-1"))
    elif case == "empty":
        table.write_bytes(b"")
    elif case == "directory":
        table.mkdir(exist_ok=True)
    out = folder / f"oi_{case}.json"
    assert_refused(invoke(["ops-info", "import-table", table, "--target", "cuda", "-o", out]), str(table), fragment)
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ option values
FLOAT_VALUES = ["-1", "0", "nan", "inf", "-inf"]


@pytest.mark.parametrize("value", FLOAT_VALUES)
@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("run", "--tolerance"),
        ("compare", "--tolerance"),
        ("tune", "--tolerance"),
        ("explain", "--threshold"),
        ("compare", "--threshold"),
        ("tune", "--max-seconds"),
        ("explain", "--data-max"),
        ("compare", "--data-max"),
        ("tune", "--data-max"),
    ],
)
def test_float_options_must_be_finite_and_positive(
    folder: Path, model: Path, command: str, flag: str, value: str
) -> None:
    result = invoke([*command_args(command, model, folder / "o.onnx"), f"{flag}={value}"])
    assert_refused(result, f"{flag} must be a finite number greater than 0")


@pytest.mark.parametrize(
    ("command", "flag", "value"),
    [
        ("run", "--warmup", "-1"),
        ("run", "--warmup", "100000000000000000000"),
        ("run", "--iterations", "0"),
        ("run", "--iterations", "100000000000000000000"),
        ("run", "--seed", "-1"),
        ("run", "--seed", str(2**32)),
        ("compare", "--seed", "-5"),
        ("tune", "--max-runs", "3"),
        ("tune", "--max-runs", "100000000000000000000"),
    ],
)
def test_count_options_must_be_in_range(folder: Path, model: Path, command: str, flag: str, value: str) -> None:
    args = [a for a in command_args(command, model, folder / "o.onnx") if a not in RUN_FAST]
    assert_refused(invoke([*args, f"{flag}={value}"]), f"{flag} must be between")


def test_import_table_opset_must_be_positive(folder: Path) -> None:
    table = folder / "table_for_opset.md"
    table.write_text("# kernels\n")
    assert_refused(invoke(["ops-info", "import-table", table, "--opset", "0", "-o", folder / "x.json"]), "--opset")


@pytest.mark.parametrize(
    ("setting", "json_path", "fragment"),
    [
        ("tolerance:\n  rel_l2: .inf\n", "$.tolerance.rel_l2", "finite number"),
        ("tolerance:\n  rel_l2: .nan\n", "$.tolerance.rel_l2", "finite number"),
        ("tolerance:\n  rel_l2: 0.0\n", "$.tolerance.rel_l2", "greater than 0"),
        ("tolerance:\n  rel_l2: -1.0\n", "$.tolerance.rel_l2", "greater than 0"),
        ("tolerance:\n  max_abs: .inf\n", "$.tolerance.max_abs", "finite number"),
        ("tolerance:\n  min_cosine: .nan\n", "$.tolerance.min_cosine", "finite number"),
        ("run:\n  warmup: 1000000000000\n", "$.run.warmup", "less than or equal to 10000"),
        ("run:\n  iterations: 1000000000000\n", "$.run.iterations", "less than or equal to 100000"),
        ("run:\n  seed: 1099511627776\n", "$.run.seed", "less than or equal to 4294967295"),
    ],
)
def test_config_values_are_validated_with_their_json_path(
    folder: Path, model: Path, setting: str, json_path: str, fragment: str
) -> None:
    config = folder / "values.yaml"
    config.write_text("precision_mode: force_fp16\n" + setting)
    assert_refused(invoke(["run", model, "--config", config, *FAST, *RUN_FAST]), json_path, fragment)
    checked = invoke(["validate", config])
    assert checked.exit_code == 1 and json_path in checked.stdout and fragment in checked.stdout


# ------------------------------------------------------------------------- FIFOs, sockets, devices (issue 31)
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


@contextlib.contextmanager
def unblocked(*fifos: Path, grace_s: float = 3.0) -> Iterator[None]:
    """While the block runs, a reader that opened one of ``fifos`` (what ampconfig must never do) is let go after
    ``grace_s``: the FIFO is opened for writing and closed, so the reader sees an empty file and the test fails on
    its assertions instead of hanging for ever."""
    stop = threading.Event()

    def release() -> None:
        if stop.wait(grace_s):
            return
        while not stop.wait(0.1):
            for fifo in fifos:
                with contextlib.suppress(OSError):  # ENXIO: nobody is reading, as it should be
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def fifo(folder: Path, name: str) -> Path:
    path = folder / "fifos" / name
    path.parent.mkdir(exist_ok=True)
    if not path.exists():
        os.mkfifo(path)
    return path


#: Every option that names a file ampconfig reads, with the file's name (its suffix picks how it is read).
FIFO_OPTIONS = {
    "--config": ("c.yaml", "rewrite"),
    "--modify-mixlist": ("mixlist.json", "rewrite"),
    "--keep-dtype": ("keep.cfg", "rewrite"),
    "--customize-dtypes": ("customize.cfg", "rewrite"),
    "--input": ("x.npy", "run"),
    "--inputs": ("inputs.npz", "run"),
    "--data": ("samples.json", "run"),
    "--calibration-data": ("samples.npz", "run"),
    "--ranges": ("ranges.json", "rewrite"),
}


@needs_fifo
@pytest.mark.parametrize("option", list(FIFO_OPTIONS))
def test_a_fifo_given_for_a_file_is_refused_unopened(folder: Path, model: Path, option: str) -> None:
    name, command = FIFO_OPTIONS[option]
    path = fifo(folder, name)
    value = f"x={path}" if option == "--input" else str(path)
    mode = "allow_mix_precision" if option == "--modify-mixlist" else "force_fp16"
    args = [*command_args(command, model, folder / "fifo_out.onnx"), option, value]
    args[args.index("force_fp16")] = mode
    with unblocked(path):
        assert_refused(invoke(args), str(path), "not a regular file")


@needs_fifo
@pytest.mark.parametrize("command", ["rewrite", "run"])
def test_a_model_that_is_a_fifo_is_refused_unopened(folder: Path, command: str) -> None:
    path = fifo(folder, "model.onnx")
    with unblocked(path):
        assert_refused(invoke(command_args(command, path, folder / "o.onnx")), str(path), "not a regular file")


@needs_fifo
@pytest.mark.parametrize(
    "args",
    [
        ["validate", "{}"],
        ["lock", "--check", "{}"],
        ["ops-info", "import-table", "{}", "-o", "oi.json"],
        ["ops-info", "import-kernels", "{}", "-o", "oi.json"],
        ["ops-info", "import-ascend", "{}", "-o", "oi.json"],
    ],
    ids=lambda args: " ".join(word for word in args if word != "{}"),
)
def test_other_commands_refuse_a_fifo_unopened(folder: Path, args: list[str]) -> None:
    path = fifo(folder, "document.lock.json" if "lock" in args else "document.json")
    given = [str(path) if word == "{}" else str(folder / word) if word == "oi.json" else word for word in args]
    with unblocked(path):
        result = invoke(given)
    assert result.exit_code == 2, (result.stdout, _stderr(result))
    assert "not a regular file" in result.stdout + _stderr(result)


@pytest.mark.skipif(not (hasattr(socket, "AF_UNIX") and Path("/dev/null").exists()), reason="POSIX")
def test_a_socket_or_a_device_given_for_a_file_is_refused(folder: Path, model: Path, tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(tmp_path / "c.yaml"))
        for option, path in (("--config", tmp_path / "c.yaml"), ("--keep-dtype", Path("/dev/null"))):
            args = [*command_args("rewrite", model, folder / "o.onnx"), option, path]
            assert_refused(invoke(args), str(path), "not a regular file")
    finally:
        listener.close()


@needs_fifo
def test_the_lock_hook_skips_a_fifo_named_like_a_lock(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's hang: `validate --touched` read every *.lock.json under the folder, a FIFO too, and waited for a
    writer for ever. Now it is skipped with a warning, touched or not, and the real locks are still checked."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.onnx").write_bytes(model.read_bytes())
    assert invoke(["lock", "model.onnx", "-m", "force_fp16", *FAST, "-o", "real.lock.json"]).exit_code == 0
    path = tmp_path / "sub" / "pipe.lock.json"
    path.parent.mkdir()
    os.mkfifo(path)
    with unblocked(path):
        result = invoke(["validate", "--touched", "model.onnx", "sub/pipe.lock.json"])
    assert result.exit_code == 0, (result.stdout, _stderr(result))
    assert f"skipped {path}" in _stderr(result) and "not a regular file" in _stderr(result)
    assert result.stdout.startswith("1 file checked")  # real.lock.json, which records the model, and not the FIFO


@needs_fifo
def test_a_fifo_in_a_data_folder_is_skipped_with_a_warning(folder: Path, model: Path, tmp_path: Path) -> None:
    samples = tmp_path / "samples"
    samples.mkdir()
    for index in range(2):
        np.savez(samples / f"s{index}.npz", x=np.full((1, 64), index, np.float32))
    os.mkfifo(samples / "s2.npz")
    with unblocked(samples / "s2.npz"):
        result = invoke([*command_args("run", model, folder / "o.onnx"), "--data", samples, "--json"])
    assert result.exit_code == 0, _stderr(result)
    assert f"skipped {samples / 's2.npz'}: not a regular file" in _stderr(result)
    assert json.loads(result.stdout)["samples"] == 2


# ------------------------------------------------------------------------------- value ranges files (issue 28)
def _ranges_of(folder: Path, model: Path) -> dict:
    """A valid ranges file of ``model`` (made by calibrate), as data to spoil."""
    made = folder / "made.ranges.json"
    if not made.exists():
        result = invoke(["calibrate", model, "-o", made])
        assert result.exit_code == 0, result.stdout + _stderr(result)
    return json.loads(made.read_text(encoding="utf-8"))


def _spoiled(data: dict, case: str) -> str:
    value = next(iter(data["values"]))
    if case == "empty":
        return ""
    if case == "truncated":
        return json.dumps(data)[:120]
    if case == "not an object":
        return "[1, 2]"
    if case == "no format":
        return json.dumps({key: item for key, item in data.items() if key != "format"})
    if case == "version true":
        return json.dumps({**data, "format_version": True})
    if case == "newer version":
        return json.dumps({**data, "format_version": RANGES_FORMAT_VERSION + 1})
    if case == "exponent beyond float32":
        data["values"][value]["exponents"]["200"] = 1
        return json.dumps(data)
    if case == "exponent not a number":
        data["values"][value]["exponents"]["-1.5"] = 1
        return json.dumps(data)
    if case == "exponent count zero":
        data["values"][value]["exponents"]["0"] = 0
        return json.dumps(data)
    if case == "histogram a list":
        data["values"][value]["exponents"] = [[0, 1]]
        return json.dumps(data)
    if case == "version 2 without zeros":
        del data["values"][value]["zeros"]
        return json.dumps(data)
    if case == "version 2 without weights":
        del data["model"]["weights_sha256"]
        return json.dumps(data)
    if case == "count is a boolean":
        data["values"][value]["nonfinite"] = True
        return json.dumps(data)
    if case == "peak is a string":
        data["values"][value]["max_abs"] = "12"
        return json.dumps(data)
    if case == "negative peak":
        data["values"][value]["max_abs"] = -1.0
        return json.dumps(data)
    if case == "unknown key":
        return json.dumps({**data, "extra": 1})
    if case == "repeated key":
        text = json.dumps(data)
        return text.replace('"device":', '"device": "cpu", "device":', 1)
    if case == "deep nesting":
        return "[" * 10_000 + "]" * 10_000
    raise AssertionError(case)


RANGES_CASES = [
    "empty", "truncated", "not an object", "no format", "version true", "newer version", "count is a boolean",
    "peak is a string", "negative peak", "unknown key", "repeated key", "deep nesting", "exponent beyond float32",
    "exponent not a number", "exponent count zero", "histogram a list", "version 2 without zeros",
    "version 2 without weights",
]  # fmt: skip


@pytest.mark.parametrize("case", RANGES_CASES)
@pytest.mark.parametrize("command", ["rewrite", "lock", "explain"])
def test_a_bad_ranges_file_is_a_located_error_and_nothing_is_written(
    folder: Path, model: Path, case: str, command: str
) -> None:
    path = folder / f"bad-{case.replace(' ', '_')}.ranges.json"
    path.write_text(_spoiled(_ranges_of(folder, model), case), encoding="utf-8")
    out = folder / f"bad-ranges-{command}.out"
    args: list[str | Path] = {
        "rewrite": ["rewrite", model, "-o", out],
        "lock": ["lock", model, "-o", out],
        "explain": ["explain", model],
    }[command]
    refused = invoke([*args, "--ranges", path])
    assert_refused(refused, str(path))
    assert not out.exists()
    assert invoke(["validate", path]).exit_code != 0
    if case == "newer version":
        assert "written by a newer ampconfig" in _stderr(refused)


def test_a_huge_ranges_file_is_refused_before_it_is_read(folder: Path, model: Path) -> None:
    path = folder / "huge.ranges.json"
    with path.open("wb") as handle:
        handle.truncate(MAX_RANGES_BYTES + 1)
    assert_refused(invoke(["rewrite", model, "-o", folder / "huge.out", "--ranges", path]), str(path))


@pytest.mark.parametrize("kind", list(UNNAMEABLE_PATHS))
def test_a_ranges_path_no_file_can_have(folder: Path, model: Path, kind: str) -> None:
    """From a config (a command line cannot carry a NUL), a ranges path no file can have is located."""
    name, fragment = UNNAMEABLE_PATHS[kind]
    config = folder / f"ranges_{kind}.json"
    config.write_text(json.dumps({"model": str(model), "ranges": name}), encoding="utf-8")
    out = folder / "unnameable.out"
    result = invoke(["rewrite", "--config", config, "-o", out])
    assert result.exit_code == 2
    assert fragment in _stderr(result) or "File name too long" in _stderr(result), _stderr(result)
    assert not out.exists()


def test_calibrate_never_writes_over_an_input_and_keeps_an_existing_file_on_failure(folder: Path, model: Path) -> None:
    before = model.read_bytes()
    assert_refused(invoke(["calibrate", model, "-o", model]), str(model))
    assert model.read_bytes() == before
    kept = folder / "kept.ranges.json"
    kept.write_text("previous", encoding="utf-8")
    missing = folder / "no-such-inputs.npz"
    assert_refused(invoke(["calibrate", model, "--inputs", missing, "-o", kept]), str(missing))
    assert kept.read_text(encoding="utf-8") == "previous"


# --------------------------------------------------------------------- shards and ranges merge (issue 36)
@pytest.fixture(scope="module")
def shards(folder: Path, model: Path) -> tuple[Path, Path, Path]:
    """Shards 1 and 2 of 2 of a data set of three samples, and the same model's whole-set ranges."""
    data = folder / "shard_samples"
    data.mkdir()
    for index in range(3):
        np.savez(data / f"s{index}.npz", x=np.full((1, 64), index + 1, np.float32))
    made = []
    for name, extra in (("s1", ["--shard", "1/2"]), ("s2", ["--shard", "2/2"]), ("whole", [])):
        path = folder / f"{name}.ranges.json"
        result = invoke(["calibrate", model, "--calibration-data", data, *extra, "-o", path])
        assert result.exit_code == 0, _stderr(result)
        made.append(path)
    return made[0], made[1], made[2]


@pytest.mark.parametrize("shard", ["0/2", "3/2", "1/0", "x/2", "1/2/3", "-1/2", "", "1/" + "9" * 30, "1/200000"])
def test_a_bad_shard_is_refused_naming_the_flag(folder: Path, model: Path, shard: str) -> None:
    out = folder / "bad-shard.json"
    result = invoke(["calibrate", model, "--calibration-data", folder / "shard_samples", "--shard", shard, "-o", out])
    assert_refused(result, "--shard")
    assert not out.exists()


def test_shards_need_data(folder: Path, model: Path) -> None:
    out = folder / "generated-shard.json"
    assert_refused(invoke(["calibrate", model, "--shard", "1/2", "-o", out]), "shards need data")
    assert not out.exists()


def _merged(paths: Sequence[Path | str], out: Path) -> Result:
    return invoke(["ranges", "merge", *paths, "-o", out])


@pytest.mark.parametrize(
    "case",
    ["empty", "truncated", "deep nesting", "not a shard", "version 1", "other weights", "other device",
     "twice", "missing", "wrong count", "no such file", "a folder", "a fifo", "nul", "too long"],
)  # fmt: skip
def test_a_hostile_merge_is_a_located_error_and_writes_nothing(
    folder: Path, shards: tuple[Path, Path, Path], case: str
) -> None:
    first, second, whole = shards
    spoilt = folder / f"merge-{case.replace(' ', '_')}.json"
    data = json.loads(second.read_text(encoding="utf-8"))
    given: list[Path | str] = [first, spoilt]
    if case == "empty":
        spoilt.write_text("", encoding="utf-8")
    elif case == "truncated":
        spoilt.write_text(second.read_text(encoding="utf-8")[:200], encoding="utf-8")
    elif case == "deep nesting":
        spoilt.write_text("[" * 10_000 + "]" * 10_000, encoding="utf-8")
    elif case == "not a shard":
        given = [first, whole]
    elif case == "version 1":
        data["format_version"] = 1
        del data["model"]["weights_sha256"]
        for value in data["values"].values():
            del value["zeros"], value["exponents"]
        spoilt.write_text(json.dumps(data), encoding="utf-8")
    elif case in ("other weights", "other device", "wrong count"):
        key, field, value = {
            "other weights": ("model", "weights_sha256", "0" * 64),
            "other device": (None, "device", "cuda"),
            "wrong count": ("data", "shard", {"index": 2, "count": 3, "files": 3}),
        }[case]
        (data[key] if key else data)[field] = value
        spoilt.write_text(json.dumps(data), encoding="utf-8")
    elif case == "twice":
        given = [first, first, second]
    elif case == "missing":
        given = [first]
    elif case == "no such file":
        given = [first, folder / "no-such-shard.json"]
    elif case == "a folder":
        given = [first, folder]
    elif case == "a fifo":
        fifo = folder / "shard.fifo"
        if not fifo.exists():
            os.mkfifo(fifo)
        given = [first, fifo]
    elif case in ("nul", "too long"):
        given = [first, UNNAMEABLE_PATHS["nul" if case == "nul" else "too_long"][0]]
    out = folder / f"merged-{case.replace(' ', '_')}.json"
    result = _merged(given, out)
    assert result.exit_code == 2, (case, _stderr(result))
    assert not out.exists()
    assert "error" in _stderr(result)


def test_merge_never_writes_over_a_shard(folder: Path, shards: tuple[Path, Path, Path]) -> None:
    first, second, _ = shards
    before = second.read_bytes()
    assert_refused(_merged([first, second], second), str(second))
    assert second.read_bytes() == before


def test_the_merged_shards_equal_the_whole(folder: Path, shards: tuple[Path, Path, Path]) -> None:
    first, second, whole = shards
    out = folder / "merged.ranges.json"
    assert _merged([second, first], out).exit_code == 0
    merged = json.loads(out.read_text(encoding="utf-8"))
    assert merged["values"] == json.loads(whole.read_text(encoding="utf-8"))["values"]
    assert merged["data"]["samples"] == 3 and [s["index"] for s in merged["data"]["shards"]] == [1, 2]


# ------------------------------------------------------------------------------------ STRING inputs (issue 35)
@pytest.fixture(scope="module")
def phoneme_models(folder: Path) -> dict[int, Path]:
    """A phoneme model taking STRING [frames] (rank 1) and one taking [batch, frames] (rank 2)."""
    paths = {}
    for rank in (1, 2):
        paths[rank] = folder / f"phonemes_rank{rank}.onnx"
        onnx.save(phoneme_model(rank=rank), paths[rank])
    return paths


def _text_file(folder: Path, case: str) -> Path:
    """The hostile file of ``case`` for ``--input phs=...``."""
    path = folder / "strings" / f"{case}.txt"
    path.parent.mkdir(exist_ok=True)
    if case == "directory":
        path.mkdir(exist_ok=True)
    elif case == "fifo":
        if not path.exists():
            os.mkfifo(path)
    elif case == "huge":
        with path.open("wb") as handle:
            handle.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: 4 MiB of NULs that are never read
    else:
        path.write_bytes(TEXT_CASES[case][0])
    return path


#: A text file for a STRING input: its bytes (None: made by _text_file), the model's rank, and the refusal.
TEXT_CASES: dict[str, tuple[bytes | None, int, str]] = {
    "empty": (b"", 1, "the text file is empty"),
    "huge": (None, 1, "is too large"),
    "not_utf8": (b"SP\nsh\n\xc3\x28\n", 1, "not UTF-8 text: byte 0xc3 at line 3"),
    "nul": (b"SP\nAP\x00\n", 1, "holds a NUL byte at line 2"),
    "fifo": (None, 1, "not a regular file"),
    "directory": (None, 1, "is a directory"),
    "wrong_rank": (b"SP\nAP\n", 2, "a text file gives a rank-1 input (one string a line), but input 'phs' has rank 2"),
    # issue 44: on main "holds a NUL byte at line 1: is it a binary file?"
    "utf16": ("SP\nAP\n".encode("utf-16"), 1, "is UTF-16 text (it starts with a UTF-16 byte-order mark)"),
    "utf32": ("SP\nAP\n".encode("utf-32"), 1, "is UTF-32 text (it starts with a UTF-32 byte-order mark)"),
}


@pytest.mark.parametrize("case", list(TEXT_CASES))
def test_hostile_text_files_for_a_string_input_are_located_and_write_nothing(
    folder: Path, phoneme_models: dict[int, Path], case: str
) -> None:
    if case == "fifo" and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    _, rank, fragment = TEXT_CASES[case]
    path = _text_file(folder, case)
    out = folder / "strings" / f"{case}.out.onnx"
    args = ["run", phoneme_models[rank], "-m", "force_fp16", *RUN_FAST, "--input", f"phs={path}", "--output", out]
    with unblocked(path) if case == "fifo" else contextlib.nullcontext():
        result = invoke(args)
    assert_refused(result, str(path), "--input phs", fragment)
    assert not out.exists()


def _npy_of(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=array.dtype.hasobject)
    return buffer.getvalue()


#: Arrays for a STRING input that ampconfig must refuse (a pickle it never loads, what ONNX Runtime would misread),
#: each with the refusal and, for the pickle, the advice to save text.
STRING_ARRAY_CASES = {
    "objects": (np.array([["SP", "AP"]], dtype=object), "holds Python objects", "array.astype(str)"),
    "bytes_not_utf8": (np.array([[b"SP", b"\xff"]]), "holds bytes that are not UTF-8 at index [0, 1]", None),
    "nul_inside": (np.array([["SP", "A\x00P"]]), "holds a NUL character in a string at index [0, 1]", None),
    "numbers": (np.array([[1, 2]], dtype=np.int64), "is int64 but the model expects strings", "astype(str)"),
}


@pytest.mark.parametrize("how", ["--inputs", "--input", "--data", "json"])
@pytest.mark.parametrize("case", list(STRING_ARRAY_CASES))
def test_string_arrays_that_cannot_be_fed_are_located(
    folder: Path, phoneme_models: dict[int, Path], case: str, how: str
) -> None:
    array, fragment, hint = STRING_ARRAY_CASES[case]
    base = folder / "string_arrays" / f"{case}_{how.strip('-')}"
    base.parent.mkdir(exist_ok=True)
    if how == "--inputs":
        path = base.with_suffix(".npz")
        _npz(path, {"phs.npy": _npy_of(array)})
        option = ["--inputs", path]
    elif how == "--input":
        path = base.with_suffix(".npy")
        path.write_bytes(_npy_of(array))
        option = ["--input", f"phs={path}"]
    elif how == "--data":
        base.mkdir(exist_ok=True)
        _npz(base / "0.npz", {"phs.npy": _npy_of(array)})
        path, option = base, ["--data", base]
    else:
        path = base.with_suffix(".json")
        feed = {"phs": {"array": base64.b64encode(_npy_of(array)).decode("ascii")}}
        path.write_text(json.dumps([feed]), encoding="utf-8")
        option = ["--data", path]
    out = base.with_suffix(".out.onnx")
    result = invoke(["run", phoneme_models[2], "-m", "force_fp16", *RUN_FAST, *option, "--output", out])
    assert_refused(result, str(path), fragment)
    if hint is not None:
        assert hint in _stderr(result)
    assert not out.exists()


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ([["SP", 3]], "not a rectangular array of strings: int found at index [0, 1]"),
        ([["SP"], ["AP", "a"]], "not a rectangular array of strings"),
        ([["SP", "A\u0000P"]], "holds a NUL character in a string at index [0, 1]"),
    ],
    ids=["a_number", "ragged", "nul"],
)
def test_plain_json_strings_are_checked_like_arrays(
    folder: Path, phoneme_models: dict[int, Path], value: list, fragment: str
) -> None:
    path = folder / f"plain_strings_{len(str(value))}.json"
    path.write_text(json.dumps([{"phs": value}]), encoding="utf-8")
    result = invoke(["run", phoneme_models[2], "-m", "force_fp16", *RUN_FAST, "--data", path])
    assert_refused(result, str(path), fragment)


def test_a_string_input_nothing_can_generate_is_exit_2_naming_it(folder: Path) -> None:
    path = folder / "normalized_phonemes.onnx"
    onnx.save(normalized_phoneme_model(), path)
    out = folder / "normalized.out.onnx"
    result = invoke(["run", path, "-m", "force_fp16", *RUN_FAST, "--output", out])
    assert_refused(result, "input 'phs' takes strings", "--inputs FILE.npz", "--input phs=FILE.txt")
    assert not out.exists()


def test_a_text_file_for_a_numeric_input_is_refused(folder: Path, model: Path) -> None:
    path = folder / "numbers.txt"
    path.write_text("1\n2\n", encoding="utf-8")
    result = invoke(["run", model, "-m", "force_fp16", *RUN_FAST, "--input", f"x={path}"])
    assert_refused(result, str(path), "a text file gives strings, one a line, but input 'x' is float")


# ------------------------------------------------------------------------ the small edges of round five (issue 44)
@pytest.mark.parametrize(
    ("flag", "value", "fragment"),
    [
        ("--shard", "\uff11/\uff12", "ASCII digits"),  # fullwidth 1/2: accepted on main (str.isdigit)
        ("--shape", "x=\uff11x\uff16\uff14", "whole numbers in ASCII digits"),  # accepted on main (\\d)
        ("--seed", "\uff11\uff12", "--seed"),
        ("--seed", "\u0663", "--seed"),  # ARABIC-INDIC DIGIT THREE
        ("--data-max", "\uff11.\uff15", "--data-max"),
    ],
)
def test_numbers_on_the_command_line_take_ascii_digits_only(
    folder: Path, model: Path, shards: tuple[Path, Path, Path], flag: str, value: str, fragment: str
) -> None:
    out = folder / "fullwidth.ranges.json"
    data = ["--calibration-data", folder / "shard_samples"] if flag == "--shard" else []
    result = invoke(["rewrite" if flag == "--data-max" else "calibrate", model, *data, flag, value, "-o", out])
    assert_refused(result, flag, fragment)
    assert not out.exists()


def test_a_utf16_document_is_refused_by_its_encoding_not_as_binary(folder: Path, model: Path) -> None:
    """On main: "not UTF-8 text: byte 0xff at line 1" for the file, "binary data" from validate's sniffing."""
    mixlist = folder / "utf16.mixlist.json"
    mixlist.write_bytes(json.dumps({"black-list": {"to-add": ["Softmax"]}}).encode("utf-16"))
    out = folder / "utf16.out.onnx"
    result = invoke(["rewrite", model, "--modify-mixlist", mixlist, "-o", out])
    assert_refused(result, str(mixlist), "UTF-16 text", "save it as UTF-8")
    assert "binary" not in _stderr(result) and not out.exists()
    config = folder / "utf16.config.json"
    config.write_text(json.dumps({"model": str(model), "modify_mixlist": str(mixlist)}), encoding="utf-8")
    checked = invoke(["validate", config])
    assert checked.exit_code in (1, 2) and "UTF-16" in checked.stdout + _stderr(checked)
    assert "binary" not in checked.stdout + _stderr(checked)


def test_a_size_refusal_shows_sizes_that_differ(folder: Path, model: Path) -> None:
    """On main: "too large: 4.0 MiB; ampconfig reads files up to 4.0 MiB" for a file one byte over."""
    config = folder / "one-byte-over.json"
    with config.open("wb") as handle:
        handle.truncate(MAX_DOCUMENT_BYTES + 1)
    result = invoke(["rewrite", "--config", config, "-o", folder / "over.onnx"])
    assert_refused(result, "too large: 4,194,305 bytes (4.0 MiB)", "up to 4,194,304 bytes (4.0 MiB)")


def test_a_malformed_exponent_key_is_refused_in_words(folder: Path, model: Path) -> None:
    """On main: "string should match pattern '^(0|-?[1-9][0-9]{0,2})$'", while 128 got a sentence."""
    data = _ranges_of(folder, model)
    value = next(iter(data["values"]))
    data["values"][value]["exponents"]["+01"] = 1
    path = folder / "plus-exponent.ranges.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    result = invoke(["explain", model, "--ranges", path])
    assert_refused(result, str(path), "a binary exponent: a whole number in ASCII digits from -149 to 127")
    assert "^(" not in _stderr(result)


def test_a_text_file_with_cr_only_line_ends_runs_as_lines_and_says_so(
    folder: Path, phoneme_models: dict[int, Path]
) -> None:
    """On main the whole file was one string holding the CRs, run without a word."""
    path = folder / "strings" / "cr_only.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"SP\rAP\rSP\r")
    result = invoke(["run", phoneme_models[1], "-m", "force_fp16", *RUN_FAST, "--input", f"phs={path}", "--json"])
    assert result.exit_code == 0, _stderr(result)
    payload = json.loads(result.stdout)
    assert any("ends its lines with CR alone" in line for line in payload["warnings"] + payload.get("notes", []))
    assert [item["shape"] for item in payload["inputs"] if item["name"] == "phs"] == [[3]]
