"""Lines per second per core of the request-log edge path, with and without aggregation.

Run: .kmon/venv/bin/python bench/bench_edge_aggregation.py [--seconds S] [--no-save]

Issue 24 (fleet scale) asks 150,000 request-log lines/s per core of the whole agent. This
measures the pieces on real lines, CPU time of this one process (time.process_time), the
best of three runs each:

(a0) raw read: the file in 1-MiB chunks split into lines, no per-line object;
(a) read: ingest/file_tailer.py's `read_lines` over the file, the agent's read path (a
    TailedLine and a Position per line);
(b) parse: `parse_request_line` of each line (a per-request agent did (a) + (b) + a send);
(c) aggregate: `WindowAggregator.add` of already parsed records, then its emission;
(d) read + parse + aggregate: the edge path of issue 24, short of the sink;
(e) agent: the request-log agent itself, default window settings (`RequestLogAgent.poll_once`
    until the file is read, then its shutdown emission) into a `LandingSink` in a temporary
    folder: (d) plus the agent's per-line handling, the records' JSON and the files, the
    figure the issue's target is about.

Two inputs: broker 1's request log of the bursty-3b corpus (29,685 lines over 403 s of a
3-broker cluster under load, Kafka 4.3.1: the realistic sequence for windows) and the
captured fixture bench/bench_request_log_parser.py uses (57 request lines of every API;
its parse figure compares with that bench's; its lines are excerpts of a day, each in a
window of its own, so its (c) is the cost of an emission per line, a worst case). It also
profiles (d) with cProfile (the functions the time goes to) and sizes the output: records
and JSON bytes per input line.

Prints the figures and writes them with the machine's name, CPU and load average to
bench/results/edge-aggregation-<utc stamp>.json. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import lzma
import os
import platform
import pstats
import socket
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.file_tailer import FileTailer, PositionStore
from ingest.request_log import parse_request_line
from ingest.request_log_agent import RequestLogAgent, RequestLogSource, WindowSettings
from ingest.request_windows import WindowAggregator
from ingest.sinks import LandingSink

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "bursty-3b" / "raw" / "node-1" / "kafka-request.log.xz"
FIXTURE = ROOT / "tests" / "fixtures" / "request_log" / "kafka-4.3.1-request.log"
TARGET = 150_000


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def best_rate(fn, n_lines: int, seconds: float) -> float:
    """Lines per CPU second of `fn` (which handles all n_lines once), best of three."""
    best = 0.0
    for _ in range(3):
        runs, start = 0, time.process_time()
        while True:
            fn()
            runs += 1
            spent = time.process_time() - start
            if spent >= seconds / 3:
                break
        best = max(best, runs * n_lines / spent)
    return best


def raw_read(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        pending = b""
        while chunk := f.read(1 << 20):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            n += len(lines)
    return n


def read_all(path: Path) -> list:
    tailer = FileTailer(path)
    out = []
    while True:
        got = tailer.read_lines(20_000)
        if not got:
            break
        out += got
    tailer.close()
    return out


def parse_all(lines: list) -> list:
    return [parse_request_line(tl.data, cluster="bench", broker=1) for tl in lines]


def aggregate(pairs: list) -> list:
    agg = WindowAggregator("bench", 1)
    add = agg.add
    for rec, pos in pairs:
        add(rec, pos)
    return agg.ready() + agg.flush_all()


def edge_path(path: Path) -> list:
    agg = WindowAggregator("bench", 1)
    add = agg.add
    out = []
    for tl in read_all(path):
        rec = parse_request_line(tl.data, cluster="bench", broker=1)
        if isinstance(rec, dict):
            add(rec, (tl.inode, tl.start))
    out += agg.ready()
    return out + agg.flush_all()


def agent_path(path: Path) -> None:
    """The agent over the whole file, from a fresh position, into a landing folder that
    is thrown away."""
    with tempfile.TemporaryDirectory() as tmp:
        agent = RequestLogAgent(
            [RequestLogSource("bench", 1, path)], LandingSink(Path(tmp) / "landing", "bench"),
            PositionStore(Path(tmp) / "positions.json"),
            AgentMetrics(CollectorRegistry(), "request-log"), windows=WindowSettings())
        while agent.poll_once() >= agent.batch_lines:
            pass
        agent.finish()


def measure(name: str, path: Path, seconds: float) -> dict:
    lines = read_all(path)
    records = parse_all(lines)
    pairs = [(r, (tl.inode, tl.start)) for r, tl in zip(records, lines) if isinstance(r, dict)]
    n = len(lines)
    rates = {
        "raw_read": best_rate(lambda: raw_read(path), n, seconds),
        "read": best_rate(lambda: read_all(path), n, seconds),
        "parse": best_rate(lambda: parse_all(lines), n, seconds),
        "aggregate": best_rate(lambda: aggregate(pairs), n, seconds),
        "read_parse_aggregate": best_rate(lambda: edge_path(path), n, seconds),
        "agent": best_rate(lambda: agent_path(path), n, seconds),
    }
    out = aggregate(pairs)
    windows = [o.record for o in out if o.stream == "request_windows"]
    sizes = sorted(len(json.dumps(w, separators=(",", ":"))) for w in windows)
    busy = [w for w in windows if w["requests"] >= 100]
    by_stream: dict[str, int] = {}
    for o in out:
        by_stream[o.stream] = by_stream.get(o.stream, 0) + 1
    return {
        "input": name, "lines": n, "records": len(pairs),
        "input_bytes": path.stat().st_size,
        "rates_lines_per_cpu_s": {k: round(v) for k, v in rates.items()},
        "us_per_line": {k: round(1e6 / v, 2) for k, v in rates.items()},
        "output_records": by_stream,
        "output_json_bytes": sum(len(json.dumps(o.record, separators=(",", ":")))
                                 for o in out),
        "window_record_json_bytes": {
            "median": sizes[len(sizes) // 2], "max": sizes[-1], "min": sizes[0],
            "median_busy_100plus": sorted(len(json.dumps(w, separators=(",", ":")))
                                          for w in busy)[len(busy) // 2] if busy else None},
        "buckets_per_stage_median": sorted(
            len(w[f"{s}_buckets"]) for w in windows for s in ("total", "local", "send")
        )[len(windows) * 3 // 2],
    }


def profile(path: Path, top: int = 16) -> list[dict]:
    prof = cProfile.Profile()
    prof.runcall(edge_path, path)
    stats = pstats.Stats(prof, stream=io.StringIO())
    total = stats.total_tt
    rows = []
    for (file, line, fn), (_cc, calls, tt, ct, _) in sorted(
            stats.stats.items(), key=lambda kv: -kv[1][2])[:top]:
        where = f"{Path(file).name}:{line}({fn})" if line else fn
        rows.append({"function": where, "calls": calls, "tottime_share": round(tt / total, 3),
                     "cumtime_share": round(ct / total, 3)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="CPU seconds per measurement")
    ap.add_argument("--no-save", action="store_true", help="print only")
    args = ap.parse_args()
    load_before = os.getloadavg()
    wall = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "kafka-request.log"
        corpus.write_bytes(lzma.decompress(CORPUS.read_bytes()))
        fixture = Path(tmp) / "fixture-request.log"
        fixture.write_text("".join(x + "\n" for x in FIXTURE.read_text().splitlines()
                                   if x and not x.startswith("#")))
        results = [measure("bursty-3b node-1 request log", corpus, args.seconds),
                   measure("kafka-4.3.1 fixture", fixture, args.seconds)]
        hot = profile(corpus)
    print(f"{'input':30s} {'lines':>6s} {'raw read':>10s} {'read':>10s} {'parse':>10s} "
          f"{'aggregate':>10s} {'all (d)':>10s} {'agent (e)':>10s}   lines/s per core (CPU time); "
          f"target {TARGET:,}")
    for r in results:
        x = r["rates_lines_per_cpu_s"]
        print(f"{r['input']:30s} {r['lines']:6d} {x['raw_read']:10,} {x['read']:10,} "
              f"{x['parse']:10,} {x['aggregate']:10,} {x['read_parse_aggregate']:10,} "
              f"{x['agent']:10,}")
    for r in results:
        print(f"{r['input']}: us/line {r['us_per_line']}; output {r['output_records']}, "
              f"{r['output_json_bytes']:,} JSON bytes for {r['input_bytes']:,} input bytes; "
              f"window record JSON bytes {r['window_record_json_bytes']}")
    print("where (d) spends its time (cProfile, share of the total):")
    for h in hot:
        print(f"  {h['tottime_share']:6.1%} own {h['cumtime_share']:6.1%} with callees  "
              f"{h['calls']:>8,}  {h['function']}")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    doc = {"host": socket.gethostname(), "cpu": cpu_model(), "cpus": os.cpu_count(),
           "python": platform.python_version(), "stamp": stamp,
           "load_average_before": [round(x, 2) for x in load_before],
           "load_average_after": [round(x, 2) for x in os.getloadavg()],
           "wall_s": round(time.monotonic() - wall, 1), "seconds_per_measurement":
           args.seconds, "target_lines_per_s_per_core": TARGET, "results": results,
           "profile_read_parse_aggregate": hot}
    if not args.no_save:
        out = ROOT / "bench" / "results" / f"edge-aggregation-{stamp}.json"
        out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
