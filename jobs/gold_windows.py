"""Gold request stage tables from the edge's window histograms (ingest/request_windows.py).

silver.request_stages holds only the requests shipped whole (OffsetCommits, and every
request of request_log.full_brokers); the stage percentiles come from
silver.request_windows, by merging histograms exactly (core.histogram_merge; percentiles
within the bucket scheme's 2 %). Work follows brokers x request keys x windows, not
requests.

- ``gold.request_stages_1m``: per cluster, broker, API and minute, the requests and every
  stage's p50 / p99 / p999. Every request key of the API (Fetch:consumer and
  Fetch:follower, Produce's acks) and every emission of a window is merged;
  controller-listener traffic is left out (it is not client traffic). One more column,
  ``total_excl_remote_p99_ms`` (the p99 of total - remote per request, from its own
  histogram): the slow-broker baselines of the purgatory APIs read it
  (evaluation/inputs/request_windows.py), so an hour of baselines is 60 rows per
  broker and API instead of 360 windows' histograms.
- ``gold.request_keys_1m``: per cluster, broker, request key and minute, the counts,
  bytes, and every stage's p50 / p99 / p999 and max: the split the API rows merge away
  (consumer against follower fetches, Produce by acks).
- ``gold.fleet_stages_1m``: per cluster, request key and minute, the fleet rollup: the
  brokers that served the key, the counts, every stage's percentiles and max over all
  of them, and the merged histograms themselves, so a longer rollup (an hour, a day)
  merges these rows exactly instead of the per-broker ones.

When a minute is final: at request_windows' lateness bound after its end, by the
event-time high water of silver.request_windows (a late delta the agent sends within the
bound is in the minute; one later is not). The query's micro-batches only move the high
water; a finished minute's rows are then read back from silver (pruned by date and
ts_ms) and rolled up in one pass, so the query keeps no state but the high water and
the minutes done, and the tables themselves say which minutes are done after a restart
(each append is marked with the minute it ends at, through BatchAppends).

The rollup runs in Spark's Python workers on Arrow batches (`mapInArrow`): window rows
moved by broker, merged per broker and key (core.histogram_merge, numpy), then the key
minutes moved by broker for the API rows and by key for the fleet rows. Not Spark SQL's
higher-order functions (jobs/histogram_sql.py, which stays for the SQL that reads these
tables): they run interpreted row by row, and at 2,000 brokers one minute's rollup took
most of the 120 CPU-seconds two cores have in a minute, the vectorized merge a tenth of
it (bench/bench_minute_rollup.py). The price is a Python worker on every executor, with
kmon's code and libraries (a local session starts kmon's own interpreter).
"""

from __future__ import annotations

import logging
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, DoubleType, IntegerType, LongType, ShortType,
                               StringType, StructField, StructType)

from core import signals
from core.histogram_merge import merge, values_of
from infra.lake import Lake, skipping_properties
from jobs.batch_appends import BatchAppends, last_marked_batch
from jobs.gold import silver_stream
from jobs.histogram_sql import QUANTILES, quantile_label

log = logging.getLogger(__name__)

# The seven stage timings of the stage tables; the histograms also hold total_minus_remote,
# which only gold.request_stages_1m's total_excl_remote_p99_ms shows.
STAGES = ("total", *signals.STAGES)
OWN_TIME = "total_minus_remote"
OWN_TIME_P99 = "total_excl_remote_p99_ms"
COUNTS = ("requests", "errors", "request_bytes", "response_bytes")
MINUTE_MS = 60_000
# Minutes rolled up by one read at most: a query catching up after an outage reads its
# backlog in steps of bounded memory.
STEP_MINUTES = 10
_MINUTE = "minute_ms"


def _labels(stage: str) -> list[str]:
    return [f"{stage}_{quantile_label(q)}_ms" for q in QUANTILES]


def _percentile_columns(stages=STAGES) -> list[str]:
    return [c for s in stages for c in _labels(s)]


def _max_columns(stages=STAGES) -> list[str]:
    return [f"{s}_max_ms" for s in stages]


def _hist_columns(stages) -> list[str]:
    return [c for s in stages for c in (f"{s}_buckets", f"{s}_counts")]


def _group_numbers(table: pa.Table, cols: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(each row's group number, the first row of each group) for the groups of equal
    values of `cols` (a null is a value of its own)."""
    combined = np.zeros(table.num_rows, np.int64)
    for c in cols:
        codes = pc.dictionary_encode(table[c].combine_chunks()).indices
        codes = codes.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        combined = combined * (int(codes.max()) + 1) + codes
        combined = np.unique(combined, return_inverse=True)[1].astype(np.int64)
    return combined, np.unique(combined, return_index=True)[1]


def rollup(table: pa.Table, group_cols: Sequence[str], stages: Sequence[str], *,
           totals: Sequence[str] = (), maxes: Sequence[str] = (),
           keep: Sequence[str] = (), own_p99: bool = False,
           brokers: bool = False) -> pa.Table:
    """Per group of equal `group_cols`: those columns; the sums of `totals` and the max of
    ``<s>_max_ms`` for each s of `maxes` (null where every row's is null, as SQL's); with
    `brokers`, ``brokers``: the group's distinct brokers; per stage the
    p50 / p99 / p999 of its merged histogram (``<stage>_p99_ms``; null where it holds no
    count) and, for the stages of `keep`, the merged histogram itself (ascending ids,
    SMALLINT, and BIGINT counts); with `own_p99`, OWN_TIME_P99 from OWN_TIME's histogram."""
    group, first = _group_numbers(table, group_cols)
    groups = len(first)
    rows = pa.array(first)
    out = {c: table[c].take(rows) for c in group_cols}
    aggs = [(c, "sum") for c in totals] + [(f"{s}_max_ms", "max") for s in maxes]
    if brokers:
        aggs.append(("broker", "count_distinct"))
    if aggs:
        cols = {c: table[c] for c, _ in aggs}
        done = (pa.table({**cols, "_g": pa.array(group)}).group_by("_g").aggregate(aggs)
                .sort_by("_g"))
        for c, fn in aggs:
            name = "brokers" if fn == "count_distinct" else c
            out[name] = done[f"{c}_{fn}"]
    for s in dict.fromkeys((*stages, *keep, *((OWN_TIME,) if own_p99 else ()))):
        m = merge(s, table[f"{s}_buckets"], table[f"{s}_counts"], group, groups, QUANTILES,
                  keep=s in keep)
        valued = [pa.array(values_of(ids), mask=m.n == 0) for ids in m.quantile_ids]
        if s in stages:
            out.update(zip(_labels(s), valued))
        if own_p99 and s == OWN_TIME:
            out[OWN_TIME_P99] = valued[QUANTILES.index(0.99)]
        if s in keep:
            offsets = pa.array(m.offsets, pa.int32())
            out[f"{s}_buckets"] = pa.ListArray.from_arrays(offsets, pa.array(m.ids, pa.int16()))
            out[f"{s}_counts"] = pa.ListArray.from_arrays(offsets, pa.array(m.counts, pa.int64()))
    return pa.table(out)


def _schema(fields: list[tuple[str, object]]) -> StructType:
    """A StructType; never null: merged histograms (an empty one has no entries) and the
    count of brokers."""
    return StructType([StructField(n, t, nullable=not (n == "brokers" or n.endswith(
        ("_buckets", "_counts")))) for n, t in fields])


_HEAD = [(_MINUTE, LongType()), ("cluster", StringType())]
_PCTS = [(c, DoubleType()) for c in _percentile_columns()]


def _hist_fields(stages) -> list[tuple[str, object]]:
    return [(c, ArrayType(ShortType() if c.endswith("_buckets") else LongType()))
            for c in _hist_columns(stages)]


# Per minute, cluster, broker, API and key: everything the three tables are made from.
_KEY_MINUTES = _schema([*_HEAD, ("broker", IntegerType()), ("api", StringType()),
                        ("key", StringType()), *[(c, LongType()) for c in COUNTS],
                        *[(c, DoubleType()) for c in _max_columns((*STAGES, OWN_TIME))],
                        *_PCTS, *_hist_fields((*STAGES, OWN_TIME))])
_API_MINUTES = _schema([*_HEAD, ("broker", IntegerType()), ("api", StringType()),
                        ("requests", LongType()), *_PCTS, (OWN_TIME_P99, DoubleType())])
_FLEET_MINUTES = _schema([*_HEAD, ("api", StringType()), ("key", StringType()),
                          *[(c, LongType()) for c in COUNTS],
                          *[(c, DoubleType()) for c in _max_columns()],
                          ("brokers", LongType()), *_PCTS, *_hist_fields(STAGES)])


def _in_workers(make: Callable[[pa.Table], pa.Table], schema: StructType
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A mapInArrow function: the partition's batches as one table, `make` of it, with the
    columns in `schema`'s order."""
    names = [f.name for f in schema.fields]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = list(batches)
        if batches and (table := pa.Table.from_batches(batches)).num_rows:
            yield from make(table).select(names).to_batches()
    return run


def _key_minutes(table: pa.Table) -> pa.Table:
    return rollup(table, [_MINUTE, "cluster", "broker", "api", "key"], STAGES,
                  totals=COUNTS, maxes=(*STAGES, OWN_TIME), keep=(*STAGES, OWN_TIME))


def _api_minutes(table: pa.Table) -> pa.Table:
    return rollup(table, [_MINUTE, "cluster", "broker", "api"], STAGES, totals=("requests",),
                  own_p99=True)


def _fleet_minutes(table: pa.Table) -> pa.Table:
    return rollup(table, [_MINUTE, "cluster", "api", "key"], STAGES, totals=COUNTS,
                  maxes=STAGES, keep=STAGES, brokers=True)


def _framed(df: DataFrame, cols: Sequence[str]) -> DataFrame:
    """The table's columns: the minute as window_start / window_end, `cols`, date."""
    start = F.timestamp_millis(F.col(_MINUTE))
    return df.select(start.alias("window_start"),
                     F.timestamp_millis(F.col(_MINUTE) + MINUTE_MS).alias("window_end"),
                     *cols, F.to_date(start).alias("date"))


def _key_rows(windows: DataFrame) -> DataFrame:
    """Per minute, cluster, broker, API and key (`_KEY_MINUTES`) from window rows."""
    rows = (windows.where(~F.coalesce(F.col("is_controller_traffic"), F.lit(False)))
            .select((F.col("ts_ms") - F.col("ts_ms") % MINUTE_MS).alias(_MINUTE), "cluster",
                    "broker", "api", "key", *COUNTS, *_max_columns((*STAGES, OWN_TIME)),
                    *_hist_columns((*STAGES, OWN_TIME))))
    return (rows.repartition("cluster", "broker")
            .mapInArrow(_in_workers(_key_minutes, _KEY_MINUTES), _KEY_MINUTES))


def minute_tables(windows: DataFrame) -> dict[str, DataFrame]:
    """The three minute tables' rows from silver.request_windows rows (batch): every minute
    the rows hold, complete as far as the rows are. Each table computes the key minutes
    anew: to write all three, `write_minute_tables`."""
    return _tables(_key_rows(windows))


def write_minute_tables(windows: DataFrame, write: Callable[[str, DataFrame], None]) -> bool:
    """`write(table, rows)` for each minute table of `minute_tables(windows)`, the key
    minutes computed once for the three; False (nothing written) when there are none."""
    keys = _key_rows(windows).persist()
    try:
        if keys.isEmpty():
            return False
        for table, df in _tables(keys).items():
            write(table, df)
        return True
    finally:
        keys.unpersist()


def _tables(keys: DataFrame) -> dict[str, DataFrame]:
    # The key minutes are made per partition of (cluster, broker) and mapInArrow moves no
    # row to another partition: each broker's API rows need no shuffle of their own.
    api = keys.mapInArrow(_in_workers(_api_minutes, _API_MINUTES), _API_MINUTES)
    fleet = (keys.repartition("cluster", "api", "key")
             .mapInArrow(_in_workers(_fleet_minutes, _FLEET_MINUTES), _FLEET_MINUTES))
    return {
        "request_stages_1m": _framed(api, ["cluster", "broker", "api", "requests",
                                           *_percentile_columns(), OWN_TIME_P99]),
        "request_keys_1m": _framed(keys, ["cluster", "broker", "api", "key", *COUNTS,
                                          *_percentile_columns(), *_max_columns()]),
        "fleet_stages_1m": _framed(fleet, ["cluster", "api", "key", "brokers", *COUNTS,
                                           *_percentile_columns(), *_max_columns(),
                                           *_hist_columns(STAGES)]),
    }


TABLES = ("request_stages_1m", "request_keys_1m", "fleet_stages_1m")
DETECTOR_TABLES = ("request_stages_1m",)   # the slow-broker baselines read it


def ensure_minute_tables(spark: SparkSession, lake: Lake) -> None:
    """Create the minute tables, empty, where they are not there: a query of the report or
    the cookbook before the first finished minute must find the table, not fail on a
    missing one."""
    from delta.tables import DeltaTable

    empty = _tables(spark.createDataFrame([], _KEY_MINUTES))
    for table, df in empty.items():
        path = lake.table("gold", table)
        if not DeltaTable.isDeltaTable(spark, path):
            (df.write.format("delta").options(**skipping_properties(df.columns))
             .partitionBy("date").save(path))


def _app(table: str) -> str:
    return f"gold_minutes_{table}"


class MinuteRollup:
    """The minute tables' query state: the high water and, per table, the first minute not
    in it. A step's appends are marked with the minute the step ends at, so a restart
    knows the minutes done from the tables, and a step replayed is written once."""

    def __init__(self, spark: SparkSession, lake: Lake, lateness_ms: int,
                 tables: Sequence[str] = TABLES) -> None:
        self.spark, self.lake, self.lateness_ms = spark, lake, int(lateness_ms)
        self.tables = tuple(tables)
        self.appends = BatchAppends(spark)
        self.high_water: int | None = None
        self.next: dict[str, int] | None = None

    def _silver(self) -> DataFrame:
        return self.spark.read.format("delta").load(self.lake.table("silver",
                                                                    "request_windows"))

    def _silver_rows(self, low: int, high: int) -> DataFrame:
        """silver.request_windows' rows of [low, high), pruned by date."""
        return self._silver().where(
            F.col("date").between(F.to_date(F.timestamp_millis(F.lit(low))),
                                  F.to_date(F.timestamp_millis(F.lit(high - 1))))
            & (F.col("ts_ms") >= low) & (F.col("ts_ms") < high))

    def _minutes_done(self) -> dict[str, int]:
        """Per table the first minute not in it: after its newest mark, or (a table written
        before marks) after its newest minute; for a table with no minute, the first
        minute of silver.request_windows."""
        out: dict[str, int | None] = {}
        for table in self.tables:
            path = self.lake.table("gold", table)
            mark = last_marked_batch(self.spark, path, _app(table))
            if mark is not None:
                out[table] = mark * MINUTE_MS
                continue
            newest = (self.spark.read.format("delta").load(path)
                      .agg(F.max("window_start").alias("m")).first()["m"])
            out[table] = None if newest is None else int(newest.timestamp() * 1000) + MINUTE_MS
        if None in out.values():
            first = self._silver().agg(F.min("ts_ms").alias("m")).first()["m"]
            out = {t: first - first % MINUTE_MS if v is None else v for t, v in out.items()}
        return out

    def on_batch(self, batch: DataFrame, batch_id: int) -> None:
        """A micro-batch of silver.request_windows (its ts_ms): move the high water, then
        roll up every minute it finished."""
        top = batch.agg(F.max("ts_ms").alias("m")).first()["m"]
        if top is None:
            return
        self.high_water = max(top, self.high_water or top)
        if self.next is None:
            self.next = self._minutes_done()
        finished = (self.high_water - self.lateness_ms) // MINUTE_MS * MINUTE_MS
        while (low := min(self.next.values())) < finished:
            if finished - low > STEP_MINUTES * MINUTE_MS:
                low = self._skip_silence(low, finished)
                if low >= finished:
                    break
            self._step(low, min(finished, low + STEP_MINUTES * MINUTE_MS))

    def _skip_silence(self, low: int, finished: int) -> int:
        """Where a backlog's first minute with rows is (`finished` when none is): every
        table moves past the minutes before it at once. After hours without telemetry the
        backlog is otherwise read in STEP_MINUTES steps of nothing, a Spark job each."""
        first = self._silver_rows(low, finished).agg(F.min("ts_ms").alias("m")).first()["m"]
        start = finished if first is None else first // MINUTE_MS * MINUTE_MS
        if start > low:
            self.next = {t: max(v, start) for t, v in self.next.items()}
            log.info("gold minute tables: no telemetry in minutes %d to %d", low, start)
        return start

    def _step(self, low: int, high: int) -> None:
        """Roll up the minutes in [low, high) into every table still without them."""
        rows = self._silver_rows(low, high)

        def append(table: str, df: DataFrame) -> None:
            if table not in self.next:   # a table not kept up here: not computed
                return
            start = self.next[table]
            if start >= high:
                return
            if start > low:
                df = df.where(F.col("window_start") >= F.timestamp_millis(F.lit(start)))
            # merge_schema: a gold.request_stages_1m written by an older kmon lacks
            # OWN_TIME_P99.
            self.appends.append(df, self.lake.table("gold", table), _app(table),
                                high // MINUTE_MS, partition_by=("date",), merge_schema=True)

        write_minute_tables(rows, append)
        self.next = {t: max(v, high) for t, v in self.next.items()}
        log.info("gold minute tables: minutes %d to %d rolled up", low, high)


def start_minute_tables(spark: SparkSession, lake: Lake, lateness_s: float,
                        trigger: dict | None = None, tables: Sequence[str] = TABLES):
    """The minute tables' streaming query over silver.request_windows (`tables`: those it
    keeps up; every one by default)."""
    ensure_minute_tables(spark, lake)
    roll = MinuteRollup(spark, lake, int(lateness_s * 1000), tables)
    writer = (silver_stream(spark, lake, "request_windows").select("ts_ms").writeStream
              .queryName("gold_request_windows_1m")
              .option("checkpointLocation", lake.checkpoint("gold_request_minutes"))
              .foreachBatch(roll.on_batch))
    return writer.trigger(**(trigger or {"processingTime": "60 seconds"})).start()


_STAGE_PERCENTILES = ("Percentiles of each stage: total, request_queue, local, remote, "
                      "throttle, response_queue, send (ms; from merged histograms, within "
                      "2 % of the exact value)")
_COUNT_DOCS = {
    "requests": "Requests completed in the minute",
    "errors": "Of those, responses with an error code",
    "request_bytes": "Bytes of the requests",
    "response_bytes": "Bytes of the responses",
}
GOLD_COLUMNS = {
    "request_stages_1m": {
        "window_start": "Start of the minute (UTC)",
        "window_end": "End of the minute (exclusive)",
        "cluster": "Watched cluster",
        "broker": "Broker node id",
        "api": "Request type (Produce, Fetch, ...)",
        "requests": "Requests completed in the minute",
        "<stage>_p50_ms / _p99_ms / _p999_ms": _STAGE_PERCENTILES,
        "date": "Partition column: the minute's UTC date",
        OWN_TIME_P99: "p99 of (total - remote) per request, the own time the slow-broker "
                      "rule judges for purgatory APIs (Fetch, JoinGroup, SyncGroup): its "
                      "baselines read it; floored at 0 (ms, within 2 %)",
    },
    "request_keys_1m": {
        "window_start": "Start of the minute (UTC)",
        "window_end": "End of the minute (exclusive)",
        "cluster": "Watched cluster",
        "broker": "Broker node id",
        "api": "Request type (Produce, Fetch, ...)",
        "key": "Request key: the API, Fetch split into Fetch:consumer and Fetch:follower, "
               "Produce by acks (Produce:acks=-1, ...)",
        **_COUNT_DOCS,
        "<stage>_p50_ms / _p99_ms / _p999_ms": _STAGE_PERCENTILES,
        "<stage>_max_ms": "The slowest request of each stage (ms, exact)",
        "date": "Partition column: the minute's UTC date",
    },
    "fleet_stages_1m": {
        "window_start": "Start of the minute (UTC)",
        "window_end": "End of the minute (exclusive)",
        "cluster": "Watched cluster",
        "api": "Request type",
        "key": "Request key (as in request_keys_1m)",
        "brokers": "Brokers that served the key in the minute",
        **_COUNT_DOCS,
        "<stage>_p50_ms / _p99_ms / _p999_ms": _STAGE_PERCENTILES + " over every broker",
        "<stage>_max_ms": "The slowest request of each stage in the fleet (ms)",
        "<stage>_buckets / _counts": "The merged histogram (bucket ids ascending, counts): "
                                     "a longer rollup merges these (jobs/histogram_sql.py)",
        "date": "Partition column: the minute's UTC date",
    },
}
