"""Paths as the user wrote them (an output that names a folder) and where a file really is (a symbolic link's
target, which the paths recorded in a lock or ranges file are relative to)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ampconfig.errors import AmpconfigError
from ampconfig.files.paths import names_a_folder, real_location, refuse_folder_spelling


@pytest.mark.parametrize(
    ("spelling", "folder"),
    [
        ("out/", True),
        ("out//", True),
        ("a/b/.", True),
        ("a/..", True),
        (".", True),
        ("..", True),
        ("out", False),
        ("out/model.onnx", False),
        ("out/.hidden", False),
        ("out/..onnx", False),
        ("-", False),
    ],
)
def test_names_a_folder_as_written(spelling: str, folder: bool) -> None:
    assert names_a_folder(spelling) is folder


def test_the_refusal_is_located_at_the_path_as_written() -> None:
    with pytest.raises(AmpconfigError) as caught:
        refuse_folder_spelling("out_dir/", "--output")
    assert caught.value.file == "out_dir/"
    assert caught.value.message == "--output names a folder (the path ends in '/'), not a file"


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_real_location_follows_links_and_keeps_other_spellings(tmp_path: Path) -> None:
    real = tmp_path / "deep" / "file.json"
    real.parent.mkdir()
    real.write_text("{}", encoding="utf-8")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    dangling = tmp_path / "new.json"
    dangling.symlink_to(tmp_path / "deep" / "new.json")
    assert real_location(link) == real
    assert real_location(dangling) == tmp_path / "deep" / "new.json"  # the guard writes a new file there
    assert real_location(real) == real
    assert real_location(Path("relative.json")) == Path("relative.json")  # no link: the user's spelling
    assert real_location(Path("-")) == Path("-")
    if hasattr(os, "mkfifo"):
        fifo_target = tmp_path / "pipe"
        os.mkfifo(fifo_target)
        fifo_link = tmp_path / "pipe-link"
        fifo_link.symlink_to(fifo_target)
        assert real_location(fifo_link) == fifo_link  # a stream has no folder of its own
