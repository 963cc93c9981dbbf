"""`kmon demo`: the whole system on one machine, four real faults, a summary.

Live mode (the default) runs, all real parts:

1. a local 3-broker KRaft cluster from the Apache jars (a previous demo's cluster and
   data are removed first, so a second run starts clean);
2. a workload: acks=all and acks=1 producers, consumer groups that commit, a compacted
   topic, and a topic set up for an unclean election (demo/workload.py);
3. the agents, the streaming pipeline, the detector query, the remediation decision step
   and the Prometheus exporter: what `kmon run` runs (kmon/monitor.py `Monitor`);
4. a healthy warm-up (the detectors learn each broker's normal latency; nothing may be
   flagged; demo/warmup.py), then four faults one after another (demo/faults/,
   demo/cause.py): a slow broker, offset rewinds, compaction lag, an unclean election
   with its chain. Each finding is printed as the detector query hands it over; a fault
   counts as detected when every finding it expects has appeared, and its time to detect
   runs from the moment it was caused;
5. a summary table (fault, detected, time to detect, action queued; demo/summary.py), the
   incident report, the exporter URL and the Delta tables to query.

Ctrl-C at any point stops the faults (a frozen broker is resumed), the workload, the
agents and the queries, and the cluster: nothing is left running. ``--keep`` leaves the
cluster and the lake for a look around.

Replay mode (``--replay``, demo/replay.py) needs no cluster: it feeds telemetry captured
from a demo run through the same pipeline and detectors and prints the same summary.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from demo.actions import fill_actions
from demo.cause import cause_fault, select_faults
from demo.console import Progress
from demo.lock import DemoLock
from demo.outcomes import FaultOutcome, FindingTracker, finding_line
from demo.preflight import clean_previous, preflight
from demo.settings import DEMO_CLUSTER, SHORT, DemoSettings, demo_config
from demo.summary import summary_table, table_width
from infra.procfs import PPID, pids, stat_fields
from kmon.config import Config

log = logging.getLogger(__name__)

# The niceness of the monitor's Spark JVM when it shares the host with the cluster it
# watches: the kernel then gives a broker's threads the CPU first (weight 1024 against
# 110), as if the pipeline ran on machines of its own, as it does in production.
MONITOR_NICENESS = 10


def process_tree(root: int) -> list[int]:
    """`root` and every process descended from it (by /proc/<pid>/stat's parent)."""
    parents: dict[int, int] = {}
    for pid in pids():
        fields = stat_fields(pid)
        if fields is not None:         # gone since listed otherwise
            parents[pid] = int(fields[PPID])
    tree, frontier = [root], [root]
    while frontier:
        children = [pid for pid, ppid in parents.items() if ppid in frontier]
        tree += children
        frontier = children
    return tree


def yield_cpu(root: int, niceness: int = MONITOR_NICENESS) -> int:
    """Set every thread of `root`'s process tree to `niceness` (threads started later
    inherit it from the thread that starts them); returns how many threads were set."""
    done = 0
    for pid in process_tree(root):
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, niceness)
                done += 1
            except OSError:
                pass
    return done

STEPS = 6


def run_demo(config: Config, *, keep: bool = False, short: bool = False,
             exporter_port: int | None = None, summary_json: str | None = None,
             faults: list[str] | None = None, capture_to: str | None = None,
             warmup_s: float | None = None, out=sys.stdout) -> int:
    """The four-fault demo (see the module docstring); one at a time per work folder.
    `warmup_s` replaces the healthy warm-up's length (150 s, 90 s when `short`)."""
    if warmup_s is not None and warmup_s <= 0:
        raise ValueError(f"--warmup must be a positive number of seconds, got {warmup_s:g}")
    settings = SHORT if short else DemoSettings()
    if warmup_s is not None:
        settings = replace(settings, warmup_s=warmup_s)
    with DemoLock(config.work_dir / "demo.lock"):
        config = demo_config(config)
        port = settings.exporter_port if exporter_port is None else exporter_port
        preflight(config, port)
        demo = LiveDemo(config, settings, port, select_faults(config.local_cluster.brokers,
                                                              faults), keep=keep, out=out)
        return demo.run(summary_json=summary_json, capture_to=capture_to)


class LiveDemo:
    """One live demo: its steps in order, and what it started, so that the teardown stops
    exactly that (Ctrl-C included)."""

    def __init__(self, config: Config, settings: DemoSettings, port: int, faults: list, *,
                 keep: bool, out):
        self.config, self.settings, self.port, self.faults = config, settings, port, faults
        self.keep, self.out = keep, out
        self.p = Progress(STEPS, out)
        self.stop = threading.Event()
        self.tracker = FindingTracker(out)
        self.cluster = self.workload = self.monitor = self.ctx = None
        self.stats_hook = None
        self.on_inputs = None   # the monitor's `on_inputs` (kmon/monitor.py Monitor)
        self.outcomes: list[FaultOutcome] = []
        self.healthy: list = []
        self.warm_start_ms = 0
        self.healthy_s = self.faults_s = 0.0
        self.previous_handlers: dict = {}

    def run(self, *, summary_json: str | None, capture_to: str | None) -> int:
        self.previous_handlers = {s: signal.signal(s, self.on_signal)
                                  for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start_cluster()
            if self.stop.is_set():
                return 130
            self.start_workload()
            self.start_monitor()
            self.warm_up()
            self.cause_faults()
            report = self.summarize()
            if capture_to:
                self.capture(Path(capture_to))
            if summary_json:
                self.write_summary_json(Path(summary_json), report)
            return self.exit_code()
        finally:
            self.tear_down()

    def on_signal(self, signum, _frame) -> None:
        if not self.stop.is_set():
            print(f"\nkmon demo: {signal.Signals(signum).name}: stopping the faults, the "
                  f"workload, the pipeline and the cluster...", file=self.out, flush=True)
        self.stop.set()

    # ---- the steps ---------------------------------------------------------------------

    def cluster_step(self) -> str:
        return f"starting a real {self.config.local_cluster.brokers}-broker Kafka cluster (KRaft)"

    def before_cluster_start(self, cluster) -> None:
        """Hook for what must be in place before the brokers start (nothing in the demo)."""

    def start_cluster(self) -> None:
        from infra.local_cluster import LocalCluster

        self.p.step(self.cluster_step())
        clean_previous(self.config, self.p.note)
        self.cluster = LocalCluster(self.config, name=DEMO_CLUSTER, owner_bound=not self.keep)
        self.before_cluster_start(self.cluster)
        self.cluster.start()
        self.p.note(f"bootstrap.servers={self.cluster.bootstrap_servers}")

    def start_workload(self) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.faults.base import FaultContext
        from demo.workload import ConsumerSpec, ProducerSpec, Workload, create_topics

        self.p.step("workload: orders (acks=all, group billing), clicks (acks=1, group "
                    "analytics), compacted customers, ledger (unclean election allowed)")
        bootstrap = self.cluster.bootstrap_servers
        self.stats_hook = self.client_stats_hook() if self.settings.client_stats else None
        self.workload = Workload(bootstrap, self.config.work_dir / "demo" / "clients",
                                 stats_cb=self.stats_hook)
        create_topics(bootstrap, [NewTopic("orders", 6, 3, config={"min.insync.replicas": "2"}),
                                  NewTopic("clicks", 6, 3)])
        self.ctx = FaultContext(self.cluster, self.workload, say=self.p.note, stop=self.stop)
        for f in self.faults:
            f.prepare(self.ctx)
        rate = self.settings.rate_per_s
        self.workload.start_producer(ProducerSpec("orders-producer", "orders", rate, acks="all"))
        self.workload.start_producer(ProducerSpec("clicks-producer", "clicks", rate, acks="1"))
        self.workload.start_consumer(ConsumerSpec("billing", ("orders",)))
        self.workload.start_consumer(ConsumerSpec("analytics", ("clicks",)))

    def client_stats_hook(self):
        """The hook the workload's clients hand their statistics to, as an application
        would install it, into the lake's landing folder."""
        from infra.lake import Lake
        from ingest.client_stats_hook import kmon_stats_hook
        from kmon.monitor import sink_factory

        sink = sink_factory(self.config, Lake(self.config.storage_root))("client-stats")
        return kmon_stats_hook(self.config.watch.cluster, sink)

    def start_monitor(self) -> None:
        from prometheus_client import CollectorRegistry

        from kmon.monitor import Monitor, build_agents

        self.p.step("agents, streaming pipeline, detectors, remediation decisions, exporter "
                    "(Spark local mode with Delta)")
        config, cluster = self.config, self.cluster
        registry = CollectorRegistry()
        self.monitor = Monitor(config, registry=registry,
                               watched_bootstrap=cluster.bootstrap_servers,
                               cluster_sizes={config.watch.cluster: len(cluster.broker_nodes)},
                               on_findings=[self.tracker], on_inputs=self.on_inputs)
        state_dir = config.work_dir / "demo" / "agent-state"
        self.monitor.agents = build_agents(config, registry, self.monitor.lake, state_dir,
                                           cluster) + [
            client_log_agent(config, self.workload, sorted(self.workload.consumer_specs),
                             registry, self.monitor.lake, state_dir)]
        self.monitor.start(self.port, self.out)
        threads = yield_cpu(self.monitor.spark.sparkContext._gateway.proc.pid)
        log.info("monitor JVM: %d threads at niceness %d", threads, MONITOR_NICENESS)
        for s in self.previous_handlers:   # the SparkContext replaced our SIGINT handler
            signal.signal(s, self.on_signal)
        threading.Thread(target=self.monitor.health_loop, args=(self.stop,),
                         daemon=True).start()

    def warm_up(self) -> None:
        from demo.warmup import wait_healthy, wait_keeping_up

        self.p.step(f"healthy warm-up ({self.settings.warmup_s:.0f} s): the detectors learn "
                    f"normal latency; nothing may be flagged")
        self.warm_start_ms = int(time.time() * 1000)
        wait_healthy(self.monitor, self.tracker, self.settings.warmup_s, self.stop, self.p)
        wait_keeping_up(self.monitor, self.settings.catch_up_s, self.stop, self.p)
        self.healthy = self.tracker.since(self.warm_start_ms)
        self.healthy_s = (time.time() * 1000 - self.warm_start_ms) / 1000
        self.p.note(f"healthy run: {len(self.healthy)} finding(s) in {self.healthy_s:.0f} s, "
                    f"{self.tracker.evaluations} detector evaluations")

    def cause_faults(self) -> None:
        started = time.monotonic()
        if not self.stop.is_set():
            self.p.step(f"causing {len(self.faults)} faults, one after another")
        for i, fault in enumerate(self.faults, 1):
            if self.stop.is_set():
                break
            self.p.note(f"--- fault {i}/{len(self.faults)}: {fault.title} ---")
            outcome = self.cause_one(fault)
            self.outcomes.append(outcome)
            status = (f"detected in {outcome.time_to_detect_s:.0f} s" if outcome.detected
                      else f"NOT detected within {self.settings.detect_timeout_s:.0f} s")
            self.p.note(f"{fault.title}: {status}")
            if i < len(self.faults) and not self.stop.is_set():
                self.stop.wait(self.settings.settle_s)
        self.faults_s = time.monotonic() - started

    def cause_one(self, fault) -> FaultOutcome:
        from jobs.pipeline import PipelineFailed

        try:
            return cause_fault(fault, self.ctx, self.tracker, self.settings, self.stop, self.p,
                               self.monitor)
        except PipelineFailed:
            raise
        except Exception as e:  # noqa: BLE001 - report it, go on with the next fault
            log.exception("fault %s failed", fault.name)
            self.p.note(f"{fault.title}: could not be caused: {e}")
            return FaultOutcome(fault.name, fault.title, int(time.time() * 1000),
                                notes={"error": str(e)})

    def summarize(self) -> Path | None:
        """The summary table, the warm-up's findings if any, the incident report and where
        to look next; returns the report's path."""
        out = self.out
        if self.outcomes:
            self.p.note(f"the faults took {self.faults_s:.0f} s in all (the healthy run "
                        f"{self.healthy_s:.0f} s)")
            self.p.step("summary" + (f" (interrupted: {len(self.outcomes)} of "
                                     f"{len(self.faults)} faults caused)"
                                     if self.stop.is_set() else ""))
            fill_actions(self.monitor, self.outcomes, self.stop)
            print("\n" + summary_table(self.outcomes, table_width()), file=out, flush=True)
        else:
            self.p.note("interrupted before the first fault: nothing to summarize")
        if self.healthy:
            print(f"\nhealthy warm-up flagged {len(self.healthy)} finding(s): "
                  + "; ".join(finding_line(f) for _, f in self.healthy), file=out)
        # The report's queries would queue behind a dozen streaming queries on a small
        # machine (minutes of silence after the table): stop those first, keep Spark.
        self.p.note("stopping the agents and the streaming queries; writing the incident report")
        self.monitor.stop_streams()
        report = write_report(self.monitor, self.config, self.outcomes, out)
        lake_root = self.config.storage_root
        print(f"\nincident report: {report or '(not written)'}", file=out)
        print(f"exporter: http://127.0.0.1:{self.port}/metrics (while the demo runs)"
              if self.port else "exporter: off (--exporter-port 0)", file=out)
        print(f"Delta tables under {lake_root}; query them with\n"
              f"  KMON__SPARK__STORAGE_ROOT={lake_root} ./kmonw sql \"SELECT type, entity, "
              f"cause, status FROM gold.anomalies ORDER BY first_seen_ms\"", file=out, flush=True)
        return report

    def capture(self, dest: Path) -> None:
        import dataclasses

        from demo.replay import capture
        from evaluation.inputs import describe_compacted_topics

        configs = describe_compacted_topics({"bootstrap.servers": self.cluster.bootstrap_servers},
                                            self.config.watch.cluster)
        capture(Path(self.config.storage_root) / "landing", self.outcomes, self.warm_start_ms,
                int(time.time() * 1000), [dataclasses.asdict(c) for c in configs], dest,
                self.out)

    def write_summary_json(self, path: Path, report: Path | None) -> None:
        path.write_text(json.dumps({
            "healthy_findings": [finding_line(f) for _, f in self.healthy],
            "healthy_s": round(self.healthy_s, 1), "faults_s": round(self.faults_s, 1),
            "faults": [o.to_json() for o in self.outcomes], "report": str(report or ""),
            "lake": self.config.storage_root}, indent=2, default=str))

    def exit_code(self) -> int:
        if self.stop.is_set():
            return 130
        complete = len(self.outcomes) == len(self.faults)
        return 0 if complete and all(o.detected for o in self.outcomes) else 1

    def tear_down(self) -> None:
        """Heal every fault, stop the workload, the monitor and (unless --keep) the
        cluster; put the signal handlers back. Each part only if it was started."""
        for f in self.faults:
            try:
                if self.ctx is not None:
                    f.heal(self.ctx)
            except Exception as e:  # noqa: BLE001 - keep tearing down
                log.warning("healing %s: %s", f.name, e)
        if self.ctx is not None:
            self.ctx.close()
        if self.workload is not None:
            self.workload.stop()
        if self.stats_hook is not None:
            self.stats_hook.close()
            self.stats_hook.sink.close()
        if self.monitor is not None:
            self.monitor.stop()
        if self.cluster is not None and not self.keep:
            self.cluster.stop()
            if self.stop.is_set():
                print("kmon demo: stopped; the cluster, the workload, the agents and Spark "
                      "are down", file=self.out, flush=True)
        elif self.cluster is not None:
            print(f"\ncluster left running: bootstrap.servers={self.cluster.bootstrap_servers}; "
                  f"stop it with `kmon cluster down --name {DEMO_CLUSTER}`", file=self.out)
        for s, h in self.previous_handlers.items():
            signal.signal(s, h)


def client_log_agent(config: Config, workload, groups: list[str], registry, lake, state_dir):
    """The agent that follows the workload's consumers' librdkafka logs."""
    from ingest.agent_metrics import AgentMetrics
    from ingest.client_log_agent import ClientLogAgent, ClientLogSource
    from ingest.file_tailer import PositionStore
    from ingest.supervisor import Supervised
    from kmon.monitor import sink_factory

    sources = [ClientLogSource(config.watch.cluster, f"{g}-consumer", workload.consumer_log(g),
                               group_id=g, client_software="librdkafka") for g in groups]
    for s in sources:
        s.path.touch()
    agent = ClientLogAgent(sources, sink_factory(config, lake)("client-log"),
                           PositionStore(state_dir / "client-log.json"),
                           AgentMetrics(registry, "client-log"))
    return Supervised("client-log", agent, 1.0)


def write_report(monitor, config: Config, outcomes: list[FaultOutcome], out) -> Path | None:
    """The incident report of the unclean-election chain (else of the whole demo)."""
    from reports.incident import ReportError, build_report
    from reports.render import render_html

    chain = next((f for o in outcomes if o.name == "unclean_election"
                  for _, f in o.findings if f.incident_id), None)
    path = config.work_dir / "demo" / "incident-report.html"
    try:
        if chain is not None:
            data = build_report(monitor.spark, monitor.lake, incident_id=chain.incident_id)
        elif outcomes:
            data = build_report(monitor.spark, monitor.lake, start_ms=outcomes[0].started_ms,
                                end_ms=int(time.time() * 1000), cluster=config.watch.cluster)
        else:
            return None
    except (ReportError, ValueError) as e:
        print(f"report: {e}", file=out)
        return None
    path.write_text(render_html(data), encoding="utf-8")
    return path
