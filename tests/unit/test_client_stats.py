"""ingest/client_stats.py: librdkafka statistics from confluent-kafka 2.16.1 flattened into rows."""

from __future__ import annotations

import json

import pytest

from ingest import client_stats
from ingest.client_stats import parse_client_stats
from ingest.malformed import Malformed
from tests.unit.captured import fixture_lines

pytestmark = pytest.mark.unit

PRODUCER, CONSUMER, CONSUMER_848, CONSUMER_ELECTION = fixture_lines(
    "client_stats/librdkafka-2.16.jsonl")


def rows(payload, scope=None, **kw):
    got = parse_client_stats(payload, cluster="test", **kw)
    assert not isinstance(got, Malformed), got
    return [r for r in got if scope is None or r["scope"] == scope]


@pytest.mark.parametrize("payload", [PRODUCER, CONSUMER, CONSUMER_848, CONSUMER_ELECTION],
                         ids=["producer", "classic_consumer", "kip848_consumer",
                              "consumer_during_leader_change"])
def test_every_row_has_the_record_shape(payload):
    for r in rows(payload):
        assert list(r) == list(client_stats.RECORD_FIELDS)
        json.dumps(r)


SCOPE_COUNTS = [
    ("producer", PRODUCER, {"client": 1, "broker": 3, "partition": 3}),
    ("classic_consumer_coordinator_entry_left_out", CONSUMER,
     {"client": 1, "broker": 3, "partition": 3, "group": 1}),
    ("kip848_consumer", CONSUMER_848, {"client": 1, "broker": 3, "partition": 3, "group": 1}),
    ("consumer_with_two_brokers_left", CONSUMER_ELECTION,
     {"client": 1, "broker": 2, "partition": 1, "group": 1}),
]


@pytest.mark.parametrize("payload,expected", [c[1:] for c in SCOPE_COUNTS],
                         ids=[c[0] for c in SCOPE_COUNTS])
def test_one_row_per_scope_member(payload, expected):
    counts: dict[str, int] = {}
    for r in rows(payload):
        counts[r["scope"]] = counts.get(r["scope"], 0) + 1
    assert counts == expected


def test_producer_broker_latencies_are_converted_from_microseconds():
    (b3,) = [r for r in rows(PRODUCER, "broker") if r["node_id"] == 3]
    assert {k: b3[k] for k in (
        "cluster", "ts_ms", "client_id", "name", "type", "broker_name", "broker_state",
        "rtt_p50_ms", "rtt_p99_ms", "rtt_avg_ms", "int_latency_p50_ms", "int_latency_p99_ms",
        "int_latency_avg_ms", "outbuf_latency_p50_ms", "throttle_avg_ms", "txerrs", "rxerrs",
        "req_timeouts", "topic")} == {
        "cluster": "test", "ts_ms": 1795343920000, "client_id": "producer-acks-all",
        "name": "producer-acks-all#producer-3", "type": "producer",
        "broker_name": "127.0.0.1:47235/3", "broker_state": "UP",
        "rtt_p50_ms": 7.263, "rtt_p99_ms": 157.695, "rtt_avg_ms": 82.151,
        "int_latency_p50_ms": 23.807, "int_latency_p99_ms": 24.191, "int_latency_avg_ms": 23.713,
        "outbuf_latency_p50_ms": 0.011, "throttle_avg_ms": 0.0, "txerrs": 0, "rxerrs": 0,
        "req_timeouts": 0, "topic": None}


def test_consumer_partition_offsets_and_lag():
    (p0,) = [r for r in rows(CONSUMER, "partition") if r["partition"] == 0]
    assert {k: p0[k] for k in (
        "topic", "leader", "fetch_state", "committed_offset", "stored_offset", "app_offset",
        "lo_offset", "hi_offset", "ls_offset", "consumer_lag", "consumer_lag_stored",
        "msgq_cnt", "txmsgs", "rxmsgs", "node_id")} == {
        "topic": "orders", "leader": 2, "fetch_state": "active", "committed_offset": 312,
        "stored_offset": 312, "app_offset": 312, "lo_offset": 0, "hi_offset": 312,
        "ls_offset": 312, "consumer_lag": 0, "consumer_lag_stored": 0, "msgq_cnt": 0,
        "txmsgs": 0, "rxmsgs": 312, "node_id": None}


def test_consumer_group_row():
    (g,) = rows(CONSUMER, "group")
    assert {k: g[k] for k in ("group_state", "join_state", "rebalance_cnt", "rebalance_reason",
                              "assignment_size")} == {
        "group_state": "up", "join_state": "steady", "rebalance_cnt": 1,
        "rebalance_reason": "Metadata for subscribed topic(s) has changed", "assignment_size": 3}


def test_unknown_offsets_and_lag_during_a_leader_change_are_null():
    (p,) = rows(CONSUMER_ELECTION, "partition")
    assert p["fetch_state"] == "validate-epoch-wait"
    assert p["app_offset"] is None  # -1001, librdkafka's INVALID
    assert p["committed_offset"] == 200


def test_callback_time_wins_over_the_whole_second_wall_clock():
    assert {r["ts_ms"] for r in rows(PRODUCER, ts_ms=1795343920456)} == {1795343920456}


def test_partition_minus_one_is_left_out():
    assert all(r["partition"] >= 0 for r in rows(CONSUMER, "partition"))
    assert '"-1"' in CONSUMER


# ---- bad input --------------------------------------------------------------------------

def payload_without(key: str) -> str:
    doc = json.loads(PRODUCER)
    del doc[key]
    return json.dumps(doc)


def payload_with(**changes) -> str:
    return json.dumps(json.loads(PRODUCER) | changes)


MALFORMED = [
    ("empty", "", "empty_line"),
    ("garbage_bytes", b"\xff\xfe{", "not_utf8"),
    ("cut_short", PRODUCER[:300], "truncated_json"),
    ("not_json", "statistics: none", "invalid_json"),
    ("json_array", "[1, 2]", "wrong_type:statistics"),
    ("missing_name", payload_without("name"), "missing_field:name"),
    ("missing_type", payload_without("type"), "missing_field:type"),
    ("missing_wall_clock", payload_without("time"), "missing_field:time"),
    ("name_not_a_string", payload_with(name=7), "wrong_type:name"),
    ("brokers_not_an_object", payload_with(brokers=[1]), "wrong_type:brokers"),
    ("broker_entry_not_an_object", payload_with(brokers={"b/1": 5}), "wrong_type:brokers"),
    ("counter_as_string", payload_with(msg_cnt="7"), "wrong_type:msg_cnt"),
    ("counter_as_boolean", payload_with(msg_cnt=True), "wrong_type:msg_cnt"),
]


@pytest.mark.parametrize("payload,reason", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_bad_payloads_give_malformed(payload, reason):
    got = parse_client_stats(payload, cluster="test")
    assert isinstance(got, Malformed), got
    assert (got.source, got.reason) == ("client_stats", reason)
    assert got.raw == payload


def test_oversize_payload(monkeypatch):
    monkeypatch.setattr(client_stats, "MAX_PAYLOAD_CHARS", 1000)
    got = parse_client_stats(PRODUCER, cluster="test")
    assert isinstance(got, Malformed) and got.reason == "oversize_line"
