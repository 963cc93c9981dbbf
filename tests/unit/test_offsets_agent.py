"""The offsets reader's pure parts: its position store, record ids, forced read-only settings,
and the partition_offsets record and table (the broker side is in tests/integration)."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.offsets_agent import (DEFAULT_GROUP_ID, OffsetsAgent, OffsetsPositionStore,
                                  ReaderState, offsets_record_id, reader_config)
from ingest.partition_offsets_agent import is_internal, partition_offsets_record
from ingest.sinks import LandingSink
from schemas import partition_offsets

pytestmark = pytest.mark.unit


def test_position_store_without_a_file_is_empty(tmp_path):
    state = OffsetsPositionStore(tmp_path / "none.json").load()
    assert state.positions == {} and state.committed == frozenset()


def test_position_store_round_trip_and_leaves_no_temporary_file(tmp_path):
    store = OffsetsPositionStore(tmp_path / "sub" / "offsets.json")
    state = ReaderState({0: 12, 49: 3, 7: 0}, frozenset({("orders", 0), ("orders", 2), ("b", 1)}))
    store.save(state)
    assert store.load() == state
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["offsets.json"]
    doc = json.loads((tmp_path / "sub" / "offsets.json").read_text())
    assert doc == {"positions": {"0": 12, "7": 0, "49": 3},
                   "committed": {"b": [1], "orders": [0, 2]}}


def test_position_store_save_replaces_the_previous_state(tmp_path):
    store = OffsetsPositionStore(tmp_path / "offsets.json")
    store.save(ReaderState({0: 1}, frozenset({("t", 0)})))
    store.save(ReaderState({0: 5, 1: 2}, frozenset({("t", 0), ("t", 1)})))
    assert store.load() == ReaderState({0: 5, 1: 2}, frozenset({("t", 0), ("t", 1)}))


def test_record_id_names_cluster_topic_partition_and_offset():
    assert offsets_record_id("prod", 17, 4242) == "prod:__consumer_offsets:17:4242"


def test_reader_config_passes_connection_settings_and_forces_read_only():
    user = {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "mon", "sasl.password": "x",
            "ssl.ca.location": "/etc/ca.pem", "enable.auto.commit": True,
            "isolation.level": "read_uncommitted"}
    conf = reader_config(user)
    for k in ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username",
              "sasl.password", "ssl.ca.location"):
        assert conf[k] == user[k]
    assert conf["enable.auto.commit"] is False and conf["enable.auto.offset.store"] is False
    assert conf["isolation.level"] == "read_committed"
    assert conf["group.id"] == DEFAULT_GROUP_ID
    assert reader_config({"bootstrap.servers": "k", "group.id": "mine"})["group.id"] == "mine"


def test_agent_resumes_its_saved_state_and_connects_to_nothing_when_built(tmp_path):
    OffsetsPositionStore(tmp_path / "p.json").save(ReaderState({3: 9}, frozenset({("t", 1)})))
    agent = OffsetsAgent("c", {"bootstrap.servers": "127.0.0.1:1"},
                         LandingSink(tmp_path / "landing", "t"), tmp_path / "p.json",
                         AgentMetrics(CollectorRegistry(), "offsets"))
    assert agent.saved_positions() == {3: 9}
    assert agent.committed_partitions() == frozenset({("t", 1)})
    agent.close()  # safe without a consumer


@pytest.mark.parametrize("cluster,conf", [("", {"bootstrap.servers": "k"}), ("c", {})],
                         ids=["no_cluster", "no_bootstrap"])
def test_agent_refuses_an_incomplete_configuration(tmp_path, cluster, conf):
    with pytest.raises(ValueError):
        OffsetsAgent(cluster, conf, LandingSink(tmp_path, "t"), tmp_path / "p.json",
                     AgentMetrics(CollectorRegistry(), "offsets"))


def test_partition_offsets_record_has_the_schema_fields_in_order_and_a_record_id():
    rec = partition_offsets_record("prod", 1_700_000_000_123, "orders", 4, 10, 250, 2)
    assert list(rec) == partition_offsets.SCHEMA.fieldNames() + ["record_id"]
    assert rec["record_id"] == "prod:orders:4:1700000000123"
    assert rec["earliest_offset"] == 10 and rec["latest_offset"] == 250 and rec["leader"] == 2


@pytest.mark.parametrize("leader", [-1, None])
def test_partition_offsets_record_without_a_leader_leaves_it_null(leader):
    assert partition_offsets_record("c", 1, "t", 0, 0, 0, leader)["leader"] is None


def test_partition_offsets_table_declares_schema_derived_required_checks_and_docs():
    t = partition_offsets
    assert t.SILVER_SCHEMA.fieldNames() == t.SCHEMA.fieldNames() + list(t.DERIVED)
    assert set(t.REQUIRED) <= set(t.SCHEMA.fieldNames())
    assert list(t.COLUMNS) == t.SILVER_SCHEMA.fieldNames()
    assert all(t.COLUMNS.values())
    assert {"negative_partition", "negative_offset", "earliest_after_latest"} <= set(t.CHECKS)


def test_internal_topics_are_the_double_underscore_ones():
    assert is_internal("__consumer_offsets") and is_internal("__transaction_state")
    assert not is_internal("orders") and not is_internal("_schemas")


class FakeWatermarks:
    """Only what the lost-span rule asks of a consumer: the log start (no Kafka here; the
    broker side is in tests/integration/test_offsets_agent.py)."""

    def __init__(self, low: int):
        self.low = low

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        return (self.low, self.low + 100)


@pytest.mark.parametrize("expected,offset,low,lost", [
    (10, 11, 0, None),       # the next record: no jump
    (10, 15, 3, None),       # a jump over compacted records: the log still starts before it
    (10, 15, 10, None),      # the log starts exactly where the reader goes on
    (10, 15, 12, (10, 12)),  # records 10 and 11 were deleted: lost up to the log start
    (10, 15, 40, (10, 15)),  # the log start moved past the record read: lost up to it
], ids=["next", "compacted", "log_start_at_position", "deleted", "log_start_past_record"])
def test_a_jump_is_a_lost_span_only_when_the_log_starts_after_the_position(
        tmp_path, expected, offset, low, lost):
    from tests.unit.test_tail_agent import RecordingSink
    sink = RecordingSink()
    registry = CollectorRegistry()
    agent = OffsetsAgent("c", {"bootstrap.servers": "127.0.0.1:1"}, sink, tmp_path / "p.json",
                         AgentMetrics(registry, "offsets"))
    agent._reading[7] = expected
    for _ in range(2):                       # found twice (a rewind): counted once
        agent._check_continuity(FakeWatermarks(low), 7, offset, 1_000)
    sink.flush()
    rows = sink.records("quarantine")
    if lost is None:
        assert rows == []
        return
    assert len(rows) == 2 and rows[0] == rows[1]
    row = rows[0]
    assert row["reason"] == "lost_span:log_start_moved" and row["source"] == "consumer_offsets"
    assert row["record_id"] == f"c:__consumer_offsets:7:lost_span:{expected}"
    assert json.loads(row["raw"]) == {"from": {"offset": lost[0]}, "to": {"offset": lost[1]},
                                      "lost": lost[1] - lost[0]}
    assert (row["source_partition"], row["source_offset"]) == (7, expected)
    assert registry.get_sample_value("kmon_agent_dropped_records_total",
                                     {"agent": "offsets", "reason": "log_start_moved"}) == \
        lost[1] - lost[0]
