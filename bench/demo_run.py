"""What a finished demo run measured: each fault's time to a finding, and how long the
pipeline's silver micro-batches and the detector evaluations took while it ran.

Run: .kmon/venv/bin/python -m bench.demo_run --summary DIR/summary.json --log .kmon/logs/kmon-demo-STAMP.log
     [--label TEXT]

Input: the summary a demo writes (`./kmonw test -m demo` leaves it in pytest's
demo0/summary.json; `./kmonw demo` in its work folder) and the kmon log of the same run
(.kmon/logs/kmon-demo-<stamp>.log, the newest one after the run). The log's lines read
are the silver query's "silver batch N: R rows of S streams in T s" and the detector
query's "detectors at ...: ... rows written in T s". Prints the figures and writes them to
bench/results/demo-run-<stamp>.json. Two runs compare only on the same machine at about the same time: the
same demo's batches took twice as long on this 2-core machine from one afternoon to the
next.

Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SILVER_RE = re.compile(r"jobs\.silver: silver batch \d+: (\d+) rows of (\d+) streams in "
                       r"([0-9.]+) s")
DETECT_RE = re.compile(r"evaluation\.detect: detectors at \d+: .* rows written in ([0-9.]+) s")


def _stats(xs: list[float]) -> dict:
    if not xs:
        return {"n": 0}
    ordered = sorted(xs)
    return {"n": len(xs), "mean": round(statistics.fmean(xs), 2),
            "p50": round(ordered[len(xs) // 2], 2),
            "max": round(ordered[-1], 2)}


def summarize(summary: dict, log_lines: list[str]) -> dict:
    silver = [m for m in map(SILVER_RE.search, log_lines) if m]
    evals = [float(m.group(1)) for m in map(DETECT_RE.search, log_lines) if m]
    return {
        "faults": [{"fault": f["fault"], "detected": f["detected"],
                    "time_to_detect_s": f.get("time_to_detect_s"),
                    "findings": [(x["type"], x["entity"], x["cause"])
                                 for x in f.get("findings", [])]}
                   for f in summary.get("faults", [])],
        "healthy_findings": len(summary.get("healthy_findings", [])),
        "silver_batch_s": _stats([float(m.group(3)) for m in silver]),
        "silver_rows_per_batch": _stats([float(m.group(1)) for m in silver]),
        "silver_streams_per_batch": _stats([float(m.group(2)) for m in silver]),
        "evaluation_s": _stats(evals),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", required=True, type=Path, help="the demo's summary.json")
    ap.add_argument("--log", required=True, type=Path, help="the kmon log of the same run")
    ap.add_argument("--label", default="", help="what this run measures, kept in the result")
    args = ap.parse_args()
    for path in (args.summary, args.log):
        if not path.is_file():
            print(f"{path}: no such file", file=sys.stderr)
            return 2
    summary = json.loads(args.summary.read_text())
    lines = args.log.read_text(errors="replace").splitlines()
    out = summarize(summary, lines)
    if not out["silver_batch_s"]["n"]:
        print(f"{args.log}: no silver batch lines; is it the kmon log of a demo run?",
              file=sys.stderr)
        return 2

    for f in out["faults"]:
        t = f["time_to_detect_s"]
        print(f"{f['fault']:18s} {'found' if f['detected'] else 'MISSED':6s} "
              f"{'' if t is None else f'{t:5.1f} s'}  {f['findings'][:1]}")
    for key in ("silver_batch_s", "silver_rows_per_batch", "evaluation_s"):
        print(f"{key:22s} {out[key]}")

    from bench.result_file import machine_header, save
    path = save("demo-run", {**machine_header("demo_run", "bench.demo_run", None),
                             "label": args.label,
                             "summary": str(args.summary), "log": str(args.log), **out})
    return 0 if path else 1


if __name__ == "__main__":
    raise SystemExit(main())
