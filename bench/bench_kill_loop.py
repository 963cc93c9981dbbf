"""Kill -9 loop: every kmon component killed and restarted in turn under steady load, then
everything counted.

Run: .kmon/venv/bin/python -m bench.bench_kill_loop [--rounds 3] [--down-s 5]
     [--settle-s 20] [--no-save]
     .kmon/venv/bin/python -m bench.bench_kill_loop --monitoring-outage-s 3600
     [--recover-s 300]   (one long outage of the whole monitoring Kafka instead)

Issue 25 asks that nothing stop kmon or make it lose or repeat anything, measured the way
Kafka and Spark measure it: kill each part outright (SIGKILL: no shutdown hook, no flush)
several times while telemetry flows, restart it, and count at the end. Everything is
real and runs on this machine:

- the watched cluster: a local Apache Kafka cluster (KRaft, 3 brokers) under steady
  load: a producer (acks=all, ~100 messages/s) to `orders` (6 partitions, RF 3) and a
  consumer group committing every second;
- the monitoring Kafka: a second local cluster (3 brokers) holding the telemetry topics
  (RF 3, created here) and the remediation queue: the fleet layout;
- kmon's processes as an operator runs them, each in its own process group: one
  `kmon agents --broker-id N ...` per watched broker (request log, broker logs, JMX), one
  `kmon agents --offsets` (__consumer_offsets), `kmon run --no-agents` (the pipeline,
  the detectors, the decision step and the exporter) and `kmon remediate` (the
  executor);
- remediation actions: every `--action-every-s` one `restore_group_offsets` is
  published to the queue for a group of its own, whose committed offset was set back
  (5) from the offset to restore (50): the executor restores it, once.

The loop: for each of `--rounds` rounds, each component in turn (the four agent
processes, `kmon run`, the executor, a monitoring-Kafka broker, a watched broker, the
brokers taken in turn) is killed with SIGKILL, left down `--down-s`, restarted, and left
`--settle-s` before the next kill. After each restart of `kmon run` the exporter's
/metrics is polled until it answers (the time is reported against a 15-s scrape
interval). Then the load stops, the agents are stopped as an operator would (Ctrl-C:
they drain and save their positions), `kmon run` too, and what is left in the telemetry
topics is processed by the same pipeline in this process (availableNow).

With `--monitoring-outage-s`, no kill loop and no remediation actions: after the same
start, every node of the monitoring Kafka is killed, left down that long and started
again, and `--recover-s` more are given to catch up; every 15 s a sample of what an
operator sees (module function `monitoring_outage`). The agents cannot flush meanwhile;
they keep their positions and send again, and the watched brokers' files are all they
have, so an outage longer than a log's rotation loses what rotated away (counted as
`lost_span`). The result goes to bench/results/kafka-outage-<utc stamp>.json.

Counted at the end:

- request-log lines: every line of every broker's request log up to its agent's saved
  position is in silver.request_stages or silver.quarantine exactly once (by record id);
- __consumer_offsets records: every record up to the offsets agent's saved positions
  that kmon's parser does not skip by design is in silver.offset_commits,
  silver.group_members or silver.quarantine exactly once;
- duplicates: record ids appearing twice in any silver table;
- findings: gold.anomalies rows per finding id (more than one is a duplicate), and
  every finding of the run (kills of brokers must not page);
- actions: per action published, its terminal results (exactly one), whether it ran
  again after a kill (a second "running" result: resumed, allowed), and the group's
  committed offset at the end (restored);
- the exporter: seconds from each restart of `kmon run` to /metrics answering, and
  whether the open findings were served from the first answer.

Prints the figures and writes them with the machine's name, CPU and load average to
bench/results/kill-loop-<utc stamp>.json. Nothing here asserts anything; the note quotes
the counts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

from bench.exporter_scrape import scrape, series
from bench.result_file import machine_header, save

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = "killloop"
PREFIX = "kmonkl."
TOPIC = "orders"
GROUP = "billing"
RESTORE_FROM, RESTORE_TO = 5, 50
SCRAPE_INTERVAL_S = 15.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no TOML for {v!r}")


def write_config(path: Path, sections: dict[str, dict]) -> None:
    """conf/kmon.toml with the bench's sections merged over it."""
    base = tomllib.loads((ROOT / "conf" / "kmon.toml").read_text())
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    path.write_text("".join(f"[{name}]\n" + "".join(f"{k} = {toml_value(v)}\n"
                                                    for k, v in values.items()) + "\n"
                            for name, values in base.items()))


class Proc:
    """One kmon command in its own process group, output appended to a log file."""

    def __init__(self, name: str, args: list[str], env: dict, logs: Path):
        self.name, self.args, self.env, self.log = name, args, env, logs / f"{name}.log"
        self.p: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.p = subprocess.Popen([sys.executable, "-m", "cli", *self.args], cwd=ROOT,
                                      env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        self.starts += 1

    def kill9(self) -> None:
        if self.p is not None and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(30)

    def ctrl_c(self, timeout: float = 300) -> int | None:
        if self.p is None or self.p.poll() is not None:
            return None if self.p is None else self.p.returncode
        os.killpg(self.p.pid, signal.SIGINT)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None

    def alive(self) -> bool:
        return self.p is not None and self.p.poll() is None


class Load:
    """The watched cluster's steady load: a producer and a committing consumer group."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.produced = 0
        self.errors = 0
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _produce(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 20,
                      "client.id": "kl-producer", "enable.idempotence": True})

        def done(err, _msg):
            if err is not None:
                self.errors += 1
        i = 0
        while not self.stop.is_set():
            try:
                p.produce(TOPIC, key=str(i).encode(), value=b"x" * 200, on_delivery=done)
                self.produced += 1
            except BufferError:
                pass
            p.poll(0)
            i += 1
            time.sleep(0.01)
        p.flush(30)

    def _consume(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                      "auto.offset.reset": "earliest", "enable.auto.commit": True,
                      "auto.commit.interval.ms": 1000, "client.id": "kl-consumer"})
        c.subscribe([TOPIC])
        while not self.stop.is_set():
            c.poll(0.5)
        c.close()


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topics(bootstrap: str, topics: list[tuple[str, int, int, dict]]) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)     # kept: a client collected early cancels its futures
    fs = admin.create_topics([NewTopic(t, p, rf, config=c) for t, p, rf, c in topics])
    for f in fs.values():
        try:
            f.result(60)
        except Exception as e:  # noqa: BLE001
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise


def set_offset(bootstrap: str, group: str, offset: int) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    deadline = time.monotonic() + 120
    while True:
        try:
            admin = _admin(bootstrap)
            res = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, 0, offset)])])
            res[group].result(30)
            return
        except Exception:  # noqa: BLE001 - the coordinator loading, a broker down
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def committed(bootstrap: str, group: str) -> int | None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = _admin(bootstrap)
    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, 0)])])
    tps = res[group].result(30).topic_partitions
    return tps[0].offset if tps and tps[0].offset >= 0 else None


def restore_action(group: str, i: int):
    from core.findings import ActionKind
    from remediation.actions import Action

    t = now_ms()
    return Action.build(
        finding_ids=(f"kill-loop-{i}-{t}",), cluster=CLUSTER, target=f"group:{group}",
        kind=ActionKind.RESTORE_GROUP_OFFSETS,
        operation={"op": "restore_group_offsets", "group": group,
                   "partitions": [{"topic": TOPIC, "partition": 0, "offset": RESTORE_TO,
                                   "direction": "forward"}]},
        preconditions={"group_has_no_members": True, "offset_within_log": True,
                       "still_displaced": True},
        decided_ms=t, deadline_ms=t + 3_600_000, dry_run=False)


def metrics_back(port: int, started: float, timeout_s: float = 600) -> dict:
    """Seconds from `started` (the restart) to /metrics answering, and whether the first
    answer held the open-findings count series."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = scrape(port, ("kmon_findings_open", "kmon_findings_open_count"))
        if isinstance(got, str):
            time.sleep(0.25)
            continue
        names = [name for name, _, _ in got]
        return {"seconds": round(time.monotonic() - started, 1),
                "findings_series": "kmon_findings_open_count" in names,
                "open_findings": names.count("kmon_findings_open")}
    return {"seconds": None}


def run(rounds: int, down_s: float, settle_s: float, action_every_s: float,
        work: Path, out=sys.stderr, outage_s: float = 0, recover_s: float = 300) -> dict:
    from infra.local_cluster import LocalCluster
    from jobs.streams import STREAMS
    from kmon.config import load_config
    from remediation.queue import ActionPublisher, ensure_queue_topic

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=out, flush=True)

    base = load_config()
    watched = LocalCluster(base, name=CLUSTER, brokers=3, log_roll_mb=4096)
    monitoring = LocalCluster(base, name=f"{CLUSTER}-mon", brokers=3)
    try:      # the clusters go, whatever fails (they are started inside)
        logs = work / "logs"
        logs.mkdir(parents=True)
        port = free_port()
        config_path = work / "kmon.toml"
        watched.start()
        monitoring.start()
        say(f"watched {watched.bootstrap_servers}; monitoring {monitoring.bootstrap_servers}")
        wbs, mbs = watched.bootstrap_servers, monitoring.bootstrap_servers
        write_config(config_path, {
            "watch": {"cluster": CLUSTER, "bootstrap_servers": wbs},
            "telemetry": {"bootstrap_servers": mbs, "topic_prefix": PREFIX},
            # Every request line also whole, so each line is counted by its id (the
            # windows sum them: bench_fault counts those).
            "request_log": {"full_brokers": [n.node_id for n in watched.broker_nodes]},
            "pipeline": {"source": "kafka", "exporter_port": port, "progress_interval_s": 30},
            "spark": {"storage_root": str(work / "lake")},
            "remediation": {"topic": f"{PREFIX}remediation", "executor_group": f"{PREFIX}executor",
                            "enabled_actions": ["restore_group_offsets"], "dry_run": False,
                            "max_actions_per_hour": 10_000},
        })
        env = {**os.environ, "KMON_CONFIG": str(config_path), "PYTHONPATH": str(ROOT)}
        config = load_config(config_path, environ={})
        create_topics(mbs, [(f"{PREFIX}{s.name}", 3, 3, {"min.insync.replicas": "2"})
                            for s in STREAMS])
        create_topics(wbs, [(TOPIC, 6, 3, {"min.insync.replicas": "2"})])
        ensure_queue_topic({"bootstrap.servers": mbs}, config.remediation.topic)

        procs: dict[str, Proc] = {}
        state = work / "agent-state"
        agent_ports: dict[str, int] = {}
        for n in watched.broker_nodes:
            name = f"agents-broker-{n.node_id}"
            agent_ports[name] = free_port()
            procs[name] = Proc(
                name,
                ["agents", "--broker-id", str(n.node_id), "--request-log", str(n.request_log),
                 "--log-dir", str(n.log_dir), "--metrics-url", n.metrics_url,
                 "--state-dir", str(state / f"broker-{n.node_id}"),
                 "--metrics-port", str(agent_ports[name])], env, logs)
        agent_ports["agents-offsets"] = free_port()
        procs["agents-offsets"] = Proc("agents-offsets", [
            "agents", "--offsets", "--state-dir", str(state / "offsets"),
            "--metrics-port", str(agent_ports["agents-offsets"])], env, logs)
        procs["run"] = Proc("run", ["run", "--no-agents"], env, logs)
        procs["executor"] = Proc("executor", ["remediate"], env, logs)

        load_ = Load(wbs)
        groups: list[str] = []
        actions: list = []
        publisher = ActionPublisher({"bootstrap.servers": mbs}, config.remediation.topic)
        exporter_restarts: list[dict] = []
        kills: list[dict] = []
        stop_actions = threading.Event()

        # Groups of this run's own: the executor's cooldown guard remembers a group it
        # acted on in an earlier run (30 min) and rightly skips it.
        run_tag = time.strftime("%H%M%S")

        def act_loop() -> None:
            i = 0
            while not stop_actions.wait(action_every_s):
                group = f"kl-restore-{run_tag}-{i}"
                try:
                    set_offset(wbs, group, RESTORE_FROM)
                    a = restore_action(group, i)
                    publisher.publish([a])
                    groups.append(group)
                    actions.append(a)
                except Exception as e:  # noqa: BLE001 - a broker down: try the next one
                    say(f"action {i} not published: {e}")
                i += 1

        try:
            load_.start()
            for p in procs.values():
                p.start()
            say("kmon started; waiting for the exporter and the first findings evaluation")
            first = metrics_back(port, time.monotonic())
            say(f"exporter up after {first['seconds']} s")
            time.sleep(60)
            outage = None
            if outage_s:
                rounds = 0
                outage = monitoring_outage(monitoring, outage_s, recover_s, port, agent_ports,
                                           procs, say)
            else:
                threading.Thread(target=act_loop, daemon=True).start()
            targets = [*procs, "monitoring-broker", "watched-broker"]
            for r in range(rounds):
                for name in targets:
                    t0 = time.monotonic()
                    if name in ("monitoring-broker", "watched-broker"):
                        cluster = monitoring if name == "monitoring-broker" else watched
                        node = cluster.broker_nodes[r % len(cluster.broker_nodes)].node_id
                        cluster.kill(node)
                        time.sleep(down_s)
                        cluster.restart(node)
                        what = f"{name.split('-')[0]} broker {node}"
                    else:
                        p = procs[name]
                        p.kill9()
                        time.sleep(down_s)
                        p.start()
                        what = name
                        if name == "run":
                            back = metrics_back(port, time.monotonic())
                            exporter_restarts.append(back)
                            what += f" (exporter back in {back['seconds']} s)"
                    kills.append({"round": r + 1, "component": name, "at_ms": now_ms(),
                                  "seconds": round(time.monotonic() - t0, 1)})
                    say(f"round {r + 1}: killed and restarted {what}")
                    time.sleep(settle_s)
                dead = [n for n, p in procs.items() if not p.alive()]
                if dead:
                    say(f"not running after round {r + 1}: {', '.join(dead)} (restarted)")
                    for n in dead:
                        procs[n].start()
            stop_actions.set()
            say("loop done; letting the last actions and telemetry through")
            time.sleep(90)
            load_.stop.set()
            time.sleep(15)
            codes = {n: p.ctrl_c() for n, p in procs.items() if n.startswith("agents")}
            codes["executor"] = procs["executor"].ctrl_c()
            codes["run"] = procs["run"].ctrl_c()
            say(f"stopped: {codes}")
            try:
                result = count(config, watched, state, actions, groups, wbs)
            except Exception as e:  # noqa: BLE001 - keep the loop's figures; say what failed
                import traceback
                traceback.print_exc(file=out)
                result = {"count_error": f"{type(e).__name__}: {e}"}
        finally:
            stop_actions.set()
            load_.stop.set()
            for p in procs.values():
                p.kill9()
            publisher.close()
        if outage is not None:
            return {"monitoring_outage_s": outage_s, "recover_s": recover_s, **outage,
                    "produced": load_.produced, "produce_errors": load_.errors,
                    "exporter_first_start": first, "exit_codes": codes, **result}
        return {"rounds": rounds, "down_s": down_s, "settle_s": settle_s,
                "kills": len(kills), "kill_log": kills, "produced": load_.produced,
                "produce_errors": load_.errors, "exporter_restarts": exporter_restarts,
                "exporter_first_start": first, "scrape_interval_s": SCRAPE_INTERVAL_S,
                "exit_codes": codes, **result}
    finally:
        watched.destroy()
        monitoring.destroy()


def series_values(port: int, names: tuple[str, ...]) -> dict[str, float] | str:
    """The samples of `names` at 127.0.0.1:`port`/metrics, by series, or the error."""
    got = scrape(port, names)
    return got if isinstance(got, str) else {series(n, lab): v for n, lab, v in got}


def monitoring_outage(monitoring, outage_s: float, recover_s: float, port: int,
                      agent_ports: dict[str, int], procs: dict, say) -> dict:
    """Every node of the monitoring Kafka killed for `outage_s`, then started again, and
    `recover_s` more; every 15 s what an operator sees: the pipeline's queries up or down
    and how long since their last progress (kmon run's exporter), each agent's failed
    flushes and seconds since its last good one, and which kmon processes are alive."""
    samples = []
    t_down = now_ms()

    def sample(phase: str) -> None:
        run_view = series_values(port, ("kmon_pipeline_query_up",
                                        "kmon_pipeline_query_lag_seconds", "kmon_findings_open"))
        agents = {}
        for name, p in agent_ports.items():
            got = series_values(p, ("kmon_agent_flush_failures_total",
                                    "kmon_agent_last_successful_flush_timestamp_seconds"))
            if isinstance(got, dict):
                last = [v for k, v in got.items() if "last_successful_flush" in k]
                got = {"flush_failures": sum(v for k, v in got.items() if "failures" in k),
                       "since_last_flush_s": round(time.time() - max(last)) if last else None}
            agents[name] = got
        s = {"phase": phase, "s_after_outage_start": round((now_ms() - t_down) / 1000),
             "run": run_view, "agents": agents,
             "alive": sorted(n for n, p in procs.items() if p.alive())}
        samples.append(s)
        down = ([k for k, v in run_view.items() if k.startswith("kmon_pipeline_query_up")
                 and v == 0] if isinstance(run_view, dict) else run_view)
        fails = {n: a.get("flush_failures") if isinstance(a, dict) else a
                 for n, a in agents.items()}
        say(f"{phase} +{s['s_after_outage_start']} s: queries down {down}; agents' flush "
            f"failures {fails}; alive {len(s['alive'])}/{len(procs)}")

    for n in monitoring.nodes:
        monitoring.kill(n.node_id)
    say(f"monitoring Kafka down: every node killed, for {outage_s:.0f} s")
    end = time.monotonic() + outage_s
    while time.monotonic() < end:
        time.sleep(15)
        sample("outage")
    for n in monitoring.nodes:
        monitoring.restart(n.node_id)
    t_up = now_ms()
    say(f"monitoring Kafka started again; {recover_s:.0f} s to recover")
    end = time.monotonic() + recover_s
    while time.monotonic() < end:
        time.sleep(15)
        sample("recovery")
    return {"outage_started_ms": t_down, "outage_ended_ms": t_up, "outage_samples": samples}


def count(config, watched, state: Path, actions: list, groups: list[str],
          wbs: str) -> dict:
    """Everything the module docstring lists, from the tables and the sources."""
    from collections import Counter

    from infra.kafka_clients import spark_kafka_options
    from infra.lake import Lake
    from infra.spark_session import build_spark_session
    from ingest.file_tailer import PositionStore
    from jobs.pipeline import Pipeline

    spark = build_spark_session(config)
    lake = Lake(config.storage_root)
    try:
        Pipeline(spark, lake, config.pipeline,
                 kafka_options=spark_kafka_options(config.telemetry, "telemetry"),
                 topic_prefix=config.telemetry.topic_prefix).process_available()

        def ids(table: str) -> list[str]:
            return [r[0] for r in spark.read.format("delta").load(lake.table("silver", table))
                    .where(f"cluster = '{CLUSTER}'").select("record_id").collect()]

        silver = {t: ids(t) for t in ("request_stages", "offset_commits", "group_members",
                                      "quarantine")}
        duplicates = {t: sum(n - 1 for n in Counter(v).values() if n > 1)
                      for t, v in silver.items()}
        got = {t: set(v) for t, v in silver.items()}

        # Request-log lines up to each agent's saved position.
        lines_expected: set[str] = set()
        for n in watched.broker_nodes:
            pos = PositionStore(state / f"broker-{n.node_id}" / "request-log.json").load().get(
                f"{CLUSTER}/{n.node_id}")
            if pos is None:
                continue
            offset = 0
            with open(n.request_log, "rb") as f:
                data = f.read(pos.offset)
            for line in data.split(b"\n")[:-1]:
                if line.strip():
                    lines_expected.add(f"{CLUSTER}:{n.node_id}:{pos.inode}:{offset}")
                offset += len(line) + 1
        in_silver = got["request_stages"] | got["quarantine"]
        lines = {"expected": len(lines_expected),
                 "missing": len(lines_expected - in_silver),
                 "in_both_silver_and_quarantine": len(
                     lines_expected & got["request_stages"] & got["quarantine"]),
                 "examples_missing": sorted(lines_expected - in_silver)[:5]}

        offsets = count_offsets(wbs, state / "offsets" / f"offsets-{CLUSTER}.json",
                                got["offset_commits"] | got["group_members"] | got["quarantine"],
                                got["offset_commits"] & got["quarantine"])

        from delta.tables import DeltaTable

        rows = []
        if DeltaTable.isDeltaTable(spark, lake.table("gold", "anomalies")):
            rows = (spark.read.format("delta").load(lake.table("gold", "anomalies"))
                    .where(f"cluster = '{CLUSTER}'")
                    .select("finding_id", "type", "entity", "cause", "severity").collect())
        per_id = Counter(r["finding_id"] for r in rows)
        findings = {"rows": len(rows), "findings": len(per_id),
                    "duplicated": sum(1 for n in per_id.values() if n > 1),
                    "all": sorted({(r["type"], r["entity"], r["cause"], r["severity"])
                                   for r in rows})}
    finally:
        spark.stop()

    results_path = config.work_dir / "remediation" / "results.jsonl"
    by_action: dict[str, list[dict]] = {}
    if results_path.exists():
        for line in results_path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            by_action.setdefault(row.get("action_id"), []).append(row)
    per_action = []
    for a, g in zip(actions, groups):
        rows_ = by_action.get(a.action_id, [])
        terminal = [r for r in rows_ if r.get("status") != "running"]
        per_action.append({"action_id": a.action_id, "group": g,
                           "terminal_results": len(terminal),
                           "statuses": [r.get("status") for r in rows_],
                           "resumed": sum(1 for r in rows_ if r.get("status") == "running") > 1,
                           "committed_at_end": committed(wbs, g)})
    action_summary = {
        "published": len(actions),
        "done_once": sum(1 for x in per_action if x["terminal_results"] == 1
                         and x["statuses"][-1] == "done"),
        "executed_twice": sum(1 for x in per_action
                              if sum(s == "done" for s in x["statuses"]) > 1),
        "without_result": sum(1 for x in per_action if x["terminal_results"] == 0),
        "resumed_after_kill": sum(1 for x in per_action if x["resumed"]),
        "restored": sum(1 for x in per_action if x["committed_at_end"] == RESTORE_TO),
        "each": per_action,
    }
    return {"request_log_lines": lines, "consumer_offsets_records": offsets,
            "silver_duplicates": duplicates, "findings": findings, "actions": action_summary}


def count_offsets(wbs: str, positions_path: Path, got: set[str], both: set[str]) -> dict:
    """__consumer_offsets records up to the offsets agent's saved positions that kmon's
    parser keeps (not Skipped), against what silver holds."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from ingest.consumer_offsets import is_group_key, parse_group_record, parse_offset_record
    from ingest.malformed import Skipped
    from ingest.offsets_agent import OffsetsPositionStore, offsets_record_id

    saved = OffsetsPositionStore(positions_path).load().positions
    c = Consumer({"bootstrap.servers": wbs, "group.id": f"kl-audit-{now_ms()}",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    expected: set[str] = set()
    try:
        c.assign([TopicPartition("__consumer_offsets", p, 0) for p, end in saved.items()
                  if end > 0])
        open_parts = {p for p, end in saved.items() if end > 0}
        deadline = time.monotonic() + 300
        while open_parts and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                p = m.partition()
                if m.error() is not None:
                    if p in open_parts and m.error().code() == KafkaError._PARTITION_EOF:
                        open_parts.discard(p)
                    continue
                if m.offset() >= saved[p]:
                    open_parts.discard(p)
                    continue
                parse = parse_group_record if is_group_key(m.key()) else parse_offset_record
                try:
                    rec = parse(m.key(), m.value(), cluster=CLUSTER, source_partition=p,
                                source_offset=m.offset(), ts_ms=m.timestamp()[1])
                except Exception:  # noqa: BLE001 - the agent quarantines what raises
                    rec = None
                if not isinstance(rec, Skipped):
                    expected.add(offsets_record_id(CLUSTER, p, m.offset()))
    finally:
        c.close()
    return {"expected": len(expected), "missing": len(expected - got),
            "in_both_silver_and_quarantine": len(expected & both),
            "examples_missing": sorted(expected - got)[:5]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="times each component is killed (3)")
    p.add_argument("--down-s", type=float, default=5.0, help="seconds down before a restart")
    p.add_argument("--settle-s", type=float, default=20.0, help="seconds between kills")
    p.add_argument("--action-every-s", type=float, default=30.0,
                   help="a remediation action published this often (30)")
    p.add_argument("--monitoring-outage-s", type=float, default=0,
                   help="instead of the kill loop: every monitoring-Kafka node down this "
                        "long, once, under the same load and counts (0: the loop)")
    p.add_argument("--recover-s", type=float, default=300.0,
                   help="with --monitoring-outage-s: seconds observed after it (300)")
    p.add_argument("--no-save", action="store_true")
    a = p.parse_args(argv)
    name = "kafka-outage" if a.monitoring_outage_s else "kill-loop"
    work = Path(tempfile.mkdtemp(prefix=f"kmon-{name}-"))
    started = time.monotonic()
    r = run(a.rounds, a.down_s, a.settle_s, a.action_every_s, work,
            outage_s=a.monitoring_outage_s, recover_s=a.recover_s)
    doc = {**machine_header(name, "bench.bench_kill_loop", argv),
           "wall_s": round(time.monotonic() - started), "work": str(work), **r}
    print(json.dumps({k: v for k, v in doc.items() if k not in ("kill_log",)}, indent=1,
                     default=str))
    if not a.no_save:
        save(name, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
