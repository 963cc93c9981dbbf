"""What one minute of the gold minute rollup costs at fleet scale: kmon's (vectorized, in
Spark's Python workers) against the Spark SQL form it replaced.

Run: .kmon/venv/bin/python -m bench.bench_minute_rollup --lake DIR [--minutes 2] [--repeats 2]

DIR is a lake whose silver.request_windows holds a simulated fleet's windows, e.g. the
one `python -m bench.bench_silver_batch --fleet 2000 --batches 13 --keep` leaves (a
whole minute or two of 2,000 brokers). For each whole minute in it (a minute with at least 90 %
of the fullest one's rows), both forms make the three minute tables from the minute's
rows and write them to Delta, batch mode, on the configured Spark session (`local[2]`),
`--repeats` times each, in turn (the first runs include the JIT's warm-up):

- `kmon`: jobs/gold_windows.minute_tables (window rows moved by broker to the Python
  workers as Arrow batches, merged with core.histogram_merge's numpy merge, then the
  API and fleet rows from the key minutes the same way);
- `sql`: `sql_minute_tables`, the same tables by jobs/histogram_sql.stage_percentiles
  (higher-order functions over collected arrays, interpreted in the JVM), as the gold
  query computed them until the vectorized rollup.

For each: the machine's CPU seconds (JVM and Python workers, /proc/stat: run it on an
idle machine), the JVM's alone and the wall time. Then the rows of the two forms'
tables are compared, value for value.

Prints the figures and writes them to bench/results/minute-rollup-<stamp>.json. Nothing
here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.bench_silver_batch import jvm_cpu_s
from bench.result_file import machine_header, save

MINUTE_MS = 60_000


def sql_minute_tables(windows, persist: bool = False):
    """The three minute tables by the Spark SQL merge (jobs/histogram_sql), with
    jobs/gold_windows.minute_tables' columns: the reference form. `persist`: the key
    minutes persisted (the caller clears the cache)."""
    from pyspark.sql import functions as F

    from jobs.gold_windows import COUNTS, OWN_TIME, OWN_TIME_P99, STAGES, minute_tables
    from jobs.histogram_sql import QUANTILES, stage_percentiles

    hist = (*STAGES, OWN_TIME)
    df = (windows.where(~F.coalesce(F.col("is_controller_traffic"), F.lit(False)))
          .withColumn("minute_ms", F.col("ts_ms") - F.col("ts_ms") % MINUTE_MS))
    keys = stage_percentiles(df, ["minute_ms", "cluster", "broker", "api", "key"], hist,
                             QUANTILES, totals=COUNTS)
    if persist:
        keys = keys.persist()
    api = stage_percentiles(keys, ["minute_ms", "cluster", "broker", "api"], hist, QUANTILES,
                            totals=("requests",), sum_and_max=False, keep_histograms=False)
    fleet = stage_percentiles(keys, ["minute_ms", "cluster", "api", "key"], STAGES, QUANTILES,
                              totals=COUNTS, extra={"brokers": F.count_distinct("broker")})
    forms = {"request_keys_1m": keys, "fleet_stages_1m": fleet,
             "request_stages_1m": api.withColumn(OWN_TIME_P99, F.col(f"{OWN_TIME}_p99_ms"))}
    columns = {name: df_.columns for name, df_ in minute_tables(windows.limit(0)).items()}
    start = F.timestamp_millis("minute_ms")
    return {name: forms[name].select(
        start.alias("window_start"),
        F.timestamp_millis(F.col("minute_ms") + MINUTE_MS).alias("window_end"),
        *[c for c in columns[name] if c not in ("window_start", "window_end", "date")],
        F.to_date(start).alias("date")) for name in columns}


def sql_write(windows, write) -> None:
    """The SQL form's tables written as gold wrote them: the key minutes persisted once."""
    tables = sql_minute_tables(windows, persist=True)
    try:
        for name, df in tables.items():
            write(name, df)
    finally:
        windows.sparkSession.catalog.clearCache()


def whole_minutes(ts_ms: np.ndarray, limit: int) -> list[int]:
    """The starts of the minutes holding at least 90 % of the fullest minute's rows."""
    starts, counts = np.unique(ts_ms - ts_ms % MINUTE_MS, return_counts=True)
    full = [int(s) for s, n in zip(starts, counts) if n >= 0.9 * counts.max()]
    return full[:limit]


def machine_busy_s() -> float:
    """CPU seconds every process of the machine has used (/proc/stat), to count the Python
    workers with the JVM."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def write_tables(spark, write_all, out: Path) -> dict:
    """`write_all(write)` with a `write(table, rows)` that writes a table under `out`; the
    machine's and the JVM's CPU seconds and the wall time."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    busy, jvm, wall = machine_busy_s(), jvm_cpu_s(pid), time.monotonic()
    write_all(lambda name, df: df.write.format("delta").mode("overwrite").save(str(out / name)))
    return {"machine_cpu_s": round(machine_busy_s() - busy, 1),
            "jvm_cpu_s": round(jvm_cpu_s(pid) - jvm, 1),
            "wall_s": round(time.monotonic() - wall, 1)}


def same_rows(spark, a: Path, b: Path) -> dict:
    """Per table: rows of `a` also in `b` (every value equal), of how many."""
    out = {}
    for table in ("request_keys_1m", "request_stages_1m", "fleet_stages_1m"):
        rows = [spark.read.format("delta").load(str(p / table)).collect() for p in (a, b)]
        keyed = [{tuple(tuple(v) if isinstance(v, list) else v for v in r) for r in x}
                 for x in rows]
        out[table] = f"{len(keyed[0] & keyed[1])} of {len(rows[0])} ({len(rows[1])})"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", required=True, help="a lake with silver.request_windows")
    ap.add_argument("--minutes", type=int, default=2, help="whole minutes to measure")
    ap.add_argument("--repeats", type=int, default=2,
                    help="runs of each form per minute (the first warms the JVM's code)")
    args = ap.parse_args(argv)

    import deltalake
    from pyspark.sql import functions as F

    from infra.spark_session import build_spark_session
    from jobs.gold_windows import write_minute_tables
    from kmon.config import Config

    table = str(Path(args.lake) / "silver" / "request_windows")
    ts = deltalake.DeltaTable(table).to_pyarrow_table(columns=["ts_ms"])["ts_ms"]
    minutes = whole_minutes(ts.to_numpy(), args.minutes)
    if not minutes:
        sys.exit(f"{table}: no whole minute of request windows")
    work = Path(tempfile.mkdtemp(prefix="kmon-bench-rollup-"))
    spark = build_spark_session(Config().with_overrides(spark={"storage_root": str(work)}))
    results = []
    try:
        for minute in minutes:
            rows = (spark.read.format("delta").load(table)
                    .where((F.col("ts_ms") >= minute) & (F.col("ts_ms") < minute + MINUTE_MS)))
            n = rows.count()
            kmon, sql = [], []
            for _ in range(args.repeats):
                kmon.append(write_tables(spark, lambda w: write_minute_tables(rows, w),
                                         work / str(minute) / "kmon"))
                sql.append(write_tables(spark, lambda w: sql_write(rows, w),
                                        work / str(minute) / "sql"))
            same = same_rows(spark, work / str(minute) / "kmon", work / str(minute) / "sql")
            row = {"minute_ms": minute, "window_rows": n, "kmon": kmon, "sql": sql,
                   "kmon_rows_equal_to_sql": same}
            def said(runs: list[dict]) -> str:
                return ", ".join(f"{r['machine_cpu_s']} s ({r['jvm_cpu_s']} s JVM, "
                                 f"{r['wall_s']} s wall)" for r in runs)

            print(f"minute {minute}: {n} window rows; the machine's CPU for kmon's rollup, "
                  f"run by run: {said(kmon)}; for the SQL form: {said(sql)}; rows equal: "
                  f"{same}")
            results.append(row)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    save("minute-rollup", {**machine_header("minute-rollup", "bench.bench_minute_rollup",
                                            argv), "lake": args.lake, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
