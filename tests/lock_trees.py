"""Project trees for the precision-lock tests: a model with its settings files on disk, as a repository holds
them, and the command line run on them."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from typer.testing import CliRunner, Result

from ampconfig.cli import app
from ampconfig.examples import DEFAULT_EXAMPLE, example_path
from tests.overflow_model import MIXLIST as OVERFLOW_MIXLIST
from tests.overflow_model import overflow_model

runner = CliRunner()


def cli(*args: str | Path) -> Result:
    """The command line, in this process; never a traceback or an internal error."""
    result = runner.invoke(app, [str(arg) for arg in args])
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


def cli_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    result = cli(*args, "--json")
    return result.exit_code, json.loads(result.stdout)


@contextmanager
def working_directory(folder: Path) -> Iterator[None]:
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def mixlist_text(entries: dict[str, dict[str, list[str]]]) -> str:
    """A mixlist with one list per line, so each edit is one line of the file."""
    lines = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in entries.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


@dataclass
class Tree:
    """``models/model.onnx`` with ``models/mixlist.json`` (and optionally more) under ``root``; the lock goes to
    ``models/precision.lock.json``."""

    root: Path

    @property
    def folder(self) -> Path:
        return self.root / "models"

    @property
    def model(self) -> Path:
        return self.folder / "model.onnx"

    @property
    def mixlist(self) -> Path:
        return self.folder / "mixlist.json"

    @property
    def keep(self) -> Path:
        return self.folder / "keep_dtype.cfg"

    @property
    def config(self) -> Path:
        return self.folder / "session.yaml"

    @property
    def ranges(self) -> Path:
        return self.folder / "ranges.json"

    @property
    def lock(self) -> Path:
        return self.folder / "precision.lock.json"

    def write_model(self, model: onnx.ModelProto) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        onnx.save(model, self.model)

    def write_mixlist(self, entries: dict[str, dict[str, list[str]]]) -> None:
        self.mixlist.write_text(mixlist_text(entries), encoding="utf-8")

    def lock_it(self, *settings: str | Path) -> Result:
        result = cli("lock", self.model, *settings, "-o", self.lock)
        assert result.exit_code == 0, result.output
        return result

    def check(self, *options: str) -> tuple[int, dict[str, Any]]:
        return cli_json("lock", "--check", self.lock, *options)


def example_tree(root: Path, mixlist: dict[str, dict[str, list[str]]] | None = None) -> Tree:
    """The bundled example (a transformer block) with a mixlist."""
    tree = Tree(root)
    tree.folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(example_path(DEFAULT_EXAMPLE), tree.model)
    tree.write_mixlist(mixlist or {"black-list": {"to-add": ["Softmax"]}})
    return tree


def checked_tree(root: Path) -> Tree:
    """A lock whose values were checked: the overflow MLP (its output passes float16's range) with the mixlist that
    makes its Pow white, a session config naming the model, the mixlist and a ranges file calibrated on generated
    inputs, and the lock made from the config (``values.beyond_margin`` holds the output ``y``)."""
    tree = Tree(root)
    tree.write_model(overflow_model())
    tree.write_mixlist(OVERFLOW_MIXLIST)
    tree.config.write_text(
        "model: model.onnx\nprecision_mode: allow_mix_precision\nmodify_mixlist: mixlist.json\nranges: ranges.json\n",
        encoding="utf-8",
    )
    calibrated = cli("calibrate", tree.model, "--shape", "x=4x16", "-o", tree.ranges)
    assert calibrated.exit_code == 0, calibrated.output
    made = cli("lock", "--config", tree.config, "-o", tree.lock)
    assert made.exit_code == 0, made.output
    return tree


def copy_tree(tree: Tree, root: Path) -> Tree:
    """A copy of ``tree`` under ``root`` (the lock's paths are relative: the copy checks as the original does)."""
    shutil.copytree(tree.folder, Tree(root).folder)
    return Tree(root)


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes: what a refused command must leave as it was."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def edit_lock(path: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """The lock at ``path`` edited by hand: its JSON, changed by ``edit``, written back one key per line (Python's
    writer, as a script would: NaN and Infinity included)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def line_of(path: Path, fragment: str) -> int:
    """The 1-based line of ``path`` that contains ``fragment``."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if fragment in line:
            return number
    raise AssertionError(f"{fragment!r} not in {path}")


def changed_names(payload: dict[str, Any], kinds: Sequence[str] = ("changed",)) -> set[str]:
    return {item["name"] for kind in kinds for item in payload[kind]}
