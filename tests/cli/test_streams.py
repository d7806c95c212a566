"""Issue 18, "streams are streams": an output that is standard output (``-o -``, ``-o /dev/stdout``, the file or
pipe the shell connected) carries the model or report bytes alone, every other line going to stderr; a write error
on a stream (a full device, a reader that went away) is exit 2 with one located line, except that a report whose
reader went away ends quietly by SIGPIPE (141), as cat and grep end.

Everything here is about processes and file descriptors, so every case runs the real command in a subprocess.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper as oh

from tests.graphs import FLOAT, make_model, tensor, weight

needs_posix = pytest.mark.skipif(
    not (hasattr(signal, "SIGPIPE") and os.path.exists("/dev/full")), reason="needs SIGPIPE and /dev/full"
)
pytestmark = needs_posix


def ampconfig(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "ampconfig", *(str(arg) for arg in args)]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        oh.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    path = tmp_path / "m.onnx"
    onnx.save(make_model(nodes, [tensor("x", FLOAT, [2, 8])], [tensor("y", FLOAT, [2, 8])], [weight("w", 8, 8)]), path)
    return path


def assert_one_clean_error(stderr: bytes, *fragments: str) -> None:
    text = stderr.decode()
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, text
    assert "Traceback" not in text and "internal error" not in text, text
    for fragment in fragments:
        assert fragment in errors[0], (fragment, text)


def assert_model_bytes(data: bytes) -> None:
    written = onnx.load_from_string(data)
    onnx.checker.check_model(written, full_check=True)
    assert any(node.op_type == "Cast" for node in written.graph.node)


@pytest.mark.parametrize("spelling", ["-", "/dev/stdout"])
def test_a_model_written_to_stdout_is_alone_on_it(model: Path, spelling: str) -> None:
    done = subprocess.run(ampconfig("rewrite", model, "-m", "force_fp16", "-o", spelling), capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    assert_model_bytes(done.stdout)  # `ampconfig rewrite m.onnx -o /dev/stdout | cat > x.onnx` gives a model
    assert "wrote <stdout>" in done.stderr.decode() or "wrote /dev/stdout" in done.stderr.decode()
    assert "nodes computing in float16" in done.stderr.decode()  # the summary table went to stderr


def test_the_json_object_goes_to_stderr_when_the_model_takes_stdout(model: Path, tmp_path: Path) -> None:
    """stdout redirected to a file (`> x.onnx`) and `-o /dev/stdout`: the file holds the model, nothing else."""
    target = tmp_path / "x.onnx"
    with target.open("wb") as stdout:
        done = subprocess.run(
            ampconfig("rewrite", model, "-m", "force_fp16", "-o", "/dev/stdout", "--json"),
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
    assert done.returncode == 0, done.stderr.decode()
    assert_model_bytes(target.read_bytes())
    text = done.stderr.decode()
    report = json.loads(text[text.index("{") : text.rindex("}") + 1])
    assert report["nodes_by_dtype"] == {"float16": 2}


def test_run_and_explain_streams_keep_their_reports_apart(model: Path) -> None:
    run = subprocess.run(
        ampconfig("run", model, "-m", "force_fp16", "--warmup", "0", "--iterations", "1", "-o", "-", "--json"),
        capture_output=True,
    )
    assert run.returncode == 0, run.stderr.decode()
    assert_model_bytes(run.stdout)
    assert '"passed": true' in run.stderr.decode()
    explain = subprocess.run(ampconfig("explain", model, "-m", "force_fp16", "--html", "-"), capture_output=True)
    assert explain.returncode == 0, explain.stderr.decode()
    html = explain.stdout.decode()
    assert html.lstrip().lower().startswith("<!doctype html") and html.rstrip().endswith("</html>")
    assert "decisions" in explain.stderr.decode()  # the node table went to stderr


def test_stdout_that_is_an_input_is_refused(model: Path) -> None:
    """`ampconfig rewrite m.onnx -o - >> m.onnx`: standard output is the model file, which is never overwritten."""
    before = model.read_bytes()
    with model.open("ab") as stdout:
        done = subprocess.run(ampconfig("rewrite", model, "-o", "-"), stdout=stdout, stderr=subprocess.PIPE)
    assert done.returncode == 2
    assert_one_clean_error(done.stderr, "refusing to overwrite the input model", "<stdout>")
    assert model.read_bytes() == before


@pytest.mark.parametrize(
    "command",
    [
        ("lists", "--json"),
        ("lists",),
        ("validate", "--format", "json", "{mixlist}"),
        ("rewrite", "{model}", "-m", "force_fp16", "-o", "{out}", "--json"),
    ],
)
def test_a_full_disk_on_stdout_is_one_located_line_and_exit_2(model: Path, tmp_path: Path, command: tuple) -> None:
    mixlist = tmp_path / "mix.json"
    mixlist.write_text('{"white-list": {"to-add": ["Relu"]}}', encoding="utf-8")
    args = [part.format(model=model, mixlist=mixlist, out=tmp_path / "out.onnx") for part in command]
    with open("/dev/full", "wb") as full:
        done = subprocess.run(ampconfig(*args), stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 2, done.stderr.decode()
    assert_one_clean_error(done.stderr, "<stdout>", "no space left")


@pytest.mark.parametrize("output", ["/dev/full", "-"])
def test_a_full_disk_under_a_streamed_model_is_exit_2(model: Path, tmp_path: Path, output: str) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            ampconfig("rewrite", model, "-o", output), stdout=full, stderr=subprocess.PIPE, env=env, cwd=tmp_path
        )
    assert done.returncode == 2
    assert_one_clean_error(done.stderr, "cannot write the output model", "no space left")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["m.onnx"]  # no staging folder left behind


def test_a_model_streamed_into_a_closed_pipe_was_not_delivered(model: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    reader, writer = os.pipe()
    os.close(reader)  # the reader is gone before anything was written
    try:
        done = subprocess.run(
            ampconfig("rewrite", model, "-m", "force_fp16", "-o", "-"), stdout=writer, stderr=subprocess.PIPE, env=env
        )
    finally:
        os.close(writer)
    assert done.returncode == 2, (done.returncode, done.stderr.decode())
    assert_one_clean_error(done.stderr, "<stdout>", "went away", "not delivered")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["m.onnx"]


def test_a_report_whose_reader_went_away_ends_by_sigpipe(model: Path) -> None:
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run(ampconfig("lists", "--json"), stdout=writer, stderr=subprocess.PIPE)
    finally:
        os.close(writer)
    assert done.returncode == -signal.SIGPIPE  # the shell shows 141
    assert done.stderr == b""


def test_onnx_runtime_logs_nothing_of_its_own_before_ampconfig_s_error(tmp_path: Path) -> None:
    """A model that fails in ONNX Runtime at run time (a Reshape to a size its input does not have): the failure is
    ampconfig's one located error, not first ORT's raw coloured log line on the process's stderr."""
    from onnx import TensorProto, numpy_helper

    nodes = [oh.make_node("Reshape", ["x", "s"], ["r"], name="rs"), oh.make_node("Relu", ["r"], ["y"], name="relu")]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(__import__("numpy").array([4, 4], "int64"), "s")],
    )
    path = tmp_path / "reshape.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=10), path)
    done = subprocess.run(ampconfig("run", path, "--iterations", "1", "--warmup", "0"), capture_output=True)
    assert done.returncode == 2
    assert done.stderr.startswith(b"error: ")  # ampconfig speaks first
    assert b"\x1b[" not in done.stderr and b"[E:onnxruntime" not in done.stderr
    assert_one_clean_error(done.stderr, "rs")
