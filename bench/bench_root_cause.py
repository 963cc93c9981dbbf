"""Root-cause queries over a day of a 2,000-broker fleet's minute percentiles.

Run: .kmon/venv/bin/python -m bench.bench_root_cause [--brokers 2000] [--days 1]
     [--apis 5] [--repeat 3] [--no-save]

Issue 24 asks that an engineer's two everyday root-cause queries over
gold.request_stages_1m stay under 10 s for one day (and seven, if the machine holds it)
of 1-minute stage percentiles of 2,000 brokers:

- **broker day**: one broker's stage breakdown (every stage's p99 per API and minute)
  over a day;
- **fleet hour**: the fleet's 20 slowest brokers (worst Produce total p99 in the hour,
  with its median minute and the stage that dominated) over one hour.

The table is written the way the pipeline leaves it: per day one file per minute (the
minute query appends each finished minute of every broker as one small file), in
gold.request_stages_1m's columns (jobs/gold_windows.py, with the own-time
column), `--apis` API rows per broker and minute, values from a seeded generator (per
broker a base latency, a diurnal swing, noise; a few slow brokers). Then each query runs
`--repeat` times on kmon's own Spark session (kmon.config defaults: local[2], 2 GB
driver) against that layout, then again after `Maintenance.run()` (jobs/maintenance.py:
each closed day Z-ordered by (broker, window_start)), so the figures show what the layout
is worth. Rows returned are checked equal before and after.

Prints the figures and writes them with the machine's name, CPU and load average to
bench/results/root-cause-<utc stamp>.json. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench.bench_edge_aggregation import cpu_model
from core import signals

ROOT = Path(__file__).resolve().parent.parent
DAY0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
STAGES = ("total", *signals.STAGES)
APIS = ("Produce", "Fetch", "Metadata", "OffsetCommit", "Heartbeat", "ListOffsets",
        "FindCoordinator", "JoinGroup", "SyncGroup", "ApiVersions")
CLUSTER = "fleet"


def write_day(spark, path: str, day: int, brokers: int, apis: int) -> int:
    """One day of minute rows, one file per minute; returns the rows written."""
    from pyspark.sql import functions as F

    start = int((DAY0 + timedelta(days=day)).timestamp())
    n = 1440 * brokers * apis
    i = F.col("id")
    minute = F.floor(i / (brokers * apis)).cast("long")
    broker = (F.floor(i / apis) % brokers).cast("int")
    api_idx = (i % apis).cast("int")
    api = F.element_at(F.array(*[F.lit(a) for a in APIS[:apis]]), api_idx + 1)
    # Per broker a base in [2, 20) ms, a diurnal swing, noise; brokers = 7 mod 331 slow.
    base = 2.0 + (F.abs(F.hash(broker)) % 1800) / 100.0
    diurnal = 1.0 + 0.5 * F.sin(minute / 1440.0 * 6.2832)
    slow = F.when(broker % 331 == 7, 20.0).otherwise(1.0)
    total = base * diurnal * slow * (1.0 + F.rand(seed=day))
    share = {"total": 1.0, "request_queue": 0.1, "local": 0.45, "remote": 0.3,
             "throttle": 0.0, "response_queue": 0.02, "send": 0.13}
    cols = [F.lit(CLUSTER).alias("cluster"), broker.alias("broker"), api.alias("api"),
            F.timestamp_seconds(F.lit(start) + minute * 60).alias("window_start"),
            F.timestamp_seconds(F.lit(start) + minute * 60 + 60).alias("window_end"),
            (1000 + F.abs(F.hash(broker, api_idx)) % 600_000).cast("long").alias("requests")]
    for s in STAGES:
        p99 = total * share[s]
        cols += [(p99 * 0.4).alias(f"{s}_p50_ms"), p99.alias(f"{s}_p99_ms"),
                 (p99 * 1.6).alias(f"{s}_p999_ms")]
    cols.append((total * 0.7).alias("total_excl_remote_p99_ms"))
    # spark.range splits the ids evenly: with 1,440 partitions each one is one minute's
    # rows, so the write leaves one file per minute, as the minute query's appends do.
    df = (spark.range(0, n, numPartitions=1440).select(*cols)
          .withColumn("date", F.to_date("window_start")))
    df.write.format("delta").mode("append").partitionBy("date").save(path)
    return n


BROKER_DAY = """
SELECT window_start, api, requests, {stages}
FROM delta.`{path}`
WHERE cluster = '{cluster}' AND broker = {broker} AND date = DATE '{day}'
ORDER BY window_start, api"""

FLEET_HOUR = """
SELECT broker, max(total_p99_ms) AS worst_total_p99_ms,
       percentile_approx(total_p99_ms, 0.5) AS median_total_p99_ms,
       max_by(CASE WHEN local_p99_ms >= remote_p99_ms AND local_p99_ms >= request_queue_p99_ms
                   THEN 'local' WHEN remote_p99_ms >= request_queue_p99_ms THEN 'remote'
                   ELSE 'request_queue' END, total_p99_ms) AS dominant_stage
FROM delta.`{path}`
WHERE cluster = '{cluster}' AND api = 'Produce' AND date = DATE '{day}'
  AND window_start >= TIMESTAMP '{hour}' AND window_start < TIMESTAMP '{hour}' + INTERVAL 1 HOUR
GROUP BY broker
ORDER BY worst_total_p99_ms DESC, broker
LIMIT 20"""


def timed(spark, sql: str, repeat: int) -> dict:
    runs, rows = [], None
    for _ in range(repeat):
        t0 = time.monotonic()
        rows = spark.sql(sql).collect()
        runs.append(round(time.monotonic() - t0, 2))
    return {"runs_s": runs, "first_s": runs[0], "median_s": statistics.median(runs),
            "rows": len(rows), "_rows": rows}


def files_of(spark, path: str) -> int:
    from delta.tables import DeltaTable
    return int(DeltaTable.forPath(spark, path).detail().first()["numFiles"])


def queries(spark, path: str, days: int, brokers: int, repeat: int) -> dict:
    day = (DAY0 + timedelta(days=days - 1)).date().isoformat()
    hour = f"{day} 14:00:00"
    stages = ", ".join(f"{s}_p99_ms" for s in STAGES)
    return {
        "broker_day": timed(spark, BROKER_DAY.format(stages=stages, path=path, cluster=CLUSTER,
                                                     broker=brokers // 2 + 7, day=day), repeat),
        "fleet_hour": timed(spark, FLEET_HOUR.format(path=path, cluster=CLUSTER, day=day,
                                                     hour=hour), repeat),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--brokers", type=int, default=2000)
    p.add_argument("--days", type=int, default=1)
    p.add_argument("--apis", type=int, default=5, help=f"API rows per broker and minute "
                   f"(at most {len(APIS)}; 5: the fleet simulator's brokers serve 6.4 request "
                   f"keys a window, Produce's acks and Fetch's kinds merging into one API)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-save", action="store_true")
    a = p.parse_args(argv)
    from jobs.maintenance import Maintenance
    from kmon.config import Config
    from infra.lake import Lake
    from infra.spark_session import build_spark_session

    work = Path(tempfile.mkdtemp(prefix="kmon-root-cause-"))
    config = Config().with_overrides(spark={"storage_root": str(work / "lake")})
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    doc = {"bench": "root-cause", "utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "host": socket.gethostname(), "cpu": cpu_model(), "cores": os.cpu_count(),
           "loadavg": os.getloadavg(), "command": "python -m bench.bench_root_cause "
           + " ".join(argv if argv is not None else sys.argv[1:]),
           "spark": {"master": config.spark.master, "driver_memory": config.spark.driver_memory},
           "brokers": a.brokers, "days": a.days, "apis": min(a.apis, len(APIS)),
           "target_s": 10}

    def save(d: dict) -> None:
        if not a.no_save:
            out = ROOT / "bench" / "results" / f"root-cause-{stamp}.json"
            out.write_text(json.dumps(d, indent=1) + "\n")
            print(f"wrote {out}", file=sys.stderr)

    spark = build_spark_session(config)
    lake = Lake(config.storage_root)
    path = lake.table("gold", "request_stages_1m")
    try:
        t0 = time.monotonic()
        rows = 0
        for d in range(a.days):
            rows += write_day(spark, path, d, a.brokers, min(a.apis, len(APIS)))
            print(f"day {d + 1}/{a.days} written ({rows:,} rows, "
                  f"{time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
        write_s = time.monotonic() - t0
        table_bytes = sum(f.stat().st_size for f in Path(path).rglob("*.parquet"))
        as_written = {"files": files_of(spark, path), **queries(spark, path, a.days,
                                                                 a.brokers, a.repeat)}
        print(f"as written: {as_written['files']:,} files; broker day "
              f"{as_written['broker_day']['runs_s']} s, fleet hour "
              f"{as_written['fleet_hour']['runs_s']} s", file=sys.stderr, flush=True)
        doc.update({"rows": rows, "table_bytes": table_bytes, "write_s": round(write_s, 1),
                    "as_written": _public(as_written)})
        save(doc)                           # the figures so far, if the pass is cut short
        # Every day is closed a day after DAY0 + days (the pass's clock says so).
        later = int((DAY0 + timedelta(days=a.days + 1)).timestamp() * 1000)
        m0 = time.monotonic()
        Maintenance(spark, lake, config.maintenance, clock=lambda: later).run(
            only=["gold.request_stages_1m"])
        maintain_s = time.monotonic() - m0
        after = {"files": files_of(spark, path), **queries(spark, path, a.days, a.brokers,
                                                            a.repeat)}
        for q in ("broker_day", "fleet_hour"):
            if sorted(map(tuple, as_written[q]["_rows"])) != \
                    sorted(map(tuple, after[q]["_rows"])):
                raise SystemExit(f"{q}: the rows differ after maintenance")
        doc.update({"maintenance_s": round(maintain_s, 1), "after_maintenance": _public(after)})
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(doc, indent=1))
    save(doc)
    return 0


def _public(result: dict) -> dict:
    return {k: ({kk: vv for kk, vv in v.items() if kk != "_rows"} if isinstance(v, dict) else v)
            for k, v in result.items()}


if __name__ == "__main__":
    raise SystemExit(main())
