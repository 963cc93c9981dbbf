"""The fleet path: an agent publishes to telemetry topics on a monitoring Kafka (KafkaSink),
the pipeline reads them with the Spark Kafka source (pipeline.source = "kafka"); the
monitoring Kafka goes away for a while (every broker paused) and nothing is lost or doubled.

The session's real 3-broker cluster plays the monitoring Kafka, with its own topic prefix.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from infra.lake import Lake
from ingest.agent_metrics import AgentMetrics
from ingest.file_tailer import PositionStore
from ingest.request_log_agent import RequestLogAgent, RequestLogSource
from ingest.sinks import KafkaSink
from jobs.pipeline import Pipeline
from jobs.streams import QUARANTINE, stream

FIXTURE = Path(__file__).parent.parent / "fixtures" / "request_log" / "kafka-4.3.1-request.log"


def _produce_lines(n: int, start: int) -> list[bytes]:
    line = next(l for l in FIXTURE.read_text().splitlines() if '"requestApiKey":0' in l)
    i = line.index("request:") + 8
    body = json.JSONDecoder().raw_decode(line, i)[0]
    out = []
    for k in range(start, start + n):
        body["requestHeader"]["correlationId"] = k
        out.append((line[:i] + json.dumps(body, separators=(",", ":"))
                    + " (kafka.request.logger)").encode())
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
    agent = RequestLogAgent([RequestLogSource("tel", 5, log)], sink, positions, metrics)
    assert agent.poll_once() == 300

    # The monitoring Kafka goes away: every broker frozen while the agent publishes more.
    with open(log, "ab") as f:
        f.write(b"\n".join(_produce_lines(200, 300)) + b"\n")
    saved = positions.load()["tel/5"].offset
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
    while positions.load()["tel/5"].offset < log.stat().st_size:
        assert time.monotonic() < deadline, "agent never caught up after the outage"
        agent.poll_once()
        time.sleep(1)
    agent.close()
    sink.close()

    lake = Lake(str(tmp_path / "lake"))
    kafka_mode = kmon_config.with_overrides(pipeline={"source": "kafka"})
    Pipeline(spark, lake, kafka_mode.pipeline, kafka_options={"kafka.bootstrap.servers": bs},
             topic_prefix=prefix,
             streams=(stream("request_stages"), stream(QUARANTINE))).process_available()
    bronze = spark.read.format("delta").load(lake.table("bronze", "request_stages"))
    assert bronze.where(f"kafka_topic = '{prefix}request_stages'").count() >= 500
    silver = spark.read.format("delta").load(lake.table("silver", "request_stages"))
    ids = [r["record_id"] for r in silver.select("record_id").collect()]
    assert len(ids) == 500 and len(set(ids)) == 500
    assert sorted(r["correlation_id"] for r in silver.select("correlation_id").collect()) == \
        list(range(500))
