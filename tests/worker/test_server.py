"""worker.server: the worker's side of the channel, run here in the test's process over a real pipe with a real
ONNX Runtime session: progress only for a listener and at most about ten messages a second, and the heartbeat while
a request runs."""

from __future__ import annotations

import select
import time
from collections.abc import Iterator

import numpy as np
import pytest

from ampconfig.worker.channel import Channel, ChannelSilent, pipe
from ampconfig.worker.server import HEARTBEAT_S, PROGRESS_INTERVAL_S, Worker, _Heartbeat
from tests.graphs import one_relu

X = {"x": np.array([-1.0, 2.0], np.float32)}


@pytest.fixture
def worker_and_listener() -> Iterator[tuple[Worker, Channel]]:
    """A worker whose messages go to a pipe, and the channel that reads them (the main process's side)."""
    to_worker = pipe()
    from_worker = pipe()
    worker = Worker(Channel(to_worker[0], from_worker[1]))
    listener = Channel(from_worker[0], to_worker[1])
    yield worker, listener
    worker.channel.close()
    listener.close()


def _messages(listener: Channel) -> list[tuple[object, ...]]:
    received = []
    while True:
        try:
            received.append(listener.recv(timeout=0.3))
        except ChannelSilent:
            return received


def _session(worker: Worker) -> int:
    opened = worker.open(one_relu().SerializeToString(), "cpu", False, None, None, False, None, None)
    return int(opened["id"])


def test_timing_sends_no_progress_without_a_listener(worker_and_listener: tuple[Worker, Channel]) -> None:
    """On main every timed iteration sent a message, listened to or not (2,000 here)."""
    worker, listener = worker_and_listener
    worker.listening = False
    samples = worker.time(_session(worker), X, warmup=0, iterations=2000, label="relu")
    assert len(samples) == 2000
    readable, _, _ = select.select([listener._reader], [], [], 0.1)
    assert readable == []  # not one byte


def test_progress_for_a_listener_is_at_most_about_ten_messages_a_second(
    worker_and_listener: tuple[Worker, Channel],
) -> None:
    """The first and the last count always go; between them, one per PROGRESS_INTERVAL_S (main: one per run)."""
    worker, listener = worker_and_listener
    worker.listening = True
    number = _session(worker)
    started = time.monotonic()
    worker.time(number, X, warmup=5, iterations=3000, label="relu")
    elapsed = time.monotonic() - started
    messages = _messages(listener)
    assert all(message[0] == "progress" and message[1] == "relu" for message in messages)
    assert messages[0][2:] == (0, 3005) and messages[-1][2:] == (3005, 3005)
    assert len(messages) <= elapsed / PROGRESS_INTERVAL_S + 2, (len(messages), elapsed)


def test_a_running_request_sends_heartbeats_and_none_after_it(worker_and_listener: tuple[Worker, Channel]) -> None:
    worker, listener = worker_and_listener
    heartbeat = _Heartbeat(worker.channel, None)
    with heartbeat.running():
        time.sleep(2.5 * HEARTBEAT_S)  # a long computation
    beats = _messages(listener)
    assert [beat[0] for beat in beats] == ["alive", "alive"]
    assert all(isinstance(beat[1], int) and beat[1] > 0 for beat in beats)  # the peak memory, in bytes
    time.sleep(1.5 * HEARTBEAT_S)
    assert _messages(listener) == []  # idle: silent
