"""worker.channel: the worker's frames are ampconfig's alone; anything else on the pipe is a located error, never a
wait for bytes that will not come, and a silent other end is a timeout."""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterator

import numpy as np
import pytest

from ampconfig.worker.channel import MAGIC, VERSION, Channel, ChannelBroken, ChannelSilent, pipe


@pytest.fixture
def ends() -> Iterator[tuple[Channel, int]]:
    """A channel reading a pipe, and the raw write end of that pipe (a stranger writing into it)."""
    read_fd, write_fd = pipe()
    spare_read, spare_write = pipe()
    channel = Channel(read_fd, spare_write)
    yield channel, write_fd
    channel.close()
    for fd in (write_fd, spare_read):
        os.close(fd)


def test_printed_text_on_the_pipe_is_a_located_error_not_a_hang(ends: tuple[Channel, int]) -> None:
    """What a chatty sitecustomize prints: on main the header was read as two counts (about 7e18 bytes) and the
    reader waited for them for good."""
    channel, write_fd = ends
    os.write(write_fd, b"sitecustomize says hello\n" * 4)
    with pytest.raises(ChannelBroken) as broken:
        channel.recv(timeout=5)
    assert broken.value.message == (
        "the ONNX Runtime worker's channel carried a frame that does not start with b'AMPW' (it starts with b'site')"
    )


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (struct.pack("<4sHHQQ", MAGIC, VERSION + 1, 0, 1, 0), "a frame of version 2, not 1"),
        (struct.pack("<4sHHQQ", MAGIC, VERSION, 0, 1 << 50, 0), f"a frame of {1 << 50} bytes and 0 buffers"),
        (struct.pack("<4sHHQQ", MAGIC, VERSION, 0, 1, 1 << 40), "and 1099511627776 buffers"),
        (struct.pack("<4sHHQQQ", MAGIC, VERSION, 0, 1, 1, 1 << 60), f"a buffer of {1 << 60} bytes"),
        (struct.pack("<4sHHQQ", MAGIC, VERSION, 0, 3, 0) + b"abc", "a frame whose message cannot be read"),
    ],
)
def test_a_frame_past_its_bounds_is_a_located_error(ends: tuple[Channel, int], header: bytes, words: str) -> None:
    channel, write_fd = ends
    os.write(write_fd, header)
    with pytest.raises(ChannelBroken) as broken:
        channel.recv(timeout=5)
    assert words in broken.value.message


def test_no_byte_for_the_timeout_is_silence(ends: tuple[Channel, int]) -> None:
    channel, _ = ends
    started = time.monotonic()
    with pytest.raises(ChannelSilent):
        channel.recv(timeout=0.2)
    assert time.monotonic() - started >= 0.2


def test_a_reader_that_takes_nothing_is_silence_for_the_writer_too() -> None:
    """A stopped worker with a full pipe: the writer does not block for good."""
    read_a, write_a = pipe()
    read_b, write_b = pipe()
    writer = Channel(read_b, write_a)
    with pytest.raises(ChannelSilent):
        writer.send(np.ones(4 << 20, np.float32), timeout=0.3)  # 16 MB: more than any pipe buffer
    writer.close()
    for fd in (read_a, write_b):
        os.close(fd)


def test_whole_frames_cross_in_both_directions() -> None:
    read_a, write_b = pipe()
    read_b, write_a = pipe()
    a, b = Channel(read_a, write_a), Channel(read_b, write_b)
    b.send(("ok", {"value": np.arange(3.0)}, 7), timeout=5)
    kind, value, peak = a.recv(timeout=5)
    assert kind == "ok" and peak == 7
    np.testing.assert_array_equal(value["value"], [0.0, 1.0, 2.0])
    a.close()
    b.close()
