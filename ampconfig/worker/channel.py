"""Messages between ampconfig and its ONNX Runtime worker: Python objects over a pair of pipes of their own.

A message is pickled (protocol 5) with its large buffers (NumPy arrays, a model's bytes) sent beside the pickle,
out of band: an array crosses the pipe once and is read straight into its own memory on the other side, with no
copy into and out of one big bytes object. Both ends are ampconfig's own processes, so pickle reads only what
ampconfig wrote; no user file is ever unpickled.

Framing: a header (the magic word ``AMPW``, the framing's version, the pickle's length and the number of buffers),
one 64-bit length per buffer, the pickle, then the buffers; every count and length is bounded. The pipes are never a
process's standard input or output, so nothing printed reaches them; a frame that still does not start with the
magic word, or whose sizes pass the bounds, is :class:`ChannelBroken`, a located error, never a wait for bytes that
will not come. A pipe that ends (the other process died or closed it) is :class:`EOFError` on reading and
:class:`BrokenPipeError` on writing; no byte for ``timeout`` seconds is :class:`ChannelSilent`. A signal's exception
(Ctrl-C) passes through unchanged, and the channel is then unusable (a message may be half sent): its owner
discards it. Sends from several threads (the worker's heartbeat beside its answer) go one whole frame at a time.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import select
import struct
import sys
import threading
import time
from typing import Any

from ampconfig.errors import AmpconfigError

if sys.platform != "win32":
    import fcntl

MAGIC = b"AMPW"
#: The framing's version: both ends are the same ampconfig, so another number is a stranger writing.
VERSION = 1
_HEADER = struct.Struct("<4sHHQQ")  # magic, version, spare, pickle length, number of buffers
_LENGTH = struct.Struct("<Q")
#: Bounds on a frame's sizes: a pickle (small Python objects; an array not contiguous goes inside it), the number of
#: buffers beside it and one buffer's length (a model's weights, an output).
MAX_PICKLE_BYTES = 1 << 32
MAX_BUFFERS = 1 << 16
MAX_BUFFER_BYTES = 1 << 40
#: Protocol 5 is the first that sends buffers out of band.
PROTOCOL = 5


#: Linux's fcntl command that sets a pipe's buffer size, and the size asked for: a 64 KiB pipe (the default) makes a
#: 343 MB model cross in 0.8-1.2 s of alternating writes and reads, a 1 MiB one in 0.35 s (benchmarks/worker.py).
_F_SETPIPE_SZ = 1031
PIPE_BYTES = 1 << 20


def pipe() -> tuple[int, int]:
    """A pipe (read end, write end) with the larger buffer where the platform lets a process set it."""
    read_fd, write_fd = os.pipe()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):  # a lower /proc/sys/fs/pipe-max-size: the default buffer stays
            fcntl.fcntl(write_fd, _F_SETPIPE_SZ, PIPE_BYTES)
    return read_fd, write_fd


class ChannelBroken(AmpconfigError):
    """A frame on the worker's channel is not one ampconfig wrote (no magic word, another version, sizes past the
    bounds)."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"the ONNX Runtime worker's channel carried {what}",
            hint="something other than ampconfig wrote into the worker's pipe; please report it with the command",
        )


class ChannelSilent(Exception):
    """No byte crossed the channel for the time the reader or writer gave it."""


def large_bytes(data: bytes) -> pickle.PickleBuffer:
    """``data`` wrapped so that a message carries it out of band (a model's bytes: no copy into the pickle)."""
    return pickle.PickleBuffer(data)


class Channel:
    """One end of a worker conversation: ``send`` writes to ``write_fd``, ``recv`` reads from ``read_fd``. Owns and
    closes both descriptors. ``timeout`` (seconds, None: no limit) bounds each wait for the other end to take or
    give a byte; the writing end is then non-blocking, so that a stopped reader with a full pipe is a timeout too."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._reader = io.FileIO(read_fd, "rb", closefd=True)
        self._writer = io.FileIO(write_fd, "wb", closefd=True)
        self._sending = threading.Lock()
        self._waits = sys.platform != "win32"  # select() takes pipes on POSIX only
        if self._waits:
            os.set_blocking(write_fd, False)

    def send(self, message: Any, timeout: float | None = None) -> None:
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(message, protocol=PROTOCOL, buffer_callback=buffers.append)
        raws = [buffer.raw() for buffer in buffers]
        header = _HEADER.pack(MAGIC, VERSION, 0, len(head), len(raws))
        header += b"".join(_LENGTH.pack(raw.nbytes) for raw in raws)
        with self._sending:
            for part in (memoryview(header), memoryview(head), *raws):
                self._write_all(part, timeout)

    def recv(self, timeout: float | None = None) -> Any:
        magic, version, _, head_size, count = _HEADER.unpack(self._read_exact(_HEADER.size, timeout))
        if magic != MAGIC:
            raise ChannelBroken(f"a frame that does not start with {MAGIC!r} (it starts with {bytes(magic)!r})")
        if version != VERSION:
            raise ChannelBroken(f"a frame of version {version}, not {VERSION}")
        if head_size > MAX_PICKLE_BYTES or count > MAX_BUFFERS:
            raise ChannelBroken(
                f"a frame of {head_size} bytes and {count} buffers (at most {MAX_PICKLE_BYTES} and {MAX_BUFFERS})"
            )
        sizes = [_LENGTH.unpack(self._read_exact(_LENGTH.size, timeout))[0] for _ in range(count)]
        if any(size > MAX_BUFFER_BYTES for size in sizes):
            raise ChannelBroken(f"a buffer of {max(sizes)} bytes (at most {MAX_BUFFER_BYTES})")
        head = self._read_exact(head_size, timeout)
        buffers = [self._read_exact(size, timeout) for size in sizes]
        try:
            return pickle.loads(head, buffers=buffers)
        except Exception as exc:  # noqa: BLE001 (whatever unpickling a stranger's bytes raises)
            raise ChannelBroken(f"a frame whose message cannot be read ({type(exc).__name__}: {exc})") from None

    def close(self) -> None:
        for stream in (self._writer, self._reader):
            with contextlib.suppress(OSError):  # closing a pipe whose reader died: nothing is left to flush
                stream.close()

    def _write_all(self, data: memoryview, timeout: float | None) -> None:
        data = data.cast("B")
        while data.nbytes:
            written = self._writer.write(data)
            if written is None:  # the pipe is full: wait until the reader takes some
                self._wait(self._writer, timeout)
                continue
            data = data[written:]

    def _read_exact(self, size: int, timeout: float | None) -> bytearray:
        buffer = bytearray(size)
        view = memoryview(buffer)
        while view.nbytes:
            if timeout is not None and self._waits:
                self._wait(self._reader, timeout)
            read = self._reader.readinto(view)
            if not read:
                raise EOFError("the other end of the worker pipe closed")
            view = view[read:]
        return buffer

    def _wait(self, stream: io.FileIO, timeout: float | None) -> None:
        """Until ``stream`` can be read or written (which its mode says), at most ``timeout`` seconds."""
        reading = stream is self._reader
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready = select.select([stream] if reading else [], [] if reading else [stream], [], left)
            if ready[0] or ready[1]:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise ChannelSilent(f"no byte crossed the worker's channel for {timeout:g} s")
