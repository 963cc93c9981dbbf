"""Time to turn one broker's whole JMX exporter answer into kmon's records.

Run: .kmon/venv/bin/python bench/bench_jmx_parse.py

Input: a real `/metrics` answer of a Kafka 4.3.1 broker during the demo
(tests/fixtures/jmx/kafka-4.3.1-broker-metrics.txt.gz: 7,146 lines, ~90 request types, of
which kmon keeps 752 samples). It prints the CPU time per scrape of `parse_exposition` as
shipped (lines of series kmon does not keep dropped by `kept_lines` before the exposition
parser) and with every line given to the parser (what the scraper did before), and checks
both give the same records. CPU time of this process (time.process_time), best of five.
Nothing here asserts a speed; one agent scrapes its broker every 10 s, so the figure is
also the share of a core the scraper needs per broker, times 10.
"""

from __future__ import annotations

import gzip
import time
from pathlib import Path

from ingest import jmx_scraper

FIXTURE = (Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "jmx"
           / "kafka-4.3.1-broker-metrics.txt.gz")


def best_cpu_s(fn, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    body = gzip.decompress(FIXTURE.read_bytes()).decode()

    def parse():
        return jmx_scraper.parse_exposition(body, cluster="c", broker=1, ts_ms=1_795_343_920_000)

    shipped = parse()
    t_shipped = best_cpu_s(parse)
    real_filter = jmx_scraper.kept_lines
    jmx_scraper.kept_lines = lambda text: (text, 0)   # every line to the parser
    try:
        unfiltered = parse()
        t_unfiltered = best_cpu_s(parse)
    finally:
        jmx_scraper.kept_lines = real_filter

    def key(r):
        return sorted((k, str(v)) for k, v in r.items())

    same = sorted(map(key, shipped.records)) == sorted(map(key, unfiltered.records))
    lines = body.count("\n")
    print(f"exposition: {lines:,} lines, {len(body) / 1024:,.0f} KiB; "
          f"{len(shipped.records)} records kept; same records both ways: {same}")
    print(f"{'parse_exposition (shipped, kept_lines first)':48s} {t_shipped * 1000:8.1f} ms CPU "
          f"per scrape")
    print(f"{'every line through the parser (before)':48s} {t_unfiltered * 1000:8.1f} ms CPU "
          f"per scrape")
    print(f"speed-up {t_unfiltered / t_shipped:.1f}x; at one scrape per 10 s the scraper needs "
          f"{t_shipped / 10 * 100:.2f}% of a core per broker (before: "
          f"{t_unfiltered / 10 * 100:.2f}%)")
    if not same:
        raise SystemExit("the two ways gave different records")


if __name__ == "__main__":
    main()
