"""A real confluent-kafka Producer with the kmon stats hook ships its statistics as rows."""

from __future__ import annotations

import json
import time
import uuid

from confluent_kafka import Producer

from ingest.client_stats_hook import kmon_stats_hook
from ingest.sinks import LandingSink
from tests.conftest import wait_until
from tests.integration.test_local_cluster import create_topic


def landed(root, stream):
    """Every record of a stream in the landing folder (no folder yet: none)."""
    return [json.loads(line) for f in sorted((root / stream).glob("*.jsonl"))
            for line in f.read_text().splitlines() if line]


def test_a_producer_with_the_hook_ships_client_broker_and_partition_rows(kafka_cluster,
                                                                         tmp_path):
    topic = f"stats-{uuid.uuid4().hex[:6]}"
    create_topic(kafka_cluster, topic, partitions=3)
    landing = tmp_path / "landing"
    hook = kmon_stats_hook(cluster="it", sink=LandingSink(landing, "stats-hook"),
                           flush_interval_s=0.5)
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers,
                         "client.id": "hooked-producer", "acks": "all",
                         "statistics.interval.ms": 1000, "stats_cb": hook})
    start_ms = int(time.time() * 1000)
    sent = 0

    def broker_rows_with_rtt():
        nonlocal sent
        for _ in range(20):  # keep requests flowing so every window has round trips
            producer.produce(topic, value=f"m{sent}".encode())
            sent += 1
        producer.poll(0.2)  # delivers the statistics to the hook
        return [r for r in landed(landing, "client_stats")
                if r["scope"] == "broker" and (r["rtt_avg_ms"] or 0) > 0]

    try:
        rtt_rows = wait_until(broker_rows_with_rtt, 90, "broker rows with round-trip times")
        assert producer.flush(30) == 0
    finally:
        hook.close()

    rows = landed(landing, "client_stats")
    assert {r["node_id"] for r in rtt_rows} <= {1, 2, 3}
    assert all(r["broker_state"] and r["broker_name"] for r in rtt_rows)
    clients = [r for r in rows if r["scope"] == "client"]
    assert clients and all(r["type"] == "producer" and r["client_id"] == "hooked-producer"
                           and r["name"].startswith("hooked-producer#producer-")
                           for r in clients)
    assert all(r["cluster"] == "it" and r["ts_ms"] >= start_ms - 1000 for r in rows)
    assert {r["topic"] for r in rows if r["scope"] == "partition"} == {topic}
    ids = [r["record_id"] for r in rows]
    assert len(ids) == len(set(ids))
    assert all(r["record_id"].startswith(f"it:{r['name']}:") for r in rows)
    assert landed(landing, "quarantine") == []
    assert hook.dropped == 0
