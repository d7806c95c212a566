"""The one way ampconfig writes files: every command declares what it reads and what it writes, by role, to an
:class:`OutputGuard`, and writes only through it.

What the guard promises:

- **No input is overwritten.** An output that is the same file as an input of the same invocation (or as another
  of its outputs) is refused with exit 2, naming both roles and the path. "The same file" survives every spelling:
  ``./x``, ``dir/../x``, absolute or relative, a symlink to it, or a hard link (same device and inode). Commands
  declare everything before any work, so the refusal comes first; a file found later (the model's external data)
  is checked when it is declared, still before anything is written.
- **Only regular files are replaced**, atomically: the new content is written into a hidden staging folder next to
  the destination and renamed over it, so a reader (or a crash) sees the old file or the complete new one. A
  symlink to a regular file is written through (the link stays). A FIFO or character device (``/dev/null``, a
  pipe) gets the content as a stream and is never replaced by a regular file; a directory, a block device or a
  socket is refused.
- **Standard output is a stream.** ``-`` (the Unix convention), and any path that is the file standard output is
  open on (``/dev/stdout``, ``/proc/self/fd/1``, the FIFO or file the shell connected), is written through
  standard output itself; the guard's ``on_stdout`` callback is told first, so the command can move its own
  messages to stderr and keep the stream clean.
- **A failure leaves nothing behind.** Staging folders are always removed; when the guarded block fails, every
  output it already committed is undone: a new file is removed, a replaced file gets its previous content back.
  A stream cannot be taken back. Ctrl-C, SIGTERM and SIGHUP are failures like any other
  (:mod:`ampconfig.files.interrupts`).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ampconfig.errors import AmpconfigError
from ampconfig.files.interrupts import uninterrupted

log = logging.getLogger(__name__)

#: Bytes copied at a time when an output goes to a FIFO or device.
_STREAM_CHUNK = 1 << 20
#: The name the replaced file keeps inside the staging folder until the guarded block succeeds (for undo).
_BACKUP_NAME = ".previous"
#: The output path that means standard output.
STDOUT_PATH = "-"
#: How refusals and messages name standard output.
STDOUT_NAME = "<stdout>"


class DestinationKind(enum.Enum):
    NEW = "new file"
    REPLACE = "existing regular file"
    STREAM = "FIFO or character device"
    STDOUT = "standard output"


@dataclass(frozen=True)
class FileRole:
    """A path as the user spelled it, and the part it plays in this invocation ("mixlist (--modify-mixlist)")."""

    role: str
    path: Path


@dataclass(frozen=True)
class Destination:
    """A declared output: where the bytes really go (``target``: symlinks resolved) and how they get there."""

    declared: FileRole
    kind: DestinationKind
    target: Path

    @property
    def role(self) -> str:
        return self.declared.role

    @property
    def path(self) -> Path:
        return self.declared.path

    @property
    def is_stream(self) -> bool:
        return self.kind in (DestinationKind.STREAM, DestinationKind.STDOUT)

    @property
    def is_stdout(self) -> bool:
        return self.kind is DestinationKind.STDOUT

    @property
    def shown(self) -> str:
        """The path as messages show it (``<stdout>`` for standard output)."""
        return STDOUT_NAME if self.is_stdout else str(self.path)  # /dev/stdout too: it is the stream


@dataclass
class _Committed:
    """An output already moved into place (or a stale file taken away): what undoing it takes."""

    destination: Destination
    inode: tuple[int, int] | None  # (device, inode) of the file written, to undo only our own file
    backup: Path | None  # the previous content of a replaced file, hard-linked into the staging folder
    removed: bool = False  # a stale file moved into the staging folder (remove_stale): undo puts it back


def shown_path(path: str | Path) -> str:
    """A path as messages show it: ``-`` is ``<stdout>``."""
    return STDOUT_NAME if str(path) == STDOUT_PATH else str(path)


def _spelled(path: str | Path) -> str:
    """The path a spelling stands for: ``-`` is standard output, which the system names ``/dev/stdout``."""
    return _STDOUT_DEVICE if str(path) == STDOUT_PATH else str(path)


#: Standard output as a path (``/dev/fd/1`` where the system has no ``/dev/stdout``).
_STDOUT_DEVICE = "/dev/stdout" if os.path.exists("/dev/stdout") else "/dev/fd/1"


def same_file(first: str | Path, second: str | Path) -> bool:
    """Whether two spellings name one file: the same path once symlinks and ``..`` are resolved, or the same
    device and inode (hard links). ``-`` is standard output."""
    first, second = _spelled(first), _spelled(second)
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samefile(first, second)
    except (OSError, ValueError):  # either one missing (a new output), unreadable or not a valid path
        return False


def _folder_of(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def _reason(exc: OSError) -> str:
    """The OS's words (numpy's short writes carry no errno, only a message: "16384 requested and 0 written")."""
    return exc.strerror or str(exc) or type(exc).__name__


def _is_stdout(info: os.stat_result) -> bool:
    """Whether ``info`` is the file standard output is open on (a pipe, a terminal, a file the shell opened)."""
    try:
        stdout = os.fstat(STDOUT_FD)
    except OSError:  # standard output is closed
        return False
    return (stdout.st_dev, stdout.st_ino) == (info.st_dev, info.st_ino)


#: Standard output's file descriptor (what ``-`` writes to, whatever ``sys.stdout`` is at the time).
STDOUT_FD = 1


def classify(role: str, path: Path) -> Destination:
    """Where an output to ``path`` goes and how, or a clear error for a path that cannot be an output."""
    declared = FileRole(role, path)
    if str(path) == STDOUT_PATH:
        return Destination(declared, DestinationKind.STDOUT, Path(_STDOUT_DEVICE))
    try:
        info = os.stat(path)  # follows symlinks: a link to /dev/null is a character device here
    except FileNotFoundError:
        return _new_file(declared)
    except OSError as exc:  # a symlink loop, a file used as a folder, no permission to look
        raise AmpconfigError(
            f"cannot use this path for the {role}: {_reason(exc)}", file=str(path), hint="choose another path"
        ) from None
    mode = info.st_mode
    if _is_stdout(info) and not stat.S_ISDIR(mode):
        # /dev/stdout, /proc/self/fd/1, or the very file the shell redirected standard output to: one stream.
        return Destination(declared, DestinationKind.STDOUT, Path(_STDOUT_DEVICE))
    if stat.S_ISDIR(mode):
        raise AmpconfigError(f"the {role} path is a directory", file=str(path), hint="give a file name inside it")
    if stat.S_ISREG(mode):
        return Destination(declared, DestinationKind.REPLACE, Path(os.path.realpath(path)))
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return Destination(declared, DestinationKind.STREAM, path)
    what = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
    raise AmpconfigError(
        f"the {role} path is {what}; refusing to write to it", file=str(path), hint="choose a regular file"
    )


def _new_file(declared: FileRole) -> Destination:
    """A path that does not exist yet (or a dangling symlink): written where the resolved path points."""
    target = Path(os.path.realpath(declared.path))
    folder = target.parent
    given_folder = _folder_of(declared.path)
    if not folder.is_dir():
        raise AmpconfigError(
            f"the folder of the {declared.role} does not exist", file=str(given_folder), hint="create it first"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _unwritable_folder(declared, given_folder, "permission denied")
    return Destination(declared, DestinationKind.NEW, target)


def _unwritable_folder(declared: FileRole, folder: Path, reason: str) -> AmpconfigError:
    return AmpconfigError(
        f"cannot write the {declared.role} into this folder: {reason}",
        file=str(folder),
        hint="choose a folder you can write to",
    )


class OutputGuard:
    """Declared inputs and outputs of one invocation, and the only way it writes files.

    Use it as a context manager around the command's work: leaving the block with an exception undoes every
    output committed in it; leaving it in any way removes every staging folder::

        with OutputGuard() as guard:
            guard.read("mixlist (--modify-mixlist)", mixlist)
            report = guard.output("HTML report (--html)", html)  # refused here if html is the mixlist
            ...                                                  # the work
            guard.write_text(report, render(...))
    """

    def __init__(self, on_stdout: Callable[[Destination], None] | None = None) -> None:
        """``on_stdout`` is called when an output that is standard output is declared (before any work), so the
        caller can send everything else it prints to stderr."""
        self._on_stdout = on_stdout
        self._inputs: list[FileRole] = []
        self._outputs: list[Destination] = []
        self._staging: list[Path] = []
        self._committed: list[_Committed] = []

    # ------------------------------------------------------------------------------------------------ declare
    def read(self, role: str, path: str | Path | None) -> None:
        """Declare an input (``None``: not given). Refused when a declared output is the same file."""
        if path is None:
            return
        declared = FileRole(role, Path(path))
        for output in self._outputs:
            if same_file(output.path, declared.path):
                raise _collision(output.declared, declared)
        if not any(known.role == role and same_file(known.path, declared.path) for known in self._inputs):
            self._inputs.append(declared)

    def read_all(self, role: str, paths: Iterable[str | Path]) -> None:
        for path in sorted(Path(p) for p in paths):
            self.read(role, path)

    def output(self, role: str, path: str | Path) -> Destination:
        """Declare an output and check it: not an input, not another output, a writable kind of path in a folder
        that exists. Declaring the same role and file again returns the first declaration."""
        given = Path(path)
        for known in self._outputs:
            if same_file(known.path, given):
                if known.role == role:
                    return known
                raise _collision(FileRole(role, given), known.declared)
        for known_input in self._inputs:
            if same_file(known_input.path, given):
                raise _collision(FileRole(role, given), known_input)
        destination = classify(role, given)
        self._outputs.append(destination)
        if destination.is_stdout and self._on_stdout is not None:
            self._on_stdout(destination)
        return destination

    @property
    def inputs(self) -> tuple[FileRole, ...]:
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[Destination, ...]:
        return tuple(self._outputs)

    # ------------------------------------------------------------------------------------------------ write
    @contextmanager
    def staging(self, destination: Destination) -> Iterator[Path]:
        """A path with the destination's file name inside a private staging folder: write the output there (and
        any companion file, such as a model's external data, next to it under its final name). On a clean exit
        every file in the folder is moved into place; each must be a declared output. On an error nothing is."""
        folder = self._staging_folder(destination)
        staged = folder / destination.target.name
        try:
            yield staged
        except OSError as exc:
            raise _write_failed(destination, exc) from None
        self._commit(destination, folder, staged)

    def write_text(self, destination: Destination, text: str) -> Path:
        """Write ``text`` (UTF-8, ``\\n`` line ends) to a declared output; returns the path as given."""
        with self.staging(destination) as staged:
            staged.write_text(text, encoding="utf-8", newline="\n")
        return destination.path

    def _staging_folder(self, destination: Destination) -> Path:
        """A hidden folder next to the real destination (same filesystem: the final rename is atomic); for a
        stream, in the system's temporary folder (nothing is created next to /dev/null)."""
        where = None if destination.is_stream else destination.target.parent
        prefix = f".{destination.target.name}." if where is not None else "ampconfig-stream-"
        try:
            folder = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=where))
        except OSError as exc:
            if where is None:
                raise AmpconfigError(f"cannot create a temporary folder: {_reason(exc)}") from None
            raise _unwritable_folder(destination.declared, _folder_of(destination.path), _reason(exc)) from None
        self._staging.append(folder)
        return folder

    def _commit(self, destination: Destination, folder: Path, staged: Path) -> None:
        if not staged.is_file():
            raise AmpconfigError(f"nothing was written for the {destination.role}", file=str(destination.path))
        companions = sorted(
            path for path in folder.iterdir() if path != staged and not path.name.startswith(_BACKUP_NAME)
        )
        # Companions are checked like any output before anything moves; they go first so the main file never
        # points at a companion that is not there yet.
        moves = [(self._companion(destination, path.name), path) for path in companions]
        if destination.is_stream and moves:
            raise AmpconfigError(
                f"the {destination.role} needs a file next to it ({moves[0][1].name}), which a stream cannot have",
                file=destination.shown,
                hint="write it to a regular file",
            )
        for companion, path in moves:
            self._move(companion, path, folder)
            log.info("wrote the %s: %s", companion.role, companion.path)
        if destination.is_stream:
            self._stream(destination, staged)
        else:
            self._move(destination, staged, folder)
        how = " (streamed)" if destination.is_stream else ""
        log.info("wrote the %s: %s%s", destination.role, destination.path, how)

    def _companion(self, destination: Destination, name: str) -> Destination:
        """The declared output a companion file lands on; one nobody declared is declared (and checked) now."""
        path = destination.target.parent / name
        known = next((output for output in self._outputs if same_file(output.path, path)), None)
        return known if known is not None else self.output(f"{name} written with the {destination.role}", path)

    def _move(self, destination: Destination, staged: Path, folder: Path) -> None:
        """Rename a staged file over its destination, keeping the previous content (a hard link) for undo."""
        target = destination.target
        backup: Path | None = None
        try:
            _check_still_replaceable(destination)
            if target.is_file():
                os.chmod(staged, stat.S_IMODE(target.stat().st_mode))  # the new content keeps the old mode
                backup = self._keep_previous(target, folder)
            written = staged.stat()
            with uninterrupted():  # in place and recorded for undo together, or neither
                os.replace(staged, target)
                self._committed.append(_Committed(destination, (written.st_dev, written.st_ino), backup))
        except OSError as exc:
            raise _write_failed(destination, exc) from None

    @staticmethod
    def _keep_previous(target: Path, folder: Path) -> Path | None:
        backup = folder / f"{_BACKUP_NAME}.{target.name}"
        try:
            os.link(target, backup)
        except OSError:  # a filesystem without hard links: the replaced content cannot be restored
            return None
        return backup

    def remove_stale(self, role: str, path: Path) -> bool:
        """Take away a file an output just made stale (the ``OUT.onnx.data`` of the model that ``OUT.onnx`` was),
        unless it is an input or output of this invocation; a failure later in the block puts it back. Returns
        whether it was taken away."""
        known_paths = [known.path for known in self._inputs] + [known.path for known in self._outputs]
        if any(same_file(known, path) for known in known_paths):
            return False
        destination = classify(role, path)
        if destination.kind is not DestinationKind.REPLACE:
            return False
        backup = self._staging_folder(destination) / f"{_BACKUP_NAME}.{destination.target.name}"
        try:
            with uninterrupted():
                os.replace(destination.target, backup)
                self._committed.append(_Committed(destination, None, backup, removed=True))
        except OSError as exc:
            raise _write_failed(destination, exc) from None
        log.info("removed the %s: %s", role, path)
        return True

    def _stream(self, destination: Destination, staged: Path) -> None:
        """Copy the staged bytes into the FIFO or device, or into standard output. O_CREAT is not used: if the
        device vanished meanwhile, the open fails instead of creating a regular file in its place."""
        try:
            if destination.is_stdout:
                sys.stdout.flush()  # whatever was printed before goes first, not into the middle of the stream
                descriptor = os.dup(STDOUT_FD)
            else:
                descriptor = os.open(destination.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
            with os.fdopen(descriptor, "wb") as stream, staged.open("rb") as source:
                shutil.copyfileobj(source, stream, _STREAM_CHUNK)
        except OSError as exc:
            raise _write_failed(destination, exc) from None
        self._committed.append(_Committed(destination, None, None))

    # ------------------------------------------------------------------------------------------------ finish
    def __enter__(self) -> OutputGuard:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        with uninterrupted():  # a SIGTERM now waits until the cleanup is done
            try:
                if error is not None:
                    self._undo()
            finally:
                self._remove_staging()

    def _undo(self) -> None:
        """Take back every committed output, newest first: restore what was replaced, remove what is new."""
        for done in reversed(self._committed):
            target = done.destination.target
            if done.removed and done.backup is not None and not os.path.lexists(target):
                with contextlib.suppress(OSError):  # best effort, as below
                    os.replace(done.backup, target)
                continue
            if done.destination.is_stream or not _is_inode(target, done.inode):
                continue  # a stream cannot be taken back; a file someone replaced since is not ours to touch
            try:
                if done.backup is not None:
                    os.replace(done.backup, target)
                elif done.destination.kind is DestinationKind.NEW:
                    target.unlink()
            except OSError:
                continue  # best effort while another error is already on its way to the user
        self._committed.clear()

    def _remove_staging(self) -> None:
        for folder in self._staging:
            shutil.rmtree(folder, ignore_errors=True)
        self._staging.clear()


def _check_still_replaceable(destination: Destination) -> None:
    """The destination was checked when declared; what sits there now must still be a regular file (or nothing):
    a FIFO, device or folder that appeared meanwhile is never replaced."""
    try:
        mode = os.lstat(destination.target).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise AmpconfigError(
            f"the {destination.role} path is no longer a regular file; refusing to replace it",
            file=str(destination.path),
            hint="run the command again",
        )


def _is_inode(path: Path, inode: tuple[int, int] | None) -> bool:
    try:
        info = path.stat()
    except OSError:
        return False
    return inode is not None and (info.st_dev, info.st_ino) == inode


def _collision(output: FileRole, existing: FileRole) -> AmpconfigError:
    shown = shown_path(output.path)
    spelled = "" if str(output.path) == str(existing.path) else f" ({shown} is {existing.path})"
    return AmpconfigError(
        f"refusing to overwrite the {existing.role} with the {output.role}: they are the same file{spelled}",
        file=shown,
        hint=f"give the {output.role} another path",
    )


def _write_failed(destination: Destination, exc: OSError) -> AmpconfigError:
    if destination.is_stream and exc.errno == errno.EPIPE:
        return AmpconfigError(
            f"the reader of the {destination.role} went away (broken pipe): it was not delivered whole",
            file=destination.shown,
            hint="keep the reading end open until the command ends, or write to a file",
        )
    reason = "no space left on the device" if exc.errno == errno.ENOSPC else _reason(exc)
    outcome = "" if destination.is_stream else "; nothing was written"
    return AmpconfigError(
        f"cannot write the {destination.role}: {reason}{outcome}",
        file=destination.shown,
        hint="check the path, the folder's permissions and the free space",
    )
