"""How far out of time order brokers write their request logs: what the edge's
`request_log.lateness_s` must cover.

The request-log agent closes a window when the broker's newest request time passes the
window's end by `lateness_s` (ingest/request_windows.py); a line older than that goes out
in an additive delta, and every second of lateness is a second later to every finding
that reads the windows. This reads every recorded broker request log of the fault matrix
(tests/corpus/*/raw/node-*/kafka-request.log*.xz: freezes, a CPU-starved broker, crashes,
rolling restarts, bursts) and measures, per line, how much older its timestamp is than
the newest line before it in the same file.

Run: .kmon/venv/bin/python -m bench.bench_request_log_order [--corpus DIR] [--no-save]

Prints the distribution and the worst files, and writes the same as data to
bench/results/request-log-order-<utc stamp>.json. Nothing here asserts a bound.
"""

from __future__ import annotations

import argparse
import lzma
from collections import Counter
from pathlib import Path

from bench.result_file import machine_header, save
from ingest.log_time import stamp_to_ms
from ingest.request_log import LINE_RE

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "corpus"
BUCKETS_MS = (0, 1, 10, 100, 1000, 5000)   # lower bounds of the lateness buckets (ms)


def file_lateness(path: Path) -> tuple[int, Counter, int]:
    """(request lines, lateness bucket -> lines, worst lateness ms) of one log file."""
    newest, lines, worst, buckets = None, 0, 0, Counter()
    with lzma.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            m = LINE_RE.match(line)
            if m is None:
                continue
            ts = stamp_to_ms(m.group(1))
            lines += 1
            late = 0 if newest is None or ts >= newest else newest - ts
            newest = ts if newest is None else max(newest, ts)
            buckets[max(b for b in BUCKETS_MS if late >= b)] += 1
            worst = max(worst, late)
    return lines, buckets, worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="recordings folder")
    ap.add_argument("--no-save", action="store_true", help="print only")
    args = ap.parse_args(argv)
    files = sorted(args.corpus.glob("*/raw/node-*/kafka-request.log*.xz"))
    if not files:
        raise SystemExit(f"no recorded request logs under {args.corpus}")
    total, buckets, per_file = 0, Counter(), []
    for path in files:
        n, b, worst = file_lateness(path)
        total += n
        buckets.update(b)
        per_file.append({"file": str(path.relative_to(args.corpus)), "lines": n,
                         "worst_ms": worst})
    per_file.sort(key=lambda x: x["worst_ms"], reverse=True)
    print(f"{total:,} request lines in {len(files)} files")
    print(f"  in order (or tied with the newest before them): {buckets[0]:,} lines")
    for lo, hi in zip(BUCKETS_MS[1:], BUCKETS_MS[2:] + (None,)):
        span = f"{lo}-{hi - 1} ms" if hi else f">= {lo} ms"
        print(f"  older than the newest before them by {span}: {buckets[lo]:,} lines")
    for x in per_file[:5]:
        print(f"  worst {x['worst_ms']:>6} ms  {x['file']}")
    if not args.no_save:
        doc = machine_header("request_log_order", "bench.bench_request_log_order", argv)
        doc.update({"lines": total, "files": len(files),
                    "lines_by_lateness_ms": {str(b): buckets[b] for b in BUCKETS_MS},
                    "worst_ms": per_file[0]["worst_ms"], "worst_files": per_file[:10]})
        save("request-log-order", doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
