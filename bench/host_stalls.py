"""How often a recording's brokers stalled in their own stages before its fault.

For each recording given (a folder with manifest.json and raw/node-*/kafka-request.log.xz):
the client requests logged between its start and its fault, how many held >= STALL_MS in
one of the broker's own stages (RequestQueue, Local, ResponseQueue) per broker-minute,
and the p99 and p99.9 of their own time (total - Remote). On a host shared by the brokers
and the monitor, that healthy-time stall rate is the noise a slow-broker rule must ride
out; it compares hosts and harness settings (e.g. the monitor's CPU priority).

    .kmon/venv/bin/python -m bench.host_stalls tests/corpus/*-5b
"""

from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

from bench.result_file import machine_header, save
from core.signals import OWN_STAGES
from ingest.request_log import parse_request_line

STALL_MS = 150.0


def stalls(recording: Path) -> dict:
    manifest = json.loads((recording / "manifest.json").read_text())
    lo = manifest["start_ms"]
    hi = manifest["truth"].get("fault_ms") or manifest["end_ms"]
    requests = stalled = brokers = 0
    own: list[float] = []
    for log in sorted(recording.glob("raw/node-*/kafka-request.log.xz")):
        broker = int(log.parent.name.split("-")[1])
        brokers += 1
        for raw in lzma.decompress(log.read_bytes()).splitlines():
            r = parse_request_line(raw, cluster="c", broker=broker)
            if r["is_controller_traffic"] or not lo <= r["ts_ms"] < hi:
                continue
            requests += 1
            stalled += max(r[f"{s}_ms"] for s in OWN_STAGES) >= STALL_MS
            own.append(r["total_ms"] - r["remote_ms"])
    own.sort()
    minutes = (hi - lo) / 60_000

    def q(p: float) -> float | None:
        return round(own[int(p * len(own))], 1) if own else None
    return {"recording": str(recording), "recorded_with": manifest.get("recorded_with"),
            "commit": manifest.get("commit"), "healthy_minutes": round(minutes, 2),
            "brokers": brokers, "requests": requests,
            "stalls_per_broker_minute": round(stalled / max(brokers, 1) / minutes, 2)
            if minutes > 0 else None,
            "own_p99_ms": q(0.99), "own_p999_ms": q(0.999)}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    rows = [stalls(Path(a)) for a in args]
    for r in rows:
        print(f"{Path(r['recording']).name:28s} {r['healthy_minutes']:5.1f} min  "
              f"stalls/broker-min {r['stalls_per_broker_minute']!s:>5}  "
              f"own p99 {r['own_p99_ms']!s:>6}  p99.9 {r['own_p999_ms']!s:>6}")
    save("host-stalls", {**machine_header("host_stalls", "bench.host_stalls", args),
                         "stall_ms": STALL_MS, "recordings": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
