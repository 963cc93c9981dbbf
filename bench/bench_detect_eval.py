"""How long one detector evaluation takes, and where, on a real demo lake.

Run: .kmon/venv/bin/python bench/bench_detect_eval.py [--lake .kmon/demo/lake] [--at MS ...]
     [--repeats 3] [--advance S] [--reread S] [--like-replay] [--profile N] [--no-save]

Input: the lake of a finished four-fault demo (`./kmonw test -m demo` or `./kmonw demo
--keep` leave it at .kmon/demo/lake). The bench copies it to a temporary folder (the
evaluation writes findings), then runs `evaluation.detect.evaluate` at each `--at` time (epoch
ms; default: 60 s and 360 s before the newest request window) `--repeats` times (each
`--advance` seconds later than the last), the way the detector query does (same config,
same parallel reads; from the second repeat on, the last result and the baselines are
carried over, unless `--like-replay`; so are the slow-broker windows judged). It prints
each read's wall time and row count (with `--profile N`, the N functions of the
evaluations after the first that took most of their time, cProfile, the reads then run
one after the other), then
each evaluation's wall time, and writes them to bench/results/detect-eval-<utc stamp>.json
(with the machine and the command). The first evaluation includes Spark's warm-up; the later ones
are what a running detector query pays per trigger on an idle machine. Under the demo's
load the same evaluation takes 3-4 times longer (see the demo log's "detectors at ... in
X s" lines).

Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

READS = ("read_log_events", "read_resets", "read_commits", "read_commit_requests",
         "read_memberships", "read_partition_offsets", "read_meter_ticks", "read_leader_epochs",
         "read_cleaner_gauges", "read_cleaner_runs", "read_partition_sizes", "read_client_rtts",
         "read_window_stage_windows", "read_window_client_sends",
         "read_window_follower_windows", "read_window_baselines", "read_window_producer_times")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lake", default=str(ROOT / ".kmon" / "demo" / "lake"),
                    help="a demo's lake (default: .kmon/demo/lake)")
    ap.add_argument("--at", type=int, nargs="*", default=None,
                    help="evaluation times, epoch ms (default: 60 s and 360 s before the "
                         "newest request row)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--advance", type=float, default=0.0,
                    help="seconds each repeat moves the evaluation time on, as the live query "
                         "does (default 0: the same times again). With 0 Spark reuses the "
                         "code it generated for the first repeat: a live evaluation compiles "
                         "again, because the times are literals in its plans")
    ap.add_argument("--reread", type=float, default=None, metavar="S",
                    help="the window cache's re-read margin, seconds (default: the live "
                         "detector's, evaluation/inputs/window_cache.py)")
    ap.add_argument("--like-replay", action="store_true",
                    help="read the findings and the baselines at every evaluation (as "
                         "`evaluation.detect.replay` does) instead of carrying them (as the "
                         "detector query does)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="print the N functions with the most cumulative time over the "
                         "evaluations after the first (cProfile)")
    ap.add_argument("--no-save", action="store_true", help="print only")
    args = ap.parse_args()
    lake_src = Path(args.lake)
    if not any((lake_src / "silver" / t / "_delta_log").is_dir()
               for t in ("request_stages", "request_windows")):
        print(f"{lake_src}: no silver.request_stages or request_windows table; run a demo "
              f"first "
              f"(./kmonw test -m demo)", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="kmon-bench-detect-"))
    shutil.copytree(lake_src, work / "lake", ignore=shutil.ignore_patterns("landing"))
    os.environ["KMON__SPARK__STORAGE_ROOT"] = str(work / "lake")

    from infra.lake import Lake
    from infra.lake_sql import LakeSql
    from infra.spark_session import build_spark_session
    from evaluation import detect
    from evaluation import inputs
    from kmon.config import load_config

    config = load_config(None)
    spark = build_spark_session(config)
    lake = Lake(config.storage_root)
    timings: list[tuple[str, float, object]] = []

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t = time.monotonic()
            out = fn(*a, **k)
            timings.append((name, time.monotonic() - t,
                            len(out) if hasattr(out, "__len__") else "-"))
            return out
        return wrapper

    for name in READS:
        setattr(inputs, name, timed(name, getattr(inputs, name)))
    for name in ("read_findings", "write_findings"):
        setattr(detect, name, timed(name, getattr(detect, name)))
    if args.profile:   # cProfile sees one thread: the reads in order, in this one
        detect.read_inputs = functools.partial(detect.read_inputs, parallelism=1)

    at = args.at
    if not at:
        from pyspark.sql import functions as F
        from delta.tables import DeltaTable

        newest = max((spark.read.format("delta").load(lake.table("silver", t))
                      .agg(F.max("ts_ms")).first()[0] or 0)
                     for t in ("request_windows",)
                     if DeltaTable.isDeltaTable(spark, lake.table("silver", t)))
        at = [newest - 360_000, newest - 60_000]
    # Like the detector query: each evaluation after the first at a time starts from the
    # last result at that time and keeps the slow-broker baselines (`--like-replay`: read
    # both every time, as a replay does).
    runs: list[dict] = []
    profiler = cProfile.Profile()
    carried: dict[int, list] = {}
    caches = {now_ms: inputs.BaselineCache() for now_ms in at}
    reread = {} if args.reread is None else {"reread_s": args.reread}
    windows = {now_ms: inputs.WindowReadCache(**reread) for now_ms in at}
    judged: dict[int, dict] = {now_ms: {} for now_ms in at}
    sqls = {now_ms: LakeSql(lake) for now_ms in at}   # the query's reader without the JVM
    try:
        for rep in range(args.repeats):
            for base_ms in at:
                now_ms = base_ms + int(rep * args.advance * 1000)
                timings.clear()
                t = time.monotonic()
                query_state = {} if args.like_replay else {
                    "previous": carried.get(base_ms), "baseline_cache": caches[base_ms],
                    "window_cache": windows[base_ms], "carried": judged[base_ms]}
                if args.profile and rep > 0:
                    profiler.enable()
                findings = detect.evaluate(spark, lake, config, now_ms, table="anomalies_bench",
                                           sql=sqls[base_ms], **query_state)
                profiler.disable()
                carried[base_ms] = findings
                wall = time.monotonic() - t
                print(f"run {rep + 1}, at {now_ms}: {wall:.1f} s, {len(findings)} findings")
                for name, secs, rows in timings:
                    print(f"    {name:24s} {secs:5.2f} s  rows {rows}")
                runs.append({"repeat": rep + 1, "at_ms": now_ms, "wall_s": round(wall, 2),
                             "findings": len(findings),
                             "reads": {name: {"s": round(secs, 2), "rows": rows}
                                       for name, secs, rows in timings}})
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.profile and args.repeats > 1:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)
    if not args.no_save:
        from bench.result_file import machine_header, save
        save("detect-eval", {**machine_header("detect-eval", "bench.bench_detect_eval", None),
                             "lake": str(lake_src), "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
