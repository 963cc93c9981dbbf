"""SQL over the lake's Delta tables in the caller's own process, without the JVM.

The live detector reads a few hundred small rows of a dozen tables every 10 s. Through
Spark each such read is a Delta log update, a plan and a few jobs on a JVM that also runs
the silver and gold streams: seconds a read on a loaded host, most of a finding's 60-s
budget after its windows closed. Read here, in-process, the same reads take a fraction
of a second (docs/architecture.md).

Two libraries, pinned in pyproject.toml:

- ``deltalake`` (delta-rs, the Delta Lake project's Rust implementation) reads the tables
  delta-spark writes: the snapshot of a table is kept between reads and catches up with
  ``update_incremental`` (only the new commits of _delta_log are read), and
  ``to_pyarrow_dataset`` gives a scan of the snapshot's files (the partition values as
  columns, columns added later read as null from older files). A table with a reader
  feature delta-rs cannot read fails loudly there, never silently short.
- DuckDB (``duckdb``) runs the SQL over those scans: projections and filters are pushed
  into the scan (the ``date`` partition filter skips other days' files), it has the
  window functions and UNNEST the reads need, and it releases the GIL while it runs, so
  the detector's parallel reads run in parallel.

A read names its time range (`dataset`'s ``start_ms`` and ``end_ms``): the scan then holds
only the files whose Delta statistics (the ``date`` partition, the min and max of
``ts_ms``, infra/lake.DATA_SKIPPING_COLUMNS) may hold rows of it, chosen by delta-rs as it
replays the log (``file_pruning_predicate``). A live table gains up to a few files every
10 s until maintenance compacts it, and a scan of every file of the day grew with the
lake's age: 0.5 s a read per table at 2,000 files on an idle host, several times that on
a loaded one, where the same read of the files of its range stayed at 0.03 s
(bench/bench_lake_age.py).

`LakeSql` is safe to share between threads: each query runs on a cursor of its own.
Object storage: delta-rs names the stores s3://, abfss://, gs://, where Spark's lake root
says s3a://; `delta_uri` maps the one to the other, and delta-rs takes credentials from
the standard environment (AWS_*, AZURE_*, GOOGLE_*: instance profiles and web identity
included), not from Spark's hadoop settings. Only local lakes have been tried here.
delta-rs cannot read hdfs://: such a root is refused at start, naming the key.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads
from deltalake import DeltaTable

from infra.lake import Lake

# A table's snapshot is brought up to date at most this often: the reads of one
# evaluation (parallel, within a second or two) then see the same versions.
REFRESH_S = 1.0


# Lake roots delta-rs reads as they are, and Spark's names it maps (`delta_uri`).
_AS_IS = ("s3://", "abfss://", "abfs://", "az://", "adl://", "gs://", "file://")
_MAPPED = {"s3a://": "s3://", "s3n://": "s3://"}


def delta_uri(path: str) -> str:
    """The address delta-rs reads a table of the lake at: a local path as it is, Spark's
    s3a:// (and s3n://) as s3://; ValueError for a scheme delta-rs has no store for."""
    for spark_name, name in _MAPPED.items():
        if path.startswith(spark_name):
            return name + path[len(spark_name):]
    if "://" not in path or path.startswith(_AS_IS):
        return path
    raise ValueError(f"{path.split('://')[0]}:// lakes cannot be read by the detector "
                     "(delta-rs has no store for them); use a local path, s3a://, abfss:// "
                     "or gs://")


@dataclass
class _Table:
    delta: DeltaTable | None
    refreshed: float
    full: pads.Dataset | None = None     # every file of the snapshot, built when first asked
    columns: frozenset[str] = frozenset()
    partitions: frozenset[str] = frozenset()


class LakeSql:
    """The tables of one `Lake`, read with delta-rs and queried with DuckDB."""

    def __init__(self, lake: Lake, *, refresh_s: float = REFRESH_S,
                 clock=time.monotonic) -> None:
        delta_uri(lake.root)   # refuses a root delta-rs cannot read, before any read
        self.lake = lake
        self._refresh_s = refresh_s
        self._clock = clock
        self._db = duckdb.connect(":memory:")
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, str], _Table] = {}
        self._table_locks: dict[tuple[str, str], threading.Lock] = {}

    def dataset(self, layer: str, name: str, *, start_ms: int | None = None,
                end_ms: int | None = None) -> pads.Dataset | None:
        """The table's current snapshot as a pyarrow dataset; None while it does not
        exist (a read of it is then empty).

        With ``start_ms`` and/or ``end_ms`` (epoch ms, the range a read's ``ts_ms``
        condition takes: `range_sql`'s), the dataset holds only the files that may have
        rows of [start_ms, end_ms): by their ``date`` partition and their ``ts_ms``
        statistics, when the table has them (a file without statistics is kept). A
        superset: the read's SQL still filters its rows exactly."""
        key = (layer, name)
        with self._table_lock(key):
            t = self._snapshot(key)
            if t.delta is None:
                return None
            predicate = _pruning_predicate(t, start_ms, end_ms)
            if predicate is not None:
                return t.delta.to_pyarrow_dataset(file_pruning_predicate=predicate)
            if t.full is None:
                t.full = t.delta.to_pyarrow_dataset()
            return t.full

    def _table_lock(self, key: tuple[str, str]) -> threading.Lock:
        """The lock one table's snapshot is read and refreshed under (one per table, so
        a slow refresh of one does not hold up reads of the others)."""
        with self._lock:
            return self._table_locks.setdefault(key, threading.Lock())

    def _snapshot(self, key: tuple[str, str]) -> _Table:
        """The table's snapshot, brought up to date when older than refresh_s (the caller
        holds the table's lock)."""
        t = self._tables.get(key)
        now = self._clock()
        if t is not None and now - t.refreshed < self._refresh_s:
            return t
        path = delta_uri(self.lake.table(*key))
        if t is None or t.delta is None:
            delta = DeltaTable(path) if DeltaTable.is_deltatable(path) else None
        else:
            delta = t.delta
            delta.update_incremental()
        if delta is None:
            t = _Table(None, now)
        else:
            t = _Table(delta, now, columns=frozenset(f.name for f in delta.schema().fields),
                       partitions=frozenset(delta.metadata().partition_columns))
        self._tables[key] = t
        return t

    def exists(self, layer: str, name: str) -> bool:
        """Whether the table exists (as of its snapshot)."""
        return bool(self.columns(layer, name))

    def columns(self, layer: str, name: str) -> frozenset[str]:
        """The table's column names (none while it does not exist)."""
        key = (layer, name)
        with self._table_lock(key):
            return self._snapshot(key).columns

    def rows(self, sql: str, params: Sequence[Any] = (), **tables: pads.Dataset | Any
             ) -> list[dict[str, Any]]:
        """The rows of `sql` (DuckDB SQL, ``?`` parameters), as dicts; each keyword names
        a relation the SQL reads: a dataset of `dataset`, or any Arrow table."""
        return self.table(sql, params, **tables).to_pylist()

    def table(self, sql: str, params: Sequence[Any] = (), **tables: pads.Dataset | Any
              ) -> pa.Table:
        """`rows`, as an Arrow table (to be read again by a later query)."""
        cur = self._db.cursor()
        try:
            for alias, relation in tables.items():
                cur.register(alias, relation)
            return cur.sql(sql, params=list(params)).to_arrow_table()
        finally:
            cur.close()

    def close(self) -> None:
        self._db.close()


def _pruning_predicate(t: _Table, start_ms: int | None, end_ms: int | None) -> str | None:
    """delta-rs's file pruning predicate for rows of [start_ms, end_ms) (`dataset`), or
    None when nothing prunes (no range, or a table without ``date`` and ``ts_ms``)."""
    parts = []
    if start_ms is not None:
        if "date" in t.partitions:
            parts.append(f"date >= '{utc_date(int(start_ms)).isoformat()}'")
        if "ts_ms" in t.columns:
            parts.append(f"ts_ms >= {int(start_ms)}")
    if end_ms is not None:
        if "date" in t.partitions:
            parts.append(f"date <= '{utc_date(int(end_ms)).isoformat()}'")
        if "ts_ms" in t.columns:
            parts.append(f"ts_ms < {int(end_ms)}")
    return " AND ".join(parts) if parts else None


def utc_date(ms: int) -> dt.date:
    """The UTC date of an epoch-ms time: the partition value of the rows then."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).date()


def marks(values: Sequence[Any]) -> str:
    """``?, ?, ...``: one parameter mark per value (for an IN list)."""
    return ", ".join("?" for _ in values)


def range_sql(start_ms: int, end_ms: int, column: str = "ts_ms") -> tuple[str, list]:
    """A WHERE condition and its parameters for rows of [start_ms, end_ms) of a table
    partitioned by ``date`` (the date filter skips other days' files)."""
    return (f"date BETWEEN ? AND ? AND {column} >= ? AND {column} < ?",
            [utc_date(start_ms), utc_date(end_ms), int(start_ms), int(end_ms)])
