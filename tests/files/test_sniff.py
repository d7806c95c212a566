"""What a file holds, from its first bytes (``validate``'s kind checks, the model commands' "not an ONNX model")."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as oh

from ampconfig.errors import AmpconfigError
from ampconfig.files.sniff import HEAD_BYTES, content_of
from tests.graphs import FLOAT, make_model, tensor


def test_a_real_model_an_npz_and_documents_are_told_apart(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(
        make_model([oh.make_node("Relu", ["x"], ["y"])], [tensor("x", FLOAT, [2])], [tensor("y", FLOAT, [2])]), model
    )
    npz = tmp_path / "in.npz"
    np.savez(npz, x=np.zeros(3, np.float32))
    files = {
        "json": ('{"black-list": {}}', ("text", "JSON")),
        "yaml": ("\ufeff\nprecision_mode: force_fp16\n", ("text", "YAML")),
        "toml": ('target = "cpu"\n', ("text", "TOML")),
        "cfg": ("node_a\nOpType::Erf\n", ("text", None)),
        "latin1": ("Conv\xe9\n".encode("latin-1"), ("text", None)),  # not UTF-8, still a document: read_text says where
        "empty": ("", ("empty", None)),
        "noise": (bytes(range(256)), ("binary", None)),
    }
    for name, (content, _) in files.items():
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    assert (content_of(model).kind, content_of(model).describe()) == ("protobuf", "an ONNX model")
    assert (content_of(npz).kind, content_of(npz).describe()) == ("zip", "a zip archive (an .npz)")
    for name, (_, (kind, text_kind)) in files.items():
        content = content_of(tmp_path / name)
        assert (content.kind, content.text_kind) == (kind, text_kind), name


def test_a_utf8_character_cut_by_the_end_of_the_head_is_still_text(tmp_path: Path) -> None:
    path = tmp_path / "long.json"
    path.write_bytes(b"[" + b" " * (HEAD_BYTES - 2) + "é".encode() + b"]")  # é spans the head's last byte
    assert content_of(path).kind == "text"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(AmpconfigError, match="not a regular file"):
        content_of(fifo)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-32-be"])
def test_utf16_and_utf32_text_with_a_mark_is_text_named_by_its_encoding(tmp_path: Path, encoding: str) -> None:
    """Its NUL bytes made it "binary data" on main (issue 44)."""
    path = tmp_path / "mixlist.json"
    path.write_bytes(
        ("\ufeff" if encoding.endswith("-be") else "").encode(encoding) + '{"black-list": {}}'.encode(encoding)
    )
    content = content_of(path)
    assert (content.kind, content.describe()) == ("text", f"{encoding[:6].upper()} text")
