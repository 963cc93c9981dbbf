"""`kmon report`: write an incident's HTML report and print its path.

    kmon report --incident 3f9c0a1be2d4c5f6a7b8c9d0
    kmon report --from 2024-05-01T10:00:00Z --to 2024-05-01T11:00:00Z --out /tmp/r.html
    kmon report --from 1714557600000 --to 1714561200000 --cluster prod-eu

Times are ISO-8601 (no zone means UTC) or epoch milliseconds. Without --out the report
goes to <work_dir>/reports/. cli/main.py wires the command with `add_arguments` and `run`
(the application shell loads the configuration and passes it in).
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

EXAMPLE = ("kmon report --incident 3f9c0a1be2d4c5f6a7b8c9d0\n"
           "  kmon report --from 2024-05-01T10:00:00Z --to 2024-05-01T11:00 --out r.html")


def parse_time(text: str) -> int:
    """Epoch milliseconds from digits, or from an ISO-8601 time (naive means UTC)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO-8601 time "
            f"(e.g. 2024-05-01T10:00:00Z)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def add_arguments(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--incident", metavar="ID",
                       help="incident id (the root finding's id), or any finding's id")
    which.add_argument("--from", dest="start", metavar="TIME", type=parse_time,
                       help="report every finding seen from TIME (with --to)")
    p.add_argument("--to", dest="end", metavar="TIME", type=parse_time,
                   help="end of the --from range (exclusive)")
    p.add_argument("--cluster", help="with --from/--to: only this cluster's findings")
    p.add_argument("--out", metavar="FILE", help="where to write the HTML "
                                                 "(default: <work_dir>/reports/...)")


def default_out(work_dir: Path, incident: str | None, start_ms: int | None,
                end_ms: int | None) -> Path:
    if incident is not None:
        name = "incident-" + re.sub(r"[^A-Za-z0-9_.-]", "_", incident)
    else:
        name = f"findings-{start_ms}-{end_ms}"
    return work_dir / "reports" / f"{name}.html"


def run(args: argparse.Namespace, config) -> int:
    """Build and write the report; 2 for wrong arguments, 1 when there is nothing to report."""
    if args.start is not None and args.end is None:
        print("kmon report: --from needs --to", file=sys.stderr)
        return 2
    if args.end is not None and args.start is None:
        print("kmon report: --to needs --from", file=sys.stderr)
        return 2
    if args.start is not None and args.end <= args.start:
        print("kmon report: --to must be after --from", file=sys.stderr)
        return 2
    if args.cluster and args.incident:
        print("kmon report: --cluster goes with --from/--to (an incident names its own)",
              file=sys.stderr)
        return 2
    from infra.lake import Lake
    from infra.spark_session import build_spark_session
    from reports.incident import ReportError, build_report
    from reports.render import render_html

    out = Path(args.out) if args.out else default_out(config.work_dir, args.incident,
                                                      args.start, args.end)
    spark = build_spark_session(config)
    try:
        data = build_report(spark, Lake(config.storage_root), incident_id=args.incident,
                            start_ms=args.start, end_ms=args.end, cluster=args.cluster)
    except ReportError as e:
        print(f"kmon report: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(data), encoding="utf-8")
    print(out.resolve())
    return 0

