"""The whole streaming pipeline as one object: start every query, report, stop cleanly.

`Pipeline.start` creates any missing table (so every downstream query can start before
data arrives), then starts ``silver`` (the telemetry topics or landing folders of every
stream not in ``pipeline.slow_streams`` -> bronze.<s>, silver.<s> and silver.quarantine,
jobs/silver.py) and ``silver_slow`` (the same for the slow streams, on their own
trigger), then the gold queries. `stop` stops them downstream first, each at a micro-batch boundary, so every
checkpoint stays consistent: a restart resumes where each query committed, and the
idempotent writes make a replayed batch a no-op.

`run_until_stopped` is what `kmon run` calls: it prints one progress line per query every
``pipeline.progress_interval_s``, and a query that dies is logged with its error and
started again from its checkpoint after a backoff (`RestartBackoff`), while the rest run
on. `check` raises instead (a demo or a bench that must stop on the first failure).
`process_available` runs every query once over all data available now and returns
(tests, batch replays).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from infra.lake import Lake, register_tables, skipping_properties
from jobs import bronze, gold, gold_windows, silver
from jobs.streams import STREAMS, Stream
from jobs.validation import add_constraints, constraint_properties

log = logging.getLogger(__name__)

# The scheduler pools of infra/resources/spark-fair-pools.xml: what detection waits for
# first.
SILVER_POOL, BACKGROUND_POOL = "silver", "background"
BRONZE_SCHEMA = StructType([
    StructField("value", StringType()), StructField("source", StringType()),
    StructField("source_file", StringType()), StructField("kafka_topic", StringType()),
    StructField("kafka_partition", IntegerType()), StructField("kafka_offset", LongType()),
    StructField("kafka_ts", TimestampType()), StructField("ingest_ts", TimestampType()),
    StructField("ingest_date", DateType()),
])


class PipelineFailed(RuntimeError):
    """A streaming query stopped with an error; the message names the query."""


class RestartBackoff:
    """When a streaming query that failed is started again: `first_s` after its first
    failure, twice as long after each failure that follows, at most `max_s`; a query that
    then ran `healthy_s` without failing starts over at `first_s`.

    A query fails when what it reads or writes is unavailable for a while (the lake's disk
    full, the monitoring Kafka down). Its checkpoint holds where it was, so starting it
    again later loses nothing; exiting instead would take the exporter and the embedded
    agents down with it, and leave the operator nothing to see. The doubling keeps a query
    that fails at once (a cause that lasts) from filling the log."""

    def __init__(self, first_s: float = 10.0, max_s: float = 300.0, healthy_s: float = 600.0):
        self.first_s, self.max_s, self.healthy_s = first_s, max_s, healthy_s
        self._started: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._due: dict[str, float] = {}

    def started(self, name: str, now: float) -> None:
        self._started[name] = now
        self._due.pop(name, None)

    def failed(self, name: str, now: float) -> float:
        """Note a failure (or a failed start); returns the seconds until the next start."""
        if now - self._started.get(name, now) >= self.healthy_s:
            self._failures[name] = 0
        self._started[name] = now   # a failed start does not count as running time
        n = self._failures[name] = self._failures.get(name, 0) + 1
        delay = min(self.max_s, self.first_s * 2 ** (n - 1))
        self._due[name] = now + delay
        return delay

    def waiting(self, name: str) -> bool:
        return name in self._due

    def due(self, name: str, now: float) -> bool:
        return name in self._due and now >= self._due[name]


def add_missing_columns(spark: SparkSession, path: str, schema) -> list[str]:
    """Add the columns of `schema` that the Delta table at `path` lacks (nullable, at the
    end), so a lake written by an older kmon takes the rows of a newer one (a schema module
    that gained a column). Columns are only ever added: one whose type changed stays as it
    is and the append names it. Returns the added names."""
    have = {f.name for f in spark.read.format("delta").load(path).schema.fields}
    missing = [f for f in schema.fields if f.name not in have]
    if missing:
        cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
    return [f.name for f in missing]


@dataclass
class Pipeline:
    spark: SparkSession
    lake: Lake
    settings: object                      # kmon.config.PipelineSection
    kafka_options: dict[str, str] | None = None   # Spark Kafka source options (source=kafka)
    topic_prefix: str = "kmon."
    streams: tuple[Stream, ...] = STREAMS
    on_batch: Callable[[dict], None] | None = None  # silver batch stats, e.g. to the exporter
    extra_queries: list[Callable[[dict | None], object]] = field(default_factory=list)
    queries: list = field(default_factory=list)
    # False leaves out the gold tables no detector reads (gold.offset_commits_1m,
    # gold.offset_lag_1m, and of the minute tables all but gold.request_stages_1m: the
    # dashboards', the report's and the cookbook's), and does not
    # name the tables in the session's catalog (the detectors read them by path). A corpus
    # replay scores findings only; there those two queries took 9-17 s of batches each
    # beside the stage minutes, and naming a new lake's tables 3-5 s (2 cores).
    reader_tables: bool = True
    # True when the lake's tables were just made by this code's `ensure_tables` (a corpus
    # replay starts from a copy of an empty lake): starting skips that check, which reads
    # every table's log and plans every stream's rules (about 6 s on 2 cores).
    tables_current: bool = False
    backoff: RestartBackoff = field(default_factory=RestartBackoff)
    # Each query's name -> what starts it again (from its checkpoint), for `restart_failed`.
    _starters: dict[str, tuple[str | None, Callable[[], object]]] = field(
        default_factory=dict, repr=False)

    # ---- tables ------------------------------------------------------------------------

    def ensure_tables(self) -> None:
        """Create missing bronze/silver tables with their schemas; add silver constraints."""
        from delta.tables import DeltaTable

        spark, lake = self.spark, self.lake
        empty_bronze = spark.createDataFrame([], BRONZE_SCHEMA)
        batches = lake.table("gold", silver.BATCHES_TABLE)
        if not DeltaTable.isDeltaTable(spark, batches):
            # Created here, not by the first silver batch: several silver queries write it.
            (spark.createDataFrame([], silver.BATCH_SCHEMA).write.format("delta")
             .options(**skipping_properties(silver.BATCH_SCHEMA.fieldNames())).save(batches))
        else:
            add_missing_columns(spark, batches, silver.BATCH_SCHEMA)
        for s in self.streams:
            bpath = lake.table("bronze", s.name)
            if self.settings.bronze_tables and not DeltaTable.isDeltaTable(spark, bpath):
                (empty_bronze.write.format("delta")
                 .options(**skipping_properties(empty_bronze.columns))
                 .partitionBy("ingest_date").save(bpath))
            spath = lake.table("silver", s.name)
            flat = silver.classify(silver.decode(empty_bronze, s.table), s, None)
            schema = silver.valid_rows(flat, s).schema
            if DeltaTable.isDeltaTable(spark, spath):
                added = add_missing_columns(spark, spath, schema)  # columns added since
                if added:
                    log.info("silver.%s: added column(s) %s", s.name, ", ".join(added))
                changed = add_constraints(spark, spath, s.table)  # rules added or changed
                if changed:
                    log.info("silver.%s: constraint(s) %s added or updated", s.name,
                             ", ".join(changed))
                continue
            builder = (DeltaTable.createIfNotExists(spark).location(spath)
                       .addColumns(schema)
                       .partitionedBy(*silver.partition_columns(s)))
            for key, value in {**constraint_properties(s.table),
                               **skipping_properties(schema.fieldNames(),
                                                     silver.partition_columns(s))}.items():
                builder = builder.property(key, value)
            builder.execute()

    # ---- queries -----------------------------------------------------------------------

    def _raw(self, streams: list[str]):
        if self.settings.source == "kafka":
            if not self.kafka_options:
                raise ValueError("pipeline.source is 'kafka' but no monitoring Kafka is "
                                 "configured (telemetry.bootstrap_servers)")
            raw = bronze.from_kafka(self.spark, self.kafka_options, self.topic_prefix, streams,
                                    self.settings.max_offsets_per_trigger)
        else:
            for name in streams:
                _mkdirs(self.spark, self.lake.landing(name))
            raw = bronze.from_landing(self.spark, self.lake, streams,
                                      self.settings.max_files_per_trigger)
        return bronze.with_ingest_time(raw)

    def groups(self) -> list[tuple[str, tuple[Stream, ...], bool]]:
        """(query name, its streams, on the slow trigger) for each silver query."""
        slow = set(self.settings.slow_streams)
        fast = tuple(s for s in self.streams if s.name not in slow)
        late = tuple(s for s in self.streams if s.name in slow)
        return [g for g in (("silver", fast, False), ("silver_slow", late, True)) if g[1]]

    def start(self, once: bool = False) -> list:
        """Start every query; `once` processes what is available now and stops."""
        st = self.settings
        unknown = sorted(set(st.slow_streams) - {s.name for s in STREAMS})
        if unknown:
            raise ValueError(f"pipeline.slow_streams: unknown stream(s) {', '.join(unknown)} "
                             f"(streams: {', '.join(s.name for s in STREAMS)})")
        trig = (lambda _s: {"availableNow": True}) if once else (
            lambda secs: {"processingTime": f"{secs} seconds"})
        slow = trig(st.slow_trigger_s)
        # Running continuously, a query runs a micro-batch only when rows came in: telemetry
        # never stops, so windows still close and state is still evicted on the next batch,
        # and the no-data batches (each a fixed cost of jobs and commits) are saved. A
        # run-once keeps them: its last batch must close what the data allows.
        self.spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", str(once).lower())
        if not self.tables_current:
            self.ensure_tables()
        started = []
        for query, streams, on_slow in self.groups():
            started.append(self._launch(
                BACKGROUND_POOL if on_slow else SILVER_POOL,
                lambda query=query, streams=streams, on_slow=on_slow: silver.start_silver(
                    self.spark, self.lake, streams, self._raw([s.name for s in streams]),
                    query=query, trigger=slow if on_slow else trig(st.silver_trigger_s),
                    dedupe_window=f"{st.dedupe_window_s} seconds", on_batch=self.on_batch,
                    bronze_tables=st.bronze_tables, write_threads=st.write_threads,
                    max_ahead_ms=st.max_event_ahead_s * 1000)))
        if once:
            _await(started)
        names = {s.name for s in self.streams}
        spark, lake, launch = self.spark, self.lake, self._launch
        if "request_windows" in names:
            # The stage minutes from the edge's histograms (request_stages holds only the
            # requests kept whole).
            lateness = next(s.lateness_s for s in self.streams if s.name == "request_windows")
            minutes = (gold_windows.TABLES if self.reader_tables
                       else gold_windows.DETECTOR_TABLES)
            started.append(launch(BACKGROUND_POOL, lambda: gold_windows.start_minute_tables(
                spark, lake, lateness, slow, tables=minutes)))
        if "offset_commits" in names and self.reader_tables:
            started.append(launch(BACKGROUND_POOL, lambda: gold.start_offset_commits_1m(
                spark, lake, gold.COMMITS_WATERMARK, slow)))
        if {"offset_commits", "partition_offsets"} <= names and self.reader_tables:
            started.append(launch(BACKGROUND_POOL, lambda: gold.start_offset_lag_1m(
                spark, lake, slow, st.offset_lag_lookback_days)))
        if once:
            _await(started)
        for make in self.extra_queries:
            started.append(launch(None, lambda make=make: make(trig(st.detect_trigger_s))))
        if once:
            _await(started)
        self.queries = started
        if self.reader_tables:
            register_tables(self.spark, self.lake)
        return started

    def _launch(self, pool: str | None, start: Callable[[], object]):
        """Start a query with `start`, its jobs in scheduler `pool` (None: the default; the
        detector query sets its own), and keep both to start it again after a failure."""
        if pool is None:
            q = start()
        else:
            context = self.spark.sparkContext
            context.setLocalProperty("spark.scheduler.pool", pool)
            try:
                q = start()
            finally:
                context.setLocalProperty("spark.scheduler.pool", None)
        self._starters[q.name] = (pool, start)
        self.backoff.started(q.name, time.monotonic())
        return q

    def restart_failed(self, now: float | None = None) -> list[str]:
        """Start again every query that stopped with an error, once its backoff has passed
        (`RestartBackoff`): it resumes from its checkpoint. Each failure is logged once with
        the query's name, its error and when it starts again; while it waits, the query
        stays in `queries`, inactive, which the exporter reports as down. Returns the names
        started again."""
        now = time.monotonic() if now is None else now
        again = []
        for i, q in enumerate(self.queries):
            if q.isActive or q.name not in self._starters:
                continue
            error = q.exception()
            if error is None:
                continue                       # stopped on purpose
            name = q.name
            if not self.backoff.waiting(name):
                delay = self.backoff.failed(name, now)
                log.error("query %s failed; starting it again from its checkpoint in %.0f s: "
                          "%s", name, delay, _cause_line(error))
            elif self.backoff.due(name, now):
                try:
                    self.queries[i] = self._launch(*self._starters[name])
                except Exception as e:  # noqa: BLE001 - the cause may last: try again later
                    delay = self.backoff.failed(name, now)
                    log.error("query %s could not start again; next try in %.0f s: %s",
                              name, delay, _cause_line(e))
                    continue
                log.warning("query %s started again from its checkpoint", name)
                again.append(name)
        return again

    def process_available(self) -> None:
        """Run every query over all data available now, in dependency order, then return."""
        self.start(once=True)
        self.queries = []

    def stop(self, batch_wait_s: float = 60.0) -> None:
        """Stop every query between two of its micro-batches where possible, all at once.

        Each query is stopped the first moment it runs no batch; one still in a batch
        after `batch_wait_s` is interrupted, which is safe too (the batch is replayed on
        restart and every write is idempotent), just slower to recover. All at once, not
        one after another: a query waiting for its turn goes on starting batches, so a
        stop took as long as every query's batches in turn.
        """
        deadline = time.monotonic() + batch_wait_s
        running = list(reversed(self.queries))
        while running:
            late, busy = time.monotonic() >= deadline, []
            for q in running:
                try:
                    if not late and q.isActive and q.status.get("isTriggerActive"):
                        busy.append(q)
                    else:
                        q.stop()
                except Exception as e:  # noqa: BLE001 - stop the rest (JVM may be gone)
                    log.warning("stopping a query: %s",
                                str(e).splitlines()[0] if str(e) else e)
            running = busy
            if running:
                time.sleep(0.2)
        self.queries = []

    # ---- progress ----------------------------------------------------------------------

    def check(self) -> None:
        for q in self.queries:
            if not q.isActive and q.exception() is not None:
                raise PipelineFailed(f"query {q.name} stopped: {q.exception()}")

    def progress_lines(self) -> list[str]:
        lines = []
        for q in self.queries:
            p = q.lastProgress
            if not q.isActive and q.name in self._starters and q.exception() is not None:
                lines.append(f"  {q.name:28s} failed, starting again after a backoff")
                continue
            if not p:
                lines.append(f"  {q.name:28s} starting")
                continue
            dur = (p.get("durationMs") or {}).get("triggerExecution", 0) / 1000
            dropped = sum(op.get("numRowsDroppedByWatermark", 0)
                          for op in p.get("stateOperators", []))
            extra = f", {dropped} late rows left out" if dropped else ""
            lines.append(f"  {q.name:28s} batch {p['batchId']:>5}  {p['numInputRows']:>8,} rows"
                         f"  {p.get('processedRowsPerSecond', 0) or 0:>9,.0f} rows/s"
                         f"  last batch {dur:5.1f}s{extra}")
        return lines

    def run_until_stopped(self, stop: threading.Event, out=sys.stdout) -> None:
        t0 = time.monotonic()
        next_report = t0
        while not stop.is_set():
            self.restart_failed()
            if time.monotonic() >= next_report:
                print(f"[+{time.monotonic() - t0:.0f}s] {len(self.queries)} queries running",
                      file=out, flush=True)
                for line in self.progress_lines():
                    print(line, file=out, flush=True)
                next_report += self.settings.progress_interval_s
            stop.wait(0.5)


_NAMED = re.compile(r"[\w.$]+(Exception|Error): ")
_WRAPPERS = ("Python Proxy", "Py4JJavaError", "Traceback (most recent call last)")


def _cause_line(error) -> str:
    """The line of a query's error that says what went wrong: the last "Caused by:" of
    a Java trace (its root), else the first line naming an exception that is not one of
    the wrappers PySpark puts around it (a foreachBatch error arrives as "An exception
    was raised by the Python Proxy" with the Java trace below)."""
    lines = [x.strip() for x in str(error).splitlines() if x.strip()]
    if not lines:
        return type(error).__name__
    caused = [x for x in lines if x.startswith("Caused by:")]
    if caused:
        return caused[-1][len("Caused by:"):].strip()[:500]
    named = [x for x in lines if _NAMED.search(x) and not any(w in x for w in _WRAPPERS)]
    return (named[0] if named else lines[0])[:500]


def _await(queries) -> None:
    for q in queries:
        if q.isActive:
            q.awaitTermination()
        if q.exception() is not None:
            raise PipelineFailed(f"query {q.name} failed: {q.exception()}")


def _mkdirs(spark: SparkSession, path: str) -> None:
    jvm = spark.sparkContext._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).mkdirs(p)
