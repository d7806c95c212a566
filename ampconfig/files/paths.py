"""Input paths checked before they are opened: a located message for every way a path can fail to be a readable
file (missing, a symbolic link loop, a directory, a device or pipe where a regular file is needed).

ampconfig reads regular files only. Opening a FIFO for reading waits until something opens it for writing, which
may be never (a FIFO named like a lock under the folder the pre-commit hook searches hung it for ever); a device
or socket has no end or no content. :func:`open_regular` opens without waiting and checks what it opened.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO, Literal

from ampconfig.errors import AmpconfigError


def resolve_path(path: str | Path) -> Path:
    """``path`` made absolute with symbolic links resolved as far as they go; a link loop, which ``Path.resolve``
    reports with RuntimeError on some Python versions, yields the absolute path unresolved."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError, ValueError):  # ValueError: a NUL in the path
        return Path(os.path.abspath(path))


#: What a path names, as :func:`path_kind` sees it.
PathKind = Literal["file", "folder", "other", "missing", "nul", "too long"]
#: Why no file can have the name, for the kinds that say so.
UNNAMEABLE: dict[PathKind, str] = {
    "nul": "holds a NUL character, which no file name can",
    "too long": "has a name longer than the file system allows",
}


def path_kind(path: Path) -> PathKind:
    """What ``path`` names, for a check that only looks: a regular file, a folder, something else (a device, pipe
    or socket), nothing, or a name no file can have. Never raises (``Path.is_dir`` raises on a name too long)."""
    try:
        mode = path.stat().st_mode
    except ValueError:  # a NUL in the path
        return "nul"
    except OSError as exc:
        return "too long" if exc.errno == errno.ENAMETOOLONG else "missing"
    except RuntimeError:  # a symbolic link loop on Python versions whose stat raises it
        return "missing"
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "other"


def require_file(path: Path, what: str, *, hint: str | None = None, regular: bool = True) -> None:
    """Raise a located AmpconfigError unless ``path`` is an existing file; with ``regular``, a regular file (not a
    device, pipe or socket, whose size is unknown and whose reading may never end)."""
    source = str(path)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise _missing(path, what, hint, exc) from None
    except RuntimeError:  # a symbolic link loop on Python versions whose stat raises it
        raise _link_loop(source, what) from None
    except ValueError:  # the OS takes no NUL in a path; os.stat says so with ValueError
        raise AmpconfigError(
            f"{what}: the path {UNNAMEABLE['nul']}",
            file=source,
            hint=hint or "check the path",
        ) from None
    if stat.S_ISDIR(mode):
        raise AmpconfigError(f"{what} is a directory, not a file", file=source, hint=hint)
    if regular and not stat.S_ISREG(mode):
        raise not_regular(source, what)


def not_regular(source: str, what: str) -> AmpconfigError:
    return AmpconfigError(
        f"{what} is not a regular file (a device, pipe or socket); ampconfig reads only files on disk",
        file=source,
        hint="give the path of a file on disk",
    )


#: Opening without waiting: a FIFO opens at once (and is then refused) instead of waiting for a writer.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_OPEN_FLAGS = os.O_RDONLY | _NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def open_regular(path: Path, what: str, *, hint: str | None = None) -> BinaryIO:
    """``path`` open for reading (binary), or a located AmpconfigError unless it is a regular file. The check is
    made on what was opened (a FIFO put in the file's place after a check of the path is refused too), and
    opening never waits."""
    require_file(path, what, hint=hint)
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise _unreadable(path, what, hint, exc) from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise not_regular(str(path), what)
        if _NONBLOCK:
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _unreadable(path: Path, what: str, hint: str | None, exc: OSError) -> AmpconfigError:
    if isinstance(exc, (PermissionError, FileNotFoundError)):  # FileNotFoundError: it went away since the check
        return _missing(path, what, hint, exc)
    return AmpconfigError(f"cannot read {what}: {exc.strerror or exc}", file=str(path))


def _missing(path: Path, what: str, hint: str | None, exc: OSError) -> AmpconfigError:
    source = str(path)
    if exc.errno == errno.ENAMETOOLONG:  # before is_symlink, which raises it again
        return AmpconfigError(
            f"{what} not found: a name in its path is longer than the file system allows",
            file=source,
            hint=hint or "check the path",
        )
    if path.is_symlink():
        return _link_loop(source, what)
    if isinstance(exc, PermissionError):
        return AmpconfigError(
            f"cannot read {what}: permission denied", file=source, hint="check the permissions of the file and folders"
        )
    return AmpconfigError(f"{what} not found", file=source, hint=hint or "check the path")


def _link_loop(source: str, what: str) -> AmpconfigError:
    return AmpconfigError(
        f"{what} is a symbolic link that leads nowhere (a loop, or a missing target)",
        file=source,
        hint="point the link at an existing file, or give the file's real path",
    )


def names_a_folder(spelling: str) -> bool:
    """Whether a path as the user wrote it names a folder whatever is there: it ends in a separator, or in ``.``
    or ``..`` (``out/``, ``out/.``). ``Path`` drops both (``Path("out/")`` is ``out``), so a file named ``out``
    would be written where the user meant a folder: an output path is checked as written, before it is a Path."""
    separators = os.sep + (os.altsep or "")
    if spelling.endswith(tuple(separators)):
        return True
    last = spelling
    for separator in separators:
        last = last.rsplit(separator, 1)[-1]
    return last in (".", "..")


def folder_ending(spelling: str) -> str:
    """What makes ``spelling`` name a folder: its trailing separator, else its last part (``.`` or ``..``)."""
    if spelling[-1:] in (os.sep, os.altsep):
        return spelling[-1]
    return ".." if spelling.endswith("..") else "."


def refuse_folder_spelling(spelling: str, what: str) -> None:
    """A located AmpconfigError when an output path names a folder (:func:`names_a_folder`)."""
    if names_a_folder(spelling):
        raise AmpconfigError(
            f"{what} names a folder (the path ends in {folder_ending(spelling)!r}), not a file",
            file=spelling,
            hint="give a file name inside the folder",
        )


def real_location(path: Path) -> Path:
    """Where the file at ``path`` really is, or will be written (the guard writes through a symbolic link to its
    target): the paths a lock or ranges file records are relative to that file's folder, so they hold however the
    file was reached. ``path`` as given when no link is on the way (messages keep the user's spelling), and for
    what is not a file on disk (``-``, a FIFO, a device): a stream has no folder of its own."""
    spelled = os.fspath(path)
    if spelled == "-":
        return path
    try:
        mode = os.stat(spelled).st_mode
    except (OSError, ValueError):  # not there yet (a new output), or not a path a file can have
        mode = stat.S_IFREG
    if not stat.S_ISREG(mode):
        return path
    real = os.path.realpath(spelled)
    return path if real == os.path.abspath(spelled) else Path(real)


def relative_path(path: Path, folder: Path) -> str:
    """``path`` relative to ``folder`` with ``/`` separators (``..`` where it lies outside), as a lock and a ranges
    file keep it: the same on every machine for the same tree, whatever the working directory."""
    absolute, base = os.path.abspath(path), os.path.abspath(folder)
    try:
        relative = os.path.relpath(absolute, base)
    except ValueError:  # another drive (Windows): no relative path exists
        return Path(absolute).as_posix()
    return Path(relative).as_posix()


def path_argument(value: object, name: str, what: str) -> Path:
    """An API's path argument as a Path: a ``str`` or ``os.PathLike`` (bytes are not paths here), else a located
    AmpconfigError naming the argument (what a command line's flag would be)."""
    if not isinstance(value, (str, os.PathLike)) or isinstance(os.fspath(value), bytes):
        kind = type(value).__name__
        raise AmpconfigError(f"{name} must be the path of {what}, got {kind} {value!r:.60}")
    return Path(value)
