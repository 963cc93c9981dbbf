"""The broker log shipper and the JMX scraper against a real 3-broker Kafka 4.3.1 cluster.

A compacted topic with one partition led by each broker and ``segment.ms`` of half a
second gets keyed messages in a few bursts, so its segments roll and the log cleaner
compacts them (its thread looks for work every log.cleaner.backoff.ms, 15 s). Then:
the broker log agent, following every broker's four logs into a landing folder, publishes
the leader changes of the new partitions (state-change.log) and the cleaner's run summary
(log-cleaner.log) among the rest, each event once, also across a restart; the JMX scraper
returns every request stage's quantiles for Produce from every broker, and the log size of
each replica of the topic (three brokers x three partitions) with its topic and partition.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.broker_log_agent import BrokerLogAgent, broker_log_sources
from ingest.file_tailer import PositionStore
from ingest.jmx_scraper import JmxScraper, JmxSource
from ingest.sinks import LandingSink
from schemas.broker_metrics import LOG_SIZE, STAGES
from tests.conftest import wait_until

QUANTILES = {0.5, 0.75, 0.95, 0.98, 0.99, 0.999}


def landed(root: Path, stream: str) -> list[dict]:
    return [json.loads(line) for f in sorted((root / stream).glob("*.jsonl"))
            for line in f.read_text().splitlines()]


@pytest.fixture(scope="module")
def compacted_topic(kafka_cluster):
    """A compacted topic, partition p led by broker p+1, with a few rolled dirty segments."""
    name = f"agents-compacted-{uuid.uuid4().hex[:6]}"
    ids = [n.node_id for n in kafka_cluster.nodes]
    assignment = [ids[i:] + ids[:i] for i in range(len(ids))]   # first replica leads
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, len(ids), replica_assignment=assignment, config={
        "cleanup.policy": "compact", "segment.ms": "500", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0"})])[name].result(60)
    wait_until(lambda: all(p.leader >= 0 for p in
                           admin.list_topics(name, timeout=10).topics[name].partitions.values()),
               30, f"leaders for {name}")
    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap_servers, "acks": "all",
                         "linger.ms": 5})
    for _ in range(4):  # bursts further apart than segment.ms: each one rolls a segment
        for i in range(600):
            producer.produce(name, key=f"k{i % 20}".encode(), value=b"v" * 200,
                             partition=i % len(ids))
        assert producer.flush(30) == 0
        time.sleep(0.7)
    return name


def test_broker_log_agent_publishes_leader_changes_and_cleaner_runs_once(
        kafka_cluster, compacted_topic, tmp_path):
    sources = [s for n in kafka_cluster.nodes for s in broker_log_sources("it", n.node_id,
                                                                          n.log_dir)]
    positions = PositionStore(tmp_path / "positions.json")
    sink = LandingSink(tmp_path / "landing", "broker-log-agent")

    def new_agent():
        return BrokerLogAgent(sources, sink, positions,
                              AgentMetrics(CollectorRegistry(), "broker-log-agent"))

    agent, stop = new_agent(), threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop, 0.5), daemon=True)
    thread.start()
    try:
        def ours(kind):
            return [e for e in landed(tmp_path / "landing", "log_events")
                    if e["kind"] == kind and e["topic"] == compacted_topic]

        leaders = wait_until(lambda: {e["broker"] for e in ours("leader_change")} >= {1, 2, 3}
                             and ours("leader_change"), 30, "leader changes of the new topic")
        assert {e["log"] for e in leaders} == {"state-change"}
        runs = wait_until(lambda: ours("cleaner_run"), 60, f"a cleaner run on {compacted_topic}")
        assert runs[0]["log"] == "log-cleaner" and runs[0]["dirty_end"] > 0
        assert runs[0]["start_messages"] >= runs[0]["end_messages"]
    finally:
        stop.set()
        thread.join(30)
        agent.close()

    # A restart from the saved positions adds only what is new: no record twice.
    agent = new_agent()
    agent.poll_once()
    agent.close()
    events = landed(tmp_path / "landing", "log_events")
    ids = [e["record_id"] for e in events]
    assert len(ids) == len(set(ids))
    assert {e["log"] for e in events} == {"server", "controller", "state-change", "log-cleaner"}
    assert landed(tmp_path / "landing", "quarantine") == []


def test_jmx_scraper_returns_produce_stage_quantiles_for_every_broker(
        kafka_cluster, compacted_topic, tmp_path):
    registry = CollectorRegistry()
    scraper = JmxScraper([JmxSource("it", n.node_id, n.metrics_url) for n in kafka_cluster.nodes],
                         LandingSink(tmp_path / "landing", "jmx-scraper"),
                         AgentMetrics(registry, "jmx-scraper"))
    want = {(b, s) for b in (1, 2, 3) for s in STAGES}

    def last_round() -> list[dict]:
        records = landed(tmp_path / "landing", "broker_metrics")
        newest = max(r["ts_ms"] for r in records)
        return [r for r in records if r["ts_ms"] == newest]

    def produce_quantiles():
        scraper.poll_once()
        got: dict[tuple[int, str], set[float]] = {}
        for r in last_round():
            if r["request"] == "Produce" and r["quantile"] is not None:
                stage = r["metric"].removeprefix("kafka_network_requestmetrics_")
                got.setdefault((r["broker"], stage), set()).add(r["quantile"])
        return got if set(got) >= want else None

    try:
        got = wait_until(produce_quantiles, 30, "Produce stage quantiles from every broker")
    finally:
        scraper.close()
    assert all(got[k] == QUANTILES for k in want)
    records = last_round()
    counts = {r["broker"]: r["value"] for r in records
              if r["metric"] == "kafka_network_requestmetrics_totaltimems_count"
              and r["request"] == "Produce"}
    assert set(counts) == {1, 2, 3} and min(counts.values()) > 0
    assert {"kafka_log_logcleanermanager_max_dirty_percent",
            "kafka_log_logcleaner_deadthreadcount",
            "kafka_server_replicamanager_underreplicatedpartitions",
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent"} <= {
        r["metric"] for r in records}
    ids = [r["record_id"] for r in records]
    assert len(ids) == len(set(ids))
    assert landed(tmp_path / "landing", "quarantine") == []
    assert registry.get_sample_value("kmon_agent_scrape_failures_total",
                                     {"agent": "jmx-scraper", "source": "it/1"}) is None


def test_jmx_scraper_returns_the_log_size_of_every_replica(kafka_cluster, compacted_topic,
                                                             tmp_path):
    """kafka.log:type=Log,name=Size through the exporter rule: one series per replica, each
    with its topic and partition, bytes on disk (the topic has data on every replica)."""
    scraper = JmxScraper([JmxSource("it", n.node_id, n.metrics_url) for n in kafka_cluster.nodes],
                         LandingSink(tmp_path / "landing", "jmx-scraper"),
                         AgentMetrics(CollectorRegistry(), "jmx-scraper"))
    want = {(b, str(p)) for b in (1, 2, 3) for p in range(3)}

    def sizes():
        scraper.poll_once()
        records = landed(tmp_path / "landing", "broker_metrics")
        newest = max(r["ts_ms"] for r in records)
        got = {(r["broker"], r["labels"]["partition"]): r for r in records
               if r["ts_ms"] == newest and r["metric"] == LOG_SIZE
               and r["topic"] == compacted_topic}
        return got if set(got) == want and all(r["value"] > 0 for r in got.values()) else None

    try:
        got = wait_until(sizes, 30, f"the log size of every replica of {compacted_topic}")
    finally:
        scraper.close()
    assert all(r["labels"] == {"partition": p} and r["request"] is None
               and r["quantile"] is None for (_, p), r in got.items())
    assert landed(tmp_path / "landing", "quarantine") == []
