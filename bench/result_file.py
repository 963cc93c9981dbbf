"""What every benchmark's result file starts with, and where it goes.

A result document opens with the bench's name, the time, the machine (host, CPU, cores,
load average) and the command that produced it; `save` writes it to
bench/results/<prefix>-<utc stamp>.json and says where.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path

from bench.bench_edge_aggregation import cpu_model

RESULTS = Path(__file__).resolve().parent / "results"


def machine_header(bench: str, module: str, argv: list[str] | None) -> dict:
    """The opening keys of a result document; `module` as run with python -m."""
    args = argv if argv is not None else sys.argv[1:]
    return {"bench": bench, "utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(), "cpu": cpu_model(), "cores": os.cpu_count(),
            "loadavg": os.getloadavg(), "command": f"python -m {module} " + " ".join(args)}


def result_path(prefix: str) -> Path:
    """bench/results/<prefix>-<utc stamp of now>.json."""
    return RESULTS / (f"{prefix}-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
                      + ".json")


def save(prefix: str, doc: dict, out: Path | None = None) -> Path:
    """Write `doc` to `out`, by default bench/results/<prefix>-<utc stamp>.json (a long
    bench passes the same `out` to save what it has so far); returns the path."""
    out = out or result_path(prefix)
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"wrote {out}")
    return out
