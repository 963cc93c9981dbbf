"""Lines per second of the request-log parser on captured Kafka 4.3.1 Produce and Fetch lines.

Run: .kmon/venv/bin/python bench/bench_request_log_parser.py [--seconds S]

For each group of captured lines (tests/fixtures/request_log/kafka-4.3.1-request.log) it
prints the rate of ``parse_request_line`` (fast path), of the full decode it falls back to,
and of a bare ``json.loads`` of the message for scale. Rates are CPU time of this process
(time.process_time), so other load on the machine skews them less than wall time would;
each figure is the best of three runs. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ingest.request_log import parse_request_line

FIXTURE = (Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "request_log"
           / "kafka-4.3.1-request.log")


def captured_lines() -> list[str]:
    return [line for line in FIXTURE.read_text().splitlines() if not line.startswith("#")]


def groups(lines: list[str]) -> dict[str, list[str]]:
    def api(line: str) -> str:
        return line.split('"requestApiKeyName":"', 1)[1].split('"', 1)[0]

    fetch = [line for line in lines if api(line) == "FETCH"]
    return {
        "Produce": [line for line in lines if api(line) == "PRODUCE"],
        "Fetch (consumer)": [line for line in fetch if '"replicaState"' not in line
                             and '"listener":"PLAINTEXT"' in line],
        "Fetch (follower)": [line for line in fetch if '"replicaState"' in line
                             and '"listener":"PLAINTEXT"' in line],
        "Fetch, 14 partitions": [max(fetch, key=len)],
        "all captured lines": lines,
    }


def rate(fn, lines: list[str], seconds: float) -> float:
    best = 0.0
    for _ in range(3):
        n, start = 0, time.process_time()
        while time.process_time() - start < seconds / 3:
            for line in lines:
                fn(line)
            n += len(lines)
        best = max(best, n / (time.process_time() - start))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per measurement")
    args = ap.parse_args()

    def fast(line):
        return parse_request_line(line, cluster="bench", broker=1)

    def full(line):
        return parse_request_line(line, cluster="bench", broker=1, full_decode=True)

    def bare_json(line):
        return json.loads(line[line.index("{"):line.rindex(" (")])

    print(f"{'lines':24s} {'n':>4s} {'avg bytes':>9s} {'parser':>12s} {'full decode':>12s} "
          f"{'json.loads':>12s}   (lines/s, CPU time)")
    for name, lines in groups(captured_lines()).items():
        avg = sum(map(len, lines)) / len(lines)
        print(f"{name:24s} {len(lines):4d} {avg:9.0f} {rate(fast, lines, args.seconds):12,.0f} "
              f"{rate(full, lines, args.seconds):12,.0f} {rate(bare_json, lines, args.seconds):12,.0f}")


if __name__ == "__main__":
    main()
