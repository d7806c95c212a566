"""Which precision locks a change touches: every ``*.lock.json`` under a folder whose lock file, model (or its
external data), session config, mixlist or keep_dtype file is one of the changed files. What the ``ampconfig-lock``
pre-commit hook checks (``ampconfig validate --touched FILE...``).

Locks are found by name; a file of that name that is not a lock is left alone (``validate`` reports a lock that
cannot be read when it is given by name, not when it is found). One that is not a regular file (a FIFO, a socket,
a device) is skipped with a warning and never opened: opening a FIFO waits for a writer, for ever in a hook.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from ampconfig.documents.lock_file import PrecisionLock, load_lock
from ampconfig.errors import AmpconfigError
from ampconfig.files.guard import same_file
from ampconfig.lock.record import lock_relative
from ampconfig.model_io.models import open_model

log = logging.getLogger(__name__)

#: How a precision lock's name ends.
LOCK_SUFFIX = ".lock.json"
#: Folders never searched for locks: version control, environments, caches, dependencies.
SKIPPED_FOLDERS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".nox"})


def find_locks(root: Path) -> Iterator[Path]:
    """Every ``*.lock.json`` under ``root`` that is a regular file (or a symlink to one), in sorted order, skipping
    hidden and dependency folders; any other file of that name is skipped with a warning."""
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if name not in SKIPPED_FOLDERS and not name.startswith("."))
        for name in sorted(files):
            if not name.lower().endswith(LOCK_SUFFIX):
                continue
            path = Path(folder) / name
            if path.is_file() or not path.exists():  # a dangling symlink: load_lock says it is missing
                yield path
            else:
                log.warning(
                    "skipped %s: named like a precision lock, but not a regular file (a FIFO, socket or "
                    "device), so it is not read",
                    path,
                )


def recorded_files(lock: PrecisionLock, lock_path: Path) -> list[Path]:
    """The files a lock was made from: its model (and the model's external data), config, mixlist, keep_dtype,
    customize_dtypes."""
    settings = lock.settings
    recorded = [lock.model.path] + [
        record.path if record is not None else None
        for record in (settings.config, settings.modify_mixlist, settings.keep_dtype, settings.customize_dtypes)
    ]
    files = [lock_relative(lock_path, path) for path in recorded if path is not None]
    if lock.model.path is not None:
        # A model that cannot be opened is the check's to report, on the lock's line.
        with contextlib.suppress(AmpconfigError):
            files.extend(open_model(lock_relative(lock_path, lock.model.path)).external_files)
    return files


def _same(first: Path, second: Path) -> bool:
    """The same file however spelled; a deleted file (a commit may remove one) by its absolute path."""
    if first.exists() and second.exists():
        return same_file(first, second)
    return os.path.abspath(first) == os.path.abspath(second)


def touched_locks(changed: Iterable[Path], root: Path) -> list[Path]:
    """The locks under ``root`` that record one of the ``changed`` files, or are one of them."""
    changed = list(changed)
    found = []
    for lock_path in find_locks(root):
        if any(_same(lock_path, path) for path in changed):
            found.append(lock_path)
            continue
        try:
            lock, _ = load_lock(lock_path)
        except AmpconfigError:
            continue  # not a lock after all, or a broken one nobody touched
        recorded = recorded_files(lock, lock_path)
        if any(_same(path, item) for path in changed for item in recorded):
            found.append(lock_path)
    return found
