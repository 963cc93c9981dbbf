"""`kmon run`: the agents, every streaming query and the exporter, until Ctrl-C.

Embedded default (``pipeline.source = "landing"``, ``watch.bootstrap_servers`` empty): the
watched cluster is the local one started by `kmon cluster up`; the agents follow its
files and endpoints on this machine and write the landing folder; the jobs read it.
Fleet (``pipeline.source = "kafka"``): agents run next to the brokers (`kmon agents`), the
jobs read the telemetry topics on the monitoring Kafka; `kmon run --no-agents` runs only
the jobs and the exporter.

Ctrl-C (or SIGTERM) stops the agents first (each drains and saves its position), then
the queries downstream first, each at a micro-batch boundary, so checkpoints stay
consistent and a restart resumes without loss or repeats.
"""

from __future__ import annotations

import hashlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from jobs.silver_commits import SilverCommits
from kmon.config import Config

log = logging.getLogger(__name__)

# A silver commit this recent counts as the latest: the evaluation starts at once.
FRESH_COMMIT_S = 1.0


class RunError(RuntimeError):
    """`kmon run` cannot start; the message says what to do."""


def _local_cluster(config: Config):
    from infra.local_cluster import LocalCluster

    cluster = LocalCluster(config)
    if not cluster.nodes or all(r["state"] == "stopped" for r in cluster.status()):
        raise RunError(f"no local cluster '{cluster.name}' is running: start one with "
                       f"`kmon cluster up`, or set watch.bootstrap_servers (and "
                       f"pipeline.source = \"kafka\") to watch a real cluster")
    return cluster


def sink_factory(config: Config, lake):
    """A new sink per agent: the telemetry topics (source=kafka) or the landing folder."""
    from infra.kafka_clients import librdkafka_config
    from ingest.sinks import KafkaSink, LandingSink, new_agent_id

    if config.pipeline.source == "kafka":
        conf = librdkafka_config(config.telemetry, "telemetry")
        return lambda kind: KafkaSink(conf, config.telemetry.topic_prefix)
    return lambda kind: LandingSink(lake.landing_root, new_agent_id(kind))


def request_windows(config: Config):
    """The request-log agents' window settings from [request_log]."""
    from ingest.request_log_agent import WindowSettings

    rl = config.request_log
    return WindowSettings(rl.aggregator_options(),
                          full_brokers=frozenset(int(b) for b in rl.full_brokers))


def build_host_agents(config: Config, registry: CollectorRegistry, lake, state_dir: Path, *,
                      broker: int | None, log_dir: str | None, request_log: str | None,
                      metrics_url: str | None, offsets: bool):
    """Agents for one broker host of a real cluster (and/or the cluster-wide offsets reader)."""
    from infra.kafka_clients import librdkafka_config
    from ingest.supervisor import BrokerHost
    from ingest.supervisor import build_agents as agents_for

    if (log_dir or request_log or metrics_url) and broker is None:
        raise RunError("--broker-id is required with --log-dir, --request-log or --metrics-url")
    hosts = [BrokerHost(broker, Path(request_log) if request_log else None,
                        Path(log_dir) if log_dir else None, metrics_url)] if broker is not None else []
    out = agents_for(cluster_name=config.watch.cluster, hosts=hosts,
                     offsets_client=librdkafka_config(config.watch, "watch") if offsets else None,
                     sink_for=sink_factory(config, lake), state_dir=state_dir, registry=registry,
                     request_windows=request_windows(config))
    if not out:
        raise RunError("nothing to run: give --request-log, --log-dir, --metrics-url "
                       "(with --broker-id) and/or --offsets")
    return out


def build_agents(config: Config, registry: CollectorRegistry, lake, state_dir: Path,
                 cluster=None):
    """The embedded agents for the local cluster, each with its own sink: for every node,
    dedicated controllers included (their controller.log and JMX meters carry the
    elections the unclean-election detector reads)."""
    from ingest.supervisor import embedded_agents

    cluster = cluster or _local_cluster(config)
    sink_for = sink_factory(config, lake)
    client = dict(config.watch.client_config)
    return embedded_agents(cluster_name=config.watch.cluster, nodes=cluster.nodes,
                           bootstrap=cluster.bootstrap_servers, client_config=client,
                           sink_for=sink_for, state_dir=state_dir, registry=registry,
                           request_windows=request_windows(config))


def exporter_state_path(config: Config) -> Path:
    """Where `kmon run` keeps its exporter's open findings across a restart: one file per
    lake (the findings are its gold.anomalies'), under the work dir."""
    lake_key = hashlib.sha1(str(config.storage_root).encode()).hexdigest()[:12]
    return config.work_dir / "exporter-state" / f"{config.watch.cluster}-{lake_key}.json"


class Monitor:
    """Everything `kmon run` runs, as one object the demo can start and stop too.

    `start` builds the Spark session, the pipeline with the detector query (findings go
    to the exporter, the remediation decision step and any `on_findings` listener), the
    agents (`agents`, a list of `ingest.supervisor.Supervised`) and the exporter's HTTP
    server; `stop` undoes it in the safe order (agents drain, queries finish their batch).
    """

    def __init__(self, config: Config, *, agents: list | None = None,
                 registry: CollectorRegistry | None = None, watched_bootstrap: str | None = None,
                 cluster_sizes: dict[str, int] | None = None,
                 on_findings: list | None = None, exporter_state: Path | None = None,
                 on_inputs: Callable | None = None):
        from infra.lake import Lake
        from kmon.exporter import KmonExporter

        self.config = config
        self.lake = Lake(config.storage_root)
        self.registry = registry or CollectorRegistry()
        # With `exporter_state`, the open findings survive a restart (kmon/exporter.py).
        self.exporter = KmonExporter(self.registry, clusters=(config.watch.cluster,),
                                     state_path=exporter_state)
        self.agents = agents or []
        self.watched_bootstrap = watched_bootstrap
        self.cluster_sizes = cluster_sizes or {}
        # Called in each evaluation, before anything is written (the alert path).
        self.listeners = [self.exporter.set_findings, *(on_findings or [])]
        # Called with what each evaluation read (evaluation.detect.assess `on_inputs`).
        self.on_inputs = on_inputs
        # Called after them, in the detector query's write-behind thread (the decision step).
        self.background_listeners: list = []
        self.spark = self.pipeline = self.supervisor = self.server = None
        self.decisions = self.maintenance = None
        # The silver query's commits; each detector evaluation starts after one.
        self.silver_commits = SilverCommits()
        self._release_clients = lambda: None

    def start(self, exporter_port: int = 0, out=sys.stdout) -> None:
        from infra.kafka_clients import spark_kafka_options
        from infra.spark_session import build_spark_session
        from ingest.supervisor import AgentSupervisor
        from jobs.pipeline import Pipeline

        config = self.config
        if exporter_port:
            # First, before Spark starts (a minute on a small machine): after a restart,
            # /metrics answers again within seconds, with the findings it had saved.
            self.server, _ = self.exporter.serve(exporter_port)
            print(f"exporter: http://127.0.0.1:{exporter_port}/metrics", file=out, flush=True)
        kafka_options = (spark_kafka_options(config.telemetry, "telemetry")
                         if config.pipeline.source == "kafka" else None)
        self.spark = build_spark_session(config)
        exporter = self.exporter
        commits = self.silver_commits

        def on_batch(stats: dict) -> None:
            exporter.quarantined(stats["stream"], stats["rows_quarantined"])
            exporter.source_leads(stats["stream"], stats["source_lead_ms"])
            commits.notice(stats)

        self.pipeline = Pipeline(
            self.spark, self.lake, config.pipeline, kafka_options=kafka_options,
            topic_prefix=config.telemetry.topic_prefix, on_batch=on_batch)
        self.decisions = _decision_step(config, self.spark, self.lake,
                                        self.watched_bootstrap)
        if self.decisions is not None:
            self.background_listeners.append(self._decide)
        self._release_clients = _add_detectors(
            self.pipeline, self.spark, self.lake, config, self._on_findings,
            self.watched_bootstrap, in_background=self._on_findings_in_background,
            silver_commits=commits if config.pipeline.detect_after_silver_commit else None,
            on_inputs=self.on_inputs)
        self.pipeline.start()
        from jobs.maintenance import MaintenanceLoop
        self.maintenance = MaintenanceLoop(self.spark, self.lake, config.maintenance)
        self.maintenance.start()
        if self.agents:
            self.supervisor = AgentSupervisor(self.agents)
            self.supervisor.start()

    def _on_findings(self, findings, now_ms: int) -> None:
        self._hand_over(self.listeners, findings, now_ms)

    def _on_findings_in_background(self, findings, now_ms: int) -> None:
        self._hand_over(self.background_listeners, findings, now_ms)

    @staticmethod
    def _hand_over(listeners, findings, now_ms: int) -> None:
        for listener in listeners:
            try:
                listener(findings, now_ms)
            except Exception:  # noqa: BLE001 - one listener failing must not stop detection
                log.exception("handing findings to %s failed", getattr(listener, "__name__",
                                                                       listener))

    def _decide(self, findings, now_ms: int) -> None:
        from remediation.queue import QueueError

        try:
            decisions = self.decisions.run(findings, now_ms, self.cluster_sizes)
        except QueueError as e:
            # The watched cluster (which holds the queue) is down or unreachable, e.g. in
            # the middle of a fault: nothing was recorded, so the same decisions are taken
            # and published again at the next evaluation. One line, not a traceback.
            log.warning("remediation: actions not published, decided again at the next "
                        "evaluation: %s", e)
            return
        for d in decisions:
            log.info("remediation: %s on %s %s -> %s (%s)", d.anomaly_type, d.cluster, d.entity,
                     d.outcome.value, d.reason)

    def health_loop(self, stop: threading.Event) -> None:
        _report_health(self.pipeline, self.exporter, stop)

    def stop_streams(self) -> None:
        """Stop the agents (they drain) and the streaming queries (at a batch boundary);
        the Spark session stays for batch work such as the incident report. Safe to repeat."""
        if self.supervisor:
            self.supervisor.stop()
            self.supervisor = None
        self.silver_commits.close()   # a detector tick waiting for silver goes on now
        if self.maintenance is not None:
            self.maintenance.stop()
            self.maintenance = None
        if self.pipeline:
            self.pipeline.stop()

    def stop(self) -> None:
        self.stop_streams()
        self._release_clients()
        if self.decisions is not None:
            close = getattr(self.decisions.publisher, "close", None)
            if close is not None:
                close()
            self.decisions = None
        if self.server is not None:
            self.server.shutdown()
            self.server = None
        if self.spark is not None:
            self.spark.stop()
            self.spark = None


def run(config: Config, *, agents: bool = True, duration_s: float | None = None,
        exporter_port: int | None = None, state_dir: Path | None = None,
        out=sys.stdout) -> int:
    """Run until Ctrl-C (or `duration_s`). The agents keep their positions in `state_dir`
    (default <work_dir>/agent-state): positions belong to one lake, since a restart resumes
    from them, so a run on another lake (a test's) gives its own folder."""
    registry = CollectorRegistry()
    lake_agents = []
    local = None
    cluster = None
    if agents and config.watch.bootstrap_servers:
        raise RunError("embedded agents follow a local cluster's files; with "
                       "watch.bootstrap_servers set, run `kmon run --no-agents` here and "
                       "`kmon agents ...` on the broker hosts")
    if not config.watch.bootstrap_servers:
        try:
            cluster = _local_cluster(config)
            local = cluster.bootstrap_servers
        except RunError:
            if agents:
                raise
            cluster = None  # jobs only, e.g. replaying landed telemetry
    monitor = Monitor(config, registry=registry, watched_bootstrap=local,
                      cluster_sizes={config.watch.cluster: len(cluster.broker_nodes)} if cluster else None,
                      exporter_state=exporter_state_path(config))
    if agents:
        lake_agents = build_agents(config, registry, monitor.lake,
                                   state_dir or config.work_dir / "agent-state", cluster)
        monitor.agents = lake_agents
    print(f"kmon run: lake {config.storage_root}, source {config.pipeline.source}", file=out,
          flush=True)
    stop = threading.Event()

    def on_signal(signum, _frame):
        print(f"\nkmon run: {signal.Signals(signum).name} received, stopping cleanly "
              f"(agents drain, queries finish their batch)...", file=out, flush=True)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        port = config.pipeline.exporter_port if exporter_port is None else exporter_port
        monitor.start(port, out)
        # Creating the SparkContext installs PySpark's own SIGINT handler (cancel every
        # job, raise KeyboardInterrupt): put ours back so Ctrl-C stops at batch boundaries.
        for s in previous:
            signal.signal(s, on_signal)
        if duration_s:
            threading.Timer(duration_s, stop.set).start()
        threading.Thread(target=monitor.health_loop, args=(stop,), daemon=True).start()
        monitor.pipeline.run_until_stopped(stop, out)
    finally:
        monitor.stop()
        for s, h in previous.items():
            signal.signal(s, h)
        print("kmon run: stopped; checkpoints are consistent, a restart resumes here",
              file=out, flush=True)
    return 0


def _decision_step(config: Config, spark, lake, bootstrap: str | None):
    """The remediation decision step on the watched cluster's queue topic, or None when
    no cluster is reachable (jobs only). Actions stay disabled until enabled in config."""
    from remediation.delta_tables import DeltaDecisionStore, DeltaResultStore
    from remediation.queue import (ActionPublisher, DecisionStep, ensure_queue_topic,
                                   queue_client_config)

    if not (bootstrap or config.watch.bootstrap_servers):
        return None
    # Where `kmon remediate` consumes: the monitoring Kafka when there is one.
    client = queue_client_config(config, bootstrap)
    try:
        ensure_queue_topic(client, config.remediation.topic)
    except Exception as e:  # noqa: BLE001 - detection goes on without the queue
        log.warning("remediation queue unavailable, decisions are not taken: %s", e)
        return None
    rem = config.remediation
    return DecisionStep(rem, ActionPublisher(client, rem.topic),
                        DeltaDecisionStore(spark, lake, rem.decisions_table),
                        DeltaResultStore(spark, lake, rem.results_table))


def _add_detectors(pipeline, spark, lake, config, on_findings,
                   bootstrap: str | None, *, in_background=None,
                   silver_commits: SilverCommits | None = None,
                   on_inputs: Callable | None = None) -> Callable[[], None]:
    """The detector query (every trigger, gold.anomalies) handing findings to `on_findings`,
    then to `in_background` in its write-behind thread.

    With `silver_commits`, a running query's evaluation starts once the silver query has
    committed (within the last second, or next: at most two silver intervals' wait); a
    run-once (availableNow) evaluates at once, after silver has ended. Its window reads
    read again the windows silver wrote since (SilverCommits.written_since).

    Compacted topics' configs (for the compaction-lag contract) come from the watched
    cluster when it is reachable: `bootstrap` (the local cluster) or watch.bootstrap_servers.
    Returns what lets go of that AdminClient once the queries stopped (it has no close():
    kept, it logs "Connection refused" for every broker of a stopped cluster).
    """
    from infra.kafka_clients import librdkafka_config
    from evaluation.detect import start_detector_query
    from evaluation.inputs import TopicConfigCache, describe_compacted_topics

    topic_configs = None
    client: dict = {}
    if bootstrap or config.watch.bootstrap_servers:
        admin_config = librdkafka_config(config.watch, "watch", bootstrap)

        def describe():
            # One client for the whole run (see describe_compacted_topics).
            if "admin" not in client:
                from confluent_kafka.admin import AdminClient
                client["admin"] = AdminClient(dict(admin_config))
            return describe_compacted_topics(client["admin"], config.watch.cluster)

        topic_configs = TopicConfigCache(describe, config.compaction_lag.topic_config_refresh_s)

    def wait_for_data() -> float:
        return silver_commits.wait_fresh(FRESH_COMMIT_S, 2 * config.pipeline.silver_trigger_s)

    def start(trigger):
        waits = silver_commits is not None and "processingTime" in trigger
        return start_detector_query(spark, lake, config, trigger, on_findings=on_findings,
                                    topic_configs=topic_configs, in_background=in_background,
                                    wait_for_data=wait_for_data if waits else None,
                                    written_since=(silver_commits.written_since
                                                   if silver_commits is not None else None),
                                    on_inputs=on_inputs)

    pipeline.extra_queries.append(start)
    return client.clear


def _report_health(pipeline, exporter, stop: threading.Event) -> None:
    while not stop.wait(2.0):
        now_ms = int(time.time() * 1000)
        for q in list(pipeline.queries):
            try:
                exporter.update_query(q.name, q.lastProgress, q.isActive, now_ms)
            except Exception as e:  # noqa: BLE001 - health reporting never stops the run
                log.debug("progress of %s: %s", q.name, e)
