"""Write files atomically: a temporary file in the destination folder, then ``os.replace``.

A reader (or a crash) never sees half a report, half a mixlist or half a model; the destination is either the old
file or the complete new one, and a failed write leaves no temporary file behind.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ampconfig.errors import AmpconfigError


def check_destination(destination: str | Path, *, what: str = "output") -> Path:
    """The destination as a Path, after checking it can be written: not a folder, in a folder that exists."""
    target = Path(destination)
    if target.is_dir():
        raise AmpconfigError(f"{what} path is a directory", file=str(target), hint="give a file name")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise AmpconfigError(f"{what} folder does not exist", file=str(folder), hint="create it first")
    return target


@contextmanager
def atomic_destination(destination: str | Path, *, what: str = "output") -> Iterator[Path]:
    """Yield a temporary path next to ``destination``; on success it replaces the destination, else it goes."""
    target = check_destination(destination, what=what)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(handle)
    try:
        mask = os.umask(0)
        os.umask(mask)
        # mkstemp creates 0600; the file should get the permissions any new file gets here.
        os.chmod(temporary, 0o666 & ~mask)
        yield Path(temporary)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text_atomic(destination: str | Path, text: str, *, what: str = "output") -> Path:
    with atomic_destination(destination, what=what) as temporary:
        temporary.write_text(text, encoding="utf-8", newline="\n")
    return Path(destination)
