"""Bounded reading of user files: a file's size is checked before it is read (and while reading, for a file
that grows), and a FIFO, device or socket is refused, never opened to wait.

Parsing is bounded too, by the readers of each format (:mod:`ampconfig.documents.parsing` scans JSON and TOML
for nesting depth and value count before parsing them, :mod:`ampconfig.documents.bounded_yaml` composes YAML with
the same limits).
"""

from __future__ import annotations

import os
from pathlib import Path

from ampconfig.errors import AmpconfigError
from ampconfig.files.paths import open_regular, require_file

#: Largest document read, in bytes. Session configs, mixlists and keep_dtype files are kilobytes; the built-in op
#: info files about 70 KB.
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
#: Precision lock files (``ampconfig lock``) hold one line per node of a model: a larger limit (and a larger
#: count of values, :data:`ampconfig.documents.parsing.MAX_LOCK_VALUES`). About 140 bytes a node, so this admits
#: models of about 100,000 nodes.
MAX_LOCK_BYTES = 16 * 1024 * 1024

SPLIT_HINT = "is it the right file? ampconfig's files are small; split the content or list op types instead"


def _size(size: int) -> str:
    """A file size as a message shows it: every byte (two sizes a byte apart read apart), then in MiB."""
    return f"{size:,} bytes ({size / (1024 * 1024):.1f} MiB)"


# --------------------------------------------------------------------------------------------------- reading
def read_bounded(
    path: Path, what: str, max_bytes: int = MAX_DOCUMENT_BYTES, *, too_large_hint: str = SPLIT_HINT
) -> bytes:
    """The bytes of ``path``, a regular file (:func:`~ampconfig.files.paths.open_regular`: a FIFO, device or
    socket is refused, never opened to wait): one larger than ``max_bytes`` is refused from its size, before it is
    read (with ``too_large_hint``); one that grows past the limit while it is read is refused then."""
    source = str(path)
    try:
        with open_regular(path, what) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > max_bytes:
                raise _too_large(what, source, _size(size), max_bytes, too_large_hint)
            # Read one byte more than expected: a file that grows meanwhile is read on, up to the limit.
            raw = handle.read(size + 1)
            if len(raw) > size:
                raw += handle.read(max_bytes + 1 - len(raw))
    except OSError as exc:
        raise AmpconfigError(f"cannot read {what}: {exc.strerror or exc}", file=source) from None
    if len(raw) > max_bytes:  # a file that grew while it was read
        raise _too_large(what, source, f"more than {max_bytes:,} bytes", max_bytes, too_large_hint)
    return raw


def _too_large(what: str, source: str, size: str, max_bytes: int, hint: str) -> AmpconfigError:
    return AmpconfigError(
        f"{what} is too large: {size}; ampconfig reads files up to {_size(max_bytes)}", file=source, hint=hint
    )


#: A config's own files are checked before they are read (resolve.require_config_files says how a config's
#: relative path was resolved); a path that reaches this hint was given on the command line or in code.
_PATH_HINT = "check the path"


def read_text(path: Path, what: str = "file", hint: str = _PATH_HINT, max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of a file, or an AmpconfigError that says why it cannot be read. Files larger than
    ``max_bytes`` (:data:`MAX_DOCUMENT_BYTES`) are refused before they are read."""
    require_file(path, what, hint=hint)  # a FIFO would wait for a writer, a device never end
    return decode_utf8(read_bounded(path, what, max_bytes), str(path))


#: The byte-order marks of the Unicode encodings other than UTF-8, UTF-32's first: its little-endian mark starts
#: as UTF-16's does.
_OTHER_UNICODE_MARKS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def other_unicode(raw: bytes) -> str | None:
    """``UTF-16`` or ``UTF-32`` when ``raw`` starts with that encoding's byte-order mark (what Notepad and
    PowerShell's ``>`` write), else None: such a file is text, not binary data, in an encoding ampconfig does not
    read."""
    return next((name for mark, name in _OTHER_UNICODE_MARKS if raw.startswith(mark)), None)


def refuse_other_unicode(raw: bytes, source: str | None, what: str = "the file") -> None:
    """An AmpconfigError naming the encoding of a UTF-16 or UTF-32 file (by its byte-order mark), else nothing."""
    encoding = other_unicode(raw)
    if encoding is not None:
        raise AmpconfigError(
            f"{what} is {encoding} text (it starts with a {encoding} byte-order mark); ampconfig reads UTF-8",
            file=source,
            line=1,
            hint="save it as UTF-8",
        )


def decode_utf8(raw: bytes, source: str | None) -> str:
    """``raw`` as UTF-8 text without its byte-order mark; a UTF-16 or UTF-32 file is refused naming its encoding,
    other bytes that are not UTF-8 at their line."""
    refuse_other_unicode(raw, source)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise AmpconfigError(
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line} cannot be decoded",
            file=source,
            line=line,
            hint="save the file as UTF-8",
        ) from None
    # A byte-order mark is legal UTF-8 but not legal JSON; editors on Windows add it.
    return text.removeprefix("\ufeff")
