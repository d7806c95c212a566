"""Messages between ampconfig and its ONNX Runtime worker: Python objects over a pair of pipes.

A message is pickled (protocol 5) with its large buffers (NumPy arrays, a model's bytes) sent beside the pickle,
out of band: an array crosses the pipe once and is read straight into its own memory on the other side, with no
copy into and out of one big bytes object. Both ends are ampconfig's own processes, so pickle reads only what
ampconfig wrote; no user file is ever unpickled.

Framing: a header of two little-endian 64-bit counts (pickle length, number of buffers), one 64-bit length per
buffer, the pickle, then the buffers. A pipe that ends (the other process died or closed it) is :class:`EOFError`
on reading and :class:`BrokenPipeError` on writing; a signal's exception (Ctrl-C) passes through unchanged, and
the channel is then unusable (a message may be half sent): its owner discards it.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import struct
import sys
from typing import Any

if sys.platform != "win32":
    import fcntl

_COUNTS = struct.Struct("<QQ")
_LENGTH = struct.Struct("<Q")
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


def large_bytes(data: bytes) -> pickle.PickleBuffer:
    """``data`` wrapped so that a message carries it out of band (a model's bytes: no copy into the pickle)."""
    return pickle.PickleBuffer(data)


class Channel:
    """One end of a worker conversation: ``send`` writes to ``write_fd``, ``recv`` reads from ``read_fd``. Owns and
    closes both descriptors."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._reader = io.FileIO(read_fd, "rb", closefd=True)
        self._writer = io.FileIO(write_fd, "wb", closefd=True)

    def send(self, message: Any) -> None:
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(message, protocol=PROTOCOL, buffer_callback=buffers.append)
        raws = [buffer.raw() for buffer in buffers]
        header = _COUNTS.pack(len(head), len(raws)) + b"".join(_LENGTH.pack(raw.nbytes) for raw in raws)
        for part in (memoryview(header), memoryview(head), *raws):
            self._write_all(part)

    def recv(self) -> Any:
        head_size, count = _COUNTS.unpack(self._read_exact(_COUNTS.size))
        sizes = [_LENGTH.unpack(self._read_exact(_LENGTH.size))[0] for _ in range(count)]
        head = self._read_exact(head_size)
        buffers = [self._read_exact(size) for size in sizes]
        return pickle.loads(head, buffers=buffers)

    def close(self) -> None:
        for stream in (self._writer, self._reader):
            with contextlib.suppress(OSError):  # closing a pipe whose reader died: nothing is left to flush
                stream.close()

    def _write_all(self, data: memoryview) -> None:
        data = data.cast("B")
        while data.nbytes:
            written = self._writer.write(data)
            if written is None:  # only a non-blocking descriptor returns None; ours block
                raise BrokenPipeError("the worker pipe does not take data")
            data = data[written:]

    def _read_exact(self, size: int) -> bytearray:
        buffer = bytearray(size)
        view = memoryview(buffer)
        while view.nbytes:
            read = self._reader.readinto(view)
            if not read:
                raise EOFError("the other end of the worker pipe closed")
            view = view[read:]
        return buffer
