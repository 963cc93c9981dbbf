"""Delta table maintenance: kmon keeps its own tables healthy while the streams run.

The streaming queries append a small file (or a few) to every table they feed at every
micro-batch: at a 10-s trigger that is 8,640 commits and as many files a day per table,
and each old version's files stay on disk. Left alone, a month of them makes every query
list and open tens of thousands of files, and the lake grows without bound. One pass
(`Maintenance.run`, on `[maintenance]`'s schedule in `kmon run`, or `kmon maintain`):

- **Closed days are Z-ordered once.** A table partitioned by date whose rows have a
  broker and a time column (``ts_ms``, ``window_start`` or ``ts``) has each day that is
  closed (`closed_after_h` past its end: no appends come any more) rewritten by
  ``OPTIMIZE ... ZORDER BY (broker, <time>)``: a few large files, each holding a narrow
  range of brokers and times, so a broker's day or an hour of the fleet reads a few
  files by their min/max statistics (bench/bench_root_cause.py measures it). Other
  tables' closed days are compacted the same way, without Z-order. Each day done is
  recorded in ``gold.table_maintenance``, so it is not rewritten again.
- **The open day is compacted incrementally**: only its files below `small_file_mb` are
  bin-packed together, so a pass costs what was appended since the last one.
- **VACUUM** deletes data files no version of the last `vacuum_retain_h` hours needs.
- **The landing folder** (embedded mode) loses the files a committed batch has read, once
  they are `landing_retain_h` old, and the file-source queries' logs forget them
  (jobs/landing_retention.py).

Safe with the streams running: OPTIMIZE commits change no data (``dataChange = false``),
so an append racing it does not conflict, and a streaming reader of the table skips the
rewrite. Tables written by MERGE (the findings, the lag table, the remediation tables)
would conflict: a MERGE that read a file the OPTIMIZE removed fails, and the detector
stops on a failed write. So a live pass leaves them out of OPTIMIZE (they are small) and
only vacuums them; `kmon maintain --all` (kmon stopped) includes them.

What a pass did is appended to ``gold.table_maintenance`` (one row per table and
operation: files and bytes before and after, seconds) and logged.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Callable, Iterable

from pyspark.sql import SparkSession
from pyspark.sql.types import (DateType, DoubleType, LongType, StringType, StructField,
                               StructType)

from infra.lake import (STATS_COLUMNS_PROPERTY, Lake, delta_tables, partition_values,
                        skipping_properties)
from infra.spark_session import log_retention
from jobs.landing_retention import LandingRetention, StreamOutcome
from jobs.maintenance_config import DELTA_MIN_RETAIN_H, MaintenanceSection

log = logging.getLogger(__name__)

LOG_TABLE = "table_maintenance"
POOL = "maintenance"
# Tables written by MERGE: OPTIMIZE would make a concurrent MERGE fail (module docstring).
MERGE_TARGETS = frozenset({"gold.anomalies", "gold.offset_lag_1m",
                           "gold.remediation_decisions", "gold.remediation_results"})
TIME_COLUMNS = ("ts_ms", "window_start", "ts")
PARTITION_COLUMNS = ("date", "ingest_date")
_CONF_LOCK = threading.RLock()        # the session settings a pass changes for a moment
# VACUUM lists the table's folders with this many tasks (Spark's default, 10,000, made a
# VACUUM of a small table take 30 s on two cores).
LISTING_TASKS_PER_CORE = 4

LOG_SCHEMA = StructType([
    StructField("table", StringType()),
    StructField("operation", StringType()),
    StructField("partition", StringType()),
    StructField("ts_ms", LongType()),
    StructField("files_before", LongType()),
    StructField("files_after", LongType()),
    StructField("bytes_before", LongType()),
    StructField("bytes_after", LongType()),
    StructField("files_removed", LongType()),
    StructField("files_added", LongType()),
    StructField("seconds", DoubleType()),
    StructField("error", StringType()),
    StructField("date", DateType()),
])

LOG_COLUMNS = {
    "table": "Table maintained (<layer>.<name>), or landing/<stream> for a landing folder",
    "operation": "zorder (a closed day, once), compact_closed (a closed day of a table with "
                 "no broker and time column, once), compact (the open day's small files), "
                 "vacuum, log_retention (kmon maintain --all: delta.logRetentionDuration "
                 "set to spark.delta_log_retention_h), stats_columns (kmon maintain --all: "
                 "delta.dataSkippingStatsColumns set to the cluster, broker and time "
                 "columns the table has, as on the tables kmon makes), table (the whole "
                 "pass on the table: files and bytes before and after), or landing (files "
                 "read by a committed batch and older than landing_retain_h deleted from a "
                 "landing folder)",
    "partition": "The day (partition value) the operation rewrote; null for vacuum and table",
    "ts_ms": "When the operation ended, epoch ms",
    "files_before / files_after": "Files of the table's current version before and after "
                                  "(operation table)",
    "bytes_before / bytes_after": "Bytes on disk under the table's folder (every "
                                  "version's files and the Delta log: what VACUUM frees "
                                  "shows here)",
    "files_removed / files_added": "Files the OPTIMIZE replaced and wrote",
    "seconds": "How long it took",
    "error": "Why it failed (the pass goes on with the next table); null when it did not",
    "date": "Partition column: UTC date of ts_ms",
}


def zorder_columns(columns: Iterable[str]) -> tuple[str, ...]:
    """(broker, the first time column) when the table has both, else ()."""
    cols = set(columns)
    time_col = next((c for c in TIME_COLUMNS if c in cols), None)
    return ("broker", time_col) if "broker" in cols and time_col else ()


def closed_days(days: Iterable[str], now_ms: int, closed_after_h: float) -> list[str]:
    """The partition values (ISO dates) of days that ended `closed_after_h` before now."""
    now = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc)
    out = []
    for d in days:
        try:
            end = datetime.combine(date.fromisoformat(d) + timedelta(days=1),
                                   datetime.min.time(), tzinfo=timezone.utc)
        except ValueError:
            continue                     # not a date: never called closed
        if end + timedelta(hours=closed_after_h) <= now:
            out.append(d)
    return out


@dataclass
class TableOutcome:
    table: str
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    zordered: list[str] = field(default_factory=list)
    compacted: list[str] = field(default_factory=list)
    disk_bytes_before: int = 0           # everything under the table's folder: old
    disk_bytes_after: int = 0            # versions' files and the Delta log too
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        did = ([f"z-ordered {', '.join(self.zordered)}"] if self.zordered else []) + \
              ([f"compacted {', '.join(self.compacted)}"] if self.compacted else [])
        return (f"{self.table:32s} files {self.files_before:>6,} -> {self.files_after:<6,} "
                f"on disk {self.disk_bytes_before / 2**20:>9,.1f} -> "
                f"{self.disk_bytes_after / 2**20:<9,.1f} MiB {self.seconds:6.1f} s  "
                f"{'; '.join(did) or 'vacuumed only'}"
                + (f"  ERRORS: {'; '.join(self.errors)}" if self.errors else ""))


def system_clock_ms() -> int:
    return int(time.time() * 1000)


class Maintenance:
    """One pass over the lake's tables (module docstring). `live`: streams may be running,
    so MERGE targets are only vacuumed."""

    def __init__(self, spark: SparkSession, lake: Lake, section: MaintenanceSection, *,
                 live: bool = True, clock: Callable[[], int] = system_clock_ms,
                 log_retention_h: float | None = None):
        self.spark, self.lake, self.section = spark, lake, section
        self.live, self.clock = live, clock
        # With kmon stopped (not live): the Delta log retention set on tables made before
        # spark.delta_log_retention_h (a table property change would fail a running append).
        self.log_retention_h = log_retention_h
        self.landing: list[StreamOutcome] = []    # the last pass's landing folders
        self.landing_forgotten = 0                 # ... and source-log entries dropped

    def run(self, only: Iterable[str] | None = None,
            progress: Callable[[TableOutcome], None] | None = None) -> list[TableOutcome]:
        """Maintain every table (or the `only` ones, as <layer>.<name>), then, on a pass
        over everything, the landing folder; returns what was done to the tables (the
        landing folders' outcome is in `landing`)."""
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", POOL)
        wanted = set(only) if only is not None else None
        done = self._zordered()
        out = []
        for layer, name, path in delta_tables(self.spark, self.lake):
            table = f"{layer}.{name}"
            if wanted is not None and table not in wanted:
                continue
            outcome = self.table(table, path, done.get(table, set()))
            out.append(outcome)
            if progress is not None:
                progress(outcome)
            else:
                log.info("maintenance: %s", outcome.line())
        self.landing = self.prune_landing(log_each=progress is None) if wanted is None else []
        return out

    def prune_landing(self, log_each: bool = True) -> list[StreamOutcome]:
        """The landing folders' files a committed batch read, older than landing_retain_h
        (`log_each`: a log line per folder; the caller prints them otherwise)."""
        if not self.section.prune_landing:
            return []
        started = time.monotonic()
        try:
            retention = LandingRetention(self.spark, self.lake,
                                         self.section.landing_retain_h, self.clock)
            outcomes = retention.run()
            self.landing_forgotten = retention.forgotten
        except Exception as e:  # noqa: BLE001 - the tables are done; the next pass tries again
            log.warning("maintenance: landing retention failed: %s", e)
            self._log([self._row("landing", "landing", None, time.monotonic() - started,
                                 f"{type(e).__name__}: {e}")])
            return []
        seconds = time.monotonic() - started
        self._log([self._row(f"landing/{o.stream}", "landing", None, seconds,
                             "; ".join(o.errors[:3]) or None, removed=o.files_deleted,
                             before=(o.files_before, o.bytes_before),
                             after=(o.files_after, o.bytes_after)) for o in outcomes])
        for o in outcomes if log_each else ():
            if o.files_before:
                log.info("maintenance: landing/%s files %d -> %d (%.1f MiB deleted)", o.stream,
                         o.files_before, o.files_after, o.bytes_deleted / 2**20)
        return outcomes

    def table(self, table: str, path: str, zordered: set[str]) -> TableOutcome:
        from delta.tables import DeltaTable

        started = time.monotonic()
        dt = DeltaTable.forPath(self.spark, path)
        detail = dt.detail().first()
        out = TableOutcome(table, files_before=int(detail["numFiles"] or 0),
                           bytes_before=int(detail["sizeInBytes"] or 0),
                           disk_bytes_before=_disk_bytes(self.spark, path))
        rows = []
        rewrite = not (self.live and table in MERGE_TARGETS)
        part = next((c for c in detail["partitionColumns"] if c in PARTITION_COLUMNS), None)
        # The schema, for the Z-order and the statistics property (set only when not live,
        # so always rewriting): not read on a live pass of a MERGE target, which only
        # vacuums.
        columns = self.spark.read.format("delta").load(path).columns if rewrite else []
        if rewrite:
            zcols = zorder_columns(columns) if self.section.zorder else ()
            if part is None:
                rows.append(self._optimize(dt, table, None, None, None, out))
            else:
                days = partition_values(self.spark, path, part)
                closed = set(closed_days(days, self.clock(), self.section.closed_after_h))
                for d in days:
                    if d in closed and d not in zordered:
                        rows.append(self._optimize(dt, table, part, d, zcols, out))
                    elif d not in closed:
                        rows.append(self._optimize(dt, table, part, d, None, out))
        if not self.live and self.log_retention_h is not None:
            rows.append(self._set_property(path, table, detail, out, "log_retention",
                                           "delta.logRetentionDuration",
                                           log_retention(self.log_retention_h)))
        stats = skipping_properties(columns, detail["partitionColumns"])
        if not self.live and stats:
            rows.append(self._set_property(path, table, detail, out, "stats_columns",
                                           STATS_COLUMNS_PROPERTY,
                                           stats[STATS_COLUMNS_PROPERTY]))
        rows.append(self._vacuum(dt, table, out))
        detail = dt.detail().first()
        out.files_after, out.bytes_after = int(detail["numFiles"] or 0), int(detail["sizeInBytes"] or 0)
        out.disk_bytes_after = _disk_bytes(self.spark, path)
        out.seconds = time.monotonic() - started
        rows.append(self._row(table, "table", None, out.seconds, None,
                              before=(out.files_before, out.disk_bytes_before),
                              after=(out.files_after, out.disk_bytes_after)))
        self._log([r for r in rows if r is not None])
        return out

    def _optimize(self, dt, table: str, part: str | None, day: str | None,
                  zcols: tuple[str, ...] | None, out: TableOutcome) -> dict | None:
        """A closed day (`zcols` a tuple: Z-ordered by it, or compacted whole when empty)
        or the open day / an unpartitioned table (`zcols` None: small files only)."""
        started = time.monotonic()
        op = "zorder" if zcols else "compact" if zcols is None else "compact_closed"
        try:
            builder = dt.optimize()
            if day is not None:
                builder = builder.where(f"{part} = '{day}'")
            if zcols:
                metrics = builder.executeZOrderBy(*zcols)
            elif zcols is not None:
                metrics = builder.executeCompaction()
            else:
                with _session_conf(self.spark, "spark.databricks.delta.optimize.minFileSize",
                                   str(self.section.small_file_mb * 2**20)):
                    metrics = builder.executeCompaction()
            m = metrics.first()["metrics"]
            removed, added = int(m["numFilesRemoved"]), int(m["numFilesAdded"])
        except Exception as e:  # noqa: BLE001 - one table's failure must not stop the pass
            out.errors.append(f"{op} {day}: {type(e).__name__}: {str(e)[:300]}")
            log.warning("maintenance: %s %s of %s failed: %s", op, day, table, e)
            return self._row(table, op, day, time.monotonic() - started, f"{type(e).__name__}: {e}")
        if op == "zorder":
            out.zordered.append(day)
        elif removed or op == "compact_closed":
            out.compacted.append(day or "(table)")
        if op == "compact" and not removed:
            return None                  # nothing small enough to pack: not worth a row
        return self._row(table, op, day, time.monotonic() - started, None,
                         removed=removed, added=added)

    def _set_property(self, path: str, table: str, detail, out: TableOutcome, op: str,
                      key: str, want: str) -> dict | None:
        """Table property `key` set to `want` where it is not already (a table made before
        kmon set it on the tables it creates); a row named `op` when it was set."""
        if (detail["properties"] or {}).get(key) == want:
            return None
        started = time.monotonic()
        try:
            self.spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{key}' = '{want}')")
        except Exception as e:  # noqa: BLE001
            out.errors.append(f"{op}: {type(e).__name__}: {str(e)[:300]}")
            return self._row(table, op, None, time.monotonic() - started,
                             f"{type(e).__name__}: {e}")
        return self._row(table, op, None, time.monotonic() - started, None)

    def _vacuum(self, dt, table: str, out: TableOutcome) -> dict | None:
        started = time.monotonic()
        try:
            retain = vacuum_hours(self.section.vacuum_retain_h)
            tasks = max(4, LISTING_TASKS_PER_CORE * self.spark.sparkContext.defaultParallelism)
            # Delta 4 ignores VACUUM's retention argument unless it is 0 (an internal
            # setting, on by default), and keeps the table's deletedFileRetentionDuration
            # (7 days) instead: vacuum_retain_h did nothing. Turned off for the VACUUM so
            # that the configured retention is the one applied.
            with _session_conf(self.spark, "spark.sql.sources.parallelPartitionDiscovery."
                               "parallelism", str(tasks)), \
                    _session_conf(self.spark, VACUUM_IGNORES_RETENTION, "false"):
                if retain < DELTA_MIN_RETAIN_H:
                    with _session_conf(self.spark, "spark.databricks.delta."
                                       "retentionDurationCheck.enabled", "false"):
                        dt.vacuum(retain)
                else:
                    dt.vacuum(retain)
        except Exception as e:  # noqa: BLE001
            out.errors.append(f"vacuum: {type(e).__name__}: {str(e)[:300]}")
            log.warning("maintenance: vacuum of %s failed: %s", table, e)
            return self._row(table, "vacuum", None, time.monotonic() - started,
                             f"{type(e).__name__}: {e}")
        return self._row(table, "vacuum", None, time.monotonic() - started, None)

    def _row(self, table, op, day, seconds, error, *, removed=None, added=None,
             before=(None, None), after=(None, None)) -> dict:
        now = self.clock()
        return {"table": table, "operation": op, "partition": day, "ts_ms": now,
                "files_before": before[0], "files_after": after[0],
                "bytes_before": before[1], "bytes_after": after[1],
                "files_removed": removed, "files_added": added,
                "seconds": round(seconds, 3), "error": None if error is None else str(error)[:2000],
                "date": datetime.fromtimestamp(now / 1000, tz=timezone.utc).date()}

    def _log(self, rows: list[dict]) -> None:
        if not rows:
            return
        (self.spark.createDataFrame(rows, LOG_SCHEMA).write.format("delta").mode("append")
         .options(**skipping_properties(LOG_SCHEMA.fieldNames()))
         .partitionBy("date").save(self.lake.table("gold", LOG_TABLE)))

    def _zordered(self) -> dict[str, set[str]]:
        """Per table, the days a pass Z-ordered (or compacted whole) already."""
        from delta.tables import DeltaTable

        path = self.lake.table("gold", LOG_TABLE)
        if not DeltaTable.isDeltaTable(self.spark, path):
            return {}
        done: dict[str, set[str]] = {}
        for r in (self.spark.read.format("delta").load(path)
                  .where("operation IN ('zorder', 'compact_closed') AND error IS NULL")
                  .select("table", "partition").distinct().collect()):
            done.setdefault(r["table"], set()).add(r["partition"])
        return done


def _disk_bytes(spark: SparkSession, location: str) -> int:
    jvm = spark.sparkContext._jvm
    p = jvm.org.apache.hadoop.fs.Path(location)
    return int(p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
               .getContentSummary(p).getLength())


# Delta's (internal) switch that makes VACUUM ignore a retention argument other than 0.
VACUUM_IGNORES_RETENTION = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"


def vacuum_hours(retain_h: float) -> int:
    """The retention VACUUM is given: whole hours, as Delta rounds its argument
    (``math.round``). A retention that would round to 0 is refused: VACUUM 0 deletes every
    file no current version holds, including what a running stream has yet to read and
    what an append is still writing (the soak benchmark's 27-minute retention did that and
    stopped the gold query). 0 itself is allowed (tests; the configuration refuses it)."""
    hours = int(retain_h + 0.5)        # half up, as Scala's math.round
    if retain_h > 0 and hours == 0:
        raise ValueError(f"a VACUUM retention of {retain_h:g} h rounds to 0 h in Delta, "
                         "which deletes files running streams still need: give 1 h or more")
    return hours


class _session_conf:
    """A Spark session setting changed for the block (one pass at a time changes it)."""

    def __init__(self, spark: SparkSession, key: str, value: str):
        self.spark, self.key, self.value = spark, key, value

    def __enter__(self):
        _CONF_LOCK.acquire()
        self.before = self.spark.conf.get(self.key, None)
        self.spark.conf.set(self.key, self.value)

    def __exit__(self, *exc):
        try:
            if self.before is None:
                self.spark.conf.unset(self.key)
            else:
                self.spark.conf.set(self.key, self.before)
        finally:
            _CONF_LOCK.release()


class MaintenanceLoop:
    """`kmon run`'s schedule: a pass every `every_h` hours in a daemon thread (the first
    one `every_h` after the start), until `stop`."""

    def __init__(self, spark: SparkSession, lake: Lake, section: MaintenanceSection):
        self.maintenance = Maintenance(spark, lake, section, live=True)
        self.every_s = section.every_h * 3600
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.every_s <= 0:
            return
        self._thread = threading.Thread(target=self._loop, name="kmon-maintenance",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                outcomes = self.maintenance.run()
                log.info("maintenance pass: %d tables, %d files -> %d", len(outcomes),
                         sum(o.files_before for o in outcomes),
                         sum(o.files_after for o in outcomes))
            except Exception:  # noqa: BLE001 - the next pass tries again
                if self._stop.is_set():
                    return
                log.exception("maintenance pass failed; the next one is in %.1f h",
                              self.every_s / 3600)

    def stop(self, wait_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(wait_s)
            self._thread = None
