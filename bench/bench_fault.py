"""Faults kmon must ride out, caused for real under the demo's load: what kmon said while
each lasted, and every request-log line counted afterwards.

Run: flock /tmp/kmon-heavy.lock .kmon/venv/bin/python -m bench.bench_fault
     --fault clock-step [--step-back-s 300] [--broker coordinator|N] [--hold-s 420]
     --fault disk-full [--lake-mb 1024] [--hold-s 300] [--recover-s 300]
     [--warmup-s 120] [--no-save]

Issue 59 asks for "a watched broker's clock stepped back" and "the lake's file system
full, then freed" tried for real. Everything here is real and runs on this machine:

- a local Apache Kafka cluster (KRaft, 3 brokers) under the demo's load (demo/workload.py
  at the demo's rate): orders (acks=all) and clicks (acks=1) producers, the billing and
  analytics consumer groups;
- `kmon run` as an operator runs it (embedded: agents, pipeline, detectors, exporter on a
  free port), its request-log agents started at the end of every broker's request log.

The faults:

- **clock-step**: every broker's JVM runs under libfaketime (Debian package faketime) with
  only its wall clock faked (FAKETIME_DONT_FAKE_MONOTONIC: a faked monotonic clock would
  break their timed waits), each offset read from a file of its own that this bench writes
  and libfaketime re-reads every second: "+0" first, and for the stepped broker
  "-<step-back-s>s" after the warm-up (NTP stepping back a clock that ran ahead). The
  stepped broker is by default the billing group's coordinator, the one whose clock stamps
  the group's commits in __consumer_offsets (which broker that is is only known once the
  group has joined, hence every broker under libfaketime). The offset stays for
  `--hold-s`, longer than the step, so the broker's clock passes the times it had stamped
  before the step.
- **disk-full**: the lake (tables, checkpoints, the landing folder the embedded agents
  write) is on a tmpfs of `--lake-mb` mounted for the run (needs root). After the warm-up
  a file takes every free byte of it for `--hold-s`, then is deleted, and kmon has
  `--recover-s` to catch up. The agents' positions, the job's log and Spark's scratch
  space stay on the machine's disk, as an operator would keep them apart from the lake.

Every ~10 s a sample of what an operator sees: from the exporter, every
``kmon_findings_open`` series, the streaming queries reported down
(``kmon_pipeline_query_up`` 0), the agents' failed flushes
(``kmon_agent_flush_failures_total``) and ``kmon_pipeline_source_clock_lead_seconds`` per
source and stream; the silver.request_windows rows committed since the last sample, per
broker, with how far their event time is behind the sample's clock; new silver.quarantine
rows by source and reason; the fault's own probe (the stepped broker's newest request-log
stamp against the true clock, or the lake's free bytes); the warnings and errors in the
job's log file (named on its console's first line ``logs: ...``) since the last sample;
the load's errors.

Then the load stops, kmon is stopped with Ctrl-C (the agents emit their open windows and
save their positions) and the lake is read with delta-rs (no second Spark). Counted:

- request-log lines: per broker, the lines from where the agent started to its saved
  position (or past it, to the boundary of the windows it emitted at shutdown), against
  the sum of ``requests`` over every emission of every window of that broker in
  silver.request_windows (controller traffic included: it has its own key), plus the
  windows sent at Ctrl-C that were still in the landing folder when the jobs stopped,
  plus window rows silver quarantined (their ``requests``), plus the lines the agent
  quarantined itself (by record id, each inside the counted range);
- duplicates: record ids appearing twice in any silver table of the cluster;
- consumer commits: per group, decreases of the committed offset in the order the
  coordinator wrote them and in the order of their timestamps (the coordinator's clock);
- findings: every gold.anomalies finding of the cluster (type, entity, severity, times);
  a HIGH or CRITICAL one is a page.

Prints the figures and writes them with the machine's name, CPU and load average to
bench/results/<fault>-<utc stamp>.json. Nothing here asserts anything.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

from bench.exporter_scrape import scrape, series
from bench.result_file import machine_header, save

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = "faultrun"
SAMPLE_EVERY_S = 10.0
PAGES = ("high", "critical")
STAMP = re.compile(rb"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def faketime_env(offset_file: Path) -> dict[str, str]:
    """The environment that puts a JVM's wall clock (only) under `offset_file`."""
    libs = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    if not libs:
        raise SystemExit("libfaketime is missing: apt-get install faketime")
    # The offset file is re-read once a second (the default is every 10 s); reading it
    # on every call (FAKETIME_NO_CACHE) costs a file read per clock call of the JVM.
    return {"LD_PRELOAD": libs[0], "FAKETIME_TIMESTAMP_FILE": str(offset_file),
            "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            # libfaketime turns its monotonic fix on by itself for this glibc; with it the
            # JVM's timed waits overshoot (controller events took 4 s, the broker was never
            # unfenced). Off, a broker starts in seconds and keeps serving after a step.
            "FAKETIME_FORCE_MONOTONIC_FIX": "0"}


# ---- what an operator sees ----------------------------------------------------------------

def operator_view(port: int) -> dict:
    """From the exporter: the open findings, the queries down, the agents' failed flushes
    and the clock lead per source and stream."""
    got = scrape(port, ("kmon_pipeline_source_clock_lead_seconds", "kmon_findings_open",
                        "kmon_pipeline_query_up", "kmon_agent_flush_failures_total"))
    if isinstance(got, str):
        return {"error": got}
    lead, findings, down, flush_failures = {}, [], [], {}
    for name, lab, value in got:
        if name == "kmon_findings_open":
            if value > 0:
                findings.append({k: lab.get(k) for k in ("type", "severity", "entity", "cause")})
        elif name == "kmon_pipeline_query_up":
            if value == 0:
                down.append(lab.get("query"))
        elif name == "kmon_agent_flush_failures_total":
            flush_failures[lab.get("agent")] = int(value)
        else:
            # one series per source and stream: a broker's clock stamps its logs and
            # windows, its agent's the JMX scrapes
            key = lab.get("source", series(name, lab))
            if lab.get("stream"):
                key = f"{key} {lab['stream']}"
            lead[key] = round(value, 1)
    return {"clock_lead_s": lead, "findings_open": findings, "queries_down": sorted(down),
            "agent_flush_failures": flush_failures}


class NewRows:
    """Rows of a Delta table of the cluster not returned before (by record id): what was
    committed since the last call. The tables of a bench run are small enough to read
    whole every sample."""

    def __init__(self, path: str, columns: list[str]):
        self.path, self.columns = path, [*columns, "record_id"]
        self.seen: set[str] = set()

    def __call__(self) -> list[dict]:
        from deltalake import DeltaTable

        if not os.path.isdir(os.path.join(self.path, "_delta_log")):
            return []
        rows = DeltaTable(self.path).to_pyarrow_table(columns=self.columns).to_pylist()
        new = [r for r in rows if r["cluster"] == CLUSTER and r["record_id"] not in self.seen]
        self.seen.update(r["record_id"] for r in new)
        return new


def last_stamp_ms(path: Path) -> int | None:
    """The log4j stamp of the file's last complete line (the broker's clock, UTC)."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - 65536))
        lines = f.read().split(b"\n")[:-1]
    for line in reversed(lines):
        m = STAMP.match(line)
        if m:
            t = datetime.strptime(m.group(1).decode(), "%Y-%m-%d %H:%M:%S,%f")
            return int(t.replace(tzinfo=timezone.utc).timestamp() * 1000)
    return None


class JobLog:
    """New WARNING/ERROR records of the job's log file (named on its console's first line)."""

    def __init__(self, console: Path):
        self.console, self.path, self.offset = console, None, 0

    def new(self) -> list[str]:
        if self.path is None:
            m = re.search(r"logs: (\S+)", self.console.read_text(errors="replace"))
            if not m:
                return []
            self.path = ROOT / m.group(1)
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [x for x in data[:end].decode(errors="replace").splitlines()
                if " WARNING " in x or " ERROR " in x]


# ---- the run --------------------------------------------------------------------------------

def coordinator(bootstrap: str, group: str, timeout_s: float = 180) -> int:
    """The node id of `group`'s coordinator, once the group has one."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            d = admin.describe_consumer_groups([group])[group].result(10)
            if d.coordinator is not None and d.coordinator.id >= 0:
                return d.coordinator.id
        except Exception:  # noqa: BLE001 - the coordinator still loading: ask again
            if time.monotonic() > deadline:
                raise
        time.sleep(2)


class ClockStep:
    """One broker's wall clock stepped back `step_back_s` after the warm-up, and left so."""

    name = "clock-step"

    def __init__(self, work: Path, step_back_s: int, broker: int | None):
        self.step_back_s, self.broker = step_back_s, broker
        self.offsets = {n: work / f"faketime-offset-{n}" for n in (1, 2, 3)}
        for f in self.offsets.values():
            f.write_text("+0\n")
        self.cluster = None

    def node_env(self) -> dict[int, dict]:
        return {n: faketime_env(f) for n, f in self.offsets.items()}

    def lake_root(self, work: Path) -> Path:
        return work / "lake"

    def ready(self, cluster, coordinators: dict[str, int]) -> None:
        self.cluster = cluster
        self.broker = coordinators["billing"] if self.broker is None else self.broker
        say(f"broker {self.broker}'s clock will step")

    def cause(self) -> str:
        self.offsets[self.broker].write_text(f"-{self.step_back_s}s\n")
        return f"broker {self.broker}'s clock stepped back {self.step_back_s} s"

    def clear(self) -> str | None:
        return None             # NTP stepped it: the clock stays where it was put

    def probe(self, t_ms: int) -> dict:
        stamp = last_stamp_ms(Path(self.cluster.node(self.broker).request_log))
        return {"stepped_broker_clock_s": None if stamp is None else round((stamp - t_ms) / 1000)}

    def facts(self) -> dict:
        return {"step_back_s": self.step_back_s, "stepped_broker": self.broker}

    def close(self) -> None:
        pass


class DiskFull:
    """The lake on a tmpfs of its own, filled to the last byte after the warm-up, freed
    after the hold."""

    name = "disk-full"

    def __init__(self, work: Path, lake_mb: int):
        self.lake_mb, self.mount = lake_mb, work / "lakefs"
        self.mount.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={lake_mb}m", "tmpfs",
                        str(self.mount)], check=True)
        self.filler = self.mount / "filler"
        self.filled_bytes = 0

    def node_env(self) -> dict[int, dict] | None:
        return None

    def lake_root(self, work: Path) -> Path:
        return self.mount / "lake"

    def ready(self, cluster, coordinators: dict[str, int]) -> None:
        pass

    def free_bytes(self) -> int:
        st = os.statvfs(self.mount)
        return st.f_bavail * st.f_frsize

    def cause(self) -> str:
        chunk = b"\0" * (1 << 20)
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            size = len(chunk)
            while size:          # whole MiBs, then halves until not a byte fits
                try:
                    os.write(fd, chunk[:size])
                except OSError:
                    size //= 2
        finally:
            os.close(fd)
        self.filled_bytes = self.filler.stat().st_size
        return (f"the lake's file system filled: {self.filled_bytes >> 20} MiB written, "
                f"{self.free_bytes()} bytes free")

    def clear(self) -> str:
        self.filler.unlink()
        return f"the lake's file system freed: {self.free_bytes() >> 20} MiB free"

    def probe(self, t_ms: int) -> dict:
        return {"lake_free_mb": round(self.free_bytes() / (1 << 20), 1)}

    def facts(self) -> dict:
        return {"lake_mb": self.lake_mb, "filled_bytes": self.filled_bytes}

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.mount)], check=False)


def run(fault, warmup_s: float, hold_s: float, recover_s: float, rate: float,
        work: Path) -> dict:
    from demo.workload import ConsumerSpec, ProducerSpec, Workload, create_topics
    from confluent_kafka.admin import NewTopic
    from infra.lake import Lake
    from infra.local_cluster import LocalCluster
    from kmon.config import load_config
    from tests.support.kmon_process import (ctrl_c, kill9, kmon_env, log_tail,
                                            request_logs_from_end, start_kmon)
    from tests.support.prom_tools import free_port

    cluster = LocalCluster(load_config(), name=CLUSTER, brokers=3, owner_bound=True,
                           log_roll_mb=4096, node_env=fault.node_env())
    lake_root = str(fault.lake_root(work))
    lake = Lake(lake_root)
    logs = work / "logs"
    logs.mkdir(parents=True)
    state = work / "agent-state"
    workload = job = None
    samples: list[dict] = []
    try:
        t0 = time.monotonic()
        cluster.start()
        say(f"cluster up in {time.monotonic() - t0:.0f} s: {cluster.bootstrap_servers}")
        workload = Workload(cluster.bootstrap_servers, work / "clients")
        create_topics(cluster.bootstrap_servers,
                      [NewTopic("orders", 6, 3, config={"min.insync.replicas": "2"}),
                       NewTopic("clicks", 6, 3)])
        workload.start_producer(ProducerSpec("orders-producer", "orders", rate, acks="all"))
        workload.start_producer(ProducerSpec("clicks-producer", "clicks", rate, acks="1"))
        workload.start_consumer(ConsumerSpec("billing", ("orders",)))
        workload.start_consumer(ConsumerSpec("analytics", ("clicks",)))
        coordinators = {g: coordinator(cluster.bootstrap_servers, g)
                        for g in ("billing", "analytics")}
        say(f"group coordinators {coordinators}")
        fault.ready(cluster, coordinators)

        starts = request_logs_from_end(state, CLUSTER, cluster)
        port = free_port()
        env = kmon_env(cluster, lake_root, watch_cluster=CLUSTER,
                       overrides={"KMON__PIPELINE__EXPORTER_PORT": str(port)})
        job_console = logs / "job.log"
        job = start_kmon(["run", "--state-dir", str(state)], env, job_console)
        job_log = JobLog(job_console)
        windows = NewRows(lake.table("silver", "request_windows"),
                          ["cluster", "broker", "ts_ms", "requests"])
        quarantine = NewRows(lake.table("silver", "quarantine"),
                             ["cluster", "broker", "source", "reason"])
        phase = {"name": "warm-up", "started_ms": now_ms()}

        def sample() -> dict:
            if job.poll() is not None:
                raise RuntimeError(f"kmon run exited with {job.returncode}:\n"
                                   + log_tail(job_console))
            t = now_ms()
            try:
                new, q_new = windows(), quarantine()
            except Exception as e:  # noqa: BLE001 - a table half-written on a full disk
                new, q_new = [], []
                say(f"lake not readable now: {type(e).__name__}: {str(e)[:200]}")
            per_broker: dict[int, dict] = {}
            for r in new:
                b = per_broker.setdefault(r["broker"], {"rows": 0, "requests": 0,
                                                        "max_behind_s": None,
                                                        "min_behind_s": None})
                behind = round((t - r["ts_ms"]) / 1000)
                b["rows"] += 1
                b["requests"] += r["requests"] or 0
                b["max_behind_s"] = max(behind, b["max_behind_s"] or behind)
                b["min_behind_s"] = min(behind, b["min_behind_s"] or behind)
            s = {"phase": phase["name"], "t_ms": t,
                 "since_phase_s": round((t - phase["started_ms"]) / 1000),
                 "probe": fault.probe(t), **operator_view(port),
                 "silver_windows_new": {str(k): v for k, v in sorted(per_broker.items())},
                 "quarantine_new": dict(Counter(f"{q['source']}/{q['reason']}/{q['broker']}"
                                                for q in q_new)),
                 "job_warnings": job_log.new(),
                 "load": workload.counts()}
            samples.append(s)
            brief = {k: v["rows"] for k, v in s["silver_windows_new"].items()}
            open_ = [(f["type"], f["entity"], f["severity"]) for f in s.get("findings_open", [])]
            say(f"{s['phase']} +{s['since_phase_s']} s: {s['probe']}; new window rows "
                f"{brief}; down {s.get('queries_down')}; flush failures "
                f"{sum((s.get('agent_flush_failures') or {}).values())}; findings {open_}"
                + (f"; {len(s['job_warnings'])} warnings" if s["job_warnings"] else ""))
            return s

        def observe(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(SAMPLE_EVERY_S)
                sample()

        say("kmon run started; waiting for every broker's request windows in silver")
        deadline = time.monotonic() + 900
        seen: set[str] = set()
        while len(seen) < 3:
            if time.monotonic() > deadline:
                raise RuntimeError("no request windows of every broker in silver after 900 s")
            time.sleep(SAMPLE_EVERY_S)
            seen |= set(sample()["silver_windows_new"])
        say(f"every broker in silver; healthy warm-up of {warmup_s:.0f} s")
        observe(warmup_s)

        fault_ms = now_ms()
        phase.update(name="fault", started_ms=fault_ms)
        say(fault.cause())
        observe(hold_s)
        cleared = fault.clear()
        cleared_ms = None
        if cleared:
            cleared_ms = now_ms()
            phase.update(name="recovery", started_ms=cleared_ms)
            say(cleared)
            observe(recover_s)

        phase.update(name="drain", started_ms=now_ms())
        workload_counts = workload.counts()
        workload.stop()
        time.sleep(20)
        sample()
        code = ctrl_c(job, timeout=300)
        say(f"kmon run stopped ({code})")
        sample_tail = job_log.new()
        counts = count(lake, cluster, state, starts, fault_ms)
        return {"fault": fault.name, **fault.facts(), "group_coordinators": coordinators,
                "warmup_s": warmup_s, "hold_s": hold_s, "recover_s": recover_s if cleared else 0,
                "rate_per_s": rate, "fault_at_ms": fault_ms, "cleared_at_ms": cleared_ms,
                "exit_code": code, "load": workload_counts,
                "job_log": str(job_log.path), "job_warnings_at_stop": sample_tail,
                "operator_view": summarize(samples), "samples": samples, **counts}
    finally:
        if workload is not None:
            workload.stop()
        if job is not None and job.poll() is None:
            kill9(job)
        cluster.destroy()


def summarize(samples: list[dict]) -> dict:
    """Per phase: the fault's probe and the clock leads (their range), window rows per
    broker and minute of arrival, the queries seen down, the agents' failed flushes, the
    findings seen open, the distinct warnings."""
    out = {}
    for name in ("warm-up", "fault", "recovery", "drain"):
        ss = [s for s in samples if s["phase"] == name]
        if not ss:
            continue
        leads, probes = defaultdict(list), defaultdict(list)
        for s in ss:
            for src, v in (s.get("clock_lead_s") or {}).items():
                leads[src].append(v)
            for k, v in s["probe"].items():
                probes[k].append(v)
        per_minute = defaultdict(lambda: defaultdict(int))
        for s in ss:
            minute = datetime.fromtimestamp(s["t_ms"] / 1000, timezone.utc).strftime("%H:%M")
            for b, v in s["silver_windows_new"].items():
                per_minute[minute][b] += v["rows"]
        findings = sorted({(f["type"], f["entity"], f["severity"])
                           for s in ss for f in s.get("findings_open", [])})
        warnings = sorted({re.sub(r"^\S+ \S+ ", "", w)[:300]
                           for s in ss for w in s["job_warnings"]})
        flushes = [sum((s.get("agent_flush_failures") or {}).values()) for s in ss]
        out[name] = {
            "samples": len(ss),
            "probe": dict(probes),
            "clock_lead_s": {k: [min(v), max(v)] for k, v in sorted(leads.items())},
            "window_rows_per_arrival_minute": {m: dict(v) for m, v in sorted(per_minute.items())},
            "queries_seen_down": sorted({q for s in ss for q in s.get("queries_down") or []}),
            "samples_with_a_query_down": sum(1 for s in ss if s.get("queries_down")),
            "agent_flush_failures": [min(flushes), max(flushes)],
            "findings_open": [list(f) for f in findings],
            "job_warnings": warnings,
            "quarantine_new": dict(sum((Counter(s["quarantine_new"]) for s in ss), Counter())),
        }
    return out


# ---- the counts -------------------------------------------------------------------------------

def _table(lake, layer: str, name: str, columns: list[str]) -> list[dict]:
    from deltalake import DeltaTable

    path = lake.table(layer, name)
    if not os.path.isdir(os.path.join(path, "_delta_log")):
        return []
    rows = DeltaTable(path).to_pyarrow_table(columns=columns).to_pylist()
    return [r for r in rows if r.get("cluster") == CLUSTER]


def landing_records(lake, stream: str) -> list[dict]:
    """Every JSON record of a stream's landing files (the embedded mode's raw copy)."""
    out, seen = [], set()
    for root, _dirs, files in os.walk(lake.landing(stream)):
        for name in files:
            with open(os.path.join(root, name), errors="replace") as f:
                for line in f:
                    try:
                        r = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(r, dict) and r.get("record_id") not in seen:
                        seen.add(r.get("record_id"))
                        out.append(r)
    return out


def count(lake, cluster, state: Path, starts: dict[int, int], fault_ms: int) -> dict:
    from ingest.file_tailer import PositionStore

    store = PositionStore(state / "request-log.json")
    positions, states = store.load(), store.load_states()
    windows = _table(lake, "silver", "request_windows",
                     ["cluster", "broker", "ts_ms", "emission", "requests", "record_id"])
    quarantine = _table(lake, "silver", "quarantine",
                        ["cluster", "broker", "source", "reason", "raw", "ts_ms",
                         "ingest_ts_ms", "record_id"])

    # Windows the agents sent at Ctrl-C can still be in the landing folder when the jobs
    # stop with them: a later start reads them. Counted apart, by record id.
    in_silver = {r["record_id"] for r in windows}
    landed = [r for r in landing_records(lake, "request_windows")
              if r.get("cluster") == CLUSTER and r.get("record_id") not in in_silver]
    lines: dict[str, dict] = {}
    for n in cluster.broker_nodes:
        b = n.node_id
        pos = positions.get(f"{CLUSTER}/{b}")
        ids, offset, end = set(), starts[b], None
        if pos is not None:
            # The windows emitted at shutdown (flush_all) hold lines past the saved
            # position, which is their first line (a restart rebuilds them from it), up to
            # and with their boundary line (its position key: file ordinal << 40 | offset;
            # the bench's request logs never roll, so the ordinal is 0).
            forced = (states.get(f"{CLUSTER}/{b}") or {}).get("forced") or []
            with open(n.request_log, "rb") as f:
                end = pos.offset
                for boundary in {x[2] & ((1 << 40) - 1) for x in forced}:
                    f.seek(boundary)
                    end = max(end, boundary + len(f.readline()))
                f.seek(starts[b])
                data = f.read(end - starts[b])
            for line in data.split(b"\n")[:-1]:
                if line.strip():
                    ids.add(f"{CLUSTER}:{b}:{pos.inode}:{offset}")
                offset += len(line) + 1
        agent_q = [q for q in quarantine if q["source"] == "request_log" and q["broker"] == b]
        late_rows = [json.loads(q["raw"]) for q in quarantine
                     if q["source"] == "silver.request_windows" and q["broker"] == b]
        in_windows = sum(r["requests"] or 0 for r in windows if r["broker"] == b)
        unread = sum(r["requests"] or 0 for r in landed if r.get("broker") == b)
        in_late = sum(r.get("requests") or 0 for r in late_rows)
        q_ids = [q["record_id"] for q in agent_q]
        lines[str(b)] = {
            "lines": len(ids), "from_offset": starts[b],
            "saved_position": None if pos is None else pos.offset, "to_offset": end,
            "requests_in_silver_windows": in_windows,
            "requests_landed_not_in_silver": unread,
            "window_rows": sum(1 for r in windows if r["broker"] == b),
            "late_emissions": sum(1 for r in windows if r["broker"] == b and r["emission"] > 0),
            "requests_in_quarantined_windows": in_late,
            "quarantined_window_rows": Counter(
                q["reason"] for q in quarantine
                if q["source"] == "silver.request_windows" and q["broker"] == b),
            "lines_quarantined_by_agent": Counter(q["reason"] for q in agent_q),
            "agent_quarantine_outside_range": sum(1 for i in q_ids if i not in ids),
            "agent_quarantine_repeated": sum(n - 1 for n in Counter(q_ids).values() if n > 1),
            "difference": len(ids) - in_windows - in_late - len(set(q_ids) & ids) - unread,
        }

    duplicates = {}
    for name in sorted(os.listdir(os.path.join(lake.root, "silver"))
                       if os.path.isdir(os.path.join(lake.root, "silver")) else []):
        rows = _table(lake, "silver", name, ["cluster", "record_id"])
        dup = sum(n - 1 for n in Counter(r["record_id"] for r in rows).values() if n > 1)
        duplicates[name] = {"rows": len(rows), "duplicated_ids": dup}

    after = [q for q in quarantine if (q["ingest_ts_ms"] or 0) >= fault_ms]
    examples = {}
    for q in after:
        examples.setdefault(f"{q['source']}/{q['reason']}/broker {q['broker']}",
                            {"ts_ms": q["ts_ms"], "ingest_ts_ms": q["ingest_ts_ms"],
                             "raw": (q["raw"] or "")[:600]})
    anomalies = _table(lake, "gold", "anomalies",
                       ["cluster", "finding_id", "type", "severity", "entity", "status",
                        "first_seen_ms", "last_seen_ms", "cause"])
    latest: dict[str, dict] = {}
    for r in sorted(anomalies, key=lambda r: r["last_seen_ms"] or 0):
        latest[r["finding_id"]] = r
    findings = [{k: r[k] for k in ("type", "entity", "severity", "status", "cause")}
                | {"first_seen_s_after_fault": round((r["first_seen_ms"] - fault_ms) / 1000),
                   "last_seen_s_after_fault": round((r["last_seen_ms"] - fault_ms) / 1000)}
                for r in latest.values()]
    return {
        "request_log_lines": lines,
        "every_line_once": all(v["difference"] == 0 and not v["agent_quarantine_repeated"]
                               for v in lines.values()),
        "silver_duplicates": duplicates,
        "quarantine_after_fault": Counter(f"{q['source']}/{q['reason']}/broker {q['broker']}"
                                         for q in after),
        "quarantine_after_fault_examples": examples,
        "consumer_commits": commit_order(lake),
        "findings": findings,
        "pages": [f for f in findings if f["severity"] in PAGES],
    }


def commit_order(lake) -> dict:
    """Per consumer group: how often its committed offset went down in the order the
    coordinator wrote the commits (__consumer_offsets position: a real rewind) and in the
    order of their commit timestamps (the coordinator's clock), and how many commits are
    stamped earlier than the one written before them. A rewind only in timestamp order is
    the coordinator's clock, not the group."""
    rows = _table(lake, "silver", "offset_commits",
                  ["cluster", "group_id", "topic", "partition", "offset", "ts_ms",
                   "commit_ts_ms", "is_tombstone", "source_partition", "source_offset"])
    by_gtp = defaultdict(list)
    for r in rows:
        if not r["is_tombstone"] and r["offset"] is not None:
            by_gtp[(r["group_id"], r["topic"], r["partition"])].append(r)

    def downs(seq: list[dict]) -> int:
        return sum(1 for a, b in zip(seq, seq[1:]) if b["offset"] < a["offset"])

    out: dict[str, dict] = {}
    for (group, topic, partition), cs in sorted(by_gtp.items()):
        in_log = sorted(cs, key=lambda r: (r["source_partition"], r["source_offset"]))
        in_time = sorted(cs, key=lambda r: (r["ts_ms"], r["source_offset"]))
        g = out.setdefault(group, {"commits": 0, "decreases_in_log_order": 0,
                                   "decreases_in_timestamp_order": 0,
                                   "stamped_before_previous": 0, "most_stamped_back_s": 0})
        g["commits"] += len(cs)
        g["decreases_in_log_order"] += downs(in_log)
        g["decreases_in_timestamp_order"] += downs(in_time)
        back = [a["ts_ms"] - b["ts_ms"] for a, b in zip(in_log, in_log[1:])
                if b["ts_ms"] < a["ts_ms"]]
        g["stamped_before_previous"] += len(back)
        g["most_stamped_back_s"] = max(g["most_stamped_back_s"],
                                       round(max(back, default=0) / 1000))
    return out


def main(argv: list[str] | None = None) -> int:
    from demo.settings import DemoSettings

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fault", required=True, choices=("clock-step", "disk-full"))
    p.add_argument("--step-back-s", type=int, default=300,
                   help="clock-step: how far the broker's wall clock steps back, seconds (300)")
    p.add_argument("--broker", default="coordinator",
                   help="clock-step: the broker whose clock steps: a node id, or "
                        "'coordinator' (the billing group's coordinator, the default)")
    p.add_argument("--lake-mb", type=int, default=1024,
                   help="disk-full: the size of the lake's file system, MiB (1024)")
    p.add_argument("--warmup-s", type=float, default=120.0,
                   help="healthy seconds after every broker reached silver (120)")
    p.add_argument("--hold-s", type=float, default=None,
                   help="seconds the fault lasts (clock-step 420: more than --step-back-s "
                        "lets the broker's clock pass what it had stamped; disk-full 300)")
    p.add_argument("--recover-s", type=float, default=300.0,
                   help="disk-full: seconds observed after the disk is freed (300)")
    p.add_argument("--rate", type=float, default=DemoSettings().rate_per_s,
                   help="messages/s per producer (the demo's)")
    p.add_argument("--no-save", action="store_true")
    a = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix=f"kmon-{a.fault}-"))
    started = time.monotonic()
    if a.fault == "clock-step":
        fault = ClockStep(work, a.step_back_s,
                          None if a.broker == "coordinator" else int(a.broker))
        hold = 420.0 if a.hold_s is None else a.hold_s
    else:
        fault = DiskFull(work, a.lake_mb)
        hold = 300.0 if a.hold_s is None else a.hold_s
    try:
        r = run(fault, a.warmup_s, hold, a.recover_s, a.rate, work)
    finally:
        fault.close()
    doc = {**machine_header(a.fault, "bench.bench_fault", argv),
           "wall_s": round(time.monotonic() - started), "work": str(work), **r}
    print(json.dumps({k: v for k, v in doc.items() if k != "samples"}, indent=1, default=str))
    if not a.no_save:
        save(a.fault, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
