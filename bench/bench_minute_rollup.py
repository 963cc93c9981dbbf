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
  core.latency_histogram's rule, with the numpy merge the detectors' window reads use
  (`minute_quantiles` over evaluation/inputs/histograms.py's, on the Arrow columns
  deltalake reads): this process's CPU seconds;
- the same kernel inside Spark: the minute's rows read by Spark and moved by broker to
  the Python workers as Arrow batches (`mapInArrow`): the machine's CPU seconds (JVM and
  workers, from /proc/stat: run it on an idle machine) and the wall time.

Both are checked against kmon's rollup: the share of (broker, key) minutes whose total p99
is the same value.

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


def minute_quantiles(one):
    """The kernel: per (cluster, broker, key) of the Arrow table `one` (window rows), the
    p50 / p99 / p999 bucket id of each stage's merged histogram, by the window reads' own
    numpy merge (evaluation/inputs/histograms.py); an Arrow table, null where a group has
    no count."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from evaluation.inputs.histograms import _merge

    codes = [pc.dictionary_encode(one[c].combine_chunks()).indices.to_numpy(
        zero_copy_only=False).astype(np.int64) for c in ("cluster", "broker", "key")]
    combined = codes[0]
    for c in codes[1:]:
        combined = combined * (int(c.max()) + 1) + c
    _, first_row, group = np.unique(combined, return_index=True, return_inverse=True)
    out = {c: one[c].take(pa.array(first_row)) for c in ("cluster", "broker", "key")}
    stages = [c[:-len("_buckets")] for c in one.column_names if c.endswith("_buckets")]
    for stage in stages:
        n, ids, _ = _merge(stage, one[f"{stage}_buckets"], one[f"{stage}_counts"], group,
                           len(first_row), QUANTILES, None)
        for q, col in zip(QUANTILES, ids):
            out[f"{stage}_p{q}"] = pa.array(col, mask=n == 0, type=pa.int32())
    return pa.table(out)


def total_p99(result) -> dict:
    """(cluster, broker, key) -> the total p99 value of a `minute_quantiles` result."""
    from core.latency_histogram import value_of

    return {(c, b, k): value_of(i) for c, b, k, i in zip(
        *(result[x].to_pylist() for x in ("cluster", "broker", "key", "total_p0.99")))
        if i is not None}


def numpy_rollup(table, minute: int) -> dict:
    """The reference: the kernel on the minute's rows read by deltalake, in this process."""
    import pyarrow.compute as pc

    start = time.process_time()
    ts = table["ts_ms"]
    one = table.filter(pc.and_(pc.greater_equal(ts, minute), pc.less(ts, minute + MINUTE_MS)))
    one = one.filter(pc.invert(pc.fill_null(one["is_controller_traffic"], False)))
    result = minute_quantiles(one)
    return {"rows": one.num_rows, "groups": result.num_rows,
            "cpu_s": round(time.process_time() - start, 2), "total_p99_ms": total_p99(result)}


def machine_busy_s() -> float:
    """CPU seconds every process of the machine has used (/proc/stat), to count the Python
    workers with the JVM."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def arrow_rollup(spark, table: str, minute: int) -> dict:
    """The kernel inside Spark: the minute's rows read by Spark, moved by broker to the
    Python workers as Arrow batches (mapInArrow), merged there. The machine's CPU (JVM and
    workers; run it on an idle machine) and the wall time."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from schemas.request_windows import STAGES

    rows = (spark.read.format("delta").load(table)
            .where((F.col("ts_ms") >= minute) & (F.col("ts_ms") < minute + MINUTE_MS)
                   & ~F.coalesce(F.col("is_controller_traffic"), F.lit(False)))
            .select("cluster", "broker", "key", *[f"{s}_{part}" for s in STAGES
                                                   for part in ("buckets", "counts")]))
    schema = ", ".join(["cluster string", "broker int", "key string",
                        *[f"`{s}_p{q}` int" for s in STAGES for q in QUANTILES]])

    def merge(batches):
        batches = list(batches)
        if batches:
            yield from minute_quantiles(pa.Table.from_batches(batches)).to_batches()

    busy, wall = machine_busy_s(), time.monotonic()
    result = rows.repartition("cluster", "broker").mapInArrow(merge, schema).toArrow()
    return {"groups": result.num_rows, "machine_cpu_s": round(machine_busy_s() - busy, 1),
            "wall_s": round(time.monotonic() - wall, 1), "total_p99_ms": total_p99(result)}


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
            inside = arrow_rollup(spark, table, minute)
            kmon_p99 = kmon.pop("total_p99_ms")

            def agreeing(p99: dict) -> str:
                same = sum(1 for k, v in p99.items() if kmon_p99.get(k) == v)
                return f"{same} of {len(kmon_p99)}"

            row = {"minute_ms": minute, "kmon": kmon, "numpy": ref, "spark_arrow": inside,
                   "total_p99_same": agreeing(ref.pop("total_p99_ms")),
                   "spark_arrow_total_p99_same": agreeing(inside.pop("total_p99_ms"))}
            print(f"minute {minute}: {ref['rows']} window rows, {kmon['groups']} key minutes; "
                  f"kmon's rollup {kmon['jvm_cpu_total_s']} s of JVM CPU "
                  f"({kmon['jvm_cpu_s']}), numpy's merge {ref['cpu_s']} s, in Spark's Python "
                  f"workers {inside['machine_cpu_s']} s of the machine's CPU "
                  f"({inside['wall_s']} s wall); total p99 equal in {row['total_p99_same']} "
                  f"and {row['spark_arrow_total_p99_same']}")
            results.append(row)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    save("minute-rollup", {**machine_header("minute-rollup", "bench.bench_minute_rollup",
                                            argv), "lake": args.lake, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
