"""What a file holds, from its first bytes: enough to tell a model, an ``.npz`` and a text document apart before
anything parses it (``validate`` checks that each path a config names is a file of the kind its key wants, and
loads no onnx or numpy for it; a model command refuses a text file given as the model).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ampconfig.files.bounded import other_unicode
from ampconfig.files.paths import open_regular

#: How much of a file is read to tell what it is.
HEAD_BYTES = 4096

#: What a text file most likely is, by its first line that is not blank (the first pattern that matches).
TEXT_KINDS = (
    (re.compile(r"[{\[]"), "JSON"),
    (re.compile(r"[\w.-]+\s*\{"), "the protobuf text of something else"),
    (re.compile(r"(---|[\w.-]+\s*:(\s|$))"), "YAML"),
    (re.compile(r"[\w.-]+\s*="), "TOML"),
)
#: The suffixes of ONNX's own text formats, which are models too.
ONNX_TEXT_SUFFIXES = (".onnxtxt", ".textproto", ".pbtxt", ".prototxt", ".json")

ContentKind = Literal["empty", "text", "zip", "protobuf", "binary"]
_ZIP_MAGIC = b"PK\x03\x04"
#: A serialised ModelProto starts with its first field set: ir_version (field 1, a varint), tag byte 0x08.
_MODEL_FIRST_BYTE = 0x08


@dataclass(frozen=True)
class Content:
    kind: ContentKind
    text_kind: str | None = None  # for text: JSON, YAML, TOML ... (None: plain text)

    def describe(self) -> str:
        """What the file holds, as a message says it: "an ONNX model", "JSON" ..."""
        if self.kind == "text":
            return self.text_kind or "text"
        return {
            "empty": "nothing (it is empty)",
            "zip": "a zip archive (an .npz)",
            "protobuf": "an ONNX model",
            "binary": "binary data",
        }[self.kind]


def text_kind(head: str) -> str | None:
    """What text starting with ``head`` most likely is (leading blank lines and a byte-order mark skipped)."""
    stripped = head.lstrip("\ufeff \t\r\n")
    return next((name for pattern, name in TEXT_KINDS if pattern.match(stripped)), None)


def content_of(path: Path, what: str = "file") -> Content:
    """What the regular file at ``path`` holds; a located AmpconfigError when it cannot be opened."""
    with open_regular(path, what) as stream:
        head = stream.read(HEAD_BYTES)
    if not head:
        return Content("empty")
    if head.startswith(_ZIP_MAGIC):
        return Content("zip")
    encoding = other_unicode(head)
    if encoding is not None:  # its NUL bytes are half its characters, not a binary file's
        return Content("text", f"{encoding} text")
    if _CONTROL.search(head):
        return Content("protobuf" if head[0] == _MODEL_FIRST_BYTE else "binary")
    # Text, though perhaps not UTF-8 (a Latin-1 mixlist): the reader of the document says where it is not.
    return Content("text", text_kind(head.decode("utf-8", errors="replace")))


#: Control bytes no text document holds (a protobuf's tags and lengths are full of them).
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1f\x7f]")
