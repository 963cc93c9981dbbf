"""The demo workload's producer pause: no new messages while paused, the same rate after,
and no burst for the time paused. A real librdkafka producer pointed at a closed port
(it queues what it is given); this is about the workload's loop, not about Kafka."""

from __future__ import annotations

import time

import pytest

from faults.workload import ProducerSpec, Workload

pytestmark = pytest.mark.unit


def _count(w: Workload, name: str) -> int:
    return w.producers[name].counts["messages"]


def _wait_until(check, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_paused_producer_sends_nothing_and_resumes_without_a_burst(tmp_path):
    w = Workload("127.0.0.1:1", tmp_path)
    spec = ProducerSpec("p", "t", 200, acks="1")
    w.start_producer(spec)
    try:
        _wait_until(lambda: _count(w, "p") >= 20)
        w.pause_producer("p")
        time.sleep(0.3)                       # a tick already under way may finish
        paused_at = _count(w, "p")
        time.sleep(1.0)                       # 200 messages' worth
        assert _count(w, "p") == paused_at

        w.resume_producer("p")
        _wait_until(lambda: _count(w, "p") > paused_at)
        # One 0.1-s tick at 200/s is 20 messages: a catch-up for the second paused
        # would be 200 at once.
        assert _count(w, "p") - paused_at <= 60
    finally:
        w.stop(timeout_s=15)
