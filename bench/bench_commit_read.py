"""The offset-rewind detector's commit read on a live lake: whole, and seeded as the live
detector query reads it (evaluation/inputs/partition_signals.py `CommitSeedCache`).

Run: .kmon/venv/bin/python -m bench.bench_commit_read [--lake .kmon/demo/lake |
     --simulate-minutes 70] [--minutes 10] [--step-s 20]

Input: a lake a live run wrote (`kmon demo`, `kmon matrix run` or `kmon run` leave it at
.kmon/demo/lake), with at least an hour of silver.offset_commits to show the whole read's
cost: every evaluation reads the hour before its range (COMMIT_SEED_S), a live lake's
hundreds of small files. Or `--simulate-minutes M`: a table of M minutes of commits built
the way the silver query grows it, one Delta append every 10 s (20 groups of 6 partitions
committing every 5 s; the first batch goes through the real pipeline, the others are it
shifted in time, one group going back every 10 minutes). The bench copies the lake (the
read writes nothing, but a run may still be writing it), then, for the last --minutes of
commits, evaluates every --step-s as the detector query does: the whole read and the
seeded read of the same range, one after the other, and checks that they give the same
commits. It prints each pair's times and
writes every time to bench/results/commit-read-<utc stamp>.json. The first seeded read
builds its seed (about a whole read); the later ones are what the live query pays.

Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.result_file import machine_header, save

ROOT = Path(__file__).resolve().parent.parent
LOOKBACK_MS = 300_000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lake", default=str(ROOT / ".kmon" / "demo" / "lake"),
                    help="a live run's lake (default: .kmon/demo/lake)")
    ap.add_argument("--simulate-minutes", type=float, default=0.0,
                    help="instead of --lake, a table of this many minutes of commits grown "
                         "10 s at a time (see above)")
    ap.add_argument("--minutes", type=float, default=10.0,
                    help="evaluate over the last this many minutes of commits (default 10)")
    ap.add_argument("--step-s", type=float, default=20.0,
                    help="seconds between evaluations (default 20, the detector trigger)")
    args = ap.parse_args(argv)
    src = Path(args.lake)
    if not args.simulate_minutes and not (src / "silver" / "offset_commits"
                                          / "_delta_log").is_dir():
        print(f"{src}: no silver.offset_commits table; run `kmon demo` or `kmon matrix run` "
              f"first, or pass --simulate-minutes")
        return 2
    work = Path(tempfile.mkdtemp(prefix="kmon-bench-commits-"))
    if not args.simulate_minutes:
        shutil.copytree(src / "silver" / "offset_commits", work / "silver" / "offset_commits")

    from pyspark.sql import functions as F

    from infra.lake import Lake
    from infra.lake_sql import LakeSql
    from infra.spark_session import build_spark_session
    from evaluation.inputs import CommitSeedCache, TimeRange, read_commits
    from kmon.config import load_config

    config = load_config().with_overrides(spark={"storage_root": str(work)})
    spark = build_spark_session(config)
    lake = Lake(str(work))
    doc = machine_header("commit-read", "bench.bench_commit_read", argv)
    try:
        if args.simulate_minutes:
            started = time.monotonic()
            simulate(spark, config, lake, args.simulate_minutes)
            print(f"simulated {args.simulate_minutes:g} min of commits in "
                  f"{time.monotonic() - started:.0f} s")
        commits = spark.read.format("delta").load(lake.table("silver", "offset_commits"))
        first, newest, rows = commits.agg(F.min("ts_ms"), F.max("ts_ms"), F.count("*")).first()
        files = len(list((work / "silver" / "offset_commits").rglob("*.parquet")))
        print(f"silver.offset_commits: {rows} rows in {files} files over "
              f"{(newest - first) / 60_000:.0f} min")
        seed, sql = CommitSeedCache(), LakeSql(lake)
        runs = []
        step = int(args.step_s * 1000)
        for now in range(newest - int(args.minutes * 60_000), newest + 1, step):
            r = TimeRange(now - LOOKBACK_MS, now)
            t0 = time.monotonic()
            whole = read_commits(sql, r)
            t1 = time.monotonic()
            seeded = read_commits(sql, r, seed=seed)
            t2 = time.monotonic()
            runs.append({"at_ms": now, "whole_s": round(t1 - t0, 3),
                         "seeded_s": round(t2 - t1, 3), "commits": len(whole),
                         "same": whole == seeded,
                         "silver_from_s": round((r.start_ms - seed.silver_from_ms) / 1000, 1)})
            x = runs[-1]
            print(f"at {now}: whole {x['whole_s']:.2f} s, seeded {x['seeded_s']:.2f} s, "
                  f"{x['commits']} commits, same: {x['same']}")
        later = runs[1:] or runs
        doc.update({"lake": f"simulated {args.simulate_minutes:g} min" if args.simulate_minutes
                    else str(src), "rows": rows, "files": files,
                    "span_min": round((newest - first) / 60_000, 1),
                    "minutes": args.minutes, "step_s": args.step_s,
                    "whole_median_s": statistics.median(x["whole_s"] for x in later),
                    "seeded_median_s": statistics.median(x["seeded_s"] for x in later),
                    "all_same": all(x["same"] for x in runs), "runs": runs})
        print(f"median after the first: whole {doc['whole_median_s']:.2f} s, seeded "
              f"{doc['seeded_median_s']:.2f} s; every pair the same: {doc['all_same']}")
        save("commit-read", doc)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0 if doc.get("all_same") else 1


GROUPS, PARTITIONS, BATCH_MS, COMMIT_EVERY_MS = 20, 6, 10_000, 5_000


def simulate(spark, config, lake, minutes: float) -> None:
    """silver.offset_commits grown as the silver query grows it: the first 10-s batch of
    commits through the real pipeline, then one Delta append per 10 s of that batch shifted
    in time (offsets moving on, group g-0 going back by 1,000 every 10 minutes)."""
    from pyspark.sql import functions as F

    from ingest.consumer_offsets import encode_key, encode_value, parse_offset_record
    from ingest.sinks import LandingSink
    from jobs.pipeline import Pipeline
    from jobs.streams import QUARANTINE, stream

    t0 = (int(time.time() * 1000) - int(minutes * 60_000)) // BATCH_MS * BATCH_MS
    sink = LandingSink(lake.landing_root, "bench")
    n = 0
    for k in range(BATCH_MS // COMMIT_EVERY_MS):
        for g in range(GROUPS):
            for p in range(PARTITIONS):
                ts = t0 + k * COMMIT_EVERY_MS + g * 10 + p
                rec = parse_offset_record(encode_key(f"g-{g}", "orders", p),
                                          encode_value(1000 + k * 10, "", ts), cluster="bench",
                                          source_partition=g % 50, source_offset=n, ts_ms=ts)
                sink.send("offset_commits", "k", dict(rec, record_id=f"bench:offsets:{n}"))
                n += 1
    sink.flush()
    Pipeline(spark, lake, config.pipeline,
             streams=(stream("offset_commits"), stream(QUARANTINE))).process_available()
    path = lake.table("silver", "offset_commits")
    first = spark.read.format("delta").load(path).localCheckpoint(eager=True)
    batches = int(minutes * 60_000 // BATCH_MS)
    for b in range(1, batches):
        shift = b * BATCH_MS
        back = F.when((F.col("group_id") == "g-0") & F.lit(b % 60 == 0), -1000).otherwise(0)
        batch = (first.withColumn("ts_ms", F.col("ts_ms") + shift)
                 .withColumn("commit_ts_ms", F.col("commit_ts_ms") + shift)
                 .withColumn("offset", F.col("offset") + b * 20 + back)
                 .withColumn("source_offset", F.col("source_offset") + b * n)
                 .withColumn("record_id", F.concat("record_id", F.lit(f":{b}")))
                 .withColumn("ts", F.timestamp_millis("ts_ms"))
                 .withColumn("date", F.to_date("ts")))
        batch.write.format("delta").mode("append").save(path)
        if b % 60 == 0:
            print(f"  {b * BATCH_MS // 60_000} min appended")


if __name__ == "__main__":
    raise SystemExit(main())
