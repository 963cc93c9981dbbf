"""What the slow-broker rules cost per evaluation at fleet scale (no I/O, no Spark).

Run: .kmon/venv/bin/python -m bench.bench_slow_broker_rules [--brokers 2000] [--windows 30]
     [--repeats 3]

An evaluation judges every window of its range (300 s: 30 windows of 10 s) with
detectors.slow_broker.detect_slow_brokers. This builds the inputs of such a range for a
fleet: per broker and window, Produce, Fetch, Metadata and OffsetCommit rows (log-normal
p99s, 500 requests each; broker 5's Produce slow in its Local stage in the last third)
and two follower-fetch rows per broker, then times the rules on them (this process's CPU
seconds, best of `--repeats`), with the detections they give.

Prints the figures and writes them to bench/results/slow-broker-rules-<stamp>.json.
Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from bench.result_file import machine_header, save

APIS = ("Produce", "Fetch", "Metadata", "OffsetCommit")
T0 = 1_800_000_000_000


def fleet_windows(brokers: int, windows: int, seed: int = 1):
    from detectors.slow_broker import FollowerFetchWindow, RequestStageWindow

    rng = random.Random(seed)
    rows, fetches = [], []
    for w in range(windows):
        t = T0 + w * 10_000
        for b in range(brokers):
            for api in APIS:
                slow = 600.0 if b == 5 and api == "Produce" and w >= 2 * windows // 3 else 0.0
                local = rng.lognormvariate(2, 0.5) + slow
                total = local + 1.0
                rows.append(RequestStageWindow("c", b, api, t, 500, total, 0.1, local, 0.5,
                                               0.0, 0.1, 0.2, total))
            for k in (1, 2):
                fetches.append(FollowerFetchWindow("c", t, b, (b + k) % brokers, 20,
                                                   500.0 + rng.random(), 0.2))
    return rows, fetches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", type=int, default=2000)
    ap.add_argument("--windows", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    from detectors.slow_broker import SlowBrokerSection, detect_slow_brokers

    rows, fetches = fleet_windows(args.brokers, args.windows)
    config = SlowBrokerSection()
    runs = []
    for _ in range(args.repeats):
        start = time.process_time()
        found = detect_slow_brokers(rows, follower_fetches=fetches, config=config)
        runs.append(round(time.process_time() - start, 2))
    entities = sorted({d.entity for d in found})
    print(f"{args.brokers} brokers x {args.windows} windows: {len(rows)} stage rows, "
          f"{len(fetches)} follower rows; the rules took {runs} s of CPU; detections on "
          f"{entities}")
    save("slow-broker-rules", {**machine_header("slow-broker-rules",
                                                "bench.bench_slow_broker_rules", argv),
                               "brokers": args.brokers, "windows": args.windows,
                               "stage_rows": len(rows), "follower_rows": len(fetches),
                               "cpu_s": runs, "detections": entities})
    return 0


if __name__ == "__main__":
    sys.exit(main())
