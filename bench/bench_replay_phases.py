"""Wall and CPU time of a corpus replay's two steps, per recording: prepare (the recorded
files through the real agents, then the pipeline) and score (the detectors evaluated every
20 recorded seconds). The replays are half of CI's CPU; this says which step a change to
them has to cut.

Run: .kmon/venv/bin/python -m bench.bench_replay_phases [--scenarios a,b,c] [--step-s 20]
     [--conf spark.key=value ...]

Each recording is prepared and then scored in one Spark session, one step after the
other. CI overlaps the next recording's preparation with this one's scoring instead, so
each step is measured without the other's CPU mixed in. CPU is user + system time of this
process and its children (the Spark JVM), read from /proc around each step.

The first recording also pays for the JVM's start and warm-up and for the empty lakes, so
list a warm-up recording first. The results vary by ±15% from run to run on a 2-core
machine: compare alternated runs, not a single pair. Prints one line per recording and
writes bench/results/replay-phases-<utc stamp>.json. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.result_file import machine_header, save
from infra.procfs import PPID, STIME, UTIME, pids, stat_fields

DEFAULT_SCENARIOS = "freeze-short-5b,slow-link-3b,unclean-noloss-3b"


def tree_cpu_s() -> float:
    """CPU seconds of this process and its direct children (the Spark driver JVM)."""
    me, tick, total = os.getpid(), os.sysconf("SC_CLK_TCK"), 0.0
    for p in pids():
        fields = stat_fields(p)
        if fields is not None and (p == me or int(fields[PPID]) == me):
            total += (int(fields[UTIME]) + int(fields[STIME])) / tick
    return total


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default=DEFAULT_SCENARIOS,
                    help=f"recordings to replay, in order (default {DEFAULT_SCENARIOS})")
    ap.add_argument("--step-s", type=float, default=20.0,
                    help="recorded seconds between evaluations (default 20, as CI)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting on top of CI's (spark.extra_conf), e.g. "
                         "spark.sql.adaptive.enabled=false; repeat for more")
    args = ap.parse_args(argv)
    bad = [c for c in args.conf if "=" not in c]
    if bad:
        ap.error(f"--conf takes KEY=VALUE, not {bad[0]!r}")
    extra = dict(c.split("=", 1) for c in args.conf)

    from infra.spark_session import build_spark_session
    from kmon.config import load_config
    from matrix.corpus import EmptyLakes, prepare_replay, recordings, score_replay

    root = Path(tempfile.mkdtemp(prefix="kmon-replay-phases-"))
    # As CI's session (tests/conftest.py kmon_config).
    config = load_config().with_overrides(spark={"storage_root": str(root / "lake"),
                                                 "shuffle_partitions": 2,
                                                 "driver_memory": "4g",
                                                 "extra_conf": extra})
    spark = build_spark_session(config)
    empty = EmptyLakes(spark, root / "empty-lakes")
    runs = []
    try:
        for rec in recordings(names=args.scenarios.split(",")):
            cpu0, t0 = tree_cpu_s(), time.monotonic()
            prepared = prepare_replay(spark, config, rec, root / rec.scenario, empty)
            cpu1, t1 = tree_cpu_s(), time.monotonic()
            result, _seen = score_replay(spark, prepared, args.step_s)
            cpu2, t2 = tree_cpu_s(), time.monotonic()
            run = {"scenario": rec.scenario, "passed": result.passed,
                   "prepare_wall_s": round(t1 - t0, 1), "prepare_cpu_s": round(cpu1 - cpu0, 1),
                   "score_wall_s": round(t2 - t1, 1), "score_cpu_s": round(cpu2 - cpu1, 1)}
            runs.append(run)
            print(f"{rec.scenario}: prepare {run['prepare_wall_s']} s wall, "
                  f"{run['prepare_cpu_s']} s CPU; score {run['score_wall_s']} s wall, "
                  f"{run['score_cpu_s']} s CPU; {'pass' if result.passed else 'FAIL'}",
                  flush=True)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    save("replay-phases", {**machine_header("replay_phases", "bench.bench_replay_phases", argv),
                           "step_s": args.step_s, "conf": extra, "runs": runs})


if __name__ == "__main__":
    main()
