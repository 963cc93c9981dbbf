"""Silver: typed rows from the raw telemetry, validated; every rejected row goes to quarantine.

One streaming query per group of streams (jobs/streams.py; the pipeline runs two groups,
``silver`` and ``silver_slow``, on their own triggers) reads the group's raw source
(jobs/bronze.py), drops repeats of the same ``record_id`` within a stream (an agent
re-sends after a crash) within a bounded watermark, and in each micro-batch, for each
stream that had rows:

- appends the raw rows to ``bronze.<stream>`` (unless the pipeline keeps no bronze);
- decodes each value with the stream's schema from schemas/ (`from_json`, no Python on
  the row path) and splits rows by the table's rules (jobs/validation.py): rows that
  pass are appended to ``silver.<stream>``; rows that are not JSON, break a rule, or
  whose event time is more than the stream's lateness bound behind the newest event time
  seen so far go to ``silver.quarantine`` (schemas/quarantine.py) with the reason and
  the raw value; rows late but within the bound are kept and counted;
- writes one row to ``gold.pipeline_batches`` with the counts (rows in, valid,
  quarantined, late) and the event-time high water.

The work of a batch (`SilverBatches`, a method per step): materialize it once
(localCheckpoint), find its streams (a count, no decoding), then per stream, in parallel
tasks (`write_threads`): decode and classify once, count, append the valid rows; then the
quarantine rows and the counts. Each batch logs how long each part took.

One query for many streams, not one each: a micro-batch has a fixed cost (planning, the
offset and commit logs, the state store, a Delta commit for the counts), and nine
queries paying it every few seconds were most of what two cores could do.

Every write is idempotent per batch (jobs/batch_appends.py: a mark per commit, checked
when a query starts), so a restart that replays a batch writes nothing twice. The high water of batch N is read back from
``gold.pipeline_batches`` (rows of batches before N), so a replayed batch is judged
exactly as it was the first time.

The stream ``quarantine`` (what agents could not parse) goes through the same job: its
valid rows are the quarantine rows themselves.
"""

from __future__ import annotations

import functools
import logging
import threading
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from infra.lake import Lake
from jobs.batch_appends import BatchAppends
from jobs.bronze import BRONZE_COLUMNS, STREAM
from jobs.streams import QUARANTINE, Stream
from jobs.streams import stream as stream_named
from jobs.validation import first_broken_rule, rules

log = logging.getLogger(__name__)

RAW_MAX_CHARS = 16 * 1024
BATCHES_TABLE = "pipeline_batches"
# A micro-batch's valid rows of a stream are written in one task (one file per date) for
# each this many rows. Without it every batch wrote a file per shuffle partition of the
# dedupe (spark.sql.shuffle.partitions, 4 here) to every table, a table gained ~1,400
# small files an hour until maintenance compacted it, and the detector's reads slowed with
# the lake's age (bench/bench_lake_age.py). A fleet's big batches still write in parallel.
ROWS_PER_FILE = 500_000
QUARANTINE_STREAM = stream_named(QUARANTINE)
# Bronze columns carried beside the decoded record; bronze's `value` travels as `_raw`
# because records may have a column of that name (broker_metrics does).
RAW = "_raw"
SOURCE_COLUMNS = (RAW, "ingest_ts", "source_file", "kafka_topic", "kafka_partition",
                  "kafka_offset")

BATCH_SCHEMA = StructType([
    StructField("query", StringType()),
    StructField("batch_id", LongType()),
    StructField("stream", StringType()),
    StructField("rows_in", LongType()),
    StructField("rows_valid", LongType()),
    StructField("rows_quarantined", LongType()),
    StructField("rows_late_within_bound", LongType()),
    StructField("rows_late_beyond_bound", LongType()),
    StructField("high_water_ms", LongType()),
    StructField("batch_ts_ms", LongType()),
])

BATCH_COLUMNS = {
    "query": "Streaming query that wrote the batch: silver or silver_slow",
    "batch_id": "Micro-batch id of that query",
    "stream": "Telemetry stream",
    "rows_in": "Rows in the batch after repeats were dropped",
    "rows_valid": "Rows appended to the silver table",
    "rows_quarantined": "Rows sent to silver.quarantine (any reason, late included)",
    "rows_late_within_bound": "Valid rows older than the high water of earlier batches, "
                              "but within the stream's lateness bound",
    "rows_late_beyond_bound": "Rows quarantined as late_beyond_watermark",
    "high_water_ms": "Newest event time seen by this query up to and including this batch",
    "batch_ts_ms": "When the batch was written",
}


CORRUPT = "_corrupt_record"


def record_schema(table) -> StructType:
    return StructType([*table.SCHEMA.fields, StructField("record_id", StringType()),
                       StructField(CORRUPT, StringType())])


def decode(bronze: DataFrame, table) -> DataFrame:
    """Bronze rows -> the record's columns (under `r`) plus the raw value and where it came
    from."""
    return bronze.withColumnRenamed("value", RAW).select(
        F.from_json(RAW, record_schema(table),
                    {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}).alias("r"),
        *SOURCE_COLUMNS)


def dedupe_key() -> F.Column:
    """What makes two raw rows repeats of each other: the record's id, else (a row that
    is not a record) where it came from and what it says."""
    return F.coalesce(F.get_json_object("value", "$.record_id"),
                      F.sha2(F.concat_ws("|", "source_file", "kafka_topic",
                                         F.col("kafka_partition").cast("string"),
                                         F.col("kafka_offset").cast("string"), "value"), 256))


def _event_ms(stream: Stream) -> F.Column:
    return F.col("ingest_ts_ms") if stream.name == QUARANTINE else F.col("ts_ms")


def classify(batch: DataFrame, stream: Stream, high_water_ms: int | None) -> DataFrame:
    """Flatten a decoded batch and add `_reason` (null: valid) and `_late` (within bound)."""
    table = stream.table
    corrupt = F.col("r").isNull() | F.col(f"r.{CORRUPT}").isNotNull()
    flat = batch.select("r.*", *SOURCE_COLUMNS, corrupt.alias("_unparsed")).drop(CORRUPT)
    # A value that is JSON but did not fit the schema (a string where a number belongs)
    # is "wrong_type"; anything else that did not parse is "not_json".
    reason = (F.when(F.col("_unparsed") & F.expr(f"try_parse_json({RAW})").isNotNull(),
                     F.lit("wrong_type"))
              .when(F.col("_unparsed"), F.lit("not_json"))
              .otherwise(first_broken_rule(rules(table))))
    late = F.lit(False)
    if stream.lateness_s is not None and high_water_ms is not None:
        behind = F.lit(high_water_ms) - _event_ms(stream)
        reason = F.coalesce(reason, F.when(behind > stream.lateness_s * 1000,
                                           F.lit("late_beyond_watermark")))
        late = F.coalesce(behind > 0, F.lit(False))
    return flat.withColumn("_reason", reason).withColumn("_late", late & reason.isNull())


def valid_rows(flat: DataFrame, stream: Stream) -> DataFrame:
    table = stream.table
    derived = [F.expr(e).alias(c) for c, e in table.DERIVED.items()]
    out = (flat.where(F.col("_reason").isNull())
           .select(*[F.col(f.name) for f in table.SCHEMA.fields], *derived, "record_id"))
    return out.withColumn("date", F.to_date(stream.time_column))


def quarantine_rows(flat: DataFrame, stream: Stream) -> DataFrame:
    """Rejected rows in the shape of schemas/quarantine.py, whatever the stream."""
    def field(name: str, cast: str) -> F.Column:
        return F.get_json_object(RAW, f"$.{name}").try_cast(cast)

    origin = F.coalesce(F.col("kafka_topic"), F.col("source_file"))
    out = (flat.where(F.col("_reason").isNotNull())
           .select(field("cluster", "string").alias("cluster"),
                   field("broker", "int").alias("broker"),
                   F.lit(f"silver.{stream.name}").alias("source"),
                   F.col("_reason").alias("reason"),
                   F.substring(RAW, 1, RAW_MAX_CHARS).alias("raw"),
                   F.lit("utf8").alias("raw_encoding"),
                   F.octet_length(RAW).cast("long").alias("raw_bytes_len"),
                   (F.length(RAW) > RAW_MAX_CHARS).alias("raw_truncated"),
                   field("ts_ms", "long").alias("ts_ms"),
                   (F.unix_micros("ingest_ts") / 1000).cast("long").alias("ingest_ts_ms"),
                   origin.alias("origin"),
                   F.col("kafka_partition").alias("source_partition"),
                   F.col("kafka_offset").alias("source_offset"),
                   F.col("ingest_ts"),
                   "record_id"))
    return out.withColumn("date", F.to_date("ingest_ts"))


def previous_high_water(spark: SparkSession, lake: Lake, query: str,
                        batch_id: int) -> dict[str, int]:
    """Per stream, the high water after the last batch of `query` before `batch_id`
    (streams with no rows yet are absent)."""
    from delta.tables import DeltaTable

    path = lake.table("gold", BATCHES_TABLE)
    if not DeltaTable.isDeltaTable(spark, path):
        return {}
    rows = (spark.read.format("delta").load(path)
            .where((F.col("query") == query) & (F.col("batch_id") < batch_id))
            .groupBy("stream").agg(F.max("high_water_ms").alias("hw")).collect())
    return {r["stream"]: r["hw"] for r in rows if r["hw"] is not None}


def partition_columns(stream: Stream) -> tuple[str, ...]:
    """Time range first (every incident query has one), then cluster; quarantine by date."""
    return ("date",) if stream.name == QUARANTINE else ("date", "cluster")


def _counts(flat: DataFrame, stream: Stream) -> DataFrame:
    return flat.agg(
        F.lit(stream.name).alias("stream"),
        F.count(F.lit(1)).alias("rows_in"),
        F.sum(F.col("_reason").isNull().cast("long")).alias("rows_valid"),
        F.sum(F.col("_late").cast("long")).alias("late_in"),
        F.sum((F.col("_reason") == "late_beyond_watermark").cast("long")).alias("late_out"),
        F.max(F.when(F.col("_reason").isNull(), _event_ms(stream))).alias("max_ms"),
        F.min(F.when(F.col("_reason").isNull(), _event_ms(stream))).alias("min_ms"))


def release(checkpointed: DataFrame) -> None:
    """Free the blocks of a `localCheckpoint`ed DataFrame now (unpersist() does not: its
    rows are an RDD that Spark frees only when the JVM garbage-collects it)."""
    try:
        checkpointed._jdf.queryExecution().analyzed().rdd().unpersist(False)
    except Exception as e:  # noqa: BLE001 - a plan of another shape: Spark frees it later
        log.debug("could not free a checkpointed batch now: %s", e)


def run_parallel(tasks: list[tuple[str, object]], threads: int, phases: "_Phases",
                 phase: str) -> dict[str, object]:
    """Run a batch's tasks (table writes, per-stream work), `threads` at a time; return each
    task's result by name. The first failure is raised, naming the task, once every task
    has ended (the batch then fails and is replayed whole: each write is idempotent, so
    the tables written already are not written twice).

    Threads are `InheritableThread`s: Spark's local properties (the streaming query's job
    group, so stopping the query cancels their jobs; the scheduler pool) carry over."""
    from pyspark.util import InheritableThread

    errors: list[tuple[str, BaseException]] = []
    results: dict[str, object] = {}
    pending = list(tasks)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not pending or errors:
                    return
                what, task = pending.pop(0)
            t = time.monotonic()
            try:
                result = task()
            except BaseException as e:  # noqa: BLE001 - re-raised below, in the batch's thread
                with lock:
                    errors.append((what, e))
                continue
            with lock:
                results[what] = result
                phases.tasks[what] = time.monotonic() - t

    if threads <= 1 or len(tasks) <= 1:
        worker()
    else:
        workers = [InheritableThread(target=worker, daemon=True)
                   for _ in range(min(threads, len(tasks)))]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    phases.done(phase)
    if errors:
        what, e = errors[0]
        raise RuntimeError(f"{what}: {e}") from e
    return results


class _Phases:
    """Wall time of each phase of a micro-batch, for the log line that says where it went."""

    def __init__(self) -> None:
        self.start = self.last = time.monotonic()
        self.spent: dict[str, float] = {}
        self.tasks: dict[str, float] = {}   # each parallel task; they overlap

    def done(self, phase: str) -> None:
        now = time.monotonic()
        self.spent[phase] = self.spent.get(phase, 0.0) + now - self.last
        self.last = now

    def __str__(self) -> str:
        parts = ", ".join(f"{k} {v:.1f}" for k, v in self.spent.items())
        tasks = ", ".join(f"{k} {v:.1f}" for k, v in self.tasks.items())
        return f"{self.last - self.start:.1f} s ({parts}{f': {tasks}' if tasks else ''})"


def start_silver(spark: SparkSession, lake: Lake, streams: tuple[Stream, ...], raw: DataFrame,
                 *, query: str, trigger: dict | None = None, dedupe_window: str = "10 minutes",
                 on_batch=None, bronze_tables: bool = True, write_threads: int = 4):
    """Start the query `query` over a group of streams. `on_batch(stats_row_dict)` is called
    for each stream that had rows in a batch.

    `raw` holds the group's rows in the bronze shape with their `stream`
    (jobs/bronze.with_ingest_time). Repeats of a row (same stream and `dedupe_key`) within
    `dedupe_window` are dropped; each micro-batch then writes, per stream with rows, the
    raw rows to bronze.<stream> (when `bronze_tables`), the valid rows to silver.<stream>,
    and once for all streams the rejected rows to silver.quarantine and the counts to
    gold.pipeline_batches, `write_threads` tables at a time.
    """
    deduped = (raw.withColumn("dedupe_key", dedupe_key())
               .withWatermark("ingest_ts", dedupe_window)
               .dropDuplicatesWithinWatermark([STREAM, "dedupe_key"]))
    write_batch = SilverBatches(spark, lake, streams, query=query, on_batch=on_batch,
                                bronze_tables=bronze_tables, write_threads=write_threads)
    writer = (deduped.writeStream.queryName(query)
              .option("checkpointLocation", lake.checkpoint(query))
              .foreachBatch(write_batch))
    return writer.trigger(**(trigger or {"processingTime": "10 seconds"})).start()


class SilverBatches:
    """One silver query's micro-batch, in steps: the high water before it, the streams it
    holds, each stream decoded, counted and written, the batch's counts, then the rejected
    rows and the counts written. An instance is the query's `foreachBatch` function.

    It keeps, from one batch to the next, the high water after the last batch it wrote (so
    the next batch need not read gold.pipeline_batches) and the idempotent appends.
    """

    def __init__(self, spark: SparkSession, lake: Lake, streams: tuple[Stream, ...], *,
                 query: str, on_batch=None, bronze_tables: bool = True,
                 write_threads: int = 4) -> None:
        self.spark, self.lake, self.query = spark, lake, query
        self.by_name = {s.name: s for s in streams}
        self.on_batch = on_batch
        self.bronze_tables = bronze_tables
        self.write_threads = write_threads
        self.quarantine_path = lake.table("silver", QUARANTINE)
        self.batches_path = lake.table("gold", BATCHES_TABLE)
        self.appends = BatchAppends(spark)
        self.lock = threading.Lock()
        self.last_batch: int | None = None
        self.last_hw: dict[str, int] = {}

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        phases = _Phases()
        hw_before = self.high_water_before(batch_id)
        # Materialize the batch once (source read, dedupe state store): every job below
        # reads this copy. (A persisted batch was not enough: jobs started together each
        # ran the source and the dedupe again.)
        batch = batch.localCheckpoint(eager=True)
        held = [batch]
        phases.done("read")
        try:
            present = self.streams_present(batch)
            phases.done("streams")
            if not present:
                # Nothing came in (a no-data batch moving the watermark): no commits at
                # all; gold.pipeline_batches holds the batches that read rows.
                self.last_batch, self.last_hw = batch_id, hw_before
                return
            flats, counts = self.write_streams(batch, batch_id, present, hw_before, held,
                                               phases)
            stats, hw = batch_stats(self.query, batch_id, counts, hw_before,
                                    int(time.time() * 1000))
            self.write_rejected_and_counts(batch_id, flats, counts, stats, phases)
            self.last_batch, self.last_hw = batch_id, hw
            log.info("%s batch %d: %d rows of %d streams in %s", self.query, batch_id,
                     sum(c["rows_in"] for c in counts.values()), len(present), phases)
            if self.on_batch is not None:
                for row in stats:
                    self.on_batch(row)
        finally:
            for df in held:
                release(df)

    def high_water_before(self, batch_id: int) -> dict[str, int]:
        """Per stream, the high water before this batch: kept from the batch before, else
        read back (a restart, or a batch replayed)."""
        if self.last_batch == batch_id - 1:
            return self.last_hw
        return previous_high_water(self.spark, self.lake, self.query, batch_id)

    def streams_present(self, batch: DataFrame) -> list[str]:
        """The streams with rows in the batch, sorted (a count, no decoding); the others are
        left alone, no commits. ValueError for rows of a stream not in this query."""
        sizes = {r[STREAM]: r["count"] for r in batch.groupBy(STREAM).count().collect()}
        elsewhere = sorted(set(sizes) - set(self.by_name), key=str)
        if elsewhere:   # the source matched a topic or folder not in the group
            raise ValueError(f"{self.query}: {sum(sizes[n] for n in elsewhere)} rows of streams "
                             f"not in this query ({', '.join(map(str, elsewhere))}; "
                             f"this query reads {', '.join(self.by_name)})")
        return sorted(sizes)

    def write_streams(self, batch: DataFrame, batch_id: int, present: list[str],
                      hw_before: dict[str, int], held: list[DataFrame],
                      phases: _Phases) -> tuple[dict[str, DataFrame], dict]:
        """Per stream, in parallel: silver.<stream> (and bronze.<stream>); return each
        stream's classified rows and counts."""
        tasks: list[tuple[str, object]] = [
            (f"silver.{name}", functools.partial(self.decode_count_write, batch, batch_id,
                                                 name, hw_before.get(name), held))
            for name in present]
        tasks += [(f"bronze.{name}", functools.partial(
            self.appends.append, batch.where(F.col(STREAM) == name).select(*BRONZE_COLUMNS),
            self.lake.table("bronze", name), self.query, batch_id, ("ingest_date",)))
            for name in (present if self.bronze_tables else ())]
        done = run_parallel(tasks, self.write_threads, phases, "silver")
        flats = {name: done[f"silver.{name}"][0] for name in present}
        counts = {name: done[f"silver.{name}"][1] for name in present}
        return flats, counts

    def decode_count_write(self, batch: DataFrame, batch_id: int, name: str,
                           high_water_ms: int | None, held: list[DataFrame]):
        """One stream: decode and classify once (kept), count, append the valid rows to
        silver.<name>; return (classified rows, counts)."""
        s = self.by_name[name]
        flat = classify(decode(batch.where(F.col(STREAM) == name), s.table), s,
                        high_water_ms).localCheckpoint(eager=True)
        with self.lock:
            held.append(flat)
        c = _counts(flat, s).first()
        if c["rows_valid"]:
            files = -(-c["rows_valid"] // ROWS_PER_FILE)
            self.appends.append(valid_rows(flat, s).coalesce(files),
                                self.lake.table("silver", name), self.query, batch_id,
                                partition_columns(s))
        return flat, c

    def write_rejected_and_counts(self, batch_id: int, flats: dict[str, DataFrame],
                                  counts: dict, stats: list[dict], phases: _Phases) -> None:
        """The counts to gold.pipeline_batches and, if any, the rejected rows of every
        stream to silver.quarantine, in parallel."""
        rejected = [quarantine_rows(flats[name], self.by_name[name]) for name in counts
                    if name == QUARANTINE
                    or counts[name]["rows_valid"] != counts[name]["rows_in"]]
        last: list[tuple[str, object]] = [(f"gold.{BATCHES_TABLE}", functools.partial(
            self.appends.append, self.spark.createDataFrame(
                [{k: row[k] for k in BATCH_SCHEMA.fieldNames()} for row in stats], BATCH_SCHEMA),
            self.batches_path, f"{self.query}_batches", batch_id))]
        if rejected:
            last.append(("silver.quarantine", functools.partial(
                self.appends.append, functools.reduce(DataFrame.unionByName, rejected),
                self.quarantine_path, f"{self.query}_quarantine", batch_id,
                partition_columns(QUARANTINE_STREAM))))
        run_parallel(last, self.write_threads, phases, "quarantine+counts")


def batch_stats(query: str, batch_id: int, counts: dict, hw_before: dict[str, int],
                now_ms: int) -> tuple[list[dict], dict[str, int]]:
    """The gold.pipeline_batches rows of a batch (one per stream, in `counts`' order) and
    the high water after it."""
    hw = dict(hw_before)
    stats = []
    for name, c in counts.items():
        high = max([v for v in (hw_before.get(name), c["max_ms"]) if v is not None],
                   default=None)
        if high is not None:
            hw[name] = high
        stats.append({"query": query, "batch_id": batch_id, "stream": name,
                      "rows_in": c["rows_in"] or 0, "rows_valid": c["rows_valid"] or 0,
                      "rows_quarantined": (c["rows_in"] or 0) - (c["rows_valid"] or 0),
                      "rows_late_within_bound": c["late_in"] or 0,
                      "rows_late_beyond_bound": c["late_out"] or 0,
                      "high_water_ms": high, "batch_ts_ms": now_ms,
                      # not in the table: for on_batch (jobs/silver_commits.py)
                      "low_ms": c["min_ms"]})
    return stats, hw
