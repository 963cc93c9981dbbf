"""`kmon run`: the agents, every streaming query and the exporter, until Ctrl-C.

Embedded default (``pipeline.source = "landing"``, ``watch.bootstrap_servers`` empty): the
watched cluster is the local one started by `kmon cluster up`; the agents follow its
files and endpoints on this machine and write the landing folder; the jobs read it.
Fleet (``pipeline.source = "kafka"``): agents run next to the brokers (`kmon agent`), the
jobs read the telemetry topics on the monitoring Kafka; `kmon run --no-agents` runs only
the jobs and the exporter.

Ctrl-C (or SIGTERM) stops the agents first (each drains and saves its position), then
the queries downstream first, each at a micro-batch boundary, so checkpoints stay
consistent and a restart resumes without loss or repeats.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from kmon.config import Config

log = logging.getLogger(__name__)


class RunError(RuntimeError):
    """`kmon run` cannot start; the message says what to do."""


def _local_cluster(config: Config):
    from kmon.local_cluster import LocalCluster

    cluster = LocalCluster(config)
    if not cluster.nodes or all(r["state"] == "stopped" for r in cluster.status()):
        raise RunError(f"no local cluster '{cluster.name}' is running: start one with "
                       f"`kmon cluster up`, or set watch.bootstrap_servers (and "
                       f"pipeline.source = \"kafka\") to watch a real cluster")
    return cluster


def sink_factory(config: Config, lake):
    """A new sink per agent: the telemetry topics (source=kafka) or the landing folder."""
    from ingest.sinks import KafkaSink, LandingSink, new_agent_id
    from kmon.kafka_clients import librdkafka_config

    if config.pipeline.source == "kafka":
        conf = librdkafka_config(config.telemetry, "telemetry")
        return lambda kind: KafkaSink(conf, config.telemetry.topic_prefix)
    return lambda kind: LandingSink(lake.landing_root, new_agent_id(kind))


def build_host_agents(config: Config, registry: CollectorRegistry, lake, state_dir: Path, *,
                      broker: int | None, log_dir: str | None, request_log: str | None,
                      metrics_url: str | None, offsets: bool):
    """Agents for one broker host of a real cluster (and/or the cluster-wide offsets reader)."""
    from ingest.supervisor import BrokerHost, build_agents as agents_for
    from kmon.kafka_clients import librdkafka_config

    if (log_dir or request_log or metrics_url) and broker is None:
        raise RunError("--broker-id is required with --log-dir, --request-log or --metrics-url")
    hosts = [BrokerHost(broker, Path(request_log) if request_log else None,
                        Path(log_dir) if log_dir else None, metrics_url)] if broker is not None else []
    out = agents_for(cluster_name=config.watch.cluster, hosts=hosts,
                     offsets_client=librdkafka_config(config.watch, "watch") if offsets else None,
                     sink_for=sink_factory(config, lake), state_dir=state_dir, registry=registry)
    if not out:
        raise RunError("nothing to run: give --request-log, --log-dir, --metrics-url "
                       "(with --broker-id) and/or --offsets")
    return out


def build_agents(config: Config, registry: CollectorRegistry, lake, state_dir: Path,
                 cluster=None):
    """The embedded agents for the local cluster, each with its own sink."""
    from ingest.supervisor import embedded_agents

    cluster = cluster or _local_cluster(config)
    sink_for = sink_factory(config, lake)
    client = dict(config.watch.client_config)
    return embedded_agents(cluster_name=config.watch.cluster, nodes=cluster.nodes,
                           bootstrap=cluster.bootstrap_servers, client_config=client,
                           sink_for=sink_for, state_dir=state_dir, registry=registry)


def run(config: Config, *, agents: bool = True, duration_s: float | None = None,
        exporter_port: int | None = None, out=sys.stdout) -> int:
    from ingest.supervisor import AgentSupervisor
    from jobs.lake import Lake
    from jobs.pipeline import Pipeline
    from kmon.exporter import KmonExporter
    from kmon.kafka_clients import spark_kafka_options
    from kmon.spark_session import build_spark_session

    lake = Lake(config.storage_root)
    registry = CollectorRegistry()
    exporter = KmonExporter(registry, clusters=(config.watch.cluster,))
    supervisor = None
    if agents:
        if config.watch.bootstrap_servers:
            raise RunError("embedded agents follow a local cluster's files; with "
                           "watch.bootstrap_servers set, run `kmon run --no-agents` here and "
                           "`kmon agent ...` on the broker hosts")
        supervisor = AgentSupervisor(build_agents(config, registry, lake,
                                                  config.work_dir / "agent-state"))
    kafka_options = (spark_kafka_options(config.telemetry, "telemetry")
                     if config.pipeline.source == "kafka" else None)
    print(f"kmon run: lake {config.storage_root}, source {config.pipeline.source}", file=out,
          flush=True)
    spark = build_spark_session(config)
    pipeline = Pipeline(spark, lake, config.pipeline, kafka_options=kafka_options,
                        topic_prefix=config.telemetry.topic_prefix,
                        on_batch=lambda s: exporter.quarantined(s["stream"], s["rows_quarantined"]))
    local = None
    if not config.watch.bootstrap_servers:
        try:
            local = _local_cluster(config).bootstrap_servers
        except RunError:
            local = None  # jobs only, e.g. replaying landed telemetry
    _add_detectors(pipeline, spark, lake, config, exporter, local)
    stop = threading.Event()

    def on_signal(signum, _frame):
        print(f"\nkmon run: {signal.Signals(signum).name} received, stopping cleanly "
              f"(agents drain, queries finish their batch)...", file=out, flush=True)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    server = None
    try:
        pipeline.start()
        if supervisor:
            supervisor.start()
        port = config.pipeline.exporter_port if exporter_port is None else exporter_port
        if port:
            server, _ = exporter.serve(port)
            print(f"exporter: http://127.0.0.1:{port}/metrics", file=out, flush=True)
        if duration_s:
            threading.Timer(duration_s, stop.set).start()
        health = threading.Thread(target=_report_health, args=(pipeline, exporter, stop),
                                  daemon=True)
        health.start()
        pipeline.run_until_stopped(stop, out)
    finally:
        if supervisor:
            supervisor.stop()
        pipeline.stop()
        if server is not None:
            server.shutdown()
        spark.stop()
        for s, h in previous.items():
            signal.signal(s, h)
        print("kmon run: stopped; checkpoints are consistent, a restart resumes here",
              file=out, flush=True)
    return 0


def _add_detectors(pipeline, spark, lake, config, exporter, bootstrap: str | None) -> None:
    """The detector query (every trigger, gold.anomalies) feeding the exporter.

    Compacted topics' configs (for the compaction-lag contract) come from the watched
    cluster when it is reachable: `bootstrap` (the local cluster) or watch.bootstrap_servers.
    """
    from detectors.inputs import TopicConfigCache, describe_compacted_topics
    from jobs.detect import start_detector_query
    from kmon.kafka_clients import librdkafka_config

    topic_configs = None
    if bootstrap or config.watch.bootstrap_servers:
        admin = librdkafka_config(config.watch, "watch", bootstrap)
        topic_configs = TopicConfigCache(
            lambda: describe_compacted_topics(admin, config.watch.cluster))
    pipeline.extra_queries.append(
        lambda trigger: start_detector_query(spark, lake, config, trigger,
                                             on_findings=exporter.set_findings,
                                             topic_configs=topic_configs))


def _report_health(pipeline, exporter, stop: threading.Event) -> None:
    while not stop.wait(2.0):
        now_ms = int(time.time() * 1000)
        for q in list(pipeline.queries):
            try:
                exporter.update_query(q.name, q.lastProgress, q.isActive, now_ms)
            except Exception as e:  # noqa: BLE001 - health reporting never stops the run
                log.debug("progress of %s: %s", q.name, e)
