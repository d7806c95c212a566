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
- **An interrupted command takes its outputs back, however late.** The command line holds every guard's outputs
  (:func:`hold_outputs`) until the process is about to end successfully (:func:`settle_outputs`): a signal after a
  guarded block succeeded, while the command still prints its results, takes them back as well
  (:func:`take_back_outputs`), so at every moment the previous content is intact or the command reports success.
- **Declaring many files costs what declaring one does.** Every declared path is indexed by what makes two
  spellings one file (its resolved path, its device and inode), so the check against earlier declarations is a
  lookup, not a comparison with each: a ``--data`` folder of 10,000 samples is declared in a fraction of a second.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Generic, TypeVar

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


@dataclass(frozen=True)
class _Identity:
    """What makes two spellings one file, as :func:`same_file` compares them: the path with symlinks and ``..``
    resolved, and the device and inode of a file that exists."""

    resolved: str
    inode: tuple[int, int] | None

    @classmethod
    def of(cls, path: str | Path) -> _Identity:
        spelled = _spelled(path)
        try:
            resolved = os.path.realpath(spelled)
        except ValueError:  # a NUL: no file can have this name; it is only ever the same as its own spelling
            return cls(os.path.abspath(spelled), None)
        try:
            info = os.stat(spelled)
        except (OSError, ValueError):  # missing (a new output), unreadable or not a valid path
            return cls(resolved, None)
        return cls(resolved, (info.st_dev, info.st_ino))

    def lookup_keys(self) -> tuple[tuple[object, ...], ...]:
        by_path: tuple[object, ...] = ("path", self.resolved)
        return (by_path,) if self.inode is None else (by_path, ("inode", *self.inode))


T = TypeVar("T")


class _Declared(Generic[T]):
    """Declared files in declaration order, found by identity in constant time."""

    def __init__(self) -> None:
        self.items: list[T] = []
        self._positions: dict[tuple[object, ...], list[int]] = {}

    def add(self, item: T, identity: _Identity) -> None:
        for key in identity.lookup_keys():
            self._positions.setdefault(key, []).append(len(self.items))
        self.items.append(item)

    def matching(self, identity: _Identity) -> list[T]:
        """The declared items that are the same file as ``identity``, first declared first."""
        positions = sorted({position for key in identity.lookup_keys() for position in self._positions.get(key, ())})
        return [self.items[position] for position in positions]


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
    try:
        if os.path.realpath(first) == os.path.realpath(second):
            return True
        return os.path.samefile(first, second)
    except (OSError, ValueError):  # either one missing (a new output), unreadable or not a valid path (a NUL)
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
    except ValueError:  # a NUL in the path (from a config: the command line cannot hold one)
        raise AmpconfigError(
            f"cannot use this path for the {role}: it holds a NUL character, which no file name can",
            file=str(path),
            hint="choose another path",
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
        self._inputs: _Declared[FileRole] = _Declared()
        self._outputs: _Declared[Destination] = _Declared()
        self._staging: list[Path] = []
        self._committed: list[_Committed] = []

    # ------------------------------------------------------------------------------------------------ declare
    def read(self, role: str, path: str | Path | None) -> None:
        """Declare an input (``None``: not given). Refused when a declared output is the same file."""
        if path is None:
            return
        declared = FileRole(role, Path(path))
        identity = _Identity.of(declared.path)
        for output in self._outputs.matching(identity):
            raise _collision(output.declared, declared)
        if not any(known.role == role for known in self._inputs.matching(identity)):
            self._inputs.add(declared, identity)

    def read_all(self, role: str, paths: Iterable[str | Path]) -> None:
        for path in sorted(Path(p) for p in paths):
            self.read(role, path)

    def read_each(self, inputs: Iterable[FileRole]) -> None:
        """Declare each input, in order."""
        for declared in inputs:
            self.read(declared.role, declared.path)

    def output(self, role: str, path: str | Path) -> Destination:
        """Declare an output and check it: not an input, not another output, a writable kind of path in a folder
        that exists. Declaring the same role and file again returns the first declaration."""
        given = Path(path)
        identity = _Identity.of(given)
        for known in self._outputs.matching(identity):
            if known.role == role:
                return known
            raise _collision(FileRole(role, given), known.declared)
        for known_input in self._inputs.matching(identity):
            raise _collision(FileRole(role, given), known_input)
        destination = classify(role, given)
        self._outputs.add(destination, identity)
        if destination.is_stdout and self._on_stdout is not None:
            self._on_stdout(destination)
        return destination

    @property
    def inputs(self) -> tuple[FileRole, ...]:
        return tuple(self._inputs.items)

    @property
    def outputs(self) -> tuple[Destination, ...]:
        return tuple(self._outputs.items)

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
        known = next(iter(self._outputs.matching(_Identity.of(path))), None)
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
        identity = _Identity.of(path)
        if self._inputs.matching(identity) or self._outputs.matching(identity):
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
                descriptor = _open_for_stream(destination)
            with os.fdopen(descriptor, "wb") as stream, staged.open("rb") as source:
                shutil.copyfileobj(source, stream, _STREAM_CHUNK)
        except OSError as exc:
            raise _write_failed(destination, exc) from None
        self._committed.append(_Committed(destination, None, None))

    # ------------------------------------------------------------------------------------------------ finish
    def __enter__(self) -> OutputGuard:
        if _held is not None:
            # Until its own exit has cleaned up: a signal can arrive inside __exit__ before its first line holds the
            # signals back, and the command line must then take this guard's outputs back itself.
            _held.open.append(self)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        with uninterrupted():  # a SIGTERM now waits until the cleanup is done
            try:
                if error is None and _held is not None and (self._committed or self._staging):
                    _held.guards.append(self)  # final when the command line settles its outputs
                    return
                try:
                    if error is not None:
                        taken_back = self._undo()
                        if _held is not None:
                            _held.taken_back.extend(taken_back)
                finally:
                    self._remove_staging()
            finally:
                if _held is not None and self in _held.open:
                    _held.open.remove(self)

    def _undo(self) -> list[str]:
        """Take back every committed output, newest first: restore what was replaced, remove what is new. Returns
        what was done to each, for the user."""
        said = []
        for done in reversed(self._committed):
            said.append(_undo_one(done))
        self._committed.clear()
        return said

    def _remove_staging(self) -> None:
        for folder in self._staging:
            shutil.rmtree(folder, ignore_errors=True)
        self._staging.clear()


def _undo_one(done: _Committed) -> str:
    """Take back one committed output (best effort: another error is already on its way to the user); what
    became of it."""
    destination = done.destination
    target, named = destination.target, f"the {destination.role} {destination.shown}"
    if done.removed:
        if done.backup is None or os.path.lexists(target):
            return f"{named} was taken away and someone has put a file there since: left as it is"
        try:
            os.replace(done.backup, target)
        except OSError as exc:
            return f"{named} could not be put back: {_reason(exc)}"
        return f"{named} is back"
    if destination.is_stream:
        return f"{named} was already written: a stream cannot be taken back"
    if not _is_inode(target, done.inode):
        return f"{named} was replaced by someone else meanwhile: left as it is"
    try:
        if done.backup is not None:
            os.replace(done.backup, target)
            return f"{named} has its previous content again"
        if destination.kind is DestinationKind.NEW:
            target.unlink()
            return f"{named} was removed again"
    except OSError as exc:
        return f"{named} could not be taken back: {_reason(exc)}"
    return f"{named} keeps the new content: its previous content could not be kept (no hard links here)"


# ------------------------------------------------------------------------------------------ held outputs
@dataclass
class _HeldOutputs:
    """What the command line holds until it settles: guards whose block succeeded, and what failed guards took
    back (to say so when the command ends by a signal)."""

    guards: list[OutputGuard] = field(default_factory=list)
    taken_back: list[str] = field(default_factory=list)
    #: guards entered whose exit has not finished (an interrupted one is taken back with the held ones)
    open: list[OutputGuard] = field(default_factory=list)


_held: _HeldOutputs | None = None


def hold_outputs() -> None:
    """From now on, for the rest of the process, a guard whose block succeeds keeps what taking its outputs back
    needs (the previous contents, its staging folders) until :func:`settle_outputs`. The command line calls this
    before a command runs; the library never does, so its guards finish when their block does."""
    global _held
    _held = _HeldOutputs()


def settle_outputs() -> None:
    """The held outputs are final: their staging folders (with the previous contents) are removed."""
    if _held is None:
        return
    with uninterrupted():
        for guard in _held.guards:
            guard._remove_staging()
        _held.guards.clear()


def take_back_outputs() -> list[str]:
    """Take back every held output, newest first (an interruption before the command ended successfully); what
    became of each output taken back, failed guards' outputs included, in the order it happened."""
    if _held is None:
        return []
    with uninterrupted():
        for guard in [*reversed(_held.open), *reversed(_held.guards)]:
            try:
                _held.taken_back.extend(guard._undo())
            finally:
                guard._remove_staging()
        _held.open.clear()
        _held.guards.clear()
    return list(_held.taken_back)


#: How long an output FIFO may have no reader before the command stops saying so (a reader started with the
#: command, ``ampconfig ... -o fifo & consumer < fifo``, opens it well within this).
FIFO_READER_WAIT_S = 5.0
_FIFO_POLL_S = 0.05


def _open_for_stream(destination: Destination) -> int:
    """The FIFO or device open for writing, without ever waiting for ever: opening a FIFO for writing blocks
    until something reads it, so it is opened non-blocking (ENXIO while nobody reads), retried for
    :data:`FIFO_READER_WAIT_S`, and then written in blocking mode (the reader sets the pace)."""
    flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    deadline = time.monotonic() + FIFO_READER_WAIT_S
    while True:
        try:
            descriptor = os.open(destination.path, flags)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:
                raise AmpconfigError(
                    f"nothing reads the FIFO the {destination.role} goes to (waited {FIFO_READER_WAIT_S:g} s)",
                    file=destination.shown,
                    hint="start its reader first (cat FIFO > FILE &), or write to a regular file",
                ) from None
            time.sleep(_FIFO_POLL_S)
            continue
        os.set_blocking(descriptor, True)
        return descriptor


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
