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

Event time is bounded per source, never by one clock for everyone. A row stamped more
than `max_ahead_ms` ahead of its ingest time goes to quarantine as ``future_event_time``
and moves nothing. The lateness bound is kept per source (`Stream.source_columns`: a
broker, a client): a broker whose clock runs behind, or one that was down, makes only its
own rows late, never another's. How far each source's newest row runs ahead of its ingest
time (its lead: negative is the delivery delay, positive a clock ahead) goes out per batch
(`on_batch`, the exporter's ``kmon_pipeline_source_clock_lead_seconds``), and a source with rows
too far ahead is warned about once. A source's high water is remembered for
`SOURCE_MEMORY_MS` after its last row, so the state stays bounded by the sources that are
alive.

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
import json
import logging
import threading
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

from infra.lake import Lake
from jobs.batch_appends import BatchAppends
from jobs.bronze import BRONZE_COLUMNS, STREAM
from jobs.streams import QUARANTINE, Stream
from jobs.streams import stream as stream_named
from jobs.validation import first_broken_rule, rules
from ingest.repeated_condition import RepeatedCondition
from schemas.quarantine import FUTURE_EVENT_TIME, MAX_EVENT_AHEAD_S

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
# The source of a row (`Stream.source_columns` joined by "/"), beside the decoded record.
SOURCE = "_source"
SOURCE_MAP = MapType(StringType(), LongType())
# A source's high water is forgotten this long after the batch that last moved it; rows of
# a source back from a longer silence are judged afresh.
SOURCE_MEMORY_MS = 3_600_000
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
    StructField("source_high_water", SOURCE_MAP),
    StructField("source_lead_ms", SOURCE_MAP),
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
    "source_high_water": "Per source with valid rows in the batch (cluster/broker, "
                         "cluster/client_id or cluster): its newest event time so far, what "
                         "its next rows' lateness is measured from",
    "source_lead_ms": "Per source in the batch: its newest event time minus its ingest time "
                      "(negative: the delivery delay; positive: a clock running ahead)",
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


# The record id at the head of a line, as agents write it (ingest/sinks.py); an id with a
# quote or a backslash, or longer than the head, is read by its JSON path instead (the
# same bytes always take the same path, so a repeat gets the same key).
HEAD_RECORD_ID = r'^\{"record_id":"([^"\\]*)"'
HEAD_CHARS = 512


def dedupe_key() -> F.Column:
    """What makes two raw rows repeats of each other: the record's id (from the head of
    the line when it is there: its JSON path parses the whole value, at two thirds the
    cost of decoding it), else (a row that is not a record) where it came from and what
    it says."""
    head = F.regexp_extract(F.substring("value", 1, HEAD_CHARS), HEAD_RECORD_ID, 1)
    return F.coalesce(F.nullif(head, F.lit("")),
                      F.get_json_object("value", "$.record_id"),
                      F.sha2(F.concat_ws("|", "source_file", "kafka_topic",
                                         F.col("kafka_partition").cast("string"),
                                         F.col("kafka_offset").cast("string"), "value"), 256))


def _event_ms(stream: Stream) -> F.Column:
    return F.col("ingest_ts_ms") if stream.name == QUARANTINE else F.col("ts_ms")


def source_key(stream: Stream) -> F.Column:
    """A row's source: its `Stream.source_columns` joined by "/" (the quarantine stream's
    rows have none)."""
    if stream.name == QUARANTINE:
        return F.lit(None).cast("string")
    return F.concat_ws("/", *[F.coalesce(F.col(c).cast("string"), F.lit(""))
                              for c in stream.source_columns])


def classify(batch: DataFrame, stream: Stream, high_water: dict[str, int] | None,
             max_ahead_ms: int = MAX_EVENT_AHEAD_S * 1000) -> DataFrame:
    """Flatten a decoded batch and add `_source`, `_reason` (null: valid) and `_late` (within
    bound); the raw value is kept on rejected rows only. `high_water`: each source's high
    water before this batch."""
    table = stream.table
    corrupt = F.col("r").isNull() | F.col(f"r.{CORRUPT}").isNotNull()
    flat = (batch.select("r.*", *SOURCE_COLUMNS, corrupt.alias("_unparsed")).drop(CORRUPT)
            .withColumn(SOURCE, source_key(stream)))
    # A value that is JSON but did not fit the schema (a string where a number belongs)
    # is "wrong_type"; anything else that did not parse is "not_json".
    reason = (F.when(F.col("_unparsed") & F.expr(f"try_parse_json({RAW})").isNotNull(),
                     F.lit("wrong_type"))
              .when(F.col("_unparsed"), F.lit("not_json"))
              .otherwise(first_broken_rule(rules(table))))
    if stream.name != QUARANTINE:
        ahead = F.col("ts_ms") - F.unix_millis("ingest_ts")
        reason = F.coalesce(reason, F.when(ahead > max_ahead_ms, F.lit(FUTURE_EVENT_TIME)))
    late = F.lit(False)
    if stream.lateness_s is not None and high_water:
        # One literal, folded once per batch; a source not in it has no high water yet. A
        # map lookup scans the keys (one per source: thousands in a fleet), so only a row
        # older than the newest mark, which alone can be behind its own, looks it up.
        marks = F.from_json(F.lit(json.dumps(high_water)), SOURCE_MAP)
        event_ms = _event_ms(stream)
        behind = F.when(event_ms < max(high_water.values()),
                        F.element_at(marks, F.col(SOURCE)) - event_ms)
        reason = F.coalesce(reason, F.when(behind > stream.lateness_s * 1000,
                                           F.lit("late_beyond_watermark")))
        late = F.coalesce(behind > 0, F.lit(False))
    # The raw value stays on the rejected rows only: quarantine keeps it, a valid row is
    # kept by its columns, and the classified rows are held in memory while they are
    # written.
    return (flat.withColumn("_reason", reason).withColumn("_late", late & reason.isNull())
            .withColumn(RAW, F.when(F.col("_reason").isNotNull(), F.col(RAW))))


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


class HighWater:
    """The high waters after a batch: per stream (the table's column) and per stream and
    source ([high water, batch_ts_ms of the batch that last moved it])."""

    def __init__(self, streams: dict[str, int] | None = None,
                 sources: dict[str, dict[str, list[int]]] | None = None) -> None:
        self.streams = streams or {}
        self.sources = sources or {}

    def of_sources(self, stream: str) -> dict[str, int]:
        return {k: v[0] for k, v in self.sources.get(stream, {}).items()}


def previous_high_water(spark: SparkSession, lake: Lake, query: str,
                        batch_id: int) -> HighWater:
    """The high waters after the last batch of `query` before `batch_id`: per stream over
    every batch, per source over the batches of the last `SOURCE_MEMORY_MS` (what the
    running query remembers too; streams and sources with no rows yet are absent)."""
    from delta.tables import DeltaTable

    path = lake.table("gold", BATCHES_TABLE)
    if not DeltaTable.isDeltaTable(spark, path):
        return HighWater()
    before = (spark.read.format("delta").load(path)
              .where((F.col("query") == query) & (F.col("batch_id") < batch_id)))
    rows = before.groupBy("stream").agg(F.max("high_water_ms").alias("hw"),
                                        F.max("batch_ts_ms").alias("at")).collect()
    streams = {r["stream"]: r["hw"] for r in rows if r["hw"] is not None}
    last = max((r["at"] for r in rows if r["at"] is not None), default=None)
    sources: dict[str, dict[str, list[int]]] = {}
    if last is not None and "source_high_water" in before.columns:
        marks = (before.where(F.col("batch_ts_ms") >= last - SOURCE_MEMORY_MS)
                 .select("stream", "batch_ts_ms", F.explode("source_high_water"))
                 .groupBy("stream", "key").agg(F.max("value").alias("hw"),
                                               F.max("batch_ts_ms").alias("at")).collect())
        for r in marks:
            sources.setdefault(r["stream"], {})[r["key"]] = [r["hw"], r["at"]]
    return HighWater(streams, sources)


def partition_columns(stream: Stream) -> tuple[str, ...]:
    """Time range first (every incident query has one), then cluster; quarantine by date."""
    return ("date",) if stream.name == QUARANTINE else ("date", "cluster")


_TOTALS = ("rows_in", "rows_valid", "late_in", "late_out", "ahead")


def _counts(flat: DataFrame, stream: Stream) -> dict:
    """A stream's counts in a batch, and per source (`sources`: source -> its newest valid
    event time `max_ms`, its `lead_ms` and how many rows were too far `ahead`)."""
    valid = F.col("_reason").isNull()
    event = _event_ms(stream)
    lead = (F.max(F.col("ts_ms") - F.unix_millis("ingest_ts")) if stream.name != QUARANTINE
            else F.lit(None).cast("long"))
    rows = flat.groupBy(SOURCE).agg(
        F.count(F.lit(1)).alias("rows_in"),
        F.sum(valid.cast("long")).alias("rows_valid"),
        F.sum(F.col("_late").cast("long")).alias("late_in"),
        F.sum((F.col("_reason") == "late_beyond_watermark").cast("long")).alias("late_out"),
        F.sum((F.col("_reason") == FUTURE_EVENT_TIME).cast("long")).alias("ahead"),
        F.max(F.when(valid, event)).alias("max_ms"),
        F.min(F.when(valid, event)).alias("min_ms"),
        lead.alias("lead_ms")).collect()
    out: dict = {k: sum(r[k] or 0 for r in rows) for k in _TOTALS}
    out["max_ms"] = max((r["max_ms"] for r in rows if r["max_ms"] is not None), default=None)
    out["min_ms"] = min((r["min_ms"] for r in rows if r["min_ms"] is not None), default=None)
    out["sources"] = {r[SOURCE]: {"max_ms": r["max_ms"], "lead_ms": r["lead_ms"],
                                  "ahead": r["ahead"] or 0}
                      for r in rows if r[SOURCE] is not None}
    return out


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
                 on_batch=None, bronze_tables: bool = True, write_threads: int = 4,
                 max_ahead_ms: int = MAX_EVENT_AHEAD_S * 1000):
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
                                bronze_tables=bronze_tables, write_threads=write_threads,
                                max_ahead_ms=max_ahead_ms)
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
                 write_threads: int = 4, max_ahead_ms: int = MAX_EVENT_AHEAD_S * 1000) -> None:
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
        self.last_hw = HighWater()
        self.max_ahead_ms = max_ahead_ms
        self.clocks = RepeatedCondition(log)

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
            self.warn_clocks_ahead(counts)
            log.info("%s batch %d: %d rows of %d streams in %s", self.query, batch_id,
                     sum(c["rows_in"] for c in counts.values()), len(present), phases)
            if self.on_batch is not None:
                for row in stats:
                    self.on_batch(row)
        finally:
            for df in held:
                release(df)

    def warn_clocks_ahead(self, counts: dict) -> None:
        """Warn once per stream and source whose rows run too far ahead of ingest time, and
        when that ends."""
        for name, c in counts.items():
            for source, st in c["sources"].items():
                if st["ahead"]:
                    self.clocks.occurred(
                        (name, source), "%s: %s rows of %s are stamped %.0f s ahead of their "
                        "ingest time (its clock runs ahead?); they go to quarantine as %s",
                        name, st["ahead"], source, (st["lead_ms"] or 0) / 1000,
                        FUTURE_EVENT_TIME)
                else:
                    self.clocks.ended((name, source))

    def high_water_before(self, batch_id: int) -> HighWater:
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
                      hw_before: HighWater, held: list[DataFrame],
                      phases: _Phases) -> tuple[dict[str, DataFrame], dict]:
        """Per stream, in parallel: silver.<stream> (and bronze.<stream>); return each
        stream's classified rows and counts."""
        tasks: list[tuple[str, object]] = [
            (f"silver.{name}", functools.partial(self.decode_count_write, batch, batch_id,
                                                 name, hw_before.of_sources(name), held))
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
                           high_water: dict[str, int], held: list[DataFrame]):
        """One stream: decode and classify once (kept), count, append the valid rows to
        silver.<name>; return (classified rows, counts)."""
        s = self.by_name[name]
        flat = classify(decode(batch.where(F.col(STREAM) == name), s.table), s,
                        high_water, self.max_ahead_ms).localCheckpoint(eager=True)
        with self.lock:
            held.append(flat)
        c = _counts(flat, s)
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


def batch_stats(query: str, batch_id: int, counts: dict, hw_before: HighWater,
                now_ms: int) -> tuple[list[dict], HighWater]:
    """The gold.pipeline_batches rows of a batch (one per stream, in `counts`' order) and
    the high waters after it (a source's forgotten `SOURCE_MEMORY_MS` after it last moved)."""
    # every stream's sources are pruned by this batch's time, as the read-back does
    hw = HighWater(dict(hw_before.streams),
                   {name: kept for name, sources in hw_before.sources.items()
                    if (kept := {k: v for k, v in sources.items()
                                 if now_ms - v[1] <= SOURCE_MEMORY_MS})})
    stats = []
    for name, c in counts.items():
        high = max([v for v in (hw_before.streams.get(name), c["max_ms"]) if v is not None],
                   default=None)
        if high is not None:
            hw.streams[name] = high
        sources = dict(hw.sources.get(name, {}))
        moved = {}
        for source, st in c["sources"].items():
            if st["max_ms"] is not None:
                moved[source] = max(st["max_ms"], sources.get(source, [st["max_ms"]])[0])
                sources[source] = [moved[source], now_ms]
        if sources:
            hw.sources[name] = sources
        stats.append({"query": query, "batch_id": batch_id, "stream": name,
                      "rows_in": c["rows_in"] or 0, "rows_valid": c["rows_valid"] or 0,
                      "rows_quarantined": (c["rows_in"] or 0) - (c["rows_valid"] or 0),
                      "rows_late_within_bound": c["late_in"] or 0,
                      "rows_late_beyond_bound": c["late_out"] or 0,
                      "high_water_ms": high, "batch_ts_ms": now_ms,
                      "source_high_water": moved,
                      "source_lead_ms": {k: st["lead_ms"] for k, st in c["sources"].items()
                                         if st["lead_ms"] is not None},
                      # not in the table: for on_batch (jobs/silver_commits.py)
                      "low_ms": c["min_ms"]})
    return stats, hw
