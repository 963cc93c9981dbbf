"""The lake reads the detector inputs share: a time range, the sorting of collected rows,
and the two tables several inputs come from (silver.log_events and silver.broker_metrics).

Nothing later than the range end is ever read, so a replay over history sees what a live
evaluation at that time would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from infra.lake import Lake
from infra.lake_sql import LakeSql, marks, range_sql

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
    """A lake that no longer changes (a recording replayed after its pipeline ran).
    `metrics`: the broker_metrics series the lake was built with, when it holds only some
    (a corpus replay's); a read of another raises instead of finding nothing."""
    metrics: frozenset[str] | None = None


def sorted_rows(rows: Iterable[Any], keys: Sequence[str]) -> list:
    """Collected rows in ascending order of `keys`, nulls first."""
    return sorted(rows, key=lambda x: tuple((x[k] is not None, x[k]) for k in keys))


def int_or_none(x: Any) -> int | None:
    return None if x is None else int(x)


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
    # DuckDB's parallel scan gives them in no set order; here in time order.
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
