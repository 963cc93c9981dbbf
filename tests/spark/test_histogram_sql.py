"""jobs.histogram_sql restates core.latency_histogram in Spark SQL: the merge (sum the
counts per bucket id), the bucket values and the quantile rule. Both forms must give the
same arrays and the same doubles, or a gold percentile differs from the one the Python
side (tests, detectors, the edge) computes from the same histograms.

The data: request windows as the edge ships them (ingest/request_window_records.py), every
stage's histogram built with core.latency_histogram.Histogram from log-normal timings
rounded to the microsecond, remote and throttle often exactly 0; each (broker, key,
window) split across 2 or 3 emissions. The Python side merges the emissions' arrays with
Histogram.merge and reads quantiles with quantile_of_arrays; the raw timings give the exact
nearest-rank quantile the 2 % bound is checked against.
"""

from __future__ import annotations

import math
import random

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (BooleanType, IntegerType, LongType, StringType, StructField,
                               StructType)

from core.latency_histogram import (ALPHA, GAMMA, MIN_BUCKET, ZERO_BUCKET, Histogram,
                                    bucket_of, quantile_of_arrays, value_of)
from ingest.request_window_records import STAGES
from jobs.histogram_sql import (TABLE_MAX, bucket_value, merged_histograms, quantile_label,
                                stage_percentiles, with_quantiles)
from schemas.histogram import histogram_fields

QS = (0.5, 0.9, 0.99, 0.999, 0.07, 0.0, 1.0)
T0 = 1_767_225_600_000   # a minute boundary
W = 10_000
BROKER_WINDOW = ["cluster", "broker", "key", "window_start_ms"]
FLEET = ["cluster", "key", "window_start_ms"]
SCHEMA = StructType([
    StructField("cluster", StringType()), StructField("broker", IntegerType()),
    StructField("key", StringType()), StructField("api", StringType()),
    StructField("window_start_ms", LongType()), StructField("window_ms", IntegerType()),
    StructField("emission", IntegerType()), StructField("is_controller_traffic", BooleanType()),
    StructField("requests", IntegerType()), StructField("errors", IntegerType()),
    *[f for s in STAGES for f in histogram_fields(s)]])
ZERO_SHARE = {"remote": 0.5, "throttle": 0.9}   # other stages: 2 % exact zeros


def timing(rng: random.Random, stage: str) -> float:
    if rng.random() < ZERO_SHARE.get(stage, 0.02):
        return 0.0
    return round(rng.lognormvariate(1.0, 1.6), 3)   # ms, to the microsecond as Kafka logs


def record(group: tuple, emission: int, timings: dict[str, list[float]], errors: int) -> dict:
    cluster, broker, key, start = group
    rec = {"cluster": cluster, "broker": broker, "key": key, "api": key.split(":")[0],
           "window_start_ms": start, "window_ms": W, "emission": emission,
           "is_controller_traffic": False, "requests": len(timings["total"]),
           "errors": errors}
    for s in STAGES:
        vals = timings[s]
        rec[f"{s}_sum_ms"] = sum(vals)
        rec[f"{s}_max_ms"] = max(vals) if vals else 0.0
        rec[f"{s}_buckets"], rec[f"{s}_counts"] = Histogram.of(vals).to_arrays()
    return rec


def edge_records(seed: int = 24) -> tuple[list[dict], dict[tuple, dict[str, list[float]]]]:
    """Records of 3 brokers x 3 keys x 3 windows, each group's requests split across 2 or 3
    emissions; and each group's raw timings per stage."""
    rng = random.Random(seed)
    records, raw = [], {}
    for broker in (1, 2, 3):
        for key in ("Produce", "FetchConsumer", "Metadata:v12"):
            for w in range(3):
                group = ("c1", broker, key, T0 + w * W)
                n = rng.randint(3, 160)
                timings = {s: [timing(rng, s) for _ in range(n)] for s in STAGES}
                raw[group] = timings
                parts = rng.choice((2, 3))
                cuts = [0, *sorted(rng.sample(range(1, n), parts - 1)), n]
                for e in range(parts):
                    lo, hi = cuts[e], cuts[e + 1]
                    records.append(record(group, e, {s: v[lo:hi] for s, v in timings.items()},
                                          rng.randint(0, 2)))
    rng.shuffle(records)
    return records, raw


def python_merge(records: list[dict], key) -> dict[tuple, dict[str, Histogram]]:
    out: dict[tuple, dict[str, Histogram]] = {}
    for r in records:
        hists = out.setdefault(key(r), {s: Histogram() for s in STAGES})
        for s in STAGES:
            if r[f"{s}_buckets"] is not None:
                hists[s].merge(Histogram.from_arrays(r[f"{s}_buckets"], r[f"{s}_counts"]))
    return out


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def mismatches(rows, expected: dict[tuple, dict[str, Histogram]], group_cols) -> list:
    """Every (group, stage, what, Spark, Python) where a row differs from the Python merge."""
    bad = []
    assert len(rows) == len(expected)
    for row in rows:
        group = tuple(row[c] for c in group_cols)
        for s in STAGES:
            buckets, counts = expected[group][s].to_arrays()
            if (list(row[f"{s}_buckets"]), list(row[f"{s}_counts"])) != (buckets, counts):
                bad.append((group, s, "arrays", row[f"{s}_buckets"], buckets))
            if row[f"{s}_count"] != sum(counts):
                bad.append((group, s, "count", row[f"{s}_count"], sum(counts)))
            for q in QS:
                got, want = row[f"{s}_{quantile_label(q)}_ms"], quantile_of_arrays(buckets,
                                                                                  counts, q)
                if got != want or type(got) is not type(want):
                    bad.append((group, s, q, got, want))
    return bad


@pytest.fixture(scope="module")
def edge(spark):
    records, raw = edge_records()
    return spark.createDataFrame(records, SCHEMA), records, raw


@pytest.fixture(scope="module")
def broker_windows(edge):
    df, _, _ = edge
    return stage_percentiles(df, BROKER_WINDOW, STAGES, QS).collect()


def test_the_edge_data_is_what_the_tests_claim(edge):
    df, records, raw = edge
    assert len(raw) == 27 and 2 * 27 <= len(records) <= 3 * 27
    assert {r["emission"] for r in records} == {0, 1, 2}
    hists = python_merge(records, lambda r: 0)[0]
    assert hists["remote"].counts[ZERO_BUCKET] > 500 and hists["throttle"].count > 2000
    assert len(hists["total"].counts) > 150


def test_broker_windows_merge_emissions_exactly_and_agree_with_python(edge, broker_windows):
    df, records, raw = edge
    rows = broker_windows
    expected = python_merge(records, lambda r: tuple(r[c] for c in BROKER_WINDOW))

    assert mismatches(rows, expected, BROKER_WINDOW) == [], "group, stage, q, Spark, Python"
    for row in rows:
        group = tuple(row[c] for c in BROKER_WINDOW)
        mine = [r for r in records if tuple(r[c] for c in BROKER_WINDOW) == group]
        assert row["requests"] == sum(r["requests"] for r in mine) == len(raw[group]["total"])
        assert row["errors"] == sum(r["errors"] for r in mine)
        for s in STAGES:
            assert row[f"{s}_max_ms"] == max(raw[group][s])
            assert row[f"{s}_sum_ms"] == pytest.approx(sum(raw[group][s]), rel=1e-12)


def test_quantiles_are_within_alpha_of_the_exact_nearest_rank(edge, broker_windows):
    _, _, raw = edge
    off = []
    for row in broker_windows:
        group = tuple(row[c] for c in BROKER_WINDOW)
        for s in STAGES:
            for q in QS:
                got, exact = row[f"{s}_{quantile_label(q)}_ms"], nearest_rank(raw[group][s], q)
                if abs(got - exact) > ALPHA * exact * (1 + 1e-12):
                    off.append((group, s, q, got, exact))
    assert off == []


def test_quantiles_without_the_histograms_skip_the_merge_and_equal_it(edge, broker_windows):
    """keep_histograms=False reads the quantiles and counts off the collected entries, not
    summed per id (jobs/histogram_sql._merge, sum_runs=False): the same doubles as after
    the merge, on groups of up to three emissions each."""
    df, _, _ = edge
    lean = stage_percentiles(df, BROKER_WINDOW, STAGES, QS, keep_histograms=False).collect()
    assert len(lean) == len(broker_windows)
    assert not any(c.endswith(("_buckets", "_counts")) for c in lean[0].asDict())
    merged = {tuple(r[c] for c in BROKER_WINDOW): r.asDict() for r in broker_windows}
    for row in lean:
        want = merged[tuple(row[c] for c in BROKER_WINDOW)]
        assert {k: (v, type(v)) for k, v in row.asDict().items()} == {
            k: (want[k], type(want[k])) for k in row.asDict()}


def test_merged_histograms_gives_one_stage_the_same_arrays(edge):
    df, records, _ = edge
    expected = python_merge(records, lambda r: tuple(r[c] for c in BROKER_WINDOW))
    out = merged_histograms(df, BROKER_WINDOW, "remote")
    assert out.columns == [*BROKER_WINDOW, "remote_buckets", "remote_counts"]
    got = {tuple(r[c] for c in BROKER_WINDOW): (list(r["remote_buckets"]),
                                                list(r["remote_counts"]))
           for r in out.collect()}
    assert got == {g: h["remote"].to_arrays() for g, h in expected.items()}


def test_fleet_and_minute_rollups_equal_merging_every_broker(edge):
    df, records, _ = edge
    fleet = python_merge(records, lambda r: tuple(r[c] for c in FLEET))
    assert mismatches(stage_percentiles(df, FLEET, STAGES, QS).collect(), fleet, FLEET) == []

    # From the per-broker rows (a merged histogram merges again): the same answer.
    per_broker = stage_percentiles(df, BROKER_WINDOW, STAGES, QS)
    again = stage_percentiles(per_broker, FLEET, STAGES, QS).collect()
    assert mismatches(again, fleet, FLEET) == []
    assert {r["key"]: r["requests"] for r in again if r["window_start_ms"] == T0} == {
        k: sum(r["requests"] for r in records if r["key"] == k and r["window_start_ms"] == T0)
        for k in ("Produce", "FetchConsumer", "Metadata:v12")}

    # A minute per broker: the caller floors the window start.
    minute = df.withColumn("window_start_ms", F.col("window_start_ms") - F.col(
        "window_start_ms") % 60_000)
    by_minute = python_merge(records, lambda r: (r["cluster"], r["broker"], r["key"],
                                                 r["window_start_ms"] - r["window_start_ms"]
                                                 % 60_000))
    rows = stage_percentiles(minute, BROKER_WINDOW, STAGES, QS).collect()
    assert {r["window_start_ms"] for r in rows} == {T0}
    assert mismatches(rows, by_minute, BROKER_WINDOW) == []


def histogram_row(group: str, values: list[float] | None) -> dict:
    buckets, counts = Histogram.of(values).to_arrays() if values is not None else (None, None)
    return {"cluster": "c1", "broker": 1, "key": group, "window_start_ms": T0,
            "requests": 0 if values is None else len(values), "errors": 0,
            "total_sum_ms": None, "total_max_ms": None,
            "total_buckets": buckets, "total_counts": counts}


def run_total(spark, rows: list[dict], qs=QS):
    schema = StructType([*[SCHEMA[c] for c in [*BROKER_WINDOW, "requests", "errors"]],
                         *histogram_fields("total")])
    df = spark.createDataFrame(rows, schema)
    out = stage_percentiles(df, BROKER_WINDOW, ["total"], qs).collect()
    return {r["key"]: r for r in out}


def test_values_at_bucket_edges_and_ranks_at_cumulative_edges(spark):
    """Timings on and one ulp around bucket edges (GAMMA^i), among them ids whose closed
    form Spark computes an ulp off; and counts that put a rank exactly on a cumulative
    count, or q * n a hair above an integer (0.07 * 100 = 7.000000000000001, rank 8) or
    below it (0.29 * 100 = 28.999999999999996, rank 29)."""
    edges = [GAMMA ** i for i in (-172, -100, 0, 9, 12, 27, 99, 256, 378)]
    around = [v for e in edges for v in (math.nextafter(e, 0), e, math.nextafter(e, math.inf))]
    cases = {
        "edges": around,
        "edges and zeros": [0.0] * 5 + around,
        "7 then 93": [1.0] * 7 + [2.0] * 93,
        "29 then 71": [1.0] * 29 + [2.0] * 71,
        "28 then 72": [1.0] * 28 + [2.0] * 72,
        "57 then 43": [1.0] * 57 + [2.0] * 43,
        "999 then 1": [5.0] * 999 + [700.0],
        "one": [3.25],
        "two": [1.0, 9.0],
    }
    assert 0.07 * 100 > 7 and 0.28 * 100 > 28 and 0.29 * 100 < 29 and 0.57 * 100 < 57
    qs = (*QS, 0.28, 0.29, 0.57)
    rows = run_total(spark, [histogram_row(name, vals) for name, vals in cases.items()], qs)
    bad = []
    for name, vals in cases.items():
        buckets, counts = Histogram.of(vals).to_arrays()
        row = rows[name]
        assert (list(row["total_buckets"]), list(row["total_counts"])) == (buckets, counts)
        for q in qs:
            got, want = row[f"total_{quantile_label(q)}_ms"], quantile_of_arrays(buckets,
                                                                                counts, q)
            if got != want:
                bad.append((name, q, got, want))
    assert bad == []
    one, two = value_of(bucket_of(1.0)), value_of(bucket_of(2.0))
    assert rows["7 then 93"]["total_p7_ms"] == two            # rank 8
    assert rows["29 then 71"]["total_p29_ms"] == one          # rank 29, cumulative 29
    assert rows["28 then 72"]["total_p29_ms"] == two
    assert rows["28 then 72"]["total_p28_ms"] == two          # 28.000000000000004: rank 29
    assert rows["57 then 43"]["total_p57_ms"] == one          # rank 57, cumulative 57
    assert rows["999 then 1"]["total_p999_ms"] == value_of(bucket_of(5.0))
    assert rows["999 then 1"]["total_p100_ms"] == value_of(bucket_of(700.0))


def test_zeros_sort_first_empty_is_null_and_null_arrays_add_nothing(spark):
    rows = run_total(spark, [
        histogram_row("zeros", [0.0, 0.0, 0.0, 1.5, 2.0]),
        histogram_row("zeros", None),            # null arrays beside real ones
        histogram_row("zeros", []),
        histogram_row("empty", []),
        histogram_row("empty", None),
        histogram_row("null", None),
    ])
    zeros = rows["zeros"]
    assert list(zeros["total_buckets"]) == [ZERO_BUCKET, bucket_of(1.5), bucket_of(2.0)]
    assert list(zeros["total_counts"]) == [3, 1, 1]
    assert zeros["total_count"] == 5 and zeros["requests"] == 5
    assert zeros["total_p0_ms"] == zeros["total_p50_ms"] == 0.0
    assert zeros["total_p90_ms"] == zeros["total_p100_ms"] == value_of(bucket_of(2.0))
    for name in ("empty", "null"):
        row = rows[name]
        assert list(row["total_buckets"]) == [] and list(row["total_counts"]) == []
        assert row["total_count"] == 0
        assert [row[f"total_{quantile_label(q)}_ms"] for q in QS] == [None] * len(QS)


def test_quantiles_of_null_arrays_are_null(spark):
    df = spark.createDataFrame([(None, None), ([], [])],
                               "total_buckets array<smallint>, total_counts array<int>")
    out = with_quantiles(df, "total", (0.5, 0.99), prefix="t", count_col="n").collect()
    assert [(r["t_p50_ms"], r["t_p99_ms"], r["n"]) for r in out] == [
        (None, None, None), (None, None, 0)]
    with pytest.raises(ValueError, match="duplicate"):
        with_quantiles(df, "total", (0.999, 0.0999))   # both p999


def test_bucket_values_are_python_doubles(spark):
    ids = [ZERO_BUCKET, *range(MIN_BUCKET - 3, TABLE_MAX + 60)]
    df = spark.createDataFrame([(i,) for i in ids], "id smallint")
    got = dict(df.select("id", bucket_value("id")).collect())
    in_table = [i for i in ids if i == ZERO_BUCKET or MIN_BUCKET <= i <= TABLE_MAX]
    assert [i for i in in_table if got[i] != value_of(i)] == []
    beyond = [i for i in ids if i not in in_table]
    assert [i for i in beyond if abs(got[i] - value_of(i)) > 2 * math.ulp(value_of(i))] == []
    assert df.select(F.lit(GAMMA).alias("g")).first()["g"] == GAMMA


def test_spark_pow_is_an_ulp_off_for_some_ids_which_is_why_the_table(spark, broker_windows):
    """If Spark's POWER ever agrees with CPython's everywhere, the table can go. The edge
    data's quantiles fall in such buckets, so the exact comparisons above would catch a
    closed form."""
    ids = list(range(MIN_BUCKET, TABLE_MAX + 1))
    df = spark.createDataFrame([(i,) for i in ids], "id smallint")
    closed = F.lit(2.0) * F.pow(F.lit(GAMMA), F.col("id")) / (F.lit(GAMMA) + F.lit(1.0))
    got = dict(df.select("id", closed).collect())
    off = [i for i in ids if got[i] != value_of(i)]
    assert off and all(abs(got[i] - value_of(i)) <= math.ulp(value_of(i)) for i in off)
    answers = {row[f"{s}_{quantile_label(q)}_ms"] for row in broker_windows for s in STAGES
               for q in QS}
    assert len(answers & {value_of(i) for i in off}) >= 5


def test_one_aggregation_no_python_udf_no_percentile_approx(edge):
    df, _, _ = edge
    out = stage_percentiles(df, FLEET, STAGES, QS)
    executed = out._jdf.queryExecution().executedPlan().toString()
    optimized = out._jdf.queryExecution().optimizedPlan().toJSON()   # not abbreviated
    for word in ("PythonUDF", "BatchEvalPython", "ArrowEvalPython", "Percentile"):
        assert word not in executed and word not in optimized
    assert executed.count("Exchange") == 1
    # Nothing costly inlined twice by the optimizer: per stage one sort, three aggregate
    # passes (run sums, n, quantiles); and one copy of the value table for all stages.
    assert optimized.count('expressions.SortArray"') == len(STAGES)
    assert optimized.count('expressions.ArrayAggregate"') == 3 * len(STAGES)
    one_stage = stage_percentiles(df, FLEET, ["total"], QS)._jdf.queryExecution()
    table = repr(value_of(MIN_BUCKET))   # its first value (the JSON may list a node twice)
    assert optimized.count(table) == one_stage.optimizedPlan().toJSON().count(table) > 0


def test_labels_and_bad_quantiles():
    assert [quantile_label(q) for q in (0.5, 0.99, 0.999, 0.9, 0.07, 0.0, 1.0)] == [
        "p50", "p99", "p999", "p90", "p7", "p0", "p100"]
    with pytest.raises(ValueError):
        quantile_label(1.5)
