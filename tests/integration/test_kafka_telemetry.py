"""The fleet path: an agent publishes to telemetry topics on a monitoring Kafka (KafkaSink),
the pipeline reads them with the Spark Kafka source (pipeline.source = "kafka"); the
monitoring Kafka goes away for a while (every broker paused) and nothing is lost or doubled:
every line counted once in the windows, and every line kept whole once (the broker is one of
the agent's `full_brokers`).

The session's real 3-broker cluster plays the monitoring Kafka, with its own topic prefix.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from infra.lake import Lake
from ingest.agent_metrics import AgentMetrics
from ingest.file_tailer import PositionStore
from ingest.request_log_agent import RequestLogAgent, RequestLogSource, WindowSettings
from ingest.sinks import KafkaSink
from jobs.pipeline import Pipeline
from jobs.streams import QUARANTINE, stream

FIXTURE = Path(__file__).parent.parent / "fixtures" / "request_log" / "kafka-4.3.1-request.log"


STEP_MS = 100       # between two lines: 500 lines span 50 s, some 10-s windows


def _produce_lines(n: int, start: int) -> list[bytes]:
    """Produce lines `start` .. `start + n - 1`, correlation id k, STEP_MS apart."""
    line = next(l for l in FIXTURE.read_text().splitlines() if '"requestApiKey":0' in l)
    first = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
    i = line.index("request:") + 8
    body = json.JSONDecoder().raw_decode(line, i)[0]
    out = []
    for k in range(start, start + n):
        ms = round(first.timestamp() * 1000) + k * STEP_MS
        stamp = datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        body["requestHeader"]["correlationId"] = k
        out.append((f"[{stamp},{ms % 1000:03d}]" + line[25:i]
                    + json.dumps(body, separators=(",", ":")) + " (kafka.request.logger)"
                    ).encode())
    return out


@pytest.mark.timeout(1200)
def test_agent_to_telemetry_topic_to_silver_survives_the_monitoring_kafka_being_down(
        kafka_cluster, spark, kmon_config, tmp_path):
    bs = kafka_cluster.bootstrap_servers
    prefix = f"kmontest{int(time.time())}."
    log = tmp_path / "kafka-request.log"
    log.write_bytes(b"\n".join(_produce_lines(300, 0)) + b"\n")
    registry = CollectorRegistry()
    metrics = AgentMetrics(registry, "kafka-path")
    sink = KafkaSink({"bootstrap.servers": bs, "delivery.timeout.ms": 6000,
                      "request.timeout.ms": 3000}, topic_prefix=prefix)
    positions = PositionStore(tmp_path / "positions.json")
    agent = RequestLogAgent([RequestLogSource("tel", 5, log)], sink, positions, metrics,
                            windows=WindowSettings(full_brokers=frozenset({5})))
    assert agent.poll_once() == 300

    # The monitoring Kafka goes away: every broker frozen while the agent publishes more.
    with open(log, "ab") as f:
        f.write(b"\n".join(_produce_lines(200, 300)) + b"\n")
    saved = positions.load()["tel/5"].offset
    assert saved > 0, "no window closed: the position is still at the first line"
    for n in kafka_cluster.nodes:
        kafka_cluster.pause(n.node_id)
    try:
        assert agent.poll_once() == 0  # flush failed: nothing counted as handled
        assert positions.load()["tel/5"].offset == saved, "position advanced without delivery"
        assert registry.get_sample_value("kmon_agent_flush_failures_total",
                                         {"agent": "kafka-path"}) >= 1
    finally:
        for n in kafka_cluster.nodes:
            kafka_cluster.resume(n.node_id)
    deadline = time.monotonic() + 120
    # Caught up once the windows the new lines closed are delivered (the last is still open).
    while positions.load()["tel/5"].offset == saved:
        assert time.monotonic() < deadline, "agent never caught up after the outage"
        agent.poll_once()
        time.sleep(1)
    done = threading.Event()
    done.set()
    agent.run(done)             # a clean stop: the open windows go out
    agent.close()
    sink.close()

    lake = Lake(str(tmp_path / "lake"))
    kafka_mode = kmon_config.with_overrides(pipeline={"source": "kafka"})
    Pipeline(spark, lake, kafka_mode.pipeline, kafka_options={"kafka.bootstrap.servers": bs},
             topic_prefix=prefix,
             streams=(stream("request_stages"), stream("request_windows"),
                      stream(QUARANTINE))).process_available()
    windows = spark.read.format("delta").load(lake.table("silver", "request_windows"))
    assert windows.groupBy().sum("requests").collect()[0][0] == 500
    bronze = spark.read.format("delta").load(lake.table("bronze", "request_stages"))
    assert bronze.where(f"kafka_topic = '{prefix}request_stages'").count() >= 500
    silver = spark.read.format("delta").load(lake.table("silver", "request_stages"))
    ids = [r["record_id"] for r in silver.select("record_id").collect()]
    assert len(ids) == 500 and len(set(ids)) == 500
    assert sorted(r["correlation_id"] for r in silver.select("correlation_id").collect()) == \
        list(range(500))


@pytest.mark.timeout(600)
def test_a_record_the_monitoring_kafka_acknowledged_is_not_sent_again(kafka_cluster, tmp_path):
    """A flush fails as a whole when some records fail, and the agent sends them all
    again; those the monitoring Kafka had already acknowledged must not be written twice
    (silver drops repeats only within its dedupe window, and a long outage outlasts it).
    One topic refuses every write (max.message.bytes below any batch) while the other
    takes them, then the refusing one is fixed and everything is sent again."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, NewTopic)

    from ingest.sinks import SinkError

    bs = kafka_cluster.bootstrap_servers
    prefix = f"kmonacked{int(time.time())}."
    admin = AdminClient({"bootstrap.servers": bs})
    fs = admin.create_topics([NewTopic(prefix + "log_events", 1, 1),
                              NewTopic(prefix + "broker_metrics", 1, 1,
                                       config={"max.message.bytes": "16"})])
    for f in fs.values():
        f.result(60)
    sink = KafkaSink({"bootstrap.servers": bs, "delivery.timeout.ms": 8000,
                      "request.timeout.ms": 3000, "retries": 2}, topic_prefix=prefix)

    def send_all() -> None:
        for i in range(20):
            sink.send("log_events", "k", {"record_id": f"e{i}", "i": i})
            sink.send("broker_metrics", "k", {"record_id": f"m{i}", "i": i})
        sink.flush(30)

    with pytest.raises(SinkError):
        send_all()                       # log_events acknowledged, broker_metrics refused
    res = ConfigResource(ConfigResource.Type.TOPIC, prefix + "broker_metrics",
                         incremental_configs=[ConfigEntry(
                             "max.message.bytes", "1048588",
                             incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(60)
    deadline = time.monotonic() + 60
    while True:                          # the agent's retry, until the topic takes them
        try:
            send_all()
            break
        except SinkError:
            assert time.monotonic() < deadline, "broker_metrics never took the records"
            time.sleep(2)
    sink.close()

    def ids(topic: str) -> list[str]:
        c = Consumer({"bootstrap.servers": bs, "group.id": f"audit-{time.time_ns()}",
                      "enable.partition.eof": True, "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(prefix + topic, 0, 0)])
        out = []
        try:
            while True:
                m = c.poll(10)
                assert m is not None, f"no end of {topic}"
                if m.error() is not None:
                    break                # end of the partition
                out.append(json.loads(m.value())["record_id"])
        finally:
            c.close()
        return out

    assert sorted(ids("log_events")) == sorted(f"e{i}" for i in range(20))
    assert sorted(ids("broker_metrics")) == sorted(f"m{i}" for i in range(20))
