"""The client statistics hook: buffering, drop accounting, record ids, event time, retries.

A recording Sink stands in for kmon's own sink protocol; the statistics documents are the
real librdkafka 2.16 captures under tests/fixtures/client_stats/.
"""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.client_stats import parse_client_stats
from ingest.client_stats_hook import (MAX_DELIVERY_DELAY_S, ClientStatsHook, emitted_at_ms,
                                      kmon_stats_hook, row_record_id, stats_ts_us)
from ingest.sinks import SinkError
from tests.conftest import wait_until
from tests.unit.captured import fixture_lines

pytestmark = pytest.mark.unit

PRODUCER, CONSUMER, CONSUMER_848, CONSUMER_ELECTION = fixture_lines(
    "client_stats/librdkafka-2.16.jsonl")


class RecordingSink:
    """kmon's Sink protocol, kept in memory; fails the next `fail_flushes` flushes."""

    def __init__(self, fail_flushes: int = 0):
        self.sent: list[tuple[str, str, dict]] = []
        self.durable: list[tuple[str, str, dict]] = []
        self.fail_flushes = fail_flushes
        self.flushes = 0

    def send(self, stream, key, record):
        self.sent.append((stream, key, record))

    def flush(self, timeout=30.0):
        self.flushes += 1
        if self.fail_flushes:
            self.fail_flushes -= 1
            self.sent.clear()
            raise SinkError("monitoring Kafka down (test)")
        self.durable.extend(self.sent)
        self.sent.clear()

    def close(self):
        self.flush()

    def records(self, stream):
        return [r for s, _, r in self.durable if s == stream]


def ts_of(payload):
    return json.loads(payload)["ts"]


def make_hook(sink, **kw):
    """A hook on fake clocks where every document is delivered 2 s after librdkafka made it."""
    registry = CollectorRegistry()
    state = {"mono": 0.0}
    hook = ClientStatsHook("prod", sink, AgentMetrics(registry, "stats"),
                           clock=lambda: 1_800_000_000.0, monotonic=lambda: state["mono"], **kw)

    def deliver(payload):
        state["mono"] = ts_of(payload) / 1e6 + 2.0
        hook(payload)

    return hook, deliver, registry


def test_every_row_of_every_document_is_published_with_a_unique_record_id():
    sink = RecordingSink()
    hook, deliver, _ = make_hook(sink)
    for p in (PRODUCER, CONSUMER, CONSUMER_848, CONSUMER_ELECTION):
        deliver(p)
    assert hook.publish() == 4
    rows = sink.records("client_stats")
    expected = sum(len(parse_client_stats(p, cluster="prod")) for p in
                   (PRODUCER, CONSUMER, CONSUMER_848, CONSUMER_ELECTION))
    assert len(rows) == expected
    ids = [r["record_id"] for r in rows]
    assert len(set(ids)) == len(ids)
    assert sink.records("quarantine") == []


def test_record_ids_name_client_stats_ts_and_row_keys_and_repeat_for_the_same_document():
    first, second = RecordingSink(), RecordingSink()
    for sink in (first, second):
        hook, deliver, _ = make_hook(sink)
        deliver(PRODUCER)
        hook.publish()
    ids = [r["record_id"] for r in first.records("client_stats")]
    assert ids == [r["record_id"] for r in second.records("client_stats")]
    name, ts = "producer-acks-all#producer-3", ts_of(PRODUCER)
    assert f"prod:{name}:{ts}:client" in ids
    brokers = [r for r in first.records("client_stats") if r["scope"] == "broker"]
    assert brokers and all(r["record_id"] == f"prod:{name}:{ts}:broker:{r['node_id']}"
                           for r in brokers)
    parts = [r for r in first.records("client_stats") if r["scope"] == "partition"]
    assert parts and all(
        r["record_id"] == f"prod:{name}:{ts}:partition:{r['topic']}:{r['partition']}"
        for r in parts)


def test_row_record_id_of_a_group_row():
    assert row_record_id("c", 5, {"scope": "group", "name": "x#consumer-1"}) == \
        "c:x#consumer-1:5:group"


def test_event_time_is_when_librdkafka_emitted_the_document_not_when_poll_delivered_it():
    sink = RecordingSink()
    hook, deliver, _ = make_hook(sink)
    deliver(CONSUMER)  # delivered 2 s after it was made
    hook.publish()
    assert {r["ts_ms"] for r in sink.records("client_stats")} == {1_800_000_000_000 - 2_000}


@pytest.mark.parametrize("ts_us,mono,expected", [
    (5_000_000, 5.25, 999_750),                        # emitted 250 ms before delivery
    (None, 5.0, 1_000_000),                            # no ts: delivery time
    (9_000_000, 5.0, 1_000_000),                       # ts in the future: another clock
    (1_000_000, 2.0 + MAX_DELIVERY_DELAY_S, 1_000_000),  # implausibly old: another clock
])
def test_emitted_at_ms(ts_us, mono, expected):
    assert emitted_at_ms(ts_us, 1000.0, mono) == expected


def test_stats_ts_is_read_from_the_document():
    for p in (PRODUCER, CONSUMER, CONSUMER_848, CONSUMER_ELECTION):
        assert stats_ts_us(p) == ts_of(p)
    assert stats_ts_us('{"name": "a\\"ts\\": 5", "x": 1}') is None


def test_a_malformed_document_goes_to_quarantine_with_its_reason_and_a_stable_id():
    sink = RecordingSink()
    hook, _, _ = make_hook(sink)
    hook(PRODUCER[:500])
    hook('{"type": "producer", "time": 1}')
    hook.publish()
    q = sink.records("quarantine")
    assert [r["reason"] for r in q] == ["truncated_json", "missing_field:name"]
    assert all(r["source"] == "client_stats" and r["cluster"] == "prod" for r in q)
    assert q[0]["record_id"].startswith("prod:client_stats:") and \
        q[0]["record_id"] != q[1]["record_id"]
    assert sink.records("client_stats") == []


def test_a_full_buffer_drops_the_oldest_documents_and_counts_them():
    sink = RecordingSink()
    hook, deliver, registry = make_hook(sink, max_documents=3)
    docs = [PRODUCER, CONSUMER, CONSUMER_848, CONSUMER_ELECTION, PRODUCER]
    for p in docs:
        deliver(p)
    assert hook.buffered == 3 and hook.dropped == 2
    assert registry.get_sample_value("kmon_agent_dropped_records_total",
                                     {"agent": "stats", "reason": "buffer_full"}) == 2
    hook.publish()
    clients = [r for r in sink.records("client_stats") if r["scope"] == "client"]
    assert [r["name"] for r in clients] == [json.loads(p)["name"] for p in docs[2:]]


def test_the_buffer_is_bounded_by_characters_too():
    sink = RecordingSink()
    hook, deliver, _ = make_hook(sink, max_chars=len(CONSUMER) + len(PRODUCER))
    for p in (CONSUMER, CONSUMER, PRODUCER):
        deliver(p)
    assert hook.buffered == 2 and hook.dropped == 1


def test_the_callback_never_raises_into_the_client():
    hook, _, _ = make_hook(RecordingSink())
    hook(None)      # not a document at all
    hook(b"{}")     # bytes are accepted
    assert hook.buffered == 1


def test_a_failed_flush_keeps_the_documents_and_the_retry_sends_the_same_ids():
    sink = RecordingSink(fail_flushes=1)
    hook, deliver, registry = make_hook(sink)
    deliver(PRODUCER)
    deliver(CONSUMER)
    assert hook.publish() == 0
    assert hook.buffered == 2 and sink.durable == []
    assert registry.get_sample_value("kmon_agent_flush_failures_total", {"agent": "stats"}) == 1
    deliver(CONSUMER_848)
    assert hook.publish() == 3
    ids = [r["record_id"] for r in sink.records("client_stats")]
    assert len(ids) == len(set(ids))
    names = [r["name"] for r in sink.records("client_stats") if r["scope"] == "client"]
    assert names == [json.loads(p)["name"] for p in (PRODUCER, CONSUMER, CONSUMER_848)]


def test_documents_kept_after_a_failure_still_respect_the_bound():
    sink = RecordingSink(fail_flushes=1)
    hook, deliver, _ = make_hook(sink, max_documents=2)
    deliver(PRODUCER)
    deliver(CONSUMER)
    hook.publish()  # fails; both kept
    assert hook.buffered == 2 and hook.dropped == 0
    deliver(CONSUMER_848)  # the oldest (PRODUCER) goes
    assert hook.buffered == 2 and hook.dropped == 1


def test_the_background_thread_publishes_and_close_flushes_the_rest():
    sink = RecordingSink()
    hook = kmon_stats_hook("prod", sink, flush_interval_s=0.05)
    hook(PRODUCER)
    wait_until(lambda: sink.records("client_stats"), 10, "the background publish")
    hook.close()
    hook.close()  # safe to repeat
    n = len(sink.records("client_stats"))
    late = ClientStatsHook("prod", sink)  # never started: close alone publishes
    late(CONSUMER)
    late.close()
    assert len(sink.records("client_stats")) == n + len(parse_client_stats(CONSUMER,
                                                                           cluster="prod"))
