"""The shared file-agent loop (ingest/tail_agent.py), through the request log agent.

The agent aggregates into windows, as it always does, and has its broker among
`full_brokers`, so every line also goes out whole to request_stages under its line's
record id: what these tests count. The position it saves is where a restart must re-read
from, the first line of a window still open (ingest/request_log_agent.py); a line stamped
a window and its lateness after the others (`LATER_LINE`) closes their window and moves it.

Also home of `RecordingSink`, kmon's own Sink protocol kept in memory (not Kafka), which
the other agent tests import: it records what a flush made durable and can refuse a flush
the way a down monitoring Kafka or a full disk does (the buffered records are gone).
"""

from __future__ import annotations

import json
import os
import threading

import pytest
from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.file_tailer import MAX_ROTATED, PositionStore
from ingest.request_log_agent import RequestLogAgent, RequestLogSource, WindowSettings
from ingest.sinks import SinkError
from tests.unit.captured import fixture_lines

pytestmark = pytest.mark.unit

_FIXTURE = [line for line in fixture_lines("request_log/kafka-4.3.1-request.log")
            if line.strip()]
REQUEST_LINES = _FIXTURE[:6]    # 2.1 s of broker time, in one 10-s window
# 31.5 s after the last of them: past their window's end and the aggregator's lateness.
LATER_LINE = _FIXTURE[15]


class RecordingSink:
    """Sink protocol in memory: `durable` holds (stream, key, record) of successful flushes."""

    def __init__(self):
        self.durable: list[tuple[str, str, dict]] = []
        self.fail_flushes = 0
        self._buffer: list[tuple[str, str, dict]] = []

    def send(self, stream: str, key: str, record: dict) -> None:
        # Through JSON, as both real sinks do (and NaN is refused the same way).
        self._buffer.append((stream, key, json.loads(json.dumps(record, allow_nan=False))))

    def flush(self, timeout: float = 30.0) -> None:
        buffered, self._buffer = self._buffer, []
        if self.fail_flushes:
            self.fail_flushes -= 1
            raise SinkError(f"test sink refused {len(buffered)} records")
        self.durable += buffered

    def close(self) -> None:
        self.flush()

    def records(self, stream: str) -> list[dict]:
        return [r for s, _, r in self.durable if s == stream]


class Clock:
    def __init__(self, t: float = 1_796_000_000.0):  # after every fixture line (none is "future")
        self.t = t

    def __call__(self) -> float:
        return self.t


def append(path, text: str | bytes) -> None:
    with open(path, "ab") as f:
        f.write(text.encode() if isinstance(text, str) else text)


def rotate(path, keep: int = 5) -> None:
    """What log4j2's DefaultRolloverStrategy does: .1 -> .2 ..., x.log -> x.log.1, new x.log."""
    for i in range(keep - 1, 0, -1):
        if os.path.exists(f"{path}.{i}"):
            os.replace(f"{path}.{i}", f"{path}.{i + 1}")
    os.replace(path, f"{path}.1")
    open(path, "wb").close()


def request_agent(tmp_path, sink, registry=None):
    src = RequestLogSource("c", 1, tmp_path / "kafka-request.log")
    metrics = AgentMetrics(registry or CollectorRegistry(), "request-log-agent")
    return RequestLogAgent([src], sink, PositionStore(tmp_path / "pos.json"), metrics,
                           windows=WindowSettings(full_brokers=frozenset({1})))


def stop(agent) -> None:
    """A clean stop: `run`'s last poll, every open window emitted, then close."""
    done = threading.Event()
    done.set()
    agent.run(done)
    agent.close()


def window_requests(sink) -> int:
    return sum(w["requests"] for w in sink.records("request_windows"))


def test_publishes_each_line_with_its_record_id_and_saves_the_position(tmp_path):
    log = tmp_path / "kafka-request.log"
    append(log, "".join(line + "\n" for line in REQUEST_LINES[:3]))
    sink = RecordingSink()
    agent = request_agent(tmp_path, sink)
    assert agent.poll_once() == 3
    recs = sink.records("request_stages")
    inode = os.stat(log).st_ino
    starts = [0, len(REQUEST_LINES[0]) + 1, len(REQUEST_LINES[0]) + len(REQUEST_LINES[1]) + 2]
    assert [r["record_id"] for r in recs] == [f"c:1:{inode}:{s}" for s in starts]
    assert all(r["cluster"] == "c" and r["broker"] == 1 for r in recs)
    # Their window is open: a restart must read them again.
    assert PositionStore(tmp_path / "pos.json").load()["c/1"] == (inode, 0)
    assert agent.poll_once() == 0 and len(sink.durable) == 3
    size = os.path.getsize(log)
    append(log, LATER_LINE + "\n")
    assert agent.poll_once() == 1
    assert window_requests(sink) == 3
    assert PositionStore(tmp_path / "pos.json").load()["c/1"] == (inode, size)
    assert len(sink.records("request_stages")) == 4


def test_malformed_line_goes_to_quarantine_with_reason_and_record_id(tmp_path):
    log = tmp_path / "kafka-request.log"
    append(log, REQUEST_LINES[0] + "\n" + REQUEST_LINES[1][:80] + "\n")
    sink = RecordingSink()
    request_agent(tmp_path, sink).poll_once()
    [q] = sink.records("quarantine")
    assert q["source"] == "request_log" and q["reason"] == "truncated_json"
    assert q["record_id"] == f"c:1:{os.stat(log).st_ino}:{len(REQUEST_LINES[0]) + 1}"
    assert q["origin"] == str(log) and q["broker"] == 1


def test_failed_flush_rewinds_so_the_next_poll_sends_everything_once(tmp_path):
    log = tmp_path / "kafka-request.log"
    append(log, "".join(line + "\n" for line in REQUEST_LINES[:4]))
    sink = RecordingSink()
    registry = CollectorRegistry()
    agent = request_agent(tmp_path, sink, registry)
    sink.fail_flushes = 1
    assert agent.poll_once() == 0
    assert sink.durable == [] and PositionStore(tmp_path / "pos.json").load() == {}
    assert registry.get_sample_value("kmon_agent_flush_failures_total",
                                     {"agent": "request-log-agent"}) == 1
    append(log, REQUEST_LINES[4] + "\n")
    assert agent.poll_once() == 5
    ids = [r["record_id"] for r in sink.records("request_stages")]
    assert len(ids) == len(set(ids)) == 5


def test_restart_across_rotation_neither_loses_nor_repeats(tmp_path):
    log = tmp_path / "kafka-request.log"
    append(log, REQUEST_LINES[0] + "\n" + REQUEST_LINES[1] + "\n")
    sink = RecordingSink()
    agent = request_agent(tmp_path, sink)
    agent.poll_once()
    agent.close()                                   # the agent stops ...
    append(log, REQUEST_LINES[2] + "\n")
    rotate(log)                                     # ... the broker rolls its log ...
    append(log, REQUEST_LINES[3] + "\n")
    agent = request_agent(tmp_path, sink)           # ... and a new agent resumes
    agent.poll_once()
    stop(agent)
    # It re-read the open window's lines from the rotated file: sent again, the same
    # (silver keeps one per id), and counted once.
    whole = {}
    for r in sink.records("request_stages"):
        assert whole.setdefault(r["record_id"], r) == r
    old, new = os.stat(f"{log}.1").st_ino, os.stat(log).st_ino
    starts = [0, len(REQUEST_LINES[0]) + 1, len(REQUEST_LINES[0]) + len(REQUEST_LINES[1]) + 2]
    assert sorted(whole) == sorted([f"c:1:{old}:{s}" for s in starts] + [f"c:1:{new}:0"])
    assert window_requests(sink) == 4


def test_file_rotated_out_of_reach_while_down_is_counted_as_dropped(tmp_path):
    log = tmp_path / "kafka-request.log"
    append(log, REQUEST_LINES[0] + "\n")
    sink = RecordingSink()
    request_agent(tmp_path, sink).poll_once()
    append(log, REQUEST_LINES[1] + "\n")
    rotate(log)
    os.remove(f"{log}.1")                           # rolled past DefaultRolloverStrategy.max
    append(log, REQUEST_LINES[2] + "\n")
    registry = CollectorRegistry()
    request_agent(tmp_path, sink, registry).poll_once()
    assert registry.get_sample_value("kmon_agent_dropped_records_total",
                                     {"agent": "request-log-agent", "reason": "rotated_away"}) == 1
    assert len(sink.records("request_stages")) == 2


def test_source_names_must_be_unique(tmp_path):
    src = RequestLogSource("c", 1, tmp_path / "a.log")
    with pytest.raises(ValueError, match="unique"):
        RequestLogAgent([src, src], RecordingSink(), PositionStore(tmp_path / "p.json"),
                        AgentMetrics(CollectorRegistry(), "a"), windows=WindowSettings())


# ---- lost spans: input the agent cannot read back is quarantined, counted, logged ---------

def lost_rows(sink):
    return [r for r in sink.records("quarantine") if r["reason"].startswith("lost_span:")]


def dropped(registry, reason):
    return registry.get_sample_value("kmon_agent_dropped_records_total",
                                     {"agent": "request-log-agent", "reason": reason})


def one_line_saved(tmp_path):
    """A request log of one line, then one whose time closes the first's window, read and
    saved past the first by an agent that then stops: the log, its sink and the saved
    position (the start of the second line, whose window is still open)."""
    log = tmp_path / "kafka-request.log"
    append(log, REQUEST_LINES[0] + "\n" + LATER_LINE + "\n")
    sink = RecordingSink()
    agent = request_agent(tmp_path, sink)
    agent.poll_once()
    agent.close()
    saved = PositionStore(tmp_path / "pos.json").load()["c/1"]
    assert saved.offset == len(REQUEST_LINES[0]) + 1
    return log, sink, saved


def test_file_rotated_out_of_reach_while_down_is_one_lost_span_row(tmp_path, caplog):
    log, sink, saved = one_line_saved(tmp_path)
    # The agent is down while the broker rolls its log more than MAX_ROTATED times (held
    # open: a freed inode would be reused by a newer file, see ingest/file_tailer.py).
    with open(log, "rb"):
        for i in range(MAX_ROTATED + 2):
            rotate(log, keep=MAX_ROTATED)
            append(log, REQUEST_LINES[1 + i % 5] + "\n")
    oldest = f"{log}.{MAX_ROTATED}"
    registry = CollectorRegistry()
    sink.fail_flushes = 1                           # the first flush fails: sent again
    agent = request_agent(tmp_path, sink, registry)
    assert agent.poll_once() == 0
    assert agent.poll_once() == MAX_ROTATED + 1     # every file still there, then the live one
    [row] = lost_rows(sink)
    assert row["reason"] == "lost_span:rotated_away" and row["source"] == "request_log"
    assert row["record_id"] == f"request_stages:c/1:lost_span:{saved.inode}:{saved.offset}"
    assert json.loads(row["raw"]) == {
        "from": {"inode": saved.inode, "offset": saved.offset, "path": None},
        "to": {"inode": os.stat(oldest).st_ino, "offset": 0, "path": oldest}}
    assert row["cluster"] == "c" and row["broker"] == 1 and row["origin"] == str(log)
    assert dropped(registry, "rotated_away") == 1   # once, though found again by the rewind
    assert len([r for r in caplog.records if "lost_span:rotated_away" in r.getMessage()]) == 1
    assert len(sink.records("request_stages")) == 2 + MAX_ROTATED + 1
    agent.close()
    registry = CollectorRegistry()                  # a restart after the save: nothing again
    request_agent(tmp_path, sink, registry).poll_once()
    assert len(lost_rows(sink)) == 1 and dropped(registry, "rotated_away") is None


def test_restart_before_the_flush_sends_the_same_lost_span_row(tmp_path):
    log = tmp_path / "kafka-request.log"
    append(log, REQUEST_LINES[0] + "\n" + REQUEST_LINES[1] + "\n" + LATER_LINE + "\n")
    sink = RecordingSink()
    request_agent(tmp_path, sink).poll_once()       # saved at LATER_LINE's start
    with open(log, "r+b") as f:                     # truncated in place while down
        f.truncate(0)
    append(log, REQUEST_LINES[2] + "\n")
    sink.fail_flushes = 1
    request_agent(tmp_path, sink).poll_once()       # killed before a flush got through
    assert lost_rows(sink) == []
    request_agent(tmp_path, sink).poll_once()
    request_agent(tmp_path, sink).poll_once()
    [row] = lost_rows(sink)
    inode = os.stat(log).st_ino
    end = len(REQUEST_LINES[0]) + len(REQUEST_LINES[1]) + 2
    assert row["reason"] == "lost_span:truncated"
    assert row["record_id"] == f"request_stages:c/1:lost_span:{inode}:{end}"
    assert json.loads(row["raw"]) == {"from": {"inode": inode, "offset": end, "path": str(log)},
                                      "to": {"inode": inode, "offset": 0, "path": str(log)}}


def test_file_truncated_while_read_is_a_lost_span_and_reading_goes_on(tmp_path):
    log = tmp_path / "kafka-request.log"
    append(log, REQUEST_LINES[0] + "\n")
    sink = RecordingSink()
    registry = CollectorRegistry()
    agent = request_agent(tmp_path, sink, registry)
    agent.poll_once()
    with open(log, "r+b") as f:
        f.truncate(0)
    append(log, REQUEST_LINES[1] + "\n")
    assert agent.poll_once() == 1
    [row] = lost_rows(sink)
    assert row["reason"] == "lost_span:truncated"
    assert dropped(registry, "truncated") == 1
    append(log, LATER_LINE + "\n")                 # closes the window of what was read
    assert agent.poll_once() == 1
    assert PositionStore(tmp_path / "pos.json").load()["c/1"].offset == len(REQUEST_LINES[1]) + 1
    assert window_requests(sink) == 2


def test_a_newer_file_that_took_the_saved_inode_is_a_lost_span_not_a_resume(tmp_path):
    log, sink, saved = one_line_saved(tmp_path)
    assert PositionStore(tmp_path / "pos.json").load_heads()["c/1"].startswith("64:")
    # While down, the file was rolled away and deleted, and a newer file got its inode
    # (as ext4 does); shown here by rewriting it in place: same inode, other lines.
    with open(log, "r+b") as f:
        f.truncate(0)
        f.write(("\n".join(REQUEST_LINES[1:4]) + "\n").encode())
    agent = request_agent(tmp_path, sink)
    assert agent.poll_once() == 3                   # every line of the newer file
    [row] = lost_rows(sink)
    assert row["reason"] == "lost_span:rotated_away"
    assert row["record_id"] == f"request_stages:c/1:lost_span:{saved.inode}:{saved.offset}"


def test_the_lag_grows_while_flushes_fail(tmp_path):
    """What an operator watches during a sink outage: the bytes not yet delivered, from the
    saved position (the first line of the window still open), not the figure of the last
    good flush."""
    log = tmp_path / "kafka-request.log"
    append(log, REQUEST_LINES[0] + "\n")
    sink, registry = RecordingSink(), CollectorRegistry()
    agent = request_agent(tmp_path, sink, registry)

    def lag():
        return registry.get_sample_value("kmon_agent_source_lag_bytes",
                                         {"agent": "request-log-agent", "source": "c/1"})
    agent.poll_once()
    held = len(REQUEST_LINES[0]) + 1                # its window is open
    assert lag() == held
    sink.fail_flushes = 2
    append(log, REQUEST_LINES[1] + "\n")
    assert agent.poll_once() == 0
    assert lag() == held + len(REQUEST_LINES[1]) + 1
    append(log, LATER_LINE + "\n")
    agent.poll_once()
    assert lag() == held + len(REQUEST_LINES[1]) + len(LATER_LINE) + 2
    agent.poll_once()                               # the sink is back: the window closes
    assert lag() == len(LATER_LINE) + 1
