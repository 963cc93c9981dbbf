"""The lake reads the detector inputs share: a time range, a table that may not exist yet,
the range filters of silver and gold, and the two tables several inputs come from
(silver.log_events and silver.broker_metrics).

Nothing later than the range end is ever read, so a replay over history sees what a live
evaluation at that time would have seen.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from infra.lake import Lake
from infra.lake_sql import LakeSql, marks, range_sql, utc_date as _date

# The kinds of the shared log-event read; cleaner_run is read on its own, over the
# growing-partition rule's window (compaction.read_cleaner_runs).
LOG_EVENT_KINDS = ("unclean_election", "truncation", "isr_shrink", "isr_update", "isr_expand",
                   "leader_change", "coordinator_load", "broker_fenced", "broker_shutdown",
                   "broker_registered", "broker_unfenced", "broker_unreachable")


@dataclass(frozen=True)
class TimeRange:
    """[start_ms, end_ms): the range one evaluation judges."""
    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        if self.end_ms <= self.start_ms:
            raise ValueError(f"empty time range [{self.start_ms}, {self.end_ms})")

    def back(self, seconds: float) -> "TimeRange":
        """The same end, starting `seconds` earlier (context read before the range)."""
        return TimeRange(self.start_ms - int(seconds * 1000), self.end_ms)


@dataclass(frozen=True)
class FrozenLake(Lake):
    """A lake that no longer changes (a recording replayed after its pipeline ran): the
    Spark reads (`table`; the baselines) take each table once and keep
    it in Spark's cache, so the many evaluations
    over the recorded time filter memory instead of reading the Delta log and the files
    each time (measured on a corpus recording: 4.5 s an evaluation, 2.7 s with the cache).
    A table missing at its first read stays missing. `release()` frees the cache.
    `metrics`: the broker_metrics series the lake was built with, when it holds only some
    (a corpus replay's); a read of another raises instead of finding nothing."""
    _frames: dict = field(default_factory=dict, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)
    metrics: frozenset[str] | None = None

    def frame(self, spark: SparkSession, layer: str, name: str) -> DataFrame | None:
        with self._lock:   # the detector inputs are read by several threads at once
            if (layer, name) not in self._frames:
                df = _read(spark, self.table(layer, name))
                self._frames[(layer, name)] = df.cache() if df is not None else None
            return self._frames[(layer, name)]

    def release(self) -> None:
        with self._lock:
            for df in self._frames.values():
                if df is not None:
                    df.unpersist()
            self._frames.clear()


def table(spark: SparkSession, lake: Lake, layer: str, name: str) -> DataFrame | None:
    """The Delta table, or None while it does not exist (its input is then empty)."""
    if isinstance(lake, FrozenLake):
        return lake.frame(spark, layer, name)
    return _read(spark, lake.table(layer, name))


def _read(spark: SparkSession, path: str) -> DataFrame | None:
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return spark.read.format("delta").load(path)


def sorted_rows(rows: Iterable[Any], keys: Sequence[str]) -> list:
    """Collected rows in Spark's ascending order of `keys` (nulls first). The reads sort
    their few rows here: an orderBy before collect costs a sampling job and a shuffle."""
    return sorted(rows, key=lambda x: tuple((x[k] is not None, x[k]) for k in keys))


def int_or_none(x: Any) -> int | None:
    return None if x is None else int(x)


def silver_range(df: DataFrame, r: TimeRange) -> DataFrame:
    """Rows with ts_ms in the range; the date filter lets Delta skip other partitions."""
    return df.where((F.col("date") >= F.lit(_date(r.start_ms)))
                    & (F.col("date") <= F.lit(_date(r.end_ms)))
                    & (F.col("ts_ms") >= r.start_ms) & (F.col("ts_ms") < r.end_ms))


def gold_windows(df: DataFrame, r: TimeRange) -> DataFrame:
    """Windows that start at or after the range start and end at or before its end."""
    return df.where((F.col("date") >= F.lit(_date(r.start_ms)))
                    & (F.col("date") <= F.lit(_date(r.end_ms)))
                    & (F.unix_millis("window_start") >= r.start_ms)
                    & (F.unix_millis("window_end") <= r.end_ms))


def in_range(df: DataFrame, r: TimeRange) -> DataFrame:
    """Rows of an already read frame with ts_ms in the range (no date filter to add)."""
    return df.where((F.col("ts_ms") >= r.start_ms) & (F.col("ts_ms") < r.end_ms))


def read_log_events(sql: LakeSql, r: TimeRange) -> list[dict]:
    """The log events the detectors use (few: not the `other` lines), as dicts."""
    ds = sql.dataset("silver", "log_events", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None:
        return []
    cols = ["cluster", "broker", "ts_ms", "kind", "topic", "partition", "topic_id", "offset",
            "high_watermark", "old_leader", "new_leader", "leader_epoch", "isr_before",
            "isr_after", "seconds", "reduction_pct", "subject_broker"]
    # Added later: a lake written before it lacks the column until `kmon run` adds it
    # (jobs.pipeline.add_missing_columns); `kmon detect` may read such a lake first.
    if "last_known_elr" in ds.schema.names:
        cols.append("last_known_elr")
    where, params = range_sql(r.start_ms, r.end_ms)
    quoted = ", ".join(f'"{c}"' for c in cols)   # offset is a keyword of DuckDB's SQL
    rows = sql.rows(f"SELECT {quoted} FROM t WHERE {where} AND kind IN ({marks(LOG_EVENT_KINDS)})",
                    [*params, *LOG_EVENT_KINDS], t=ds)
    # Spark's collect gave them in no set order; here in time order.
    return sorted_rows(rows, ("ts_ms", "cluster", "broker", "kind", "topic", "partition"))


def broker_metrics(sql: LakeSql, r: TimeRange,
                   metrics: Iterable[str]) -> tuple[str, list, Any] | None:
    """silver.broker_metrics rows of the given series in the range: a query (of relation
    ``t``), its parameters and the dataset ``t`` is (the files of the range), to read from
    as a subquery; None while the table does not exist."""
    metrics = list(metrics)
    held = sql.lake.metrics if isinstance(sql.lake, FrozenLake) else None
    if held is not None and not set(metrics) <= held:
        raise ValueError(f"broker_metrics series {sorted(set(metrics) - held)} are not in this "
                         "lake: it holds only evaluation.inputs.DETECTOR_METRICS (add "
                         "every series a detector reads there)")
    ds = sql.dataset("silver", "broker_metrics", start_ms=r.start_ms, end_ms=r.end_ms)
    if ds is None:
        return None
    where, params = range_sql(r.start_ms, r.end_ms)
    return (f"SELECT * FROM t WHERE {where} AND metric IN ({marks(metrics)})",
            [*params, *metrics], ds)
