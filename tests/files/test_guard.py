"""Issue 10, "nothing overwritten": every command that writes goes through one output guard
(:mod:`ampconfig.files.guard`). No command overwrites any of its inputs, however the path is spelled; a FIFO or
device is written as a stream, never replaced by a regular file; a failure leaves nothing behind.

Everything here uses real models, real files and the real CLI (typer's CliRunner). The hypothesis budget is fixed
and derandomized, as in ``tests/hostile/test_hostile.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper as oh
from typer.testing import CliRunner, Result

from ampconfig.cli import app
from ampconfig.errors import AmpconfigError
from ampconfig.files import guard as guard_module
from ampconfig.files.guard import OutputGuard, same_file
from ampconfig.settings import json_schemas as schemas
from tests.graphs import FLOAT, make_model, tensor, weight

runner = CliRunner()
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
FAST_RUN = ("--warmup", "0", "--iterations", "1")
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


# ---------------------------------------------------------------------------------------------- the files
def small_model() -> onnx.ModelProto:
    """x[4,16] -> MatMul -> Relu -> Softmax -> y: white, clear and black ops; valid in every mode."""
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        oh.make_node("Relu", ["h"], ["r"], name="relu"),
        oh.make_node("Softmax", ["r"], ["y"], axis=-1, name="softmax"),
    ]
    return make_model(nodes, [tensor("x", FLOAT, [4, 16])], [tensor("y", FLOAT, [4, 16])], [weight("w", 16, 16)])


@dataclass(frozen=True)
class World:
    """One folder with a model (its weights in external data), a mixlist, a keep_dtype file, a config that points
    at the mixlist, a .npy and an .npz input: every kind of input a command can read."""

    folder: Path
    model: Path
    weights: Path
    mixlist: Path
    keep_dtype: Path
    config: Path
    config_with_mixlist: Path
    npy: Path
    npz: Path

    def files(self) -> list[Path]:
        return sorted(path for path in self.folder.rglob("*") if path.is_file() and not path.is_symlink())

    def digests(self) -> dict[Path, str]:
        return {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in self.files()}


def build_world(folder: Path) -> World:
    model = folder / "model.onnx"
    onnx.save(small_model(), model, save_as_external_data=True, location="weights.bin", size_threshold=0)
    mixlist = folder / "mix.json"
    mixlist.write_text(json.dumps({"black-list": {"to-add": ["Softmax"]}}), encoding="utf-8")
    keep_dtype = folder / "keep.cfg"
    keep_dtype.write_text("relu\n", encoding="utf-8")
    config = folder / "session.yaml"
    config.write_text("precision_mode: allow_mix_precision\n", encoding="utf-8")
    config_with_mixlist = folder / "pointing.yaml"
    config_with_mixlist.write_text("precision_mode: allow_mix_precision\nmodify_mixlist: mix.json\n", encoding="utf-8")
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    npy, npz = folder / "x.npy", folder / "inputs.npz"
    np.save(npy, x)
    np.savez(npz, x=x)
    (folder / "sub").mkdir()
    return World(folder, model, folder / "weights.bin", mixlist, keep_dtype, config, config_with_mixlist, npy, npz)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_world(tmp_path)


def inline_model(folder: Path, name: str = "m.onnx") -> Path:
    path = folder / name
    onnx.save(small_model(), path)
    return path


def invoke(*args: str | Path) -> Result:
    result = runner.invoke(app, [str(arg) for arg in args])
    text = result.stdout + result.stderr
    assert "Traceback" not in text and "internal error" not in text, text
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def staging_leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.rglob("*.tmp"))


def is_char_device(path: str) -> bool:
    return stat.S_ISCHR(os.stat(path).st_mode)


# ---------------------------------------------------------------------------------------------- the cases
@pytest.mark.parametrize("command", ["explain", "compare"])
def test_html_report_over_the_model_is_refused(world: World, command: str) -> None:
    before = world.digests()
    result = invoke(command, world.model, "-m", "allow_mix_precision", "--html", world.model)
    assert result.exit_code == 2
    assert "HTML report (--html)" in result.stderr and "input model (MODEL)" in result.stderr
    assert str(world.model) in result.stderr
    assert world.digests() == before


@pytest.mark.parametrize(
    ("flag", "attribute", "role"),
    [
        ("--modify-mixlist", "mixlist", "mixlist (--modify-mixlist)"),
        ("--keep-dtype", "keep_dtype", "keep_dtype file (--keep-dtype)"),
        ("--config", "config", "session config (--config)"),
    ],
)
def test_rewrite_output_over_a_settings_file_is_refused(world: World, flag: str, attribute: str, role: str) -> None:
    before = world.digests()
    target = getattr(world, attribute)
    result = invoke("rewrite", world.model, "-m", "allow_mix_precision", flag, target, "-o", target)
    assert result.exit_code == 2
    assert role in result.stderr and "output model (--output)" in result.stderr and str(target) in result.stderr
    assert world.digests() == before


@pytest.mark.parametrize(
    ("args", "attribute", "role"),
    [
        (("--input", "x=x.npy"), "npy", ".npy input x (--input)"),
        (("--inputs", "inputs.npz"), "npz", ".npz inputs (--inputs)"),
    ],
)
def test_run_output_over_an_input_array_is_refused(
    world: World, monkeypatch: pytest.MonkeyPatch, args: tuple[str, str], attribute: str, role: str
) -> None:
    monkeypatch.chdir(world.folder)
    before = world.digests()
    result = invoke("run", "model.onnx", *args, "-o", getattr(world, attribute).name, *FAST_RUN)
    assert result.exit_code == 2
    assert role in result.stderr and "output model (--output)" in result.stderr
    assert world.digests() == before


def test_tune_output_over_its_config_is_refused(world: World) -> None:
    before = world.digests()
    result = invoke("tune", world.model, "--config", world.config, "-o", world.config)
    assert result.exit_code == 2
    assert "session config (--config)" in result.stderr and "mixlist (-o)" in result.stderr
    assert world.digests() == before


def test_a_file_the_config_points_to_is_an_input(world: World) -> None:
    before = world.digests()
    result = invoke("rewrite", world.model, "--config", world.config_with_mixlist, "-o", world.mixlist)
    assert result.exit_code == 2
    assert f"mixlist (`modify_mixlist` in the config {world.config_with_mixlist})" in result.stderr
    assert world.digests() == before


def test_an_output_set_in_the_config_over_the_config_itself_is_refused(world: World) -> None:
    config = world.folder / "self.yaml"
    config.write_text("precision_mode: force_fp16\noutput: self.yaml\n", encoding="utf-8")
    before = world.digests()
    result = invoke("rewrite", world.model, "--config", config)
    assert result.exit_code == 2
    assert f"output model (`output` in the config {config})" in result.stderr
    assert world.digests() == before


@pytest.mark.parametrize("command", ["rewrite", "run"])
def test_output_over_the_inputs_external_data_is_refused(world: World, command: str) -> None:
    """The issue's `rewrite ext/model.onnx -o ext/weights.bin`: weights went from 16,384 to 364 bytes."""
    before = world.digests()
    extra = FAST_RUN if command == "run" else ()
    result = invoke(command, world.model, "-m", "force_fp16", "-o", world.weights, *extra)
    assert result.exit_code == 2
    assert "input model's external data" in result.stderr and str(world.weights) in result.stderr
    assert world.digests() == before
    onnx.checker.check_model(str(world.model), full_check=True)  # the input still loads, weights and all


@pytest.mark.parametrize("command", ["rewrite", "run"])
def test_an_output_whose_data_file_would_land_on_an_input_is_refused(world: World, command: str) -> None:
    """The rewrite of a model with external data writes OUT.data next to OUT: that file may not be an input."""
    data_named_like_output = world.folder / "out.onnx.data"
    os.replace(world.keep_dtype, data_named_like_output)
    before = world.digests()
    extra = FAST_RUN if command == "run" else ()
    result = invoke(
        command, world.model, "-m", "allow_mix_precision", "--keep-dtype", data_named_like_output,
        "-o", world.folder / "out.onnx", *extra,
    )  # fmt: skip
    assert result.exit_code == 2
    assert "external data of the output model (--output)" in result.stderr
    assert "keep_dtype file (--keep-dtype)" in result.stderr
    assert world.digests() == before
    assert not (world.folder / "out.onnx").exists()


@pytest.mark.parametrize("existing", [False, True])
def test_tune_with_one_path_for_both_outputs_is_refused_and_leaves_nothing(world: World, existing: bool) -> None:
    """The issue's `tune -o X --keep-dtype-out X`, which left X behind after its exit 2."""
    target = world.folder / "X"
    if existing:
        target.write_text("previous\n", encoding="utf-8")
    result = invoke("tune", world.model, "-m", "allow_mix_precision", "-o", target, "--keep-dtype-out", target)
    assert result.exit_code == 2
    assert "mixlist (-o)" in result.stderr and "keep_dtype file (--keep-dtype-out)" in result.stderr
    if existing:
        assert target.read_text(encoding="utf-8") == "previous\n"
    else:
        assert not target.exists()
    assert staging_leftovers(world.folder) == []


def test_import_table_output_over_its_table_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "OperatorKernels.md"
    table.write_text("## Operators implemented by CUDAExecutionProvider\n", encoding="utf-8")
    before = table.read_bytes()
    result = invoke("ops-info", "import-table", table, "--target", "cuda", "-o", table)
    assert result.exit_code == 2 and "kernel table (TABLE)" in result.stderr
    assert table.read_bytes() == before


# ---------------------------------------------------------------------------------------------- path spellings
def test_same_file_sees_through_every_spelling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    real = tmp_path / "real.txt"
    real.write_text("x", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    os.symlink("real.txt", tmp_path / "alias")
    os.link(real, tmp_path / "hard")
    for spelling in ("real.txt", "./real.txt", "sub/../real.txt", str(real), "alias", "hard"):
        assert same_file(spelling, real), spelling
    assert not same_file("other.txt", real)
    assert same_file("new.txt", tmp_path / "new.txt")  # two spellings of a file that does not exist yet


# ---------------------------------------------------------------------------------------------- streams and kinds
def device_node(folder: Path, name: str, minor: int) -> Path:
    """A private node of a memory character device (major 1: minor 3 is null, 7 is full): the same kind of file
    as /dev/null and /dev/full, so a regression replaces this node and never the machine's own (the tests run as
    root). Needs root (CAP_MKNOD) and a folder not mounted nodev, else the test is skipped."""
    if not IS_ROOT or not hasattr(os, "mknod"):
        pytest.skip("creating a device node needs root")
    path = folder / name
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        os.close(os.open(path, os.O_WRONLY))
    except OSError as exc:
        pytest.skip(f"cannot create or open a device node here: {exc}")
    return path


def test_dev_null_stays_a_device(world: World) -> None:
    null = device_node(world.folder, "null", 3)
    link = world.folder / "null-link"  # a link to a device is written through: the device gets the stream
    os.symlink(null.name, link)
    for output in (null, link):
        result = invoke("rewrite", inline_model(world.folder), "-m", "force_fp16", "-o", output)
        assert result.exit_code == 0, result.stderr
    result = invoke("explain", world.model, "-m", "allow_mix_precision", "--html", null)
    assert result.exit_code == 0, result.stderr
    result = invoke("run", inline_model(world.folder), "-m", "force_fp16", "-o", null, *FAST_RUN)
    assert result.exit_code in (0, 1), result.stderr
    assert is_char_device(str(null)) and link.is_symlink()
    assert staging_leftovers(world.folder) == []


def test_dev_full_is_a_located_error_and_stays_a_device(world: World) -> None:
    full = device_node(world.folder, "full", 7)
    result = invoke("rewrite", inline_model(world.folder), "-m", "force_fp16", "-o", full)
    assert result.exit_code == 2
    assert f"{full}:" in result.stderr and "no space left" in result.stderr
    assert is_char_device(str(full))


@needs_fifo
def test_a_model_with_external_data_is_not_streamed(world: World, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    before = world.digests()
    result = invoke("rewrite", world.model, "-m", "force_fp16", "-o", fifo)  # refused before the FIFO is opened
    assert result.exit_code == 2 and "cannot go to a stream" in result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert world.digests() == before


@contextlib.contextmanager
def reading(fifo: Path) -> Iterator[list[bytes]]:
    """A thread that reads everything written to ``fifo``; the bytes are in the list after the block."""
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as stream:
            received.append(stream.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        if thread.is_alive() and not received:
            with contextlib.suppress(OSError):  # unblock the reader if nothing opened the FIFO for writing
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(timeout=30)


@needs_fifo
def test_a_fifo_gets_the_output_as_a_stream(tmp_path: Path) -> None:
    model = inline_model(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with reading(fifo) as received:
        result = invoke("rewrite", model, "-m", "force_fp16", "-o", fifo)
    assert result.exit_code == 0, result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a FIFO, not a regular file
    streamed = onnx.load_from_string(received[0])
    onnx.checker.check_model(streamed, full_check=True)
    assert any(init.data_type == onnx.TensorProto.FLOAT16 for init in streamed.graph.initializer)
    with reading(fifo) as received:
        result = invoke("explain", model, "-m", "allow_mix_precision", "--html", fifo)
    assert result.exit_code == 0, result.stderr
    assert b"<html" in received[0][:1000].lower()
    assert staging_leftovers(tmp_path) == []


@needs_fifo
def test_a_fifo_nobody_reads_is_a_located_error_not_a_hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a FIFO for writing waits for a reader, which may never come (issue 38: calibrate -o into such a
    FIFO blocked for ever). The guard waits a bounded time, then stops with exit 2; nothing is left behind."""
    monkeypatch.setattr(guard_module, "FIFO_READER_WAIT_S", 0.3)
    model = inline_model(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    finished: list[Result] = []
    worker = threading.Thread(target=lambda: finished.append(invoke("rewrite", model, "-o", fifo)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    if not finished:  # still blocked: let it go, then fail
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        pytest.fail("writing to a FIFO nobody reads blocked")
    result = finished[0]
    assert result.exit_code == 2
    assert f"{fifo}: nothing reads the FIFO the output model (--output) goes to" in result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert staging_leftovers(tmp_path) == []


def test_a_directory_as_output_is_a_clear_error(world: World) -> None:
    result = invoke("rewrite", world.model, "-m", "force_fp16", "-o", world.folder / "sub")
    assert result.exit_code == 2 and "is a directory" in result.stderr


@pytest.mark.parametrize("spelled", ["new/", "new/.", "sub/", "sub/..", "sub//"])
@pytest.mark.parametrize(
    "command",
    [
        ("rewrite", "{model}", "--output"),
        ("explain", "{model}", "--html"),
        ("lock", "{model}", "--output"),
        ("calibrate", "{model}", "--output"),
        ("run", "{model}", "--ranges-out"),
        ("tune", "{model}", "--keep-dtype-out"),
    ],
    ids=lambda command: " ".join(command) if isinstance(command, tuple) else command,
)
def test_an_output_path_that_names_a_folder_is_a_located_error(
    world: World, command: tuple[str, ...], spelled: str
) -> None:
    """``-o out_dir/`` wrote a file named out_dir (Path drops the separator): a path ending in a separator, ``.``
    or ``..`` names a folder, whether the folder is there or not; exit 2 at the flag, nothing written."""
    before = sorted(path.name for path in world.folder.iterdir())
    args = [part.format(model=world.model) for part in command]
    path = f"{world.folder}{os.sep}{spelled}"  # as typed: a Path would drop the trailing separator
    result = invoke(*args, path, "--json")
    assert result.exit_code == 2, result.stdout
    error = json.loads(result.stdout)["error"]
    assert error["file"] == path
    assert error["message"].startswith(f"{command[-1]} names a folder") and "not a file" in error["message"]
    assert sorted(path.name for path in world.folder.iterdir()) == before


def test_a_config_output_that_names_a_folder_is_a_located_error(world: World) -> None:
    config = world.folder / "out.yaml"
    config.write_text(f"model: {world.model.name}\noutput: out_dir/\n", encoding="utf-8")
    result = invoke("rewrite", "--config", config, "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert (error["file"], error["line"], error["json_path"]) == (str(config), 2, "$.output")
    assert "names a folder" in error["message"]
    assert not (world.folder / "out_dir").exists()


def test_a_symlinked_output_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    model = inline_model(tmp_path)
    real = tmp_path / "real.onnx"
    real.write_bytes(b"old")
    link = tmp_path / "link.onnx"
    os.symlink(real.name, link)
    result = invoke("rewrite", model, "-m", "force_fp16", "-o", link)
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == real.name
    onnx.checker.check_model(str(real), full_check=True)


def test_a_symlink_loop_as_output_is_a_clear_error(tmp_path: Path) -> None:
    os.symlink("loop.onnx", tmp_path / "loop.onnx")
    result = invoke("rewrite", inline_model(tmp_path), "-m", "force_fp16", "-o", tmp_path / "loop.onnx")
    assert result.exit_code == 2 and str(tmp_path / "loop.onnx") in result.stderr
    assert (tmp_path / "loop.onnx").is_symlink()


def _unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create files in: a read-only folder for a normal user; root ignores
    permissions, so for root a kernel filesystem such as /sys (skipped when none refuses)."""
    if not IS_ROOT:
        folder = tmp_path / "locked"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    for candidate in (Path("/sys"), Path("/proc")):
        try:
            os.rmdir(tempfile.mkdtemp(dir=candidate))
        except OSError:
            return candidate
    pytest.skip("no folder refuses writes by root on this machine")


def test_an_unwritable_folder_names_the_folder_not_a_temporary_file(tmp_path: Path) -> None:
    folder = _unwritable_folder(tmp_path)
    try:
        for args in (
            ("rewrite", inline_model(tmp_path), "-m", "force_fp16", "-o", folder / "out.onnx"),
            ("explain", inline_model(tmp_path), "-m", "allow_mix_precision", "--html", folder / "r.html"),
        ):
            result = invoke(*args)
            assert result.exit_code == 2
            assert f"{folder}:" in result.stderr and "cannot write" in result.stderr
            assert ".tmp" not in result.stderr
    finally:
        if folder.is_relative_to(tmp_path):
            folder.chmod(0o755)


# ---------------------------------------------------------------------------------------------- nothing left behind
def test_a_failure_undoes_every_output_already_committed(tmp_path: Path) -> None:
    new, old = tmp_path / "new.txt", tmp_path / "old.txt"
    old.write_text("before\n", encoding="utf-8")
    old.chmod(0o640)
    with pytest.raises(AmpconfigError, match="a later step"), OutputGuard() as guard:
        guard.write_text(guard.output("first output", new), "x\n")
        guard.write_text(guard.output("second output", old), "after\n")
        assert new.read_text(encoding="utf-8") == "x\n" and old.read_text(encoding="utf-8") == "after\n"
        assert stat.S_IMODE(old.stat().st_mode) == 0o640  # a replaced file keeps its mode
        raise AmpconfigError("a later step failed")
    assert not new.exists()
    assert old.read_text(encoding="utf-8") == "before\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["old.txt"]  # no staging folder, no backup


@needs_fifo
def test_a_fifo_that_appears_after_the_check_is_not_replaced(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    with pytest.raises(AmpconfigError, match="no longer a regular file"), OutputGuard() as guard:
        destination = guard.output("report", target)  # checked while nothing is there
        os.mkfifo(target)  # ... and by the time the report is written, a FIFO is
        guard.write_text(destination, "text\n")
    assert stat.S_ISFIFO(os.lstat(target).st_mode)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.txt"]


def test_a_guard_that_succeeds_keeps_its_outputs_and_no_staging(tmp_path: Path) -> None:
    with OutputGuard() as guard:
        guard.read("input", tmp_path / "in.txt")
        written = guard.write_text(guard.output("report", tmp_path / "out.txt"), "done\n")
    assert written == tmp_path / "out.txt" and written.read_text(encoding="utf-8") == "done\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.txt"]


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes past ``limit`` bytes fail with EFBIG (SIGXFSZ ignored), as on a full disk; restored afterwards."""
    if not hasattr(resource, "RLIMIT_FSIZE") or not hasattr(signal, "SIGXFSZ"):
        pytest.skip("needs RLIMIT_FSIZE and SIGXFSZ")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


@contextlib.contextmanager
def working_directory(folder: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def _big_external_model(folder: Path) -> Path:
    nodes = [oh.make_node("MatMul", ["x", f"w{i}"], [f"h{i}"], name=f"mm{i}") for i in range(3)]
    nodes.append(oh.make_node("Sum", ["h0", "h1", "h2"], ["y"], name="sum"))
    weights = [weight(f"w{i}", 128, 128) for i in range(3)]  # 3 x 32 KiB in float16: past the 64 KiB limit
    model = make_model(nodes, [tensor("x", FLOAT, [2, 128])], [tensor("y", FLOAT, [2, 128])], weights)
    path = folder / "big.onnx"
    onnx.save(model, path, save_as_external_data=True, location="big.weights", size_threshold=0)
    return path


def test_a_write_that_fails_halfway_leaves_no_partial_data_and_the_old_output_intact(tmp_path: Path) -> None:
    model = _big_external_model(tmp_path)
    out, data = tmp_path / "out.onnx", tmp_path / "out.onnx.data"
    out.write_bytes(b"previous model")
    data.write_bytes(b"previous data")
    with file_size_limit(64 * 1024):
        result = invoke("rewrite", model, "-m", "force_fp16", "-o", out)
    assert result.exit_code == 2, result.stderr
    assert str(out) in result.stderr and "cannot write the output model (--output)" in result.stderr
    assert out.read_bytes() == b"previous model" and data.read_bytes() == b"previous data"
    assert staging_leftovers(tmp_path) == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["big.onnx", "big.weights", "out.onnx", "out.onnx.data"]


def test_an_inline_model_over_an_external_data_output_takes_the_stale_data_away(tmp_path: Path) -> None:
    """OUT.onnx with its weights in OUT.onnx.data, replaced by a model small enough to be inline: the old .data
    was left behind, holding weights nothing reads."""
    out, data = tmp_path / "out.onnx", tmp_path / "out.onnx.data"
    result = invoke("rewrite", _big_external_model(tmp_path), "-m", "force_fp16", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert data.is_file()
    small = tmp_path / "small.onnx"
    onnx.save(small_model(), small)
    result = invoke("rewrite", small, "-m", "force_fp16", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert not data.exists() and staging_leftovers(tmp_path) == []
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)


def test_a_stale_data_file_comes_back_when_the_command_fails_later(tmp_path: Path) -> None:
    """A command that fails after it wrote the model (a later output cannot be written) takes it all back."""
    out, data = tmp_path / "out.onnx", tmp_path / "out.onnx.data"
    assert invoke("rewrite", _big_external_model(tmp_path), "-m", "force_fp16", "-o", out).exit_code == 0
    before = (out.read_bytes(), data.read_bytes())
    from ampconfig.model_io.models import save_model_atomic

    with contextlib.suppress(RuntimeError), OutputGuard() as guard:
        save_model_atomic(small_model(), guard.output("output model", out), guard=guard)
        assert not data.exists()
        raise RuntimeError("a later step fails")
    assert (out.read_bytes(), data.read_bytes()) == before
    assert staging_leftovers(tmp_path) == []


def test_a_data_file_that_is_an_input_is_never_taken_away(tmp_path: Path) -> None:
    from ampconfig.model_io.models import save_model_atomic

    out, data = tmp_path / "out.onnx", tmp_path / "out.onnx.data"
    assert invoke("rewrite", _big_external_model(tmp_path), "-m", "force_fp16", "-o", out).exit_code == 0
    with OutputGuard() as guard:
        guard.read("another model's external data", data)  # e.g. a second model of the call reads it
        save_model_atomic(small_model(), guard.output("output model", out), guard=guard)
    assert data.is_file() and staging_leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------------------- schema --write
def test_schema_write_refuses_a_missing_folder_and_creates_nothing(tmp_path: Path) -> None:
    result = invoke("schema", "--write", tmp_path / "missing" / "deeper")
    assert result.exit_code == 2 and "does not exist" in result.stderr
    assert list(tmp_path.iterdir()) == []


def _layout(root: Path, *, checkout: bool) -> Path:
    """A package folder and its schemas/: in a source checkout, schemas/ beside the package and a pyproject.toml
    naming ampconfig (the design card's layout); installed (site-packages), schemas/ inside the package, where the
    wheel puts it."""
    package = root / ("project" if checkout else "site-packages") / "ampconfig"
    package.mkdir(parents=True)
    (_schemas_of(package, checkout=checkout)).mkdir()
    if checkout:
        (package.parent / "pyproject.toml").write_text('[project]\nname = "ampconfig"\n', encoding="utf-8")
    return package


def _schemas_of(package: Path, *, checkout: bool) -> Path:
    return package.parent / "schemas" if checkout else package / "schemas"


def test_schema_write_without_a_folder_never_writes_into_an_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _layout(tmp_path, checkout=False)
    monkeypatch.setattr(schemas, "PACKAGE_DIR", package)
    result = invoke("schema", "--write")
    assert result.exit_code == 2
    assert "installed package" in result.stderr and "schema --write DIR" in result.stderr
    assert list(_schemas_of(package, checkout=False).iterdir()) == []


def test_schema_write_without_a_folder_writes_into_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _layout(tmp_path, checkout=True)
    monkeypatch.setattr(schemas, "PACKAGE_DIR", package)
    result = invoke("schema", "mixlist", "--write")
    assert result.exit_code == 0, result.stderr
    written = _schemas_of(package, checkout=True) / "mixlist.schema.json"
    assert written.read_text(encoding="utf-8") == schemas.schema_text("mixlist")
    assert schemas.source_schema_dir(_layout(tmp_path / "other", checkout=False)) is None


# ---------------------------------------------------------------------------------------------- the property
#: Per command: the input roles it can be given (how to pass each), and its outputs (flag, role in messages).
INPUT_ARGS: dict[str, tuple[str, ...]] = {
    "model": (),
    "external data": (),
    "mixlist": ("--modify-mixlist", "mix.json"),
    "keep_dtype": ("--keep-dtype", "keep.cfg"),
    "config": ("--config", "session.yaml"),
    "config's mixlist": ("--config", "pointing.yaml"),
    "npz": ("--inputs", "inputs.npz"),
    "npy": ("--input", "x=x.npy"),
    "other output": ("--keep-dtype-out", "tuned.json"),
}
INPUT_FILE = {
    "model": "model.onnx",
    "external data": "weights.bin",
    "mixlist": "mix.json",
    "keep_dtype": "keep.cfg",
    "config": "session.yaml",
    "config's mixlist": "mix.json",
    "npz": "inputs.npz",
    "npy": "x.npy",
    "other output": "tuned.json",
}
INPUT_ROLE = {
    "model": "input model (MODEL)",
    "external data": "input model's external data",
    "mixlist": "mixlist (--modify-mixlist)",
    "keep_dtype": "keep_dtype file (--keep-dtype)",
    "config": "session config (--config)",
    "config's mixlist": "mixlist (`modify_mixlist` in the config pointing.yaml)",
    "npz": ".npz inputs (--inputs)",
    "npy": ".npy input x (--input)",
    "other output": "keep_dtype file (--keep-dtype-out)",
}
SETTINGS_INPUTS = ("model", "external data", "mixlist", "keep_dtype", "config", "config's mixlist")
COMMANDS: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = {
    "rewrite": (SETTINGS_INPUTS, (("-o", "output model (--output)"),)),
    "run": ((*SETTINGS_INPUTS, "npz", "npy"), (("-o", "output model (--output)"),)),
    "explain": ((*SETTINGS_INPUTS, "npz", "npy"), (("--html", "HTML report (--html)"),)),
    "compare": ((*SETTINGS_INPUTS, "npz", "npy"), (("--html", "HTML report (--html)"),)),
    "tune": (
        (*SETTINGS_INPUTS, "npz", "npy", "other output"),
        (("-o", "mixlist (-o)"), ("--keep-dtype-out", "keep_dtype file (--keep-dtype-out)")),
    ),
}
SPELLINGS = ("same", "dot", "dotdot", "absolute", "symlink", "hardlink")


def spell(folder: Path, name: str, how: str) -> str:
    """``name`` (a file in ``folder``, the working directory) spelled as ``how`` says."""
    if how == "symlink":
        os.symlink(name, folder / f"alias-{name}")
        return f"alias-{name}"
    if how == "hardlink":
        os.link(folder / name, folder / f"hard-{name}")
        return f"hard-{name}"
    return {"same": name, "dot": f"./{name}", "dotdot": f"sub/../{name}", "absolute": str(folder / name)}[how]


@st.composite
def collisions(draw: st.DrawFn) -> tuple[str, str, tuple[str, str], str, bool]:
    command = draw(st.sampled_from(sorted(COMMANDS)))
    inputs, outputs = COMMANDS[command]
    output = draw(st.sampled_from(outputs))
    input_role = draw(st.sampled_from([role for role in inputs if role != "other output" or output[0] == "-o"]))
    return command, input_role, output, draw(st.sampled_from(SPELLINGS)), draw(st.booleans())


@settings(
    max_examples=60,
    derandomize=True,  # the same examples on every run: CI never flakes on a newly drawn case
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(collisions())
def test_no_spelling_of_an_input_is_ever_an_output(case: tuple[str, str, tuple[str, str], str, bool]) -> None:
    """For any command, any input role, any output role and any spelling of the path (the input itself given
    relative or absolute): exit 2, both roles named, and every input's bytes unchanged."""
    command, input_role, (output_flag, output_role), spelling, absolute_input = case
    with tempfile.TemporaryDirectory() as temporary, working_directory(Path(temporary)):
        folder = Path(temporary).resolve()
        world = build_world(folder)
        if input_role == "other output":
            (folder / "tuned.json").write_text("{}\n", encoding="utf-8")
        model = str(world.model) if absolute_input else "model.onnx"
        flag_args = list(INPUT_ARGS[input_role])
        if absolute_input and flag_args and input_role != "npy":
            flag_args[1] = str(folder / flag_args[1])
        target = spell(folder, INPUT_FILE[input_role], spelling)
        before = world.digests()
        args = (command, model, "-m", "allow_mix_precision", *flag_args, output_flag, target, *_extra(command))
        result = invoke(*args)
        assert result.exit_code == 2, (case, result.stdout, result.stderr)
        assert "refusing to overwrite" in result.stderr, result.stderr
        named = INPUT_ROLE[input_role].replace("pointing.yaml", flag_args[1] if flag_args else "")
        assert named in result.stderr and output_role in result.stderr, (case, result.stderr)
        assert world.digests() == before
        assert staging_leftovers(folder) == []


def _extra(command: str) -> tuple[str, ...]:
    return FAST_RUN if command == "run" else ()


# -------------------------------------------------------------------------------- many inputs (issue 31)
def test_declaring_many_inputs_resolves_each_path_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--data FOLDER` declares every sample file: each new path was compared with every declared one (two
    realpath calls a pair; 1,000 files took 22 s). Now each path is resolved once and looked up."""
    files = [tmp_path / f"sample_{index:04d}.npz" for index in range(400)]
    for path in files:
        path.write_bytes(b"")
    resolved = 0
    realpath = os.path.realpath

    def counting(path: str, *args: object, **kwargs: object) -> str:
        nonlocal resolved
        resolved += 1
        return realpath(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os.path, "realpath", counting)
    guard = OutputGuard()
    guard.read_all("data set (--data)", files)
    guard.read_all("data set (--data)", files[:10])  # declared again: no duplicates
    guard.output("HTML report (--html)", tmp_path / "report.html")
    assert len(guard.inputs) == len(files)
    assert resolved <= 2 * len(files) + 20


def test_an_output_that_is_one_of_many_inputs_is_still_refused(tmp_path: Path) -> None:
    files = [tmp_path / f"sample_{index:04d}.npz" for index in range(300)]
    for path in files:
        path.write_bytes(b"")
    os.link(files[250], tmp_path / "linked.onnx")
    guard = OutputGuard()
    guard.read_all("data set (--data)", files)
    with pytest.raises(AmpconfigError, match="refusing to overwrite the data set"):
        guard.output("output model (--output)", tmp_path / "linked.onnx")  # a hard link to the 251st
    with pytest.raises(AmpconfigError, match="refusing to overwrite the data set"):
        guard.output("output model (--output)", tmp_path / "sub" / ".." / files[17].name)
