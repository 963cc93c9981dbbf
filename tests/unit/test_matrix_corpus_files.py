"""What a matrix recording keeps of a broker's log files (matrix/corpus.py stamped_lines)."""

from __future__ import annotations

import pytest

from ingest.log_time import stamp_to_ms
from matrix.corpus import stamped_lines

pytestmark = pytest.mark.unit


def test_lines_in_range_with_their_continuations_from_rolled_files_first(tmp_path):
    (tmp_path / "server.log.1").write_bytes(
        b"[2026-11-26 05:00:00,000] INFO old (kafka.Foo)\n"
        b"[2026-11-26 05:00:10,000] ERROR in range, rolled (kafka.Foo)\n"
        b"java.lang.IllegalStateException: boom\n"
        b"\tat kafka.Foo.bar(Foo.java:1)\n")
    (tmp_path / "server.log").write_bytes(
        b"[2026-11-26 05:00:20,000] INFO in range (kafka.Foo)\n"
        b"[2026-11-26 05:00:40,000] INFO too late (kafka.Foo)\n"
        b"\tcontinuation of the late one\n"
        b"[2026-11-26 05:00:25,000] INFO in range again, no newline (kafka.Foo)")
    start, end = stamp_to_ms("2026-11-26 05:00:05,000"), stamp_to_ms("2026-11-26 05:00:30,000")
    assert stamped_lines(tmp_path, "server.log", start, end) == [
        b"[2026-11-26 05:00:10,000] ERROR in range, rolled (kafka.Foo)\n",
        b"java.lang.IllegalStateException: boom\n",
        b"\tat kafka.Foo.bar(Foo.java:1)\n",
        b"[2026-11-26 05:00:20,000] INFO in range (kafka.Foo)\n",
        b"[2026-11-26 05:00:25,000] INFO in range again, no newline (kafka.Foo)\n"]


def test_a_missing_log_keeps_nothing(tmp_path):
    assert stamped_lines(tmp_path, "controller.log", 0, 2**62) == []


def test_rolled_files_are_read_oldest_first(tmp_path):
    for n, minute in ((2, "01"), (1, "02")):
        (tmp_path / f"kafka-request.log.{n}").write_bytes(
            f"[2026-11-26 05:{minute}:00,000] DEBUG Completed request:{{}}\n".encode())
    (tmp_path / "kafka-request.log").write_bytes(
        b"[2026-11-26 05:03:00,000] DEBUG Completed request:{}\n")
    got = stamped_lines(tmp_path, "kafka-request.log", 0, 2**62)
    assert [x[15:17] for x in got] == [b"01", b"02", b"03"]
