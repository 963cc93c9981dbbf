"""Where a silver micro-batch spends its time, on the demo's own telemetry.

Run: .kmon/venv/bin/python -m bench.bench_silver_batch [--batch-seconds 60] [--batches 6]
     [--recording freeze-short-5b | --fleet 2000]

Input: the telemetry captured from a four-fault demo run (demo/capture/landing: ~210,000
records over 680 s from three brokers, the replay mode's input), or with `--recording`
a fault-matrix recording (tests/corpus/<name>) whose recorded broker files go through the
real request-log and broker-log agents, as its replay does. The bench cuts each
stream into files of `--file-seconds` of event time (the agents flush about that often),
dates them in event-time order (with `--fleet N`: N simulated brokers' 10-s windows from
bench/fleet_sim.py, as bench_fleet.py stages them, one window per micro-batch), and runs
the `silver` query (jobs/silver.py, the demo's
streams, no bronze tables as in the demo) with availableNow over a fresh lake, reading
`--batch-seconds` worth of files per micro-batch. It prints, per batch, the rows, the wall
time, and the wall time of each phase (the query's own log line: count, each stream's
silver append, quarantine, the counts row) and the CPU seconds the Spark JVM spent on it
(its /proc stat: unlike the wall time, hardly moved by other load on the machine), then
the mean rows per second and CPU per batch after the first (the JIT's warm-up), and writes
them to bench/results/silver-batch-<stamp>.json.

A micro-batch must take well under the trigger interval (pipeline.silver_trigger_s,
10 s) for a detector to see a fault within a minute. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CAPTURE = ROOT / "demo" / "capture" / "landing"


def _lines(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        yield from f


def cut_capture(landing: Path, file_seconds: float, source: Path = CAPTURE) -> int:
    """Write the landing files under `source` (one folder per stream) as landing files of
    `file_seconds` of event time each; return the file count."""
    files = 0
    by_stream: dict[str, list[Path]] = defaultdict(list)
    for f in sorted(source.glob("*/*.jsonl*")):
        by_stream[f.parent.name].append(f)
    for stream, sources in sorted(by_stream.items()):
        chunks: dict[int, list[str]] = defaultdict(list)
        for src in sources:
            for line in _lines(src):
                ts = json.loads(line).get("ts_ms") or 0
                chunks[int(ts // (file_seconds * 1000))].append(line)
        out = landing / stream
        out.mkdir(parents=True, exist_ok=True)
        for n, (slot, lines) in enumerate(sorted(chunks.items())):
            path = out / f"{stream}-{slot}.jsonl"
            path.write_text("".join(lines))
            # The file source takes files in modification-time order.
            t = slot * file_seconds
            os.utime(path, (t, t))
            files += 1
    return files


def recording_landing(name: str, work: Path, config) -> Path:
    """A corpus recording's landing folder as its live run would have written it: its
    recorded streams copied, its broker files through the agents."""
    from infra.lake import Lake
    from matrix.corpus import recordings, replay_config, run_file_agents

    rec = recordings(names=[name])[0]
    root = work / "agents"
    rconfig = replay_config(config, rec, root)
    lake = Lake(rconfig.storage_root)
    for stream_dir in sorted((rec.path / "landing").iterdir()):
        shutil.copytree(stream_dir, Path(lake.landing(stream_dir.name)))
    run_file_agents(rconfig, lake, rec, root)
    return Path(lake.landing_root)


def fleet_landing(landing: Path, brokers: int, windows: int) -> int:
    """`windows` 10-s windows of a simulated fleet (bench/fleet_sim.py, the bench_fleet
    agent profile) as landing files, each window's files dated after the previous one's;
    the files per window."""
    from bench.bench_fleet import _deliver, _stage_windows
    from bench.fleet_sim import WINDOW_MS, FleetSim, templates_from_recording

    sim = FleetSim(templates_from_recording(), brokers, exemplar_slowest=1, top_clients=2)
    t0 = int(time.time() * 1000) // WINDOW_MS * WINDOW_MS - windows * WINDOW_MS
    dirs, _ = _stage_windows(sim, landing.parent / "staging", t0, windows)
    per = 0
    for w, d in enumerate(dirs):
        names = [f.relative_to(d) for f in d.glob("*/*")]
        per = _deliver(d, landing)
        for name in names:   # the file source takes files in modification-time order
            os.utime(landing / name, (1e9 + w, 1e9 + w))
    shutil.rmtree(landing.parent / "staging")
    return per


def jvm_cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class PhaseLines(logging.Handler):
    def __init__(self, on_line=None) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.on_line = on_line

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if self.on_line is not None:
            self.on_line()


def print_stages(spark, top: int = 25) -> None:
    """The stages of the run grouped by name, most wall time first (Spark's REST API)."""
    import urllib.request

    base = spark.sparkContext.uiWebUrl + "/api/v1/applications/" + spark.sparkContext.applicationId
    stages = json.load(urllib.request.urlopen(base + "/stages?status=complete"))
    by_name: dict[str, list] = defaultdict(lambda: [0, 0.0, 0.0, 0])
    for st in stages:
        if not st.get("submissionTime") or not st.get("completionTime"):
            continue
        def ms(t):
            return time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) * 1000 + int(t[20:23])
        name = st["name"].split(" at ")[0] + " @" + st["name"].split(" at ")[-1][:40]
        agg = by_name[name]
        agg[0] += 1
        agg[1] += (ms(st["completionTime"]) - ms(st["submissionTime"])) / 1000
        agg[2] += st["executorRunTime"] / 1000
        agg[3] += st["numTasks"]
    if os.environ.get("BENCH_STAGE_CALLSITE"):
        shown = set()
        for st in stages:
            d = st.get("description") or ""
            key = d[-30:].split(":")[-1][:12]
            if "Compute snapshot" in d and st["stageId"] > 30 and len(shown) < 2 and key not in shown:
                shown.add(key)
                print(st["stageId"], d[-60:])
                print(st.get("details", "")[:6000])
    if os.environ.get("BENCH_STAGE_DETAIL"):
        for st in sorted(stages, key=lambda st: st["stageId"]):
            print(st["stageId"], st["numTasks"], st["executorRunTime"], st.get("inputRecords"),
                  st.get("shuffleReadRecords"), st.get("outputRecords"), st["name"][:60],
                  (st.get("description") or "")[-90:].replace("\n", " "))
    print(f"{'stages':>6} {'tasks':>6} {'wall s':>8} {'task s':>8}  stage")
    for name, (n, wall, run, tasks) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{n:>6} {tasks:>6} {wall:>8.1f} {run:>8.1f}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file-seconds", type=float, default=5.0,
                    help="event time per landing file (default 5)")
    ap.add_argument("--batch-seconds", type=float, default=60.0,
                    help="event time read per micro-batch (default 60, a lagging demo)")
    ap.add_argument("--batches", type=int, default=6, help="micro-batches to run (default 6)")
    ap.add_argument("--write-threads", type=int, default=4,
                    help="tables written at once (pipeline.write_threads, default 4)")
    ap.add_argument("--stages", action="store_true",
                    help="also print the Spark stages that took the most time (turns the UI on)")
    ap.add_argument("--keep", action="store_true", help="keep the bench lake and say where")
    ap.add_argument("--label", default="", help="what this run measures, kept in the result")
    ap.add_argument("--fleet", type=int, default=None, metavar="BROKERS",
                    help="a simulated fleet's windows instead of the demo capture "
                         "(one 10-s window per micro-batch; --batches windows)")
    ap.add_argument("--recording", default=None,
                    help="a fault-matrix recording (tests/corpus/NAME) instead of the demo "
                         "capture")
    args = ap.parse_args()

    from infra.lake import Lake
    from infra.spark_session import build_spark_session
    from jobs import silver
    from jobs.pipeline import Pipeline
    from jobs.streams import STREAMS
    from kmon.config import load_config

    work = Path(tempfile.mkdtemp(prefix="kmon-bench-silver-"))
    os.environ["KMON__SPARK__STORAGE_ROOT"] = str(work / "lake")
    if args.stages:
        os.environ["KMON__SPARK__UI_ENABLED"] = "true"
    config = load_config(None)
    landing = work / "lake" / "landing"
    source = CAPTURE
    if args.recording:
        source = recording_landing(args.recording, work, config)
    if args.fleet:
        per_batch = fleet_landing(landing, args.fleet, args.batches)
        files = per_batch * args.batches
    else:
        files = cut_capture(landing, args.file_seconds, source)
    streams = sorted(p.name for p in landing.iterdir())
    if not args.fleet:
        per_batch = max(1, round(len(streams) * args.batch_seconds / args.file_seconds))
    # Keep the files the batches will read, so the query ends by itself (availableNow)
    # between batches, not stopped in the middle of one.
    ordered = sorted(landing.glob("*/*.jsonl"), key=lambda p: p.stat().st_mtime)
    for extra in ordered[per_batch * args.batches:]:
        extra.unlink()
    what = f"windows of {args.fleet} brokers" if args.fleet else f"{args.file_seconds:g} s"
    print(f"{files} landing files of {what} ({', '.join(streams)}); "
          f"{per_batch} files per micro-batch", flush=True)

    spark = build_spark_session(config)
    lake = Lake(config.storage_root)
    settings = dataclasses.replace(config.pipeline, max_files_per_trigger=per_batch,
                                   bronze_tables=False, write_threads=args.write_threads)
    pipe = Pipeline(spark, lake, settings,
                    streams=tuple(s for s in STREAMS if s.name in streams))
    group = next(g for g in pipe.groups() if g[0] == "silver")
    pipe.ensure_tables()
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")

    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    cpu = [jvm_cpu_s(pid)]
    handler = PhaseLines(on_line=lambda: cpu.append(jvm_cpu_s(pid)))
    logging.getLogger("jobs.silver").addHandler(handler)
    logging.getLogger("jobs.silver").setLevel(logging.INFO)
    query = silver.start_silver(spark, lake, group[1], pipe._raw([s.name for s in group[1]]),
                                query="silver", trigger={"availableNow": True},
                                bronze_tables=False, write_threads=args.write_threads)
    t0 = time.monotonic()
    query.awaitTermination()
    elapsed = time.monotonic() - t0
    rows = 0
    cpu_s = [round(b - a, 1) for a, b in zip(cpu, cpu[1:])]
    for line, c in zip(handler.lines[:args.batches], cpu_s):
        print(f"{line} [JVM CPU {c:.1f} s]")
        m = re.search(r"batch \d+: (\d+) rows", line)
        rows += int(m.group(1)) if m else 0
    n = min(len(handler.lines), args.batches)
    warm = cpu_s[1:n]
    cpu_mean = round(sum(warm) / len(warm), 2) if warm else None
    print(f"{n} batches, {rows} rows in {elapsed:.1f} s wall: {rows / elapsed:.0f} rows/s; "
          f"JVM CPU per batch after the first: {cpu_mean} s")
    from bench.result_file import machine_header, save
    save("silver-batch", {**machine_header("silver_batch", "bench.bench_silver_batch", None),
                          "label": args.label,
                          "recording": (f"fleet of {args.fleet} brokers" if args.fleet
                                        else args.recording or "demo capture"),
                          "batches": n, "rows": rows, "jvm_cpu_s": cpu_s[:n],
                          "jvm_cpu_mean_after_first_s": cpu_mean,
                          "wall_s": round(elapsed, 1), "rows_per_s": round(rows / elapsed),
                          "batch_lines": handler.lines[:args.batches]})
    if args.stages:
        print_stages(spark)
    if args.keep:
        print(f"lake kept at {work / 'lake'}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()


if __name__ == "__main__":
    main()
