"""Fleet keep-up and detection at scale: a simulated fleet through kmon, window by window.

Run: .kmon/venv/bin/python -m bench.bench_fleet [--brokers 100,2000] [--windows 18]
     [--exemplar-slowest K] [--top-clients N] [--no-faults] [--no-save] [--keep-lake DIR]

`--exemplar-slowest` / `--top-clients` set the agents' request_log keys of the same names
for the fleet (the simulator ships what agents so configured would, and kmon is run with
them); by default the recording's agent settings (5 and 20).

Issue 24 asks whether kmon keeps up with a 2,000-broker fleet in the request-log windows
mode. For each fleet size this runs what `kmon run --no-agents` runs (kmon.monitor.Monitor:
the silver query, the gold queries, the detector query; Spark
`local[2]` as configured) on a fresh lake, and plays the agents' part with
bench/fleet_sim.py: once the monitor is up, the records of every broker's 10-s window
are written (shapes from a real recording, 10,000 requests/s per broker) and each window is moved
into the landing folder at its end plus the agents' lateness (request_log.lateness_s),
on the wall clock, as the agents would send it. The detectors evaluate on the wall clock
too, so the windows are stamped with the times they are delivered at.

With faults (the default), from the 7th window on: broker 5 slow (600 ms more Local
time on every Produce: a slow disk), broker 11 a slow follower (its fetches 600 ms apart:
its leaders' acks=-1 Produce wait in Remote), and one client slow to read its responses
at broker 23 (600 ms more send time). The figures per size:

- the silver, gold and detector queries' micro-batch durations (mean, p99, max) against
  the 10-s window, over the run and after its first minute (the JVM's warm-up): kmon
  keeps up when they stay below it; `--windows 48` runs past the first minutes the gold
  query rolls up (at request_windows' lateness after their end);
- the ceiling: a plain Spark batch job over the same files (every window stream to Delta,
  and the three gold minute tables made from them as gold makes them), and kmon's busy
  time on them against it (kmon does more: validation, dedupe, three gold tables, its micro-batches);
- the driver's heap (peak of a 1-s poll of the JVM's used heap), the state store
  (rows and bytes the stateful operators report in their last progress), the Delta bytes
  written per simulated day (the lake's size after the run, scaled), and the requests/s
  the run stands for;
- the detector's evaluations: seconds from each one's range end to its findings;
- detection: each fault's findings (entity, cause; `after_onset_s`, seconds from onset
  to the hand-over of the first evaluation that had it, as the matrix scores it, and
  `evaluated_s`, to that evaluation's start), the slow follower's victims (its leaders),
  any finding on another broker, and the timeline: each evaluation from onset until all
  three are found, with what it said of the faulty brokers and the victims;
- the silver query's own account of each micro-batch (jobs/silver.py's log line: where
  its time went, per phase and per table written), to see what limits it.

Prints the figures and writes them with the machine's name, CPU and load average to
bench/results/fleet-<utc stamp>.json. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from bench.bench_silver_batch import PhaseLines
from bench.fleet_sim import WINDOW_MS, Fault, FleetSim, templates_from_recording
from bench.result_file import machine_header, save

FAULT_WINDOW = 6                 # faults start at the 7th window


def faults_for(brokers: int, start_ms: int, end_ms: int) -> list[Fault]:
    if brokers < 24:
        return []
    return [Fault("slow_broker", 5, start_ms, end_ms, delay_ms=600.0, stage="local"),
            Fault("slow_follower", 11, start_ms, end_ms, delay_ms=600.0),
            Fault("slow_client", 23, start_ms, end_ms, delay_ms=600.0, client_id=None)]


def _stage_windows(sim: FleetSim, staging: Path, t0: int,
                   windows: int) -> tuple[list[Path], dict[str, int]]:
    """Every window's records in a folder of its own; the records per stream, summed."""
    dirs, records = [], {}
    for w in range(windows):
        d = staging / f"w{w:04d}"
        for stream, n in sim.write(d, t0 + w * WINDOW_MS).items():
            records[stream] = records.get(stream, 0) + n
        dirs.append(d)
    return dirs, records


def _deliver(src: Path, landing: Path) -> int:
    n = 0
    for stream_dir in src.iterdir():
        dest = landing / stream_dir.name
        dest.mkdir(parents=True, exist_ok=True)
        for f in stream_dir.iterdir():
            os.replace(f, dest / f.name)
            n += 1
    return n


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _figures(ds: list[float]) -> dict:
    ds = sorted(ds)
    return {"batches": len(ds), "mean_s": round(statistics.fmean(ds), 2),
            "p99_s": round(ds[min(len(ds) - 1, int(0.99 * len(ds)))], 2),
            "max_s": round(ds[-1], 2)}


def _durations(progress: list[dict]) -> dict:
    """The micro-batches that took rows: their durations over the run and, apart, after
    its first minute (the JVM compiles kmon's code in the first batches)."""
    busy = [p for p in progress if p.get("numInputRows", 0) > 0]
    if not busy:
        return {"batches": 0}
    start = [datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
             for p in busy]
    ds = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in busy]
    later = [d for d, t in zip(ds, start) if t >= start[0] + 60]
    return {**_figures(ds), "rows": sum(p.get("numInputRows", 0) for p in progress),
            **({"after_first_minute": _figures(later)} if later else {})}


def run_size(brokers: int, windows: int, with_faults: bool, work: Path,
             profile: dict | None = None) -> dict:
    from kmon.config import Config
    from kmon.monitor import Monitor

    templates = templates_from_recording()
    profile = dict(profile or {})
    probe = FleetSim(templates, brokers)
    lake_root = work / "lake"
    config = Config().with_overrides(
        spark={"storage_root": str(lake_root)},
        watch={"cluster": probe.cluster},
        request_log={k: v for k, v in profile.items() if v is not None},
        pipeline={"bronze_tables": False})
    seen: list[tuple[float, list]] = []
    evaluated: list[float] = []             # wall ms at each hand-over

    def on_findings(findings, now_ms):
        evaluated.append(time.time() * 1000)
        seen.append((now_ms, list(findings)))

    # The monitor first (Spark's start varies by tens of seconds under load), then the
    # windows generated, then played on the wall clock from a t0 that leaves time for
    # the generation only.
    monitor = Monitor(config, on_findings=[on_findings])
    batch_lines = PhaseLines()
    silver_log = logging.getLogger("jobs.silver")
    silver_log.addHandler(batch_lines)
    silver_log.setLevel(logging.INFO)
    landing = Path(monitor.lake.landing_root)
    heap = {"peak": 0}
    stop = threading.Event()
    monitor.start(0, out=sys.stderr)
    jvm = monitor.spark.sparkContext._jvm
    mem = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()

    # One window generated and written (with the monitor up, as the staging runs) times
    # the staging; the first run that timed generation alone started 32 s behind.
    g0 = time.monotonic()
    probe.write(work / "probe", 0)
    per_window_s = time.monotonic() - g0
    shutil.rmtree(work / "probe")
    lead_ms = int((per_window_s * windows * 1.3 + 15) * 1000)   # generation and staging
    t0 = (int(time.time() * 1000) + lead_ms) // WINDOW_MS * WINDOW_MS
    onset = t0 + FAULT_WINDOW * WINDOW_MS
    end = t0 + windows * WINDOW_MS
    faults = faults_for(brokers, onset, end) if with_faults else []
    if faults:
        client = next(c["client_id"] for cs in templates.clients["Produce:acks=1"]
                      for c in cs if c["client_id"])
        faults[2] = Fault("slow_client", 23, onset, end, delay_ms=600.0,
                          client_id=f"{client}-{23 % 50}")
    sim = FleetSim(templates, brokers, faults=faults, **profile)
    staging = work / "staging"
    dirs, records = _stage_windows(sim, staging, t0, windows)
    staged_bytes = _dir_bytes(staging)

    def poll_heap():
        while not stop.is_set():
            heap["peak"] = max(heap["peak"], mem.getHeapMemoryUsage().getUsed())
            stop.wait(1.0)

    threading.Thread(target=poll_heap, daemon=True).start()
    late = []
    try:
        for w, d in enumerate(dirs):
            # a window goes out the agents' lateness after its end
            due = (t0 + (w + 1) * WINDOW_MS + config.request_log.lateness_s * 1000) / 1000
            wait = due - time.time()
            if wait > 0:
                time.sleep(wait)
            else:
                late.append(round(-wait, 1))
            _deliver(d, landing)
        time.sleep(40)                      # the last windows through silver and detection
        progress = {q.name: [json.loads(p.json) if hasattr(p, "json") else p
                             for p in q.recentProgress] for q in monitor.pipeline.queries}
        silver = {t: monitor.spark.read.format("delta").load(monitor.lake.table("silver", t))
                  .count() for t in ("request_windows", "quarantine")}
        monitor.stop_streams()
        ceiling = ceiling_job(monitor.spark, landing, work / "ceiling")
    finally:
        stop.set()
        monitor.stop()
        silver_log.removeHandler(batch_lines)
    state = {}
    for name, ps in progress.items():
        last = next((p for p in reversed(ps) if p.get("stateOperators")), None)
        if last:
            state[name] = {"rows": sum(o.get("numRowsTotal", 0) for o in last["stateOperators"]),
                           "bytes": sum(o.get("memoryUsedBytes", 0)
                                        for o in last["stateOperators"])}
    lake_bytes = sum(_dir_bytes(lake_root / layer) for layer in ("silver", "gold")
                     if (lake_root / layer).exists())
    simulated_s = windows * WINDOW_MS / 1000
    out = {
        "brokers": brokers, "windows": windows, "agent_profile": profile,
        "requests_per_s": round(sim.requests_written / simulated_s),
        "records_per_window": {k: v // windows for k, v in records.items()},
        "landing_bytes_per_window": staged_bytes // windows,
        "queries": {name: _durations(ps) for name, ps in progress.items()},
        "ceiling": {**ceiling, **_kmon_rate(progress, ceiling)},
        "silver_rows": silver,
        "driver_heap_peak_mb": round(heap["peak"] / 2**20),
        "state": state,
        "delta_bytes_per_day": int(lake_bytes / simulated_s * 86400),
        "deliveries_late_s": late,
        "evaluations": _evaluations(seen, evaluated),
        "detection": detection(seen, evaluated, faults, onset, sim),
        "silver_batches": [x for x in batch_lines.lines if x.startswith("silver batch")],
    }
    return out


def ceiling_job(spark, landing: Path, out: Path) -> dict:
    """The ceiling: a plain Spark batch job over the same files: every window stream read
    with its schema and appended to Delta as it is (no validation, dedupe or state), and
    the three gold minute tables made from its request windows (jobs/gold_windows, as
    gold does). Best of two runs (the first warms the JVM)."""
    from jobs.gold_windows import write_minute_tables
    from schemas import (client_send_windows, follower_fetch_windows, request_exemplars,
                         request_windows)

    tables = {"request_windows": request_windows, "follower_fetch_windows":
              follower_fetch_windows, "client_send_windows": client_send_windows,
              "request_exemplars": request_exemplars}
    best = None
    for i in range(2):
        start = time.monotonic()
        for name, t in tables.items():
            (spark.read.schema(t.SCHEMA).json(str(landing / name)).write.format("delta")
             .mode("overwrite").save(str(out / f"run{i}" / name)))
        rows = spark.read.format("delta").load(str(out / f"run{i}" / "request_windows"))
        write_minute_tables(rows, lambda name, df: df.write.format("delta").mode(
            "overwrite").save(str(out / f"run{i}" / name)))
        took = time.monotonic() - start
        best = took if best is None else min(best, took)
    n = sum(spark.read.format("delta").load(str(out / "run0" / name)).count() for name in tables)
    return {"rows": n, "seconds": round(best, 2), "rows_per_s": round(n / best)}


def _kmon_rate(progress: dict[str, list[dict]], ceiling: dict) -> dict:
    """kmon's rate on the window rows: the rows silver took in over the busy time of the
    queries that carry them (silver, every window stream; the gold minute query), against
    the ceiling's rate. Rows, not the run's files: a kmon that fell behind took in fewer."""
    busy = sum(p["durationMs"].get("triggerExecution", 0) / 1000
               for name in ("silver", "gold_request_windows_1m")
               for p in progress.get(name, []) if p.get("numInputRows", 0) > 0)
    rows = sum(p.get("numInputRows", 0) for p in progress.get("silver", []))
    rate = rows / busy if busy else None
    return {"kmon_busy_s": round(busy, 1), "kmon_rows": rows,
            "kmon_rows_per_s": round(rate) if rate else None,
            "kmon_vs_ceiling": round(rate / ceiling["rows_per_s"], 2) if rate else None}


def _evaluations(seen: list[tuple[int, list]], evaluated: list[float]) -> dict:
    """The detector's evaluations: how many, and the seconds from each one's evaluation
    time (its range's end) to its findings' hand-over (reads, rules, correlation)."""
    took = sorted((w - now) / 1000 for (now, _), w in zip(seen, evaluated))
    if not took:
        return {"count": 0}
    return {"count": len(took), "mean_s": round(statistics.fmean(took), 2),
            "max_s": round(took[-1], 2)}


def detection(seen: list[tuple[int, list]], handed: list[float], faults: list[Fault],
              onset: int, sim: FleetSim) -> dict:
    """Per fault: the first evaluation whose findings name it (seconds from onset to its
    hand-over, the matrix's measure, and to its start), the finding's cause; the victims
    a slow follower makes (its leaders, whose acks=-1 Produce waits for it: a finding
    there must say so); every other finding (none is expected); and the timeline of the
    evaluations from onset until every fault was found."""
    from core.findings import AnomalyType

    faulty = {f"broker:{f.broker}" for f in faults}
    victims = {f"broker:{(f.broker - k) % sim.brokers}" for f in faults
               if f.kind == "slow_follower" for k in range(1, sim.rf)}
    out: dict = {"faults": {}, "other_findings": []}

    def names(f: Fault, x) -> bool:
        if f.kind == "slow_client":
            return x.type is AnomalyType.SLOW_CLIENT and f.client_id in x.entity
        return x.entity == f"broker:{f.broker}"

    last_hit = None
    for f in faults:
        hit = None
        for (now_ms, findings), handed_ms in zip(seen, handed):
            x = next((x for x in findings
                      if names(f, x) and x.first_seen_ms >= onset - WINDOW_MS), None)
            if x is not None:
                hit = {"after_onset_s": round((handed_ms - onset) / 1000, 1),
                       "evaluated_s": round((now_ms - onset) / 1000, 1),
                       "type": x.type.value, "cause": x.cause, "entity": x.entity}
                last_hit = max(last_hit or now_ms, now_ms)
                break
        out["faults"][f"{f.kind} broker:{f.broker}"] = hit
    watched = faulty | victims
    until = (last_hit + WINDOW_MS if all(out["faults"].values()) and last_hit is not None
             else float("inf"))
    out["timeline"] = [
        {"evaluated_s": round((now_ms - onset) / 1000, 1),
         "after_onset_s": round((handed_ms - onset) / 1000, 1),
         "findings": sorted(f"{x.type.value} {x.entity} {x.cause}" for x in findings
                            if x.entity in watched or any(names(f, x) for f in faults))}
        for (now_ms, findings), handed_ms in zip(seen, handed)
        if onset - WINDOW_MS <= now_ms <= until]
    named = [(x.type.value, x.entity, x.cause) for _, fs in seen for x in fs]
    out["victims"] = sorted({n for n in named if n[1] in victims})
    out["victims_expected"] = sorted(victims)
    out["other_findings"] = sorted({n for n in named if n[1] not in faulty | victims
                                    and not (n[0] == "slow_client" and any(
                                        f.client_id and f.client_id in n[1] for f in faults))})[:50]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", default="100,500,1000,2000",
                   help="comma-separated fleet sizes (default 100,500,1000,2000)")
    p.add_argument("--windows", type=int, default=18, help="10-s windows per size (18)")
    p.add_argument("--no-faults", action="store_true")
    p.add_argument("--exemplar-slowest", type=int, default=None,
                   help="the agents' request_log.exemplar_slowest (default: as recorded, 5)")
    p.add_argument("--top-clients", type=int, default=None,
                   help="the agents' request_log.top_clients (default: as recorded, 20)")
    p.add_argument("--no-save", action="store_true")
    p.add_argument("--keep-lake", metavar="DIR", default=None,
                   help="keep the last size's lake here (for bench/bench_detect_eval.py "
                        "--lake DIR/lake); by default it is deleted")
    a = p.parse_args(argv)
    profile = {"exemplar_slowest": a.exemplar_slowest, "top_clients": a.top_clients}
    results = []
    for n in (int(x) for x in a.brokers.split(",")):
        work = Path(tempfile.mkdtemp(prefix=f"kmon-fleet-{n}-"))
        try:
            r = run_size(n, a.windows, not a.no_faults, work, profile)
        finally:
            if a.keep_lake and (work / "lake").exists():
                shutil.rmtree(a.keep_lake, ignore_errors=True)
                Path(a.keep_lake).mkdir(parents=True)
                shutil.move(str(work / "lake"), str(Path(a.keep_lake) / "lake"))
            shutil.rmtree(work, ignore_errors=True)
        results.append(r)
        print(json.dumps(r, indent=1), flush=True)
    doc = {**machine_header("fleet", "bench.bench_fleet", argv), "results": results}
    if not a.no_save:
        save("fleet", doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
