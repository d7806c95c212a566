"""Content digests of the files and texts a lock or a ranges file records."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ampconfig.files.paths import open_regular


def file_sha256(path: Path) -> str:
    """SHA-256 of a regular file's bytes, read 1 MiB at a time (a FIFO is refused, never waited on)."""
    digest = hashlib.sha256()
    with open_regular(path, "file") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
