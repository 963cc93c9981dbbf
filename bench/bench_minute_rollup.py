"""What one minute of the gold minute rollup costs at fleet scale, and what the same merge
costs vectorized.

Run: .kmon/venv/bin/python -m bench.bench_minute_rollup --lake DIR [--minutes 2]

DIR is a lake whose silver.request_windows holds a simulated fleet's windows, e.g. the
one `python -m bench.bench_silver_batch --fleet 2000 --batches 13 --keep` leaves (two
whole minutes of 2,000 brokers). For each whole minute in it (a minute with at least 90 %
of the fullest one's rows), it measures:

- kmon's rollup as jobs/gold_windows.py computes it (`key_minutes`: every broker's
  request-key windows of the minute merged, then the three minute tables from those rows:
  `request_keys`, `api_minutes`, `fleet_minutes`, each written to Delta), in batch mode
  over the minute's rows on the configured Spark session (`local[2]`, interpreted): the
  JVM's CPU seconds (its /proc stat) and the wall time of each step. The streaming query
  does the same merges spread over its micro-batches, plus its state store;
- a reference: the same per-broker merge (counts summed per cluster, broker, key, stage
  and bucket id) and the p50 / p99 / p999 bucket of every merged histogram by
  core.latency_histogram's rule, in numpy over the Arrow columns (deltalake reads the
  table): this process's CPU seconds. It is checked against kmon's rollup: the share of
  (broker, key) minutes whose total p99 is the same value in both.

Prints the figures and writes them to bench/results/minute-rollup-<stamp>.json. Nothing
here asserts a speed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.bench_silver_batch import jvm_cpu_s
from bench.result_file import machine_header, save

MINUTE_MS = 60_000
QUANTILES = (0.5, 0.99, 0.999)


def whole_minutes(ts_ms: np.ndarray, limit: int) -> list[int]:
    """The starts of the minutes holding at least 90 % of the fullest minute's rows."""
    starts, counts = np.unique(ts_ms - ts_ms % MINUTE_MS, return_counts=True)
    full = [int(s) for s, n in zip(starts, counts) if n >= 0.9 * counts.max()]
    return full[:limit]


def spark_rollup(spark, table: str, minute: int, out: Path) -> dict:
    """kmon's minute rollup of one minute, batch mode: CPU and wall per step."""
    from pyspark.sql import functions as F

    from jobs.gold_windows import api_minutes, fleet_minutes, key_minutes, request_keys

    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    rows = (spark.read.format("delta").load(table)
            .where((F.col("ts_ms") >= minute) & (F.col("ts_ms") < minute + MINUTE_MS)))
    steps = {}
    c, t = jvm_cpu_s(pid), time.monotonic()
    keys = key_minutes(rows).persist()
    groups = keys.count()
    steps["key_minutes"] = (jvm_cpu_s(pid) - c, time.monotonic() - t)
    for name, make in (("request_keys_1m", request_keys), ("request_stages_1m", api_minutes),
                       ("fleet_stages_1m", fleet_minutes)):
        c, t = jvm_cpu_s(pid), time.monotonic()
        make(keys).write.format("delta").mode("overwrite").save(str(out / name))
        steps[name] = (jvm_cpu_s(pid) - c, time.monotonic() - t)
    keys.unpersist()
    p99 = {(r["cluster"], r["broker"], r["key"]): r["total_p99_ms"] for r in
           spark.read.format("delta").load(str(out / "request_keys_1m"))
           .select("cluster", "broker", "key", "total_p99_ms").collect()}
    return {"groups": groups,
            "jvm_cpu_s": {k: round(v[0], 1) for k, v in steps.items()},
            "wall_s": {k: round(v[1], 1) for k, v in steps.items()},
            "jvm_cpu_total_s": round(sum(v[0] for v in steps.values()), 1),
            "total_p99_ms": p99}


def numpy_rollup(table, minute: int) -> dict:
    """The reference: per-broker key merge and quantile buckets in numpy."""
    import pyarrow.compute as pc

    from core.latency_histogram import value_of

    start = time.process_time()
    ts = table["ts_ms"]
    one = table.filter(pc.and_(pc.greater_equal(ts, minute), pc.less(ts, minute + MINUTE_MS)))
    one = one.filter(pc.invert(pc.fill_null(one["is_controller_traffic"], False)))
    codes = [pc.dictionary_encode(one[c].combine_chunks()).indices.to_numpy(
        zero_copy_only=False).astype(np.int64) for c in ("cluster", "broker", "key")]
    combined = codes[0]
    for c in codes[1:]:
        combined = combined * (int(c.max()) + 1) + c
    group_keys, group = np.unique(combined, return_inverse=True)
    stages = [c[:-len("_buckets")] for c in one.column_names if c.endswith("_buckets")]
    quantile_ids: dict[str, np.ndarray] = {}
    for stage in stages:
        buckets = one[f"{stage}_buckets"].combine_chunks()
        lengths = pc.fill_null(pc.list_value_length(buckets), 0).to_numpy(zero_copy_only=False)
        ids = pc.list_flatten(buckets).to_numpy(zero_copy_only=False).astype(np.int64)
        counts = pc.list_flatten(one[f"{stage}_counts"].combine_chunks()).to_numpy(
            zero_copy_only=False).astype(np.int64)
        owner = np.repeat(group, lengths)
        keep = counts > 0
        ids, counts, owner = ids[keep], counts[keep], owner[keep]
        if not len(ids):
            continue
        low = ids.min()
        span = int(ids.max() - low) + 1
        merged, inverse = np.unique(owner * span + (ids - low), return_inverse=True)
        sums = np.bincount(inverse, weights=counts)
        owners, bucket_ids = merged // span, merged % span + low
        starts = np.r_[0, np.flatnonzero(np.diff(owners)) + 1]
        sizes = np.diff(np.r_[starts, len(owners)])
        running = np.cumsum(sums)
        within = running - np.repeat(np.r_[0.0, running[starts[1:] - 1]], sizes)
        n = np.repeat(np.add.reduceat(sums, starts), sizes)
        index = np.arange(len(owners))
        for q in QUANTILES:
            rank = np.maximum(1.0, np.ceil(float(q) * n))
            first = np.minimum.reduceat(np.where(within >= rank, index, len(index)), starts)
            quantile_ids.setdefault(f"{stage}_p{q}", np.full(len(group_keys), np.nan))[
                owners[starts]] = bucket_ids[first]
    cpu = time.process_time() - start
    cluster = one["cluster"].to_numpy(zero_copy_only=False)
    broker = one["broker"].to_numpy(zero_copy_only=False)
    key = one["key"].to_numpy(zero_copy_only=False)
    first_row = np.unique(group, return_index=True)[1]
    p99 = {(cluster[i], int(broker[i]), key[i]): value_of(int(b))
           for i, b in zip(first_row, quantile_ids["total_p0.99"]) if not np.isnan(b)}
    return {"rows": one.num_rows, "groups": len(group_keys), "cpu_s": round(cpu, 2),
            "total_p99_ms": p99}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", required=True, help="a lake with silver.request_windows")
    ap.add_argument("--minutes", type=int, default=2, help="whole minutes to measure")
    args = ap.parse_args(argv)

    import deltalake

    from infra.spark_session import build_spark_session
    from kmon.config import Config

    table = str(Path(args.lake) / "silver" / "request_windows")
    arrow = deltalake.DeltaTable(table).to_pyarrow_table()
    minutes = whole_minutes(arrow["ts_ms"].to_numpy(), args.minutes)
    if not minutes:
        sys.exit(f"{table}: no whole minute of request windows")
    work = Path(tempfile.mkdtemp(prefix="kmon-bench-rollup-"))
    spark = build_spark_session(Config().with_overrides(spark={"storage_root": str(work)}))
    results = []
    try:
        for minute in minutes:
            kmon = spark_rollup(spark, table, minute, work / str(minute))
            ref = numpy_rollup(arrow, minute)
            same = sum(1 for k, v in ref.pop("total_p99_ms").items()
                       if k in kmon["total_p99_ms"] and v == kmon["total_p99_ms"][k])
            kmon_p99 = kmon.pop("total_p99_ms")
            row = {"minute_ms": minute, "kmon": kmon, "numpy": ref,
                   "total_p99_same": f"{same} of {len(kmon_p99)}"}
            print(f"minute {minute}: {ref['rows']} window rows, {kmon['groups']} key minutes; "
                  f"kmon's rollup {kmon['jvm_cpu_total_s']} s of JVM CPU "
                  f"({kmon['jvm_cpu_s']}), numpy's merge {ref['cpu_s']} s; total p99 equal "
                  f"in {row['total_p99_same']}")
            results.append(row)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    save("minute-rollup", {**machine_header("minute-rollup", "bench.bench_minute_rollup",
                                            argv), "lake": args.lake, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
