"""The request-log agent's edge aggregation (issue 24): the real captured request log of
the bursty-3b corpus through `RequestLogAgent` with a `WindowSettings`, into kmon's Sink
protocol kept in memory (`RecordingSink`, which can refuse a flush as a down monitoring
Kafka does). What a restart or a refused flush must not change: every line is counted in
exactly one window, and every record id that goes out twice goes out the same."""

from __future__ import annotations

import json
import lzma
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.file_tailer import PositionStore
from ingest.request_log import parse_request_line
from ingest.request_log_agent import RequestLogAgent, RequestLogSource, WindowSettings
from ingest.request_windows import aggregate
from tests.unit.test_request_windows import CORPUS_LOG

# Broker 2 of the same recording: its first lines hold OffsetCommits (broker 1 coordinates
# no group).
BROKER_2_LOG = CORPUS_LOG.parents[1] / "node-2" / CORPUS_LOG.name
from tests.unit.test_tail_agent import RecordingSink, append

pytestmark = pytest.mark.unit

WINDOW_STREAMS = ("request_windows", "follower_fetch_windows", "client_send_windows",
                  "request_exemplars")


@pytest.fixture(scope="module")
def corpus_lines() -> list[bytes]:
    """The first 4,000 lines of broker 2's request log, each with its newline."""
    out = []
    with lzma.open(BROKER_2_LOG) as f:
        for raw in f:
            out.append(raw)
            if len(out) == 4000:
                break
    return out


SETTINGS = WindowSettings({"slow_ms": 50.0, "sample_every": 100})


def agent(tmp_path, sink, batch_lines=500):
    src = RequestLogSource("bursty", 2, tmp_path / "kafka-request.log")
    return RequestLogAgent([src], sink, PositionStore(tmp_path / "pos.json"),
                           AgentMetrics(CollectorRegistry(), "request-log"),
                           batch_lines=batch_lines, windows=SETTINGS)


def finish(a: RequestLogAgent) -> None:
    """Read to the end, then stop: `run`'s last poll, then every open window emitted."""
    while a.poll_once() >= a.batch_lines:
        pass
    stop = threading.Event()
    stop.set()
    a.run(stop)


def unique(sink: RecordingSink) -> dict[tuple[str, str], dict]:
    """(stream, record_id) -> record (silver drops repeats per stream: an OffsetCommit
    that is an exemplar too goes to both under its line's id); a repeated id must repeat
    the same record."""
    out: dict[tuple[str, str], dict] = {}
    for stream, _, rec in sink.durable:
        seen = out.setdefault((stream, rec["record_id"]), rec)
        assert seen == rec, f"{stream} {rec['record_id']} went out twice, different"
    return out


def reference(log, lines) -> dict[tuple[str, str], dict]:
    """What the agent must send for `lines`, the content of file `log`: the windows
    `aggregate` builds from the parsed records (its exemplar samples hash the line's inode
    and offset, so it must be the same file), and the OffsetCommit records."""
    inode, at = log.stat().st_ino, 0
    out: dict[tuple[str, str], dict] = {}
    records = []
    for raw in lines:
        rid = f"bursty:2:{inode}:{at}"
        rec = {**parse_request_line(raw.rstrip(b"\n"), cluster="bursty", broker=2),
               "record_id": rid}
        records.append(rec)
        if rec["api"] == "OffsetCommit":
            out[("request_stages", rid)] = json.loads(json.dumps(rec))
        at += len(raw)
    # Given out of order: aggregate takes the lines' order from their ids.
    for o in aggregate(records[::-1], "bursty", 2, **SETTINGS.options):
        out[(o.stream, o.record["record_id"])] = json.loads(json.dumps(o.record))
    return out


def uninterrupted(tmp_path, lines) -> tuple[dict[tuple[str, str], dict], Path]:
    """What one run that reads everything at once sends, and its log."""
    sink = RecordingSink()
    a = agent(tmp_path, sink)
    append(tmp_path / "kafka-request.log", b"".join(lines))
    finish(a)
    return unique(sink), tmp_path / "kafka-request.log"


def test_every_line_is_counted_once_and_commits_go_out_whole(tmp_path, corpus_lines):
    got, log = uninterrupted(tmp_path, corpus_lines)
    assert got == reference(log, corpus_lines)
    parsed = [parse_request_line(x.rstrip(b"\n"), cluster="bursty", broker=2)
              for x in corpus_lines]
    assert all(isinstance(r, dict) for r in parsed)
    windows = [r for (s, _), r in got.items() if s == "request_windows"]
    assert sum(w["requests"] for w in windows) == len(parsed)
    assert {s for s, _ in got} == {*WINDOW_STREAMS, "request_stages"}
    commits = [r for (s, _), r in got.items() if s == "request_stages"]
    assert commits and all(r["api"] == "OffsetCommit" for r in commits)
    assert len(commits) == sum(r["api"] == "OffsetCommit" for r in parsed)
    # Every exemplar is a real line: its id names the line's byte offset.
    starts, at = set(), 0
    for x in corpus_lines:
        starts.add(at)
        at += len(x)
    for (s, _), r in got.items():
        if s == "request_exemplars":
            assert int(r["record_id"].rsplit(":", 1)[1]) in starts
            assert ("request_windows", r["window_id"]) in got


def test_crashes_and_refused_flushes_change_nothing(tmp_path, corpus_lines):
    log = tmp_path / "kafka-request.log"
    sink = RecordingSink()
    a = agent(tmp_path, sink, batch_lines=300)
    chunks = [corpus_lines[i:i + 350] for i in range(0, len(corpus_lines), 350)]
    for i, chunk in enumerate(chunks):
        append(log, b"".join(chunk))
        if i % 4 == 1:
            sink.fail_flushes = 1          # the buffered records are lost, and re-read
        a.poll_once()
        if i % 3 == 2:
            a.close()                      # kill -9: nothing emitted at the end
            sink._buffer.clear()
            a = agent(tmp_path, sink, batch_lines=300)
    finish(a)
    assert unique(sink) == reference(log, corpus_lines)
    saved = json.loads((tmp_path / "pos.json").read_text())
    assert saved["bursty/2"]["state"]["version"] == 1


def test_a_crash_between_the_last_send_and_its_save_resends_the_same(tmp_path, corpus_lines):
    """flush_all's records refused: the next start rebuilds them, identical."""
    sink = RecordingSink()
    a = agent(tmp_path, sink)
    append(tmp_path / "kafka-request.log", b"".join(corpus_lines))
    while a.poll_once():
        pass
    sink.fail_flushes = 1               # refuses flush_all's records
    finish(a)
    a.close()
    finish(agent(tmp_path, sink))
    assert unique(sink) == reference(tmp_path / "kafka-request.log", corpus_lines)


def test_a_crash_after_the_last_send_before_its_save_then_more_lines(tmp_path, corpus_lines):
    """flush_all's records delivered, the agent killed before it saved again, and the
    broker wrote on meanwhile: the restart must re-emit those windows as they went out
    (their boundary was saved before the send), and count the new lines once, in deltas."""
    sink = RecordingSink()
    a = agent(tmp_path, sink)
    log = tmp_path / "kafka-request.log"
    append(log, b"".join(corpus_lines[:2500]))
    while a.poll_once() >= a.batch_lines:
        pass
    real_flush = sink.flush

    def flush_then_die(timeout: float = 30.0):
        real_flush(timeout)                  # flush_all's records are out ...
        raise KeyboardInterrupt("killed")    # ... and the agent dies before saving again
    sink.flush = flush_then_die
    with pytest.raises(KeyboardInterrupt):
        finish(a)
    a.close()
    sink.flush = real_flush
    assert sum(s == "request_windows" for s, _, _ in sink.durable)
    append(log, b"".join(corpus_lines[2500:]))
    finish(agent(tmp_path, sink))
    got = unique(sink)   # no id went out twice with different contents
    assert sum(r["requests"] for (s, _), r in got.items()
               if s == "request_windows") == len(corpus_lines)


def test_a_full_broker_ships_its_windows_and_every_request(tmp_path, corpus_lines):
    sink = RecordingSink()
    src = RequestLogSource("bursty", 2, tmp_path / "kafka-request.log")
    a = RequestLogAgent([src], sink, PositionStore(tmp_path / "pos.json"),
                        AgentMetrics(CollectorRegistry(), "request-log"),
                        windows=WindowSettings(SETTINGS.options, full_brokers=frozenset({2})))
    append(src.path, b"".join(corpus_lines))
    finish(a)
    got = unique(sink)
    whole = [r for (s, _), r in got.items() if s == "request_stages"]
    assert len(whole) == len(corpus_lines)
    assert sum(r["requests"] for (s, _), r in got.items()
               if s == "request_windows") == len(corpus_lines)


def test_a_line_from_the_future_is_quarantined_and_the_windows_go_on(tmp_path, corpus_lines):
    """One line stamped in 2030 must not become the broker's window clock: it goes to
    quarantine as future_event_time, and the windows of the lines after it are still
    emitted as their time passes (before the fix, every later line was a late delta held
    until 2030)."""
    sink = RecordingSink()
    a = agent(tmp_path, sink)
    log = tmp_path / "kafka-request.log"
    head, tail = corpus_lines[:1000], corpus_lines[1000:]
    future = b"[2030" + corpus_lines[1000][5:]
    append(log, b"".join(head) + future + b"".join(tail))
    while a.poll_once() >= a.batch_lines:
        pass
    q = [rec for stream, _, rec in sink.durable if stream == "quarantine"]
    assert [(r["reason"], r["raw"][:5]) for r in q] == [("future_event_time", "[2030")]
    last = parse_request_line(tail[-1].rstrip(b"\n"), cluster="bursty", broker=2)["ts_ms"]
    starts = [rec["ts_ms"] for stream, _, rec in sink.durable if stream == "request_windows"]
    # every window that closed by the last line's time went out without a flush_all
    assert max(starts) >= last - 10_000 - 2 * 10_000, (max(starts), last)
    finish(a)
    total = sum(rec["requests"] for stream, _, rec in sink.durable
                if stream == "request_windows")
    assert total == len(corpus_lines)     # every line but the one from 2030
