"""jobs/gold_windows.py: the minute tables, rolled up in Spark's Python workers, equal the
Python rule (core.latency_histogram) and the Spark SQL form (jobs/histogram_sql.py) on the
same rows, double for double; and the streaming query rolls up a minute once, when the
high water passes its end by the lateness bound, across restarts.

The rows: silver.request_windows rows as the edge ships them, 2 clusters x 3 brokers x 5
request keys x 2 minutes of 10-s windows, each window split across 1 to 3 emissions (late
deltas), every stage's histogram from log-normal timings with exact zeros (ZERO_BUCKET),
some histograms null or empty, some counts and maxes null, and controller traffic (left
out of every table).
"""

from __future__ import annotations

import random

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (BooleanType, IntegerType, LongType, StringType, StructField,
                               StructType)

from core.latency_histogram import Histogram, quantile_of_arrays
from jobs.gold_windows import (COUNTS, OWN_TIME, OWN_TIME_P99, STAGES, MinuteRollup,
                               minute_tables, start_minute_tables)
from jobs.histogram_sql import QUANTILES, quantile_label
from schemas.histogram import histogram_fields

T0 = 1_767_225_600_000   # a minute boundary
W = 10_000
HIST = (*STAGES, OWN_TIME)
KEYS = ("Produce:acks=-1", "Produce:acks=1", "Fetch:consumer", "Fetch:follower", "Metadata")
SCHEMA = StructType([
    StructField("cluster", StringType()), StructField("broker", IntegerType()),
    StructField("ts_ms", LongType()), StructField("key", StringType()),
    StructField("api", StringType()), StructField("is_controller_traffic", BooleanType()),
    *[StructField(c, LongType()) for c in COUNTS],
    *[f for s in HIST for f in histogram_fields(s)]])


def _timing(rng: random.Random, stage: str) -> float:
    if rng.random() < {"remote": 0.5, "throttle": 0.9}.get(stage, 0.03):
        return 0.0
    return round(rng.lognormvariate(1.0, 1.7), 3)


def window_rows(seed: int = 60, minutes: int = 2, start: int = T0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for cluster in ("c1", "c2"):
        for broker in (1, 2, 3):
            for key in KEYS:
                for w in range(minutes * 6):
                    if rng.random() < 0.15:
                        continue   # a window without this key
                    for e in range(rng.choice((1, 1, 2, 3))):
                        n = rng.choice((0, *range(1, 40)))
                        row = {"cluster": cluster, "broker": broker, "ts_ms": start + w * W,
                               "key": key, "api": key.split(":")[0],
                               "is_controller_traffic": rng.random() < 0.05,
                               "requests": n, "errors": rng.choice((None, 0, 1)),
                               "request_bytes": rng.choice((None, 100 * n)),
                               "response_bytes": 10 * n}
                        for s in HIST:
                            vals = [_timing(rng, s) for _ in range(n)]
                            if s == OWN_TIME:
                                vals = [max(0.0, v - 1.0) for v in vals]
                            b, c = Histogram.of(vals).to_arrays()
                            if rng.random() < 0.05:
                                b = c = None   # a stage the agent did not time
                            row[f"{s}_sum_ms"] = float(sum(vals))
                            row[f"{s}_max_ms"] = (max(vals) if vals and rng.random() > 0.05
                                                  else None)
                            row[f"{s}_buckets"], row[f"{s}_counts"] = b, c
                        rows.append(row)
    rng.shuffle(rows)
    return rows


def _minute(r: dict) -> int:
    return r["ts_ms"] - r["ts_ms"] % 60_000


def expected(rows: list[dict], group) -> dict[tuple, dict]:
    """Per group: the sums, the maxes (None when all are) and the merged histograms, by
    the Python rule."""
    out: dict[tuple, dict] = {}
    for r in rows:
        if r["is_controller_traffic"]:
            continue
        g = out.setdefault(group(r), {"rows": [], **{s: Histogram() for s in HIST}})
        g["rows"].append(r)
        for s in HIST:
            if r[f"{s}_buckets"] is not None:
                g[s].merge(Histogram.from_arrays(r[f"{s}_buckets"], r[f"{s}_counts"]))
    return out


def _sum(values):
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _max(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def differences(got_rows, want: dict[tuple, dict], group_cols, totals, maxes, keep,
                stages=STAGES) -> list:
    bad = []
    got = {tuple(r[c] for c in group_cols): r for r in got_rows}
    if set(got) != set(want):
        return [("groups", sorted(set(got) ^ set(want), key=str))]
    for k, w in want.items():
        row = got[k]
        for c in totals:
            if row[c] != _sum(r[c] for r in w["rows"]):
                bad.append((k, c, row[c]))
        for s in maxes:
            if row[f"{s}_max_ms"] != _max(r[f"{s}_max_ms"] for r in w["rows"]):
                bad.append((k, f"{s}_max_ms", row[f"{s}_max_ms"]))
        for s in stages:
            b, c = w[s].to_arrays()
            for q in QUANTILES:
                name = f"{s}_{quantile_label(q)}_ms"
                want_q = quantile_of_arrays(b, c, q)
                if row[name] != want_q or type(row[name]) is not type(want_q):
                    bad.append((k, name, row[name], want_q))
        for s in keep:
            b, c = w[s].to_arrays()
            if (list(row[f"{s}_buckets"]), list(row[f"{s}_counts"])) != (b, c):
                bad.append((k, f"{s} histogram", row[f"{s}_buckets"], b))
    return bad


def _ms(ts) -> int:
    return int(ts.timestamp() * 1000)


def _hashable(v):
    return tuple(v) if isinstance(v, list) else v


@pytest.fixture(scope="module")
def rows():
    return window_rows()


@pytest.fixture(scope="module")
def tables(spark, rows):
    df = spark.createDataFrame(rows, SCHEMA)
    return {name: t.collect() for name, t in minute_tables(df).items()}


def test_the_rows_are_what_the_tests_claim(rows):
    assert {_minute(r) for r in rows} == {T0, T0 + 60_000}
    assert any(r["is_controller_traffic"] for r in rows)
    assert any(r["total_buckets"] is None for r in rows)
    assert any(r["total_buckets"] == [] for r in rows)
    assert any(-32768 in (r["remote_buckets"] or []) for r in rows)
    assert any(r["errors"] is None for r in rows) and any(r["total_max_ms"] is None
                                                         for r in rows)
    emissions = {}
    for r in rows:
        k = (r["cluster"], r["broker"], r["key"], r["ts_ms"])
        emissions[k] = emissions.get(k, 0) + 1
    assert max(emissions.values()) == 3


def test_key_minutes_equal_the_python_rule(tables, rows):
    got = [{**r.asDict(), "minute": _ms(r["window_start"])} for r in tables["request_keys_1m"]]
    for r in got:
        assert _ms(r["window_end"]) == r["minute"] + 60_000
        assert r["date"] == r["window_start"].date()
    want = expected(rows, lambda r: (_minute(r), r["cluster"], r["broker"], r["key"]))
    assert differences(got, want, ["minute", "cluster", "broker", "key"], COUNTS, STAGES,
                       ()) == []


def test_api_minutes_merge_every_key_of_the_api(tables, rows):
    got = [{**r.asDict(), "minute": _ms(r["window_start"])}
           for r in tables["request_stages_1m"]]
    want = expected(rows, lambda r: (_minute(r), r["cluster"], r["broker"], r["api"]))
    assert differences(got, want, ["minute", "cluster", "broker", "api"], ("requests",), (),
                       ()) == []
    for r in got:
        b, c = want[(r["minute"], r["cluster"], r["broker"], r["api"])][OWN_TIME].to_arrays()
        assert r[OWN_TIME_P99] == quantile_of_arrays(b, c, 0.99)
    assert {r["api"] for r in got} == {"Produce", "Fetch", "Metadata"}


def test_fleet_minutes_merge_every_broker_and_keep_the_histograms(tables, rows):
    got = [{**r.asDict(), "minute": _ms(r["window_start"])} for r in tables["fleet_stages_1m"]]
    want = expected(rows, lambda r: (_minute(r), r["cluster"], r["key"]))
    assert differences(got, want, ["minute", "cluster", "key"], COUNTS, STAGES, STAGES) == []
    for r in got:
        assert r["brokers"] == len({x["broker"] for x in
                                    want[(r["minute"], r["cluster"], r["key"])]["rows"]})


def test_the_tables_equal_the_spark_sql_form_row_for_row(spark, tables, rows):
    """The same rollup in Spark SQL (jobs/histogram_sql.stage_percentiles, as the report
    and the cookbook merge; the bench's reference form), on the same rows: the same
    schema, the same rows, the same doubles."""
    from bench.bench_minute_rollup import sql_minute_tables

    sql = sql_minute_tables(spark.createDataFrame(rows, SCHEMA))
    new = minute_tables(spark.createDataFrame(rows, SCHEMA))
    for name, got_rows in tables.items():
        assert new[name].schema == sql[name].schema, name
        want = {_row(r) for r in sql[name].collect()}
        got = {_row(r) for r in got_rows}
        assert len(got) == len(got_rows) == len(want)
        assert got == want, name


def _row(r) -> tuple:
    return tuple(_hashable(v) for v in r)


def _silver(spark, lake, rows):
    (spark.createDataFrame(rows, SCHEMA).withColumn("ts", F.timestamp_millis("ts_ms"))
     .withColumn("date", F.to_date("ts")).write.format("delta").mode("append")
     .partitionBy("date", "cluster").save(lake.table("silver", "request_windows")))


def _minutes(spark, lake, table):
    return sorted(_ms(r["window_start"]) for r in spark.read.format("delta").load(
        lake.table("gold", table)).select("window_start").distinct().collect())


def test_the_query_rolls_up_a_minute_once_after_its_lateness(spark, tmp_path):
    """A minute is rolled up when the high water passes its end by the lateness bound,
    and once: a restarted query reads the minutes done from the tables, a late row of a
    finished minute changes nothing, and a step replayed writes nothing."""
    from infra.lake import Lake

    lake = Lake(str(tmp_path))
    first = window_rows(seed=1, minutes=4)          # minutes 0-3, windows to 3:50
    _silver(spark, lake, first)
    start_minute_tables(spark, lake, 15, {"availableNow": True}).awaitTermination()
    # high water 3:50, lateness 15 s: minutes 0, 1 and 2 are final, 3 is not
    for table in ("request_keys_1m", "request_stages_1m", "fleet_stages_1m"):
        assert _minutes(spark, lake, table) == [T0, T0 + 60_000, T0 + 120_000], table
    keys = spark.read.format("delta").load(lake.table("gold", "request_keys_1m"))
    batch = minute_tables(spark.createDataFrame(first, SCHEMA))["request_keys_1m"]
    assert (sorted(map(_row, keys.collect()))
            == sorted(map(_row, batch.where(F.col("window_start") < F.timestamp_millis(
                F.lit(T0 + 180_000))).collect())))

    late = [r for r in window_rows(seed=2, minutes=1, start=T0 + 60_000)][:5]
    _silver(spark, lake, late + window_rows(seed=3, minutes=1, start=T0 + 240_000))
    start_minute_tables(spark, lake, 15, {"availableNow": True}).awaitTermination()
    assert _minutes(spark, lake, "request_keys_1m") == [T0 + i * 60_000 for i in range(4)]
    after = spark.read.format("delta").load(lake.table("gold", "request_keys_1m"))
    assert (sorted(map(_row, after.where(F.col("window_start") < F.timestamp_millis(
        F.lit(T0 + 180_000))).collect())) == sorted(map(_row, keys.collect())))

    roll = MinuteRollup(spark, lake, 15_000)
    roll.next = {t: T0 for t in ("request_keys_1m", "request_stages_1m", "fleet_stages_1m")}
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{lake.table('gold', 'fleet_stages_1m')}`"
                         ).count()
    roll._step(T0, T0 + 240_000)
    assert spark.sql(f"DESCRIBE HISTORY delta.`{lake.table('gold', 'fleet_stages_1m')}`"
                     ).count() == versions


def test_the_query_passes_hours_without_telemetry_in_one_read(spark, tmp_path, caplog):
    """Five hours without rows between two minutes: the query rolls up both, and passes
    the silence in one read instead of STEP_MINUTES steps of nothing (a Spark job each)."""
    import logging

    from infra.lake import Lake

    lake = Lake(str(tmp_path))
    later = T0 + 5 * 3_600_000
    _silver(spark, lake, window_rows(seed=1, minutes=1)
            + window_rows(seed=2, minutes=2, start=later))
    with caplog.at_level(logging.INFO, logger="jobs.gold_windows"):
        start_minute_tables(spark, lake, 15, {"availableNow": True}).awaitTermination()
    for table in ("request_keys_1m", "request_stages_1m", "fleet_stages_1m"):
        assert _minutes(spark, lake, table) == [T0, later], table
    steps = [r.getMessage() for r in caplog.records if "rolled up" in r.getMessage()]
    assert len(steps) == 2, steps


def test_a_query_for_the_detectors_keeps_up_their_table_only(spark, tmp_path):
    """A corpus replay's pipeline keeps up gold.request_stages_1m alone (the baselines'
    table); the other two are made, empty."""
    from infra.lake import Lake
    from jobs.gold_windows import DETECTOR_TABLES

    lake = Lake(str(tmp_path))
    _silver(spark, lake, window_rows(seed=1, minutes=3))
    start_minute_tables(spark, lake, 15, {"availableNow": True},
                        tables=DETECTOR_TABLES).awaitTermination()
    assert _minutes(spark, lake, "request_stages_1m") == [T0, T0 + 60_000]
    assert _minutes(spark, lake, "request_keys_1m") == _minutes(
        spark, lake, "fleet_stages_1m") == []
