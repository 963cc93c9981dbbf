"""What one detector read of a live table costs as the table ages: a scan of every file of
the day against a scan of the files of the read's range (infra/lake_sql.py `dataset` with
``start_ms``/``end_ms``).

Run: .kmon/venv/bin/python -m bench.bench_lake_age [--files 360 1440 2880]
     [--rows-per-file 50] [--repeats 5] [--range-s 300] [--no-save]

Input: none. The bench grows a Delta table in a temporary folder the way the silver query
grows a live one between two maintenance passes, one small file per append with 10 s of
rows in time order, partitioned by ``date`` with statistics on ``ts_ms`` (written with
delta-rs: the reader does not care which writer made the files). 360 files is an hour of
one file per 10 s; before jobs/silver.py ROWS_PER_FILE a live table got a file per
shuffle partition (4) per micro-batch, 1,440 an hour and 8,640 by the time maintenance's
OPTIMIZE came, 6 h on. Each --files count is reached in turn (growing the table takes
minutes from a few thousand files on: delta-rs reads its log on every append). At each, the SQL of a detector read (range_sql over the last --range-s seconds)
runs --repeats times each way on a fresh snapshot (update_incremental, as the live reader
refreshes once a second): over the whole snapshot (what every read did before the range
was passed) and over the files of its range, checking that both give the same rows. It
prints the median wall times and writes every time to
bench/results/lake-age-<utc stamp>.json, with the machine and the command.

Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

from bench.result_file import machine_header, save

T0 = 1_796_200_000_000     # 2026-12-02T08:26:40Z
FILE_S = 10


def _batch(i: int, rows: int):
    import pyarrow as pa
    start = T0 + i * FILE_S * 1000
    ts = [start + j * (FILE_S * 1000 // rows) for j in range(rows)]
    return pa.table({
        "cluster": ["c1"] * rows, "broker": pa.array([j % 3 + 1 for j in range(rows)], pa.int32()),
        "ts_ms": pa.array(ts, pa.int64()), "kind": ["other"] * rows,
        "topic": [f"t{j % 7}" for j in range(rows)],
        "partition": pa.array([j % 12 for j in range(rows)], pa.int32()),
        "message": ["[ReplicaManager broker=1] some broker log line of a usual length"] * rows,
        "date": pa.array([dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc).date()
                          for t in ts], pa.date32())})


def _timed(fn, repeats: int) -> tuple[list[float], object]:
    times, out = [], None
    for _ in range(repeats):
        a = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - a)
    return times, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, nargs="+", default=[360, 1440, 2880],
                    help="file counts to measure at, ascending (default 360 1440 2880)")
    ap.add_argument("--rows-per-file", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--range-s", type=float, default=300.0,
                    help="the read's range: the last this many seconds (default 300, the "
                         "detector's lookback)")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    counts = sorted(set(args.files))
    if counts[0] < 1:
        ap.error("--files must be >= 1")

    from deltalake import write_deltalake

    from infra.lake import Lake
    from infra.lake_sql import LakeSql, range_sql

    root = Path(tempfile.mkdtemp(prefix="kmon-bench-lake-age-"))
    path = str(root / "silver" / "log_events")
    doc = machine_header("lake_age", "bench.bench_lake_age", argv)
    doc.update({"rows_per_file": args.rows_per_file, "range_s": args.range_s,
                "repeats": args.repeats, "points": []})
    written, grow_s = 0, 0.0
    for n in counts:
        a = time.perf_counter()
        while written < n:
            write_deltalake(path, _batch(written, args.rows_per_file), mode="append",
                            partition_by=["date"])
            written += 1
        grow_s += time.perf_counter() - a
        end = T0 + n * FILE_S * 1000
        start = end - int(args.range_s * 1000)
        where, params = range_sql(start, end)
        query = f"SELECT * FROM t WHERE {where} ORDER BY ts_ms, broker"
        sql = LakeSql(Lake(str(root)), refresh_s=0.0)   # every read refreshes, as live ones
        try:
            sql.dataset("silver", "log_events")          # the snapshot loaded once
            whole_t, whole = _timed(lambda: sql.rows(
                query, params, t=sql.dataset("silver", "log_events")), args.repeats)
            ranged_t, ranged = _timed(lambda: sql.rows(
                query, params, t=sql.dataset("silver", "log_events", start_ms=start,
                                             end_ms=end)), args.repeats)
            files = len(list(sql.dataset("silver", "log_events", start_ms=start,
                                         end_ms=end).get_fragments()))
        finally:
            sql.close()
        if whole != ranged:
            print(f"{n} files: the two reads differ ({len(whole)} rows whole, {len(ranged)} "
                  "ranged)")
            return 1
        point = {"files": n, "rows": len(whole), "files_in_range": files,
                 "whole_s": whole_t, "ranged_s": ranged_t,
                 "whole_median_s": statistics.median(whole_t),
                 "ranged_median_s": statistics.median(ranged_t)}
        doc["points"].append(point)
        print(f"{n:>6} files: whole snapshot {point['whole_median_s']:.3f} s, files of the "
              f"range ({files}) {point['ranged_median_s']:.3f} s, {len(whole)} rows "
              f"(median of {args.repeats}; table grown in {grow_s:.0f} s so far)", flush=True)
    if not args.no_save:
        save("lake-age", doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
