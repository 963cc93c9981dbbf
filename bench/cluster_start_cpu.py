"""CPU a local 3-broker cluster takes to start and sit idle, per set of broker JVM options.

Run: .kmon/venv/bin/python -m bench.cluster_start_cpu [--idle-s 30] [--rounds 1]
     [--options "" "-XX:TieredStopAtLevel=1"]

For each option set (local_cluster.jvm_options, split on spaces; "" is the JVM's default),
in turn: start a fresh cluster (formatting each node's storage, then the brokers), wait
until it is ready, leave it idle for --idle-s, destroy it, and read the CPU seconds its
child processes used (user + system, from getrusage). The test suite starts a dozen
short-lived clusters beside the CPU-bound corpus replays, so this is the cost it pays for
each. Prints one line per run and writes the runs to bench/results/cluster-start-cpu-<utc
stamp>.json. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from bench.result_file import machine_header, save
from infra.local_cluster import LocalCluster
from kmon.config import load_config


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def one_run(options: list[str], idle_s: float) -> dict:
    config = load_config().with_overrides(local_cluster={"jvm_options": options})
    cluster = LocalCluster(config, name=f"cpu-{os.getpid()}", brokers=3, owner_bound=True)
    cpu0, t0 = children_cpu_s(), time.monotonic()
    try:
        cluster.start()
        ready_s = time.monotonic() - t0
        time.sleep(idle_s)
    finally:
        cluster.destroy()
    return {"jvm_options": options, "ready_s": round(ready_s, 1), "idle_s": idle_s,
            "cpu_s": round(children_cpu_s() - cpu0, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle-s", type=float, default=30.0, help="idle time after ready (30)")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each option set (1)")
    ap.add_argument("--options", nargs="+", default=["", "-XX:TieredStopAtLevel=1"],
                    help="option sets to compare, each one string ('' = the JVM's default)")
    args = ap.parse_args(argv)
    doc = {**machine_header("cluster_start_cpu", "bench.cluster_start_cpu", argv), "runs": []}
    for _ in range(args.rounds):
        for opts in args.options:
            run = one_run(opts.split(), args.idle_s)
            doc["runs"].append(run)
            print(f"jvm_options {opts or '(default)'}: ready in {run['ready_s']} s, "
                  f"{run['cpu_s']} CPU-s to start and idle {args.idle_s:g} s", flush=True)
    save("cluster-start-cpu", doc)


if __name__ == "__main__":
    main()
