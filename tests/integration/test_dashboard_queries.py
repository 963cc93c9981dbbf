"""Every dashboard query is valid PromQL and finds its data in a real Prometheus.

Prometheus (the Debian package, started by tests.support.prom_tools) scrapes the real 3-broker
cluster's JMX exporters, labelled as dashboards/prometheus_scrape.py says, and a kmon
endpoint serving the metrics of a real RequestLogAgent that followed the brokers' request
logs into a LandingSink, plus kmon.exporter's findings and pipeline health when that module
exists. After a short produce/consume workload, every panel query goes to
/api/v1/query: each must parse (status success) and return data, except queries over
series that only an event creates (dropped records) and, when no exporter serves them,
over kmon_findings_* / kmon_pipeline_* series.

Here the findings and the query progress are synthetic, one finding of every type, so
every findings panel has a series; test_oncall_end_to_end.py sends the same queries to a
Prometheus scraping the running `kmon run` after a fault it caused.
"""

from __future__ import annotations

import importlib.util
import time
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry, start_http_server

from dashboards.build import build_all
from dashboards.prometheus_scrape import kafka_scrape_job, kmon_scrape_job
from dashboards.queries import data_panels, panel_queries
from ingest.agent_metrics import AgentMetrics
from ingest.file_tailer import PositionStore
from ingest.request_log_agent import RequestLogAgent, RequestLogSource, WindowSettings
from ingest.sinks import LandingSink
from tests.conftest import wait_until
from tests.support.prom_tools import (
    PROMETHEUS_BINARIES,
    PromToolsError,
    find_binary,
    start_prometheus,
)

pytestmark = pytest.mark.skipif(
    find_binary(PROMETHEUS_BINARIES) is None,
    reason="prometheus not installed (Debian package prometheus; ./kmonw setup installs it)")

HAS_EXPORTER = importlib.util.find_spec("kmon.exporter") is not None
# Series that exist only when kmon's exporter serves them (findings, streaming queries).
EXPORTER_SERIES = ("kmon_findings_", "kmon_pipeline_")
# Series that appear only once something went wrong (an agent dropped records).
EVENT_SERIES = ("kmon_agent_dropped_records_total",)
DRILLDOWN_BROKER = "1"


def _workload(cluster) -> None:
    """acks=all produce to a replicated topic, then a consumer group reads it and commits."""
    topic = f"dash-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)
    wait_until(lambda: all(p.leader >= 0 for p in
                           admin.list_topics(topic, timeout=10).topics[topic].partitions.values()),
               30, f"leaders for {topic}")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "linger.ms": 5})
    for i in range(3000):
        producer.produce(topic, key=str(i).encode(), value=b"v" * 200)
        producer.poll(0)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"{topic}-readers", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + 60
    while read < 3000 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            read += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    assert read == 3000, f"consumer read {read} of 3000"


def _findings(cluster: str, now_ms: int) -> list:
    """One open finding of every anomaly type, so every findings panel has a series."""
    from core.findings import ActionKind, AnomalyType, EntityKind, Finding, Severity, Status

    entities = {
        AnomalyType.UNCLEAN_ELECTION: (EntityKind.PARTITION, "orders-0"),
        AnomalyType.LOG_TRUNCATION: (EntityKind.PARTITION, "orders-0"),
        AnomalyType.OFFSET_RESET: (EntityKind.GROUP, "group:billing/orders-0"),
        AnomalyType.CLUSTER_WIDE_SLOWNESS: (EntityKind.CLUSTER, f"cluster:{cluster}"),
        AnomalyType.SLOW_BROKER: (EntityKind.BROKER, f"broker:{DRILLDOWN_BROKER}"),
        AnomalyType.OFFSET_REWIND: (EntityKind.GROUP, "group:billing/orders-1"),
        AnomalyType.COMPACTION_LAG: (EntityKind.BROKER, f"broker:{DRILLDOWN_BROKER}"),
        AnomalyType.SLOW_CLIENT: (EntityKind.CLIENT, "client:analytics"),
    }
    return [Finding(finding_id=f"f-{t.value}", cluster=cluster, type=t, severity=Severity.HIGH,
                    entity_kind=kind, entity=entity, first_seen_ms=now_ms - 60_000,
                    last_seen_ms=now_ms, status=Status.OPEN, evidence={}, cause="test",
                    explanation="dashboard query test", suggested_action=ActionKind.NONE,
                    incident_id="incident-1")
            for t, (kind, entity) in entities.items()]


def _progress(now_s: float) -> dict:
    """The shape of a Spark StreamingQuery.lastProgress, as the exporter reads it."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now_s)) + ".000Z"
    return {"id": "q", "batchId": 7, "timestamp": stamp, "numInputRows": 120,
            "inputRowsPerSecond": 12.0, "processedRowsPerSecond": 40.0,
            "durationMs": {"triggerExecution": 3000}, "eventTime": {}, "sources": []}


def _query(prom, expr: str) -> list:
    """Run an instant query; fail with Prometheus's own error when it does not parse."""
    try:
        return prom.query(expr)
    except PromToolsError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def prometheus(kafka_cluster, tmp_path_factory):
    work: Path = tmp_path_factory.mktemp("dashboard-queries")
    _workload(kafka_cluster)

    registry = CollectorRegistry()
    metrics = AgentMetrics(registry, "request_log")
    sources = [RequestLogSource(kafka_cluster.name, n.node_id, n.request_log)
               for n in kafka_cluster.nodes]
    agent = RequestLogAgent(sources, LandingSink(work / "landing", "request-log-test"),
                            PositionStore(work / "positions.json"), metrics,
                            windows=WindowSettings())
    published = metrics.records.labels("request_log", "request_windows", "published")

    def poll() -> float:
        # The brokers never stop logging (replica fetches, quorum traffic): poll until the
        # agent has published windows (their time moves past a window's end), not until
        # it has caught up.
        agent.poll_once()
        return published._value.get()

    wait_until(poll, 60, "the request log agent to publish the brokers' requests")

    exporter = None
    if HAS_EXPORTER:
        from kmon.exporter import KmonExporter

        exporter = KmonExporter(registry, clusters=[kafka_cluster.name])
        now = time.time()
        exporter.set_findings(_findings(kafka_cluster.name, int(now * 1000)), int(now * 1000))
        exporter.update_query("silver_request_stages", _progress(now), True, int(now * 1000))
        exporter.quarantined("request_stages", 2)
        server, _thread = exporter.serve(0)
    else:
        server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)

    config = {
        # A broker's JMX exporter walks thousands of MBean attributes per scrape; on a busy
        # 2-core machine that can take seconds, and a timed-out scrape marks its series stale.
        "global": {"scrape_interval": "5s", "scrape_timeout": "5s",
                   "evaluation_interval": "5s"},
        "scrape_configs": [
            kafka_scrape_job(kafka_cluster.name,
                             {n.node_id: n.metrics_url for n in kafka_cluster.nodes}),
            kmon_scrape_job([f"127.0.0.1:{server.server_port}"]),
        ],
    }
    prom = start_prometheus(yaml.safe_dump(config, sort_keys=False), work / "prometheus")
    try:
        brokers = len(kafka_cluster.nodes)
        wait_until(lambda: len(_query(prom, "up == 1")) == brokers + 1, 60,
                   "every broker and the kmon endpoint to be scraped")
        # rate() over 1m needs two samples of each series.
        wait_until(lambda: len(_query(prom, 'rate(kafka_server_brokertopicmetrics_bytesinpersec_'
                                            'count{topic=""}[1m])')) == brokers
                   and _query(prom, "rate(kmon_agent_records_total[1m])"),
                   60, "two scrapes of every target")
        yield prom
    finally:
        prom.stop()
        server.shutdown()
        server.server_close()
        agent.close()


def _needs_data(expr: str) -> bool:
    """Every query must find data, except over series that need an event or an absent exporter."""
    if any(s in expr for s in EVENT_SERIES):
        return False
    return HAS_EXPORTER or not any(s in expr for s in EXPORTER_SERIES)


@pytest.mark.parametrize("uid", list(build_all()))
def test_every_panel_query_is_valid_and_finds_its_data(prometheus, kafka_cluster, uid):
    dashboard = build_all()[uid]
    values = {"cluster": kafka_cluster.name, "broker": DRILLDOWN_BROKER}
    by_panel: dict[str, list[tuple[str, int]]] = {}
    for _, title, expr in panel_queries(dashboard, values):
        by_panel.setdefault(title, []).append((expr, len(_query(prometheus, expr))))

    titles = [p["title"] for p in data_panels(dashboard)]
    assert sorted(by_panel) == sorted(titles), "a data panel without a query"
    empty = [(title, expr) for title, results in by_panel.items() for expr, n in results
             if n == 0 and _needs_data(expr)]
    assert not empty, "queries without data:\n" + "\n".join(f"  {t}: {e}" for t, e in empty)


def test_all_value_matches_every_broker(prometheus, kafka_cluster):
    # With the variables at "All" (.*), the fleet view sees every broker.
    overview = build_all()["kmon-fleet-overview"]
    produce = next(expr for _, title, expr in panel_queries(overview)
                   if title == "Produce TotalTime p99 by broker")
    brokers = {r["metric"]["broker"] for r in _query(prometheus, produce)
               if r["metric"]["cluster"] == kafka_cluster.name}
    assert brokers == {str(n.node_id) for n in kafka_cluster.nodes}, \
        f"scrape health: {_query(prometheus, 'up')}"
