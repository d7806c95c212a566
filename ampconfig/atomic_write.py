"""Write text files atomically: a temporary file in the destination folder, then ``os.replace``.

A reader (or a crash) never sees half a report or half a mixlist; the destination is either the old file or the
complete new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ampconfig.errors import AmpconfigError


def write_text_atomic(destination: str | Path, text: str, *, what: str = "output") -> Path:
    target = Path(destination)
    if target.is_dir():
        raise AmpconfigError(f"{what} path is a directory", file=str(target), hint="give a file name")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise AmpconfigError(f"{what} folder does not exist", file=str(folder), hint="create it first")
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
        mask = os.umask(0)
        os.umask(mask)
        # mkstemp creates 0600; the file should get the permissions any new file gets here.
        os.chmod(temporary, 0o666 & ~mask)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target
