"""SQL over the lake's Delta tables in the caller's own process, without the JVM.

The live detector reads a few hundred small rows of a dozen tables every 10 s. Through
Spark each such read is a Delta log update, a plan and a few jobs on a JVM that also runs
the silver and gold streams: 2-5 s a read on a loaded 2-core host in the live matrix, and
evaluations of 9-24 s, most of a finding's 60-s budget after its windows closed. The same
reads of the same lake took 0.1-0.9 s here (issue 23, session 47's measurement).

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
    dataset: pads.Dataset | None
    refreshed: float


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

    def dataset(self, layer: str, name: str) -> pads.Dataset | None:
        """The table's current snapshot as a pyarrow dataset; None while it does not
        exist (a read of it is then empty)."""
        key = (layer, name)
        with self._lock:
            lock = self._table_locks.setdefault(key, threading.Lock())
        with lock:
            t = self._tables.get(key)
            now = self._clock()
            if t is not None and now - t.refreshed < self._refresh_s:
                return t.dataset
            path = delta_uri(self.lake.table(layer, name))
            if t is None or t.delta is None:
                delta = DeltaTable(path) if DeltaTable.is_deltatable(path) else None
            else:
                delta = t.delta
                delta.update_incremental()
            t = _Table(delta, None if delta is None else delta.to_pyarrow_dataset(), now)
            self._tables[key] = t
            return t.dataset

    def columns(self, layer: str, name: str) -> frozenset[str]:
        """The table's column names (none while it does not exist)."""
        ds = self.dataset(layer, name)
        return frozenset() if ds is None else frozenset(ds.schema.names)

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


def utc_date(ms: int) -> dt.date:
    """The UTC date of an epoch-ms time: the partition value of the rows then."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).date()


def marks(values: Sequence[Any]) -> str:
    """``?, ?, ...``: one parameter mark per value (for an IN list)."""
    return ", ".join("?" for _ in values)


# An API name as the rules compare names: without underscores, lower case (`norm_api`).
NORM_API_SQL = "lower(replace(api, '_', ''))"


def range_sql(start_ms: int, end_ms: int, column: str = "ts_ms") -> tuple[str, list]:
    """A WHERE condition and its parameters for rows of [start_ms, end_ms) of a table
    partitioned by ``date`` (the date filter skips other days' files)."""
    return (f"date BETWEEN ? AND ? AND {column} >= ? AND {column} < ?",
            [utc_date(start_ms), utc_date(end_ms), int(start_ms), int(end_ms)])
