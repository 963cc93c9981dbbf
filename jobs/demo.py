"""`kmon demo`: the whole system on one machine, four real faults, a summary.

Live mode (the default) runs, all real parts:

1. a local 3-broker KRaft cluster from the Apache jars (a previous demo's cluster and
   data are removed first, so a second run starts clean);
2. a workload: acks=all and acks=1 producers, consumer groups that commit, a compacted
   topic, and a topic set up for an unclean election (faults/workload.py);
3. the agents, the streaming pipeline, the detector query, the remediation decision step
   and the Prometheus exporter: what `kmon run` runs (jobs/run.py `Monitor`);
4. a healthy warm-up (the detectors learn each broker's normal latency; nothing may be
   flagged), then four faults one after another (faults/): a slow broker, offset
   rewinds, compaction lag, an unclean election with its chain. Each finding is printed
   as the detector query hands it over; a fault counts as detected when every finding
   it expects has appeared, and its time to detect runs from the moment it was caused;
5. a summary table (fault, detected, time to detect, action queued), the incident report,
   the exporter URL and the Delta tables to query.

Ctrl-C at any point stops the faults (a frozen broker is resumed), the workload, the
agents and the queries, and the cluster: nothing is left running. ``--keep`` leaves the
cluster and the lake for a look around.

Replay mode (``--replay``) needs no cluster: it copies telemetry captured from a demo run
(``demo/capture/``, kept small) into a fresh lake, runs every query once over it, replays
the detectors over the captured time range and prints the findings and the same summary.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from jobs.run import RunError
from kmon.config import REPO_ROOT, Config

log = logging.getLogger(__name__)

CAPTURE_DIR = REPO_ROOT / "demo" / "capture"
DEMO_CLUSTER = "demo"


class DemoError(RunError):
    """The demo cannot start; the message is one line saying what to do."""


class Progress:
    """Numbered steps with elapsed time, so nobody wonders whether it hung."""

    def __init__(self, total: int, out=sys.stdout):
        self.total, self.n, self.t0, self.out = total, 0, time.monotonic(), out

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def step(self, text: str) -> None:
        self.n += 1
        print(f"[{self.n}/{self.total}] {text}  (+{self.elapsed():.0f}s)", file=self.out,
              flush=True)

    def note(self, text: str) -> None:
        print(f"      {text}", file=self.out, flush=True)


# --- findings as they appear ------------------------------------------------------------------

def finding_line(f) -> str:
    cause = f" ({f.cause})" if f.cause else ""
    incident = f" incident {f.incident_id[:12]}" if f.incident_id else ""
    return (f"{f.severity.value.upper():8s} {f.type.value}{cause} on {f.entity}{incident}: "
            f"{f.explanation[:160]}")


class FindingTracker:
    """Keeps what the detector query hands over; prints each finding once, when it first
    appears; answers which findings appeared after a time."""

    def __init__(self, out=sys.stdout, clock=lambda: int(time.time() * 1000)):
        self.out, self.clock = out, clock
        self.first_seen: dict[str, tuple[int, object]] = {}   # finding_id -> (wall ms, finding)
        self.latest: dict[str, object] = {}
        self.evaluations = 0
        self.lock = threading.Lock()

    def __call__(self, findings, now_ms: int) -> None:
        wall = self.clock()
        with self.lock:
            self.evaluations += 1
            for f in findings:
                self.latest[f.finding_id] = f
                if f.finding_id not in self.first_seen and f.status.value == "open":
                    self.first_seen[f.finding_id] = (wall, f)
                    print(f"   >> {finding_line(f)}", file=self.out, flush=True)

    def open_findings(self) -> list:
        """Every finding open in its latest state."""
        with self.lock:
            return [f for f in self.latest.values() if f.status.value == "open"]

    def since(self, start_ms: int) -> list[tuple[int, object]]:
        with self.lock:
            return sorted(((t, self.latest.get(fid, f)) for fid, (t, f) in self.first_seen.items()
                           if t >= start_ms), key=lambda x: x[0])


# --- the summary --------------------------------------------------------------------------------

@dataclass
class FaultOutcome:
    name: str
    title: str
    started_ms: int
    detected_ms: int | None = None
    findings: list = field(default_factory=list)        # (wall ms, Finding) that showed it
    effects: list = field(default_factory=list)         # (wall ms, Finding) of its effects
    parts_seen: dict = field(default_factory=dict)       # part (or effect) -> wall ms
    action: str = "-"
    notes: dict = field(default_factory=dict)

    @property
    def detected(self) -> bool:
        return self.detected_ms is not None

    @property
    def time_to_detect_s(self) -> float | None:
        return None if self.detected_ms is None else (self.detected_ms - self.started_ms) / 1000

    def to_json(self) -> dict:
        return {"fault": self.name, "title": self.title, "detected": self.detected,
                "time_to_detect_s": self.time_to_detect_s, "action": self.action,
                "findings": [{"type": f.type.value, "entity": f.entity, "cause": f.cause,
                              "incident_id": f.incident_id, "evidence": f.evidence,
                              "seen_after_s": (t - self.started_ms) / 1000}
                             for t, f in self.findings],
                "effects": [{"type": f.type.value, "entity": f.entity, "cause": f.cause,
                             "incident_id": f.incident_id,
                             "seen_after_s": (t - self.started_ms) / 1000}
                            for t, f in self.effects],
                "parts_seen_after_s": {p: (t - self.started_ms) / 1000
                                       for p, t in self.parts_seen.items()},
                "notes": self.notes}


def record_finding(o: FaultOutcome, fault, t: int, f) -> None:
    """Count a finding seen at wall time t for the fault, if it shows one of its parts or
    effects not seen yet; the fault is detected when every part (not effect) is seen."""
    part = fault.part_of(f)
    if part is None or part in o.parts_seen:
        return
    o.parts_seen[part] = t
    (o.findings if part in fault.parts else o.effects).append((t, f))
    if o.detected_ms is None and set(o.parts_seen) >= set(fault.parts):
        o.detected_ms = max(o.parts_seen[p] for p in fault.parts)


def refresh_findings(o: FaultOutcome, latest: dict) -> None:
    """Each recorded finding in its latest state (finding_id -> Finding): a finding first
    seen without its lost range or incident gets them in later evaluations."""
    o.findings = [(t, latest.get(f.finding_id, f)) for t, f in o.findings]
    o.effects = [(t, latest.get(f.finding_id, f)) for t, f in o.effects]


def summary_table(outcomes: list[FaultOutcome]) -> str:
    rows = [("fault", "detected", "time to detect", "finding", "action queued")]
    for o in outcomes:
        first = o.findings[0][1] if o.findings else None
        rows.append((o.title, "yes" if o.detected else "NO",
                     f"{o.time_to_detect_s:.0f} s" if o.detected else "-",
                     f"{first.type.value} {first.entity}" if first else "-", o.action))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line]
    for i, r in enumerate(rows):
        out.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")
        if i == 0:
            out.append(line)
    out.append(line)
    return "\n".join(out)


# --- live mode ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class DemoSettings:
    warmup_s: float = 150.0          # healthy period before the first fault
    catch_up_s: float = 240.0        # after it, most time to wait for silver to keep up
    detect_timeout_s: float = 300.0  # per fault
    settle_s: float = 20.0           # after a fault is healed, before the next
    effects_wait_s: float = 90.0     # after a detection, most time to wait for its effects
    clear_wait_s: float = 120.0      # before a fault, most time to wait for open findings
                                     # that would show it to resolve
    exporter_port: int = 9464
    rate_per_s: float = 40.0         # messages/s per workload producer


SHORT = DemoSettings(warmup_s=90.0, detect_timeout_s=240.0, settle_s=5.0)


def demo_config(config: Config) -> Config:
    """The demo's cluster and lake: its own names and folders, broker settings the faults
    need, and a pipeline trimmed for one machine (no bronze copy: the landing files are
    the raw copy)."""
    from faults.unclean_election import BROKER_CONFIG

    root = config.work_dir / "demo"
    brokers = {**BROKER_CONFIG, "log.cleaner.backoff.ms": "1000",
               **config.local_cluster.extra_broker_config}
    return config.with_overrides(
        # One KRaft controller (node 3, a broker too), as a fleet runs its quorum apart
        # from the brokers it watches: the unclean election stops brokers 1 and 2, which
        # as controllers too took the quorum down with them, and the election waited for
        # the quorum's return as well as for the stale follower (11, 16 and 30 s after
        # the restart in the three runs timed; 4-20 s with node 3 as the one controller).
        local_cluster={"name": DEMO_CLUSTER, "brokers": 3, "controllers": 1,
                       "extra_broker_config": brokers},
        spark={"storage_root": str(root / "lake")},
        # The default triggers (silver 10 s, detectors 20 s). Two cores hold three
        # brokers, the workload, the agents and Spark: no 10-s stage table, the
        # slow-broker detector computes those windows from silver (detectors/inputs.py),
        # one stateful query fewer.
        pipeline={"bronze_tables": False, "fast_stage_table": False},
        # Faults follow each other within minutes: a finding left open by one (a cleaner
        # frozen with its broker) must resolve before the next fault of its kind, or that
        # fault's finding is an update of the old one (the demo waits, clear_wait_s).
        findings={"resolve_after_s": 60.0},
        # The brokers' cleaners look for work every second (log.cleaner.backoff.ms above),
        # so a second without a look already means a pass is running.
        compaction_lag={"cleaner_backoff_s": int(brokers["log.cleaner.backoff.ms"]) / 1000},
        remediation={"enabled_actions": ["move_leadership", "restore_group_offsets",
                                         "page_human"], "dry_run": True})


def _check_port(port: int) -> None:
    import socket

    if not port:
        return
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise DemoError(f"port {port} (the exporter) is in use: stop what holds it, or run "
                            f"`kmon demo --exporter-port <free port>`") from None


def preflight(config: Config, port: int) -> None:
    from kmon.preflight import PreflightError, check_disk, check_java, check_python

    try:
        check_python()
        check_java(config.jvm.java_home)
        check_disk(config.work_dir)
    except PreflightError as e:
        raise DemoError(str(e)) from None
    _check_port(port)


def clean_previous(config: Config, say) -> None:
    """A second run starts clean: stop a demo cluster left running, remove its data."""
    from kmon.local_cluster import LocalCluster

    old = LocalCluster(config, name=DEMO_CLUSTER)
    if old.nodes and any(r["state"] != "stopped" for r in old.status()):
        say("stopping the cluster a previous demo left running")
        old.stop()
    shutil.rmtree(config.work_dir / "demo", ignore_errors=True)


def _faults(brokers: int):
    from faults.compaction_lag import CompactionLag
    from faults.offset_rewind import OffsetRewinds
    from faults.slow_broker import SlowBroker
    from faults.unclean_election import UncleanElection

    return [SlowBroker(broker=min(2, brokers)), OffsetRewinds(), CompactionLag(broker=min(3, brokers)),
            UncleanElection()]


def _client_log_agent(config: Config, workload, groups: list[str], registry, lake, state_dir):
    from ingest.agent_metrics import AgentMetrics
    from ingest.client_log_agent import ClientLogAgent, ClientLogSource
    from ingest.file_tailer import PositionStore
    from ingest.supervisor import Supervised
    from jobs.run import sink_factory

    sources = [ClientLogSource(config.watch.cluster, f"{g}-consumer", workload.consumer_log(g),
                               group_id=g, client_software="librdkafka") for g in groups]
    for s in sources:
        s.path.touch()
    agent = ClientLogAgent(sources, sink_factory(config, lake)("client-log"),
                           PositionStore(state_dir / "client-log.json"),
                           AgentMetrics(registry, "client-log"))
    return Supervised("client-log", agent, 1.0)


def _action_for(monitor, outcome: FaultOutcome) -> str:
    """What the decision step did about the fault's findings (from gold.remediation_decisions)."""
    if monitor.decisions is None or not outcome.findings:
        return "-"
    ids = [f.finding_id for _, f in outcome.findings]
    try:
        decisions = monitor.decisions.decisions.load(finding_ids=ids, since_ms=outcome.started_ms)
    except Exception as e:  # noqa: BLE001 - the summary still prints
        log.warning("reading decisions: %s", e)
        return "?"
    # load() also returns every decision taken since (what the queue's rate guards need):
    # keep this fault's.
    decisions = [d for d in decisions if d.finding_id in set(ids)]
    acted = [d for d in decisions if d.action is not None]
    if acted:
        return ", ".join(sorted({f"{d.action.kind.value} (dry run)" for d in acted}))
    return ", ".join(sorted({f"none: {d.reason[:40]}" for d in decisions})) or NOT_DECIDED


NOT_DECIDED = "not decided yet"


def _fill_actions(monitor, outcomes: list[FaultOutcome], stop: threading.Event,
                  wait_s: float = 30.0) -> None:
    """Each fault's action column. The decision step runs after the detector query hands
    over its findings, so a fault detected in the last evaluation may have no decision
    yet (seen: 9 s later): wait up to wait_s for every detected fault's."""
    end = time.monotonic() + wait_s
    while True:
        for o in outcomes:
            o.action = _action_for(monitor, o)
        pending = [o for o in outcomes if o.detected and o.action == NOT_DECIDED]
        if not pending or time.monotonic() >= end or stop.is_set():
            return
        stop.wait(2.0)


class DemoLock:
    """One demo per work folder. A second `kmon demo` would stop the first one's cluster
    and remove its lake (`clean_previous`), so it stops at start instead, naming the
    process that holds the lock. An flock: it goes away with its process, even a killed
    one, so a crashed demo never leaves a stale lock."""

    def __init__(self, path: Path):
        self.path = path
        self._file = None

    def __enter__(self) -> "DemoLock":
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            f.close()
            raise DemoError(f"another kmon demo is running with this work folder (pid "
                            f"{holder}, lock {self.path}): wait for it to end, or stop it "
                            f"(Ctrl-C in its terminal, or kill {holder})") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._file = f
        return self

    def __exit__(self, *_exc) -> None:
        import fcntl

        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def run_demo(config: Config, *, keep: bool = False, short: bool = False,
             exporter_port: int | None = None, summary_json: str | None = None,
             faults: list[str] | None = None, capture_to: str | None = None,
             warmup_s: float | None = None, out=sys.stdout) -> int:
    """The four-fault demo (see the module docstring); one at a time per work folder.
    `warmup_s` replaces the healthy warm-up's length (150 s, 90 s when `short`)."""
    if warmup_s is not None and warmup_s <= 0:
        raise ValueError(f"--warmup must be a positive number of seconds, got {warmup_s:g}")
    with DemoLock(config.work_dir / "demo.lock"):
        return _run_demo(config, keep=keep, short=short, exporter_port=exporter_port,
                         summary_json=summary_json, faults=faults, capture_to=capture_to,
                         warmup_s=warmup_s, out=out)


def _run_demo(config: Config, *, keep: bool, short: bool, exporter_port: int | None,
              summary_json: str | None, faults: list[str] | None, capture_to: str | None,
              warmup_s: float | None,
              out) -> int:
    from confluent_kafka.admin import NewTopic
    from prometheus_client import CollectorRegistry

    from faults.base import FaultContext
    from faults.workload import ConsumerSpec, ProducerSpec, Workload, create_topics
    from jobs.run import Monitor, build_agents
    from kmon.local_cluster import LocalCluster

    settings = SHORT if short else DemoSettings()
    if warmup_s is not None:
        settings = replace(settings, warmup_s=warmup_s)
    port = settings.exporter_port if exporter_port is None else exporter_port
    config = demo_config(config)
    preflight(config, port)
    selected = _faults(config.local_cluster.brokers)
    if faults:
        unknown = set(faults) - {f.name for f in selected}
        if unknown:
            raise DemoError(f"unknown fault(s) {', '.join(sorted(unknown))}: choose from "
                            f"{', '.join(f.name for f in selected)}")
        selected = [f for f in selected if f.name in faults]
    p = Progress(6, out)
    stop = threading.Event()

    def on_signal(signum, _frame):
        if not stop.is_set():
            print(f"\nkmon demo: {signal.Signals(signum).name}: stopping the faults, the "
                  f"workload, the pipeline and the cluster...", file=out, flush=True)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    cluster = workload = monitor = None
    ctx = None
    outcomes: list[FaultOutcome] = []
    try:
        p.step(f"starting a real {config.local_cluster.brokers}-broker Kafka cluster (KRaft)")
        clean_previous(config, p.note)
        cluster = LocalCluster(config, name=DEMO_CLUSTER, owner_bound=not keep)
        cluster.start()
        p.note(f"bootstrap.servers={cluster.bootstrap_servers}")
        if stop.is_set():
            return 130

        p.step("workload: orders (acks=all, group billing), clicks (acks=1, group analytics), "
               "compacted customers, ledger (unclean election allowed)")
        workload = Workload(cluster.bootstrap_servers, config.work_dir / "demo" / "clients")
        create_topics(cluster.bootstrap_servers, [
            NewTopic("orders", 6, 3, config={"min.insync.replicas": "2"}),
            NewTopic("clicks", 6, 3)])
        ctx = FaultContext(cluster, workload, say=lambda t: p.note(t), stop=stop)
        for f in selected:
            f.prepare(ctx)
        rate = settings.rate_per_s
        workload.start_producer(ProducerSpec("orders-producer", "orders", rate, acks="all"))
        workload.start_producer(ProducerSpec("clicks-producer", "clicks", rate, acks="1"))
        workload.start_consumer(ConsumerSpec("billing", ("orders",)))
        workload.start_consumer(ConsumerSpec("analytics", ("clicks",)))

        p.step("agents, streaming pipeline, detectors, remediation decisions, exporter "
               "(Spark local mode with Delta)")
        registry = CollectorRegistry()
        tracker = FindingTracker(out)
        monitor = Monitor(config, registry=registry, watched_bootstrap=cluster.bootstrap_servers,
                          cluster_sizes={config.watch.cluster: len(cluster.nodes)},
                          on_findings=[tracker])
        state_dir = config.work_dir / "demo" / "agent-state"
        monitor.agents = build_agents(config, registry, monitor.lake, state_dir, cluster) + [
            _client_log_agent(config, workload, sorted(workload.consumer_specs), registry,
                              monitor.lake, state_dir)]
        monitor.start(port, out)
        for s in previous:   # the SparkContext replaced our SIGINT handler with PySpark's
            signal.signal(s, on_signal)
        threading.Thread(target=monitor.health_loop, args=(stop,), daemon=True).start()

        p.step(f"healthy warm-up ({settings.warmup_s:.0f} s): the detectors learn normal "
               f"latency; nothing may be flagged")
        warm_start = int(time.time() * 1000)
        _wait_healthy(monitor, tracker, settings.warmup_s, stop, p)
        _wait_keeping_up(monitor, settings.catch_up_s, stop, p)
        healthy = tracker.since(warm_start)
        healthy_s = (time.time() * 1000 - warm_start) / 1000
        p.note(f"healthy run: {len(healthy)} finding(s) in {healthy_s:.0f} s, "
               f"{tracker.evaluations} detector evaluations")
        faults_start = time.monotonic()

        if not stop.is_set():
            p.step(f"causing {len(selected)} faults, one after another")
        for i, fault in enumerate(selected, 1):
            if stop.is_set():
                break
            p.note(f"--- fault {i}/{len(selected)}: {fault.title} ---")
            try:
                outcome = _cause(fault, ctx, tracker, settings, stop, p, monitor)
            except Exception as e:  # noqa: BLE001 - report it, go on with the next fault
                from jobs.pipeline import PipelineFailed
                if isinstance(e, PipelineFailed):
                    raise
                log.exception("fault %s failed", fault.name)
                p.note(f"{fault.title}: could not be caused: {e}")
                outcome = FaultOutcome(fault.name, fault.title, int(time.time() * 1000),
                                       notes={"error": str(e)})
            outcomes.append(outcome)
            status = (f"detected in {outcome.time_to_detect_s:.0f} s" if outcome.detected
                      else f"NOT detected within {settings.detect_timeout_s:.0f} s")
            p.note(f"{fault.title}: {status}")
            if i < len(selected) and not stop.is_set():
                stop.wait(settings.settle_s)

        faults_s = time.monotonic() - faults_start
        if outcomes:
            p.note(f"the faults took {faults_s:.0f} s in all (the healthy run {healthy_s:.0f} s)")
            p.step("summary" + (f" (interrupted: {len(outcomes)} of {len(selected)} faults "
                                "caused)" if stop.is_set() else ""))
            _fill_actions(monitor, outcomes, stop)
            print("\n" + summary_table(outcomes), file=out, flush=True)
        else:
            p.note("interrupted before the first fault: nothing to summarize")
        if healthy:
            print(f"\nhealthy warm-up flagged {len(healthy)} finding(s): "
                  + "; ".join(finding_line(f) for _, f in healthy), file=out)
        # The report's queries would queue behind a dozen streaming queries on a small
        # machine (minutes of silence after the table): stop those first, keep Spark.
        p.note("stopping the agents and the streaming queries; writing the incident report")
        monitor.stop_streams()
        report = _write_report(monitor, config, outcomes, out)
        lake_root = config.storage_root
        print(f"\nincident report: {report or '(not written)'}", file=out)
        print(f"exporter: http://127.0.0.1:{port}/metrics (while the demo runs)" if port
              else "exporter: off (--exporter-port 0)", file=out)
        print(f"Delta tables under {lake_root}; query them with\n"
              f"  KMON__SPARK__STORAGE_ROOT={lake_root} ./kmonw sql \"SELECT type, entity, "
              f"cause, status FROM gold.anomalies ORDER BY first_seen_ms\"", file=out, flush=True)
        if capture_to:
            import dataclasses

            from detectors.inputs import describe_compacted_topics
            configs = describe_compacted_topics({"bootstrap.servers": cluster.bootstrap_servers},
                                                config.watch.cluster)
            capture(Path(config.storage_root) / "landing", outcomes, warm_start,
                    int(time.time() * 1000), [dataclasses.asdict(c) for c in configs],
                    Path(capture_to), out)
        if summary_json:
            Path(summary_json).write_text(json.dumps({
                "healthy_findings": [finding_line(f) for _, f in healthy],
                "healthy_s": round(healthy_s, 1), "faults_s": round(faults_s, 1),
                "faults": [o.to_json() for o in outcomes], "report": str(report or ""),
                "lake": lake_root}, indent=2, default=str))
        if stop.is_set():
            return 130
        return 0 if all(o.detected for o in outcomes) and len(outcomes) == len(selected) else 1
    finally:
        for f in selected:
            try:
                if ctx is not None:
                    f.heal(ctx)
            except Exception as e:  # noqa: BLE001 - keep tearing down
                log.warning("healing %s: %s", f.name, e)
        if ctx is not None:
            ctx.close()
        if workload is not None:
            workload.stop()
        if monitor is not None:
            monitor.stop()
        if cluster is not None and not keep:
            cluster.stop()
            if stop.is_set():
                print("kmon demo: stopped; the cluster, the workload, the agents and Spark "
                      "are down", file=out, flush=True)
        elif cluster is not None:
            print(f"\ncluster left running: bootstrap.servers={cluster.bootstrap_servers}; "
                  f"stop it with `kmon cluster down --name {DEMO_CLUSTER}`", file=out)
        for s, h in previous.items():
            signal.signal(s, h)


def _wait_healthy(monitor, tracker: FindingTracker, seconds: float, stop: threading.Event,
                  p: Progress) -> None:
    end = time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < end:
        stop.wait(min(15.0, max(0.0, end - time.monotonic())))
        monitor.pipeline.check()
        p.note(f"warming up: {tracker.evaluations} detector evaluations, "
               f"{_silver_batches(monitor)} silver batches so far")


KEEPING_UP = 2.0   # a silver batch within this many trigger intervals keeps up


def _silver_batch_seconds(monitor) -> list[float]:
    """How long the `silver` query's last two micro-batches took."""
    for q in list(monitor.pipeline.queries):
        if q.name == "silver":
            return [(pr.get("durationMs") or {}).get("triggerExecution", 0) / 1000
                    for pr in q.recentProgress[-2:]]
    return []


def _wait_keeping_up(monitor, seconds: float, stop: threading.Event, p: Progress) -> None:
    """Before the first fault, wait until silver keeps up with the telemetry: the first
    micro-batches (a cold JVM, the backlog of the start) take several trigger intervals,
    and a fault caused then would be timed with that backlog in front of it."""
    trigger = monitor.pipeline.settings.silver_trigger_s
    end = time.monotonic() + seconds
    while not stop.is_set():
        took = _silver_batch_seconds(monitor)
        if len(took) == 2 and max(took) <= trigger * KEEPING_UP:
            p.note(f"the pipeline keeps up: its last silver batches took "
                   f"{' and '.join(f'{t:.0f} s' for t in took)} for a {trigger:.0f} s trigger")
            return
        if time.monotonic() >= end:
            p.note(f"silver still lags after {seconds:.0f} s more (last batches: "
                   f"{', '.join(f'{t:.0f} s' for t in took) or 'none'}); causing the faults "
                   f"anyway: their times to detect include that backlog")
            return
        p.note(f"waiting for the pipeline to keep up: last silver batches took "
               f"{', '.join(f'{t:.0f} s' for t in took) or 'none yet'} for a "
               f"{trigger:.0f} s trigger")
        stop.wait(10)
        monitor.pipeline.check()


def _silver_batches(monitor) -> int:
    n = 0
    for q in list(monitor.pipeline.queries):
        if q.name.startswith("silver") and q.lastProgress:
            n += int(q.lastProgress["batchId"]) + 1
    return n


def _wait_for_effects(fault, outcome: FaultOutcome, check, settings: DemoSettings,
                      stop: threading.Event, p: Progress) -> None:
    """After the detection, wait (at most effects_wait_s) for the findings of the fault's
    effects, so the summary shows the whole chain; the time to detect stays as it was."""
    end = time.monotonic() + settings.effects_wait_s
    last_note = time.monotonic()
    while not stop.is_set():
        check()
        missing = [e for e in fault.effects if e not in outcome.parts_seen]
        if not missing:
            p.note(f"its effects are in: {', '.join(fault.effects)}")
            return
        if time.monotonic() >= end:
            p.note(f"no finding for {', '.join(missing)} within "
                   f"{settings.effects_wait_s:.0f} s of the detection; going on")
            return
        if time.monotonic() - last_note >= 15:
            last_note = time.monotonic()
            p.note(f"detected; waiting for the findings of its effects: {', '.join(missing)}")
        stop.wait(1.0)


def already_showing(fault, findings) -> list:
    """Open findings that would show the fault (one of its parts) before it is caused: a
    finding that persists is updated, not raised again, so while one is open the fault's
    own finding cannot appear (seen: a frozen cleaner's compaction_lag on every broker
    during the slow-broker fault, still open when the compaction fault began)."""
    return [f for f in findings
            if f.status.value == "open" and fault.part_of(f) in fault.parts]


def _wait_until_clear(fault, tracker: FindingTracker, settings: DemoSettings,
                      stop: threading.Event, p: Progress) -> None:
    end = time.monotonic() + settings.clear_wait_s
    last_note = 0.0
    while not stop.is_set():
        showing = already_showing(fault, tracker.open_findings())
        if not showing:
            return
        if time.monotonic() >= end:
            p.note(f"still open after {settings.clear_wait_s:.0f} s, so this fault's own "
                   f"finding may not show: {'; '.join(finding_line(f) for f in showing)}")
            return
        if time.monotonic() - last_note >= 15:
            last_note = time.monotonic()
            p.note(f"waiting for {len(showing)} earlier finding(s) that look like this fault "
                   f"to resolve: {', '.join(f'{f.type.value} {f.entity}' for f in showing)}")
        stop.wait(2.0)


def _cause(fault, ctx, tracker: FindingTracker, settings: DemoSettings, stop: threading.Event,
           p: Progress, monitor) -> FaultOutcome:
    from faults.base import FaultRun

    _wait_until_clear(fault, tracker, settings, stop, p)
    started = int(time.time() * 1000)
    run = FaultRun(fault.name, started)
    outcome = FaultOutcome(fault.name, fault.title, started, notes=run.notes)

    def check() -> bool:
        for t, f in tracker.since(started):
            record_finding(outcome, fault, t, f)
        return outcome.detected

    deadline = time.monotonic() + settings.detect_timeout_s
    last_note = [time.monotonic()]

    def done() -> bool:
        """Detected, timed out or stopping; prints progress every 15 s meanwhile."""
        monitor.pipeline.check()
        if time.monotonic() - last_note[0] >= 15:
            last_note[0] = time.monotonic()
            p.note(f"waiting for the detectors: {(time.time() * 1000 - started) / 1000:.0f} s "
                   f"since the fault started, {tracker.evaluations} evaluations so far")
        return check() or time.monotonic() > deadline or stop.is_set()

    try:
        if fault.name == "slow_broker":
            fault.inject(ctx, run, until=done)
        else:
            fault.inject(ctx, run)
            # Causing some faults takes a while (stopping and restarting brokers): the
            # detectors get their full time from the moment the fault is in place.
            deadline = time.monotonic() + settings.detect_timeout_s
        run.injected_ms = int(time.time() * 1000)
        while not done():
            stop.wait(1.0)
        if outcome.detected and fault.effects:
            _wait_for_effects(fault, outcome, check, settings, stop, p)
    finally:
        fault.heal(ctx)
    refresh_findings(outcome, {f.finding_id: f for _, f in tracker.since(started)})
    # Time to detect runs from when the damage was done (the reset commit, the election).
    outcome.started_ms = run.fault_ms or started
    if outcome.detected_ms is not None and outcome.detected_ms < outcome.started_ms:
        outcome.started_ms = started   # seen before the marked moment: count from the start
    # Every finding that appeared during the fault, for the record (related effects too).
    outcome.notes["all_findings"] = [finding_line(f) for _, f in tracker.since(started)]
    return outcome


def _write_report(monitor, config: Config, outcomes: list[FaultOutcome], out) -> Path | None:
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


# --- capture (for the replay mode) --------------------------------------------------------------

REQUEST_HISTORY_S = 180   # request timings kept before the slow-broker fault (the baseline)
REPLAY_STEP_S = 60.0      # the replay evaluates the detectors every this many captured seconds


def capture(lake_landing: Path, outcomes: list["FaultOutcome"], start_ms: int, end_ms: int,
            topic_configs: list[dict], dest: Path = CAPTURE_DIR, out=sys.stdout) -> Path:
    """Keep a demo run's telemetry, small, for `kmon demo --replay`.

    Every stream's landing files are kept gzipped, except request_stages (by far the
    biggest), whose lines are kept only around the slow-broker fault: the other faults do
    not need request timings, and without them the detectors simply see no traffic.
    """
    import gzip

    shutil.rmtree(dest, ignore_errors=True)
    slow = next((o for o in outcomes if o.name == "slow_broker"), None)
    keep_from = (slow.started_ms - REQUEST_HISTORY_S * 1000) if slow else None
    keep_until = (slow.detected_ms or end_ms) + 30_000 if slow else None
    for stream_dir in sorted(p for p in Path(lake_landing).iterdir() if p.is_dir()):
        lines = []
        for f in sorted(stream_dir.glob("*.jsonl")):
            lines += f.read_bytes().splitlines(keepends=True)
        if stream_dir.name == "request_stages":
            lines = [x for x in lines if keep_from is not None
                     and keep_from <= json.loads(x).get("ts_ms", 0) <= keep_until]
        if lines:   # one gzipped file per stream, in the order the agents wrote them
            target = dest / "landing" / stream_dir.name
            target.mkdir(parents=True, exist_ok=True)
            with gzip.open(target / f"{stream_dir.name}-capture.jsonl.gz", "wb",
                           compresslevel=9) as g:
                g.writelines(lines)
    manifest = {"start_ms": start_ms, "end_ms": end_ms, "topic_configs": topic_configs,
                "faults": [{"name": o.name, "started_ms": o.started_ms,
                            "until_ms": o.detected_ms or end_ms} for o in outcomes]}
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2))
    print(f"captured {_size_mb(dest):.1f} MB of telemetry in {dest}", file=out)
    return dest


# --- replay mode --------------------------------------------------------------------------------

def run_replay(config: Config, *, summary_json: str | None = None, step_s: float | None = None,
               out=sys.stdout) -> int:
    """Captured telemetry of a demo run through the same pipeline and detectors; no cluster."""
    from detectors.compaction_lag import CompactedTopicConfig
    from jobs.detect import evaluate
    from jobs.lake import Lake
    from jobs.pipeline import Pipeline
    from kmon.spark_session import build_spark_session

    manifest_path = CAPTURE_DIR / "manifest.json"
    if not manifest_path.exists():
        raise DemoError(f"no captured telemetry at {CAPTURE_DIR}: run `kmon demo --capture` "
                        f"once (or use the live `kmon demo`)")
    manifest = json.loads(manifest_path.read_text())
    root = config.work_dir / "demo-replay"
    shutil.rmtree(root, ignore_errors=True)
    config = config.with_overrides(spark={"storage_root": str(root / "lake")},
                                   pipeline={"bronze_tables": False})
    lake = Lake(config.storage_root)
    p = Progress(4, out)
    p.step(f"copying the captured telemetry ({_size_mb(CAPTURE_DIR):.1f} MB, "
           f"{len(manifest['faults'])} faults) into a fresh lake")
    for stream_dir in sorted((CAPTURE_DIR / "landing").iterdir()):
        shutil.copytree(stream_dir, Path(lake.landing(stream_dir.name)))
    p.step("starting Spark with Delta; every query once over the captured telemetry")
    spark = build_spark_session(config)
    try:
        Pipeline(spark, lake, config.pipeline).process_available()
        step = step_s or REPLAY_STEP_S
        start, end = manifest["start_ms"], manifest["end_ms"]
        topic_configs = [CompactedTopicConfig(**c) for c in manifest.get("topic_configs", [])]
        times = list(range(start + int(step * 1000), end, int(step * 1000))) + [end]
        p.step(f"replaying the detectors every {step:.0f} s of the captured "
               f"{(end - start) / 60000:.0f} minutes ({len(times)} evaluations)")
        tracker = FindingTracker(out)
        for i, t in enumerate(times, 1):
            tracker.clock = lambda t=t: t
            tracker(evaluate(spark, lake, config, t, topic_configs=topic_configs), t)
            if i % 10 == 0:
                p.note(f"{i}/{len(times)} evaluations, {len(tracker.first_seen)} findings so far")
        faults = {f.name: f for f in _faults(3)}
        outcomes = []
        records = manifest["faults"]
        for i, rec in enumerate(records):
            fault = faults[rec["name"]]
            o = FaultOutcome(fault.name, fault.title, rec["started_ms"])
            # A finding counts for the fault in progress: up to the next fault's start.
            bound = records[i + 1]["started_ms"] if i + 1 < len(records) else end
            for t, f in tracker.since(rec["started_ms"]):
                if t <= bound:
                    record_finding(o, fault, t, f)
            o.action = "(replay: no queue)"
            outcomes.append(o)
        p.step("summary (times are detector time on complete data, not pipeline latency)")
        print("\n" + summary_table(outcomes), file=out)
        print(f"\nDelta tables under {config.storage_root}", file=out, flush=True)
        if summary_json:
            Path(summary_json).write_text(json.dumps(
                {"faults": [o.to_json() for o in outcomes], "lake": config.storage_root},
                indent=2, default=str))
        return 0
    finally:
        spark.stop()


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6
