"""What the slow-broker rules cost per evaluation at fleet scale (no I/O, no Spark).

Run: .kmon/venv/bin/python -m bench.bench_slow_broker_rules [--brokers 2000] [--windows 30]
     [--repeats 3] [--slides 6]

An evaluation's range is 300 s: 30 windows of 10 s. This builds the inputs of such a range
for a fleet: per broker and window, Produce, Fetch, Metadata and OffsetCommit rows
(log-normal p99s, 500 requests each; broker 5's Produce slow in its Local stage in the
last third) and two follower-fetch rows per broker, then times
detectors.slow_broker.detect_slow_brokers on them (this process's CPU seconds):
- judging every window, `--repeats` times;
- as the detector query evaluates, one window later each time (`--slides` evaluations):
  the windows judged before carried (detectors/slow_broker/judged.py), the newest window
  new and the one before it read again (new objects, as the read side gives them), with
  the detections compared to judging every window of the same range.

Prints the figures and writes them to bench/results/slow-broker-rules-<stamp>.json.
Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace

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
    ap.add_argument("--slides", type=int, default=6)
    args = ap.parse_args(argv)

    from detectors.slow_broker import SlowBrokerSection, detect_slow_brokers
    from detectors.slow_broker.judged import JudgedWindows

    all_rows, all_fetches = fleet_windows(args.brokers, args.windows + args.slides)
    by_window: dict[int, tuple[list, list]] = {}
    for x in all_rows:
        by_window.setdefault(x.window_start_ms, ([], []))[0].append(x)
    for x in all_fetches:
        by_window[x.window_start_ms][1].append(x)
    starts = sorted(by_window)

    def range_ending(last: int) -> tuple[list, list]:
        span = [by_window[t] for t in starts[last - args.windows + 1:last + 1]]
        return [r for rs, _ in span for r in rs], [f for _, fs in span for f in fs]

    config = SlowBrokerSection()
    rows, fetches = range_ending(args.windows - 1)
    runs = []
    for _ in range(args.repeats):
        start = time.process_time()
        found = detect_slow_brokers(rows, follower_fetches=fetches, config=config)
        runs.append(round(time.process_time() - start, 2))
    entities = sorted({d.entity for d in found})
    print(f"{args.brokers} brokers x {args.windows} windows: {len(rows)} stage rows, "
          f"{len(fetches)} follower rows; judging every window took {runs} s of CPU; "
          f"detections on {entities}")

    judged, sliding, same = JudgedWindows(), [], True
    for last in range(args.windows - 1, args.windows + args.slides):
        before = starts[last - 1]
        by_window[before] = tuple([replace(x) for x in xs] for xs in by_window[before])
        rows, fetches = range_ending(last)
        start = time.process_time()
        carried = detect_slow_brokers(rows, follower_fetches=fetches, config=config,
                                      carried=judged)
        sliding.append({"cpu_s": round(time.process_time() - start, 2),
                        "windows_judged": judged.judged_last()})
        same &= carried == detect_slow_brokers(rows, follower_fetches=fetches, config=config)
    later = [s["cpu_s"] for s in sliding[1:]]
    mean = round(sum(later) / len(later), 3) if later else None
    print(f"sliding, windows judged before carried: {[s['cpu_s'] for s in sliding]} s of CPU "
          f"(the first judges every window; mean after it {mean} s), windows judged "
          f"{[s['windows_judged'] for s in sliding]}; detections as judging every window: "
          f"{same}")
    save("slow-broker-rules", {**machine_header("slow-broker-rules",
                                                "bench.bench_slow_broker_rules", argv),
                               "brokers": args.brokers, "windows": args.windows,
                               "stage_rows": len(rows), "follower_rows": len(fetches),
                               "cpu_s": runs, "detections": entities,
                               "sliding": {"evaluations": sliding, "mean_cpu_s_after_first":
                                           mean, "detections_as_judging_all": same}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
