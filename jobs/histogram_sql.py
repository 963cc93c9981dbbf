"""Latency histograms in Spark SQL: merge the edge's bucket arrays, read quantiles off them.

Issue 24 (fleet scale): the request-log agents ship, per broker, request key and window,
one histogram per stage timing (ingest/request_window_records.py: ``<stage>_buckets``,
ascending bucket ids, and ``<stage>_counts``), in a first emission and late deltas. Gold's
percentiles come from those histograms, merged exactly: summing counts per bucket id
across a window's emissions, across windows (a minute rollup) or across brokers (a fleet
rollup) loses nothing, and a merged histogram merges again (a fleet minute from per-broker
minutes gives the same arrays as from the raw records). The bucket scheme, the bucket
values and the quantile rule are core.latency_histogram's; this module restates them in
SQL, and tests/spark/test_histogram_sql.py holds the two equal, double for double.

Everything is Spark SQL, higher-order functions (`aggregate`, `transform`, `filter`) over
each row's arrays, not a Python UDF (nor `percentile_approx`, which would approximate
again what is already an exact summary):

- the arrays never leave the JVM: a UDF would serialize every row's sixteen arrays to a
  Python worker and back, and that worker must run on every executor of a streaming query;
- the optimizer and the streaming planner see plain expressions: the merge is one
  ordinary aggregation (`collect_list`), valid wherever Spark allows one.

The expressions are SQL text (`F.expr`), not chains of Column calls: they read as the rule
they restate, and each is one call to the JVM, where the Column form of the same
expressions made ~23,000 Py4J round trips for eight stages and seven quantiles (5 s to
build the DataFrame on a loaded 2-core machine).

Merging (`merged_histograms`, `stage_percentiles`), one aggregation for every stage: per
group, ``sort_array(flatten(collect_list(<the row's (id, count) pairs>)))``, then the runs
of equal ids are summed. Why not explode the arrays and group by (group, bucket id), as
core/latency_histogram.py sketches it? That needs two aggregations per stage (sum per id,
then re-collect the sorted arrays per group) joined to the one summing requests and
max_ms: eight stages make nine aggregations and eight joins, and a streaming query of
chained stateful aggregations. Here one groupBy carries every stage, the totals and the
maxes, its shuffle moves at most one row per input record, and the work after it is
linear in the entries: the sort is Spark's (n log n, no lambda), then each entry is visited a fixed
number of times (one pass marks where runs end, one `aggregate` sums each run's slice;
inside a lambda only O(1) reads of materialized columns, `get` and `element_at`, so nothing
is recomputed per element). A fold of maps with `map_zip_with` would also be exact but
rebuilds the accumulated map for every input row.

Quantiles (`quantile_expr`, `with_quantiles`): core.latency_histogram's rule, n = the sum
of the counts, rank = greatest(1, ceil(CAST(q AS DOUBLE) * n)) (q a double literal, the
Python float itself), the first bucket by ascending id whose cumulative count reaches the
rank; one `aggregate` pass per histogram finds the bucket of every q at once (a running
sum in the accumulator, no cumulative array). Null when n = 0.

Bucket values (`bucket_value`): 0 for ZERO_BUCKET, else 2 * GAMMA^id / (GAMMA + 1), GAMMA
the Python double itself (a DoubleType literal). The closed form alone is not the same
double: Spark's POWER is java.lang.StrictMath.pow (fdlibm) and CPython's ``**`` is the C
library's pow, and they differ by one ulp for 59 of the 684 ids from MIN_BUCKET to
TABLE_MAX (Spark 4.1.3 against CPython 3.11 on glibc; id 9 among them). So the ids from
MIN_BUCKET (1 µs) to TABLE_MAX (511: 7.4e8 ms, 8.6 days; an hour is id 378) read their
value from a literal array of `value_of` itself, and only ids beyond it (no timing Kafka
logs) fall back to the closed form, within an ulp.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.latency_histogram import GAMMA, MIN_BUCKET, ZERO_BUCKET, value_of
from ingest.request_window_records import STAGES

__all__ = ["QUANTILES", "TABLE_MAX", "VALUE_TABLE", "approx_bucket_value_sql", "bucket_value",
           "bucket_value_sql", "collected_quantile_sql", "collected_sql",
           "merged_histograms", "quantile_bucket_sql", "quantile_expr", "quantile_label",
           "quantile_sql", "stage_percentiles", "with_quantiles"]

QUANTILES = (0.5, 0.99, 0.999)
TABLE_MAX = 511
VALUE_TABLE = tuple(value_of(i) for i in range(MIN_BUCKET, TABLE_MAX + 1))
_TMP = "__hist_"   # prefix of the intermediate columns (dropped before returning)


def _double(v: float) -> str:
    """A SQL double literal of exactly `v`: its repr (the shortest string that reads back
    as the same double) with the D suffix (Java's Double.parseDouble reads it)."""
    return f"{float(v)!r}D"


_VALUE_TABLE_SQL = "array(" + ", ".join(_double(v) for v in VALUE_TABLE) + ")"


def quantile_label(q: float) -> str:
    """The column label of a quantile: p50 (0.5), p99 (0.99), p999 (0.999), p7 (0.07),
    p0 (0.0), p100 (1.0): q in percent with the decimal point left out."""
    _check_q(q)
    return "p" + format((Decimal(repr(float(q))) * 100).normalize(), "f").replace(".", "")


def bucket_value_sql(bucket: str) -> str:
    """SQL: the value of bucket id `bucket` (an SQL expression), the same double as
    core.latency_histogram.value_of; null for a null id. The table literal is folded once
    per query, also inside a lambda."""
    return (f"CASE WHEN {bucket} = {ZERO_BUCKET} THEN 0D "
            f"WHEN {bucket} BETWEEN {MIN_BUCKET} AND {TABLE_MAX} "
            f"THEN element_at({_VALUE_TABLE_SQL}, {bucket} - ({MIN_BUCKET - 1})) "
            f"ELSE {_closed_form_sql(bucket)} END")


def approx_bucket_value_sql(bucket: str) -> str:
    """SQL: the value of bucket id `bucket` by the closed form alone, within an ulp of
    value_of (module docstring): a statement a person reads (the incident report prints
    its SQL) instead of the 684-entry table."""
    return f"CASE WHEN {bucket} = {ZERO_BUCKET} THEN 0D ELSE {_closed_form_sql(bucket)} END"


def _closed_form_sql(bucket: str) -> str:
    g = _double(GAMMA)
    return f"2D * power({g}, {bucket}) / ({g} + 1D)"


def collected_sql(stage: str) -> str:
    """SQL aggregate: every (id, count) entry of the group's ``<stage>`` histograms, sorted
    by id, as ARRAY<STRUCT<b SMALLINT, c BIGINT>>, not summed per id; a null array adds no
    entry (collect_list skips nulls), nor does an entry with a null id or a count <= 0.
    `_merge` sums its runs of equal ids; a quantile read off it unsummed
    (`collected_quantile_sql`) is the merged histogram's, since the entries of one id are
    adjacent and the running count reaches a rank at the same id either way."""
    return (f"sort_array(flatten(collect_list(filter(CAST(arrays_zip({_q(stage + '_buckets')}, "
            f"{_q(stage + '_counts')}) AS ARRAY<STRUCT<b: SMALLINT, c: BIGINT>>), "
            f"x -> x.b IS NOT NULL AND x.c > 0))))")


def collected_quantile_sql(collected: str, q: float) -> str:
    """SQL: the q-quantile's value (closed form, `approx_bucket_value_sql`) of `collected`
    (an expression of `collected_sql`'s entries); null when it holds no count."""
    ids = quantile_bucket_sql(f"transform({collected}, x -> x.b)",
                              f"transform({collected}, x -> x.c)", (q,))
    return approx_bucket_value_sql(f"({ids})[0]")


def bucket_value(bucket: str) -> Column:
    """The value of bucket id `bucket` (a column name or SQL expression), as value_of."""
    return F.expr(bucket_value_sql(bucket))


def quantile_bucket_sql(buckets: str, counts: str, qs: Sequence[float] = QUANTILES,
                        n: str | None = None) -> str:
    """SQL, array<int> of len(qs) (never null): the bucket id of the q-quantile of the
    histogram (`buckets` ascending, their `counts`: SQL expressions) for each q of `qs`, in
    order; each null when the counts sum to 0 or are null. `n`, if given, is the sum of the
    counts (a column computed beforehand: the ranks use it once per q).

    One pass: the accumulator carries the running count (`seen`), each q's rank (the zero
    value is evaluated once per row) and each q's bucket, null until `seen` reaches the
    rank.
    """
    qs = [float(q) for q in qs]
    if not qs:
        raise ValueError("no quantiles asked for")
    for q in qs:
        _check_q(q)
    n = _total_sql(counts) if n is None else n
    k = range(len(qs))
    zero = ", ".join(["'seen', 0L",
                      *[f"'r{i}', greatest(1L, ceil(CAST({_double(q)} AS DOUBLE) * {n}))"
                        for i, q in enumerate(qs)],
                      *[f"'b{i}', CAST(NULL AS INT)" for i in k]])
    step = ", ".join(["'seen', acc.seen + x.c",
                      *[f"'r{i}', acc.r{i}" for i in k],
                      *[f"'b{i}', IF(acc.b{i} IS NULL AND acc.seen + x.c >= acc.r{i}, x.b, "
                        f"acc.b{i})" for i in k]])
    ids = ", ".join(f"acc.b{i}" for i in k)
    nulls = ", ".join("CAST(NULL AS INT)" for _ in k)
    pairs = f"CAST(arrays_zip({buckets}, {counts}) AS ARRAY<STRUCT<b: INT, c: BIGINT>>)"
    return (f"coalesce(aggregate({pairs}, named_struct({zero}), "
            f"(acc, x) -> named_struct({step}), acc -> array({ids})), array({nulls}))")


def quantile_sql(buckets: str, counts: str, qs: Sequence[float] = QUANTILES,
                 n: str | None = None) -> str:
    """SQL, array<double>: the q-quantiles (`quantile_bucket_sql`'s buckets, valued)."""
    return _valued(quantile_bucket_sql(buckets, counts, qs, n))


def quantile_expr(buckets: str, counts: str, qs: Sequence[float] = QUANTILES,
                  n: str | None = None) -> Column:
    """`quantile_sql` as a Column."""
    return F.expr(quantile_sql(buckets, counts, qs, n))


def with_quantiles(df: DataFrame, stage: str, qs: Sequence[float] = QUANTILES,
                   prefix: str | None = None, count_col: str | None = None) -> DataFrame:
    """`df` with ``<prefix>_<label>_ms`` for each q (e.g. total_p99_ms; prefix defaults to
    `stage`), read off the rows' merged histograms ``<stage>_buckets`` / ``<stage>_counts``
    (ids ascending, as `merged_histograms` leaves them); and with `count_col`, when given,
    holding the histogram's count n."""
    return _with_quantiles(df, [stage], qs, {stage: stage if prefix is None else prefix},
                           {stage: count_col})


def merged_histograms(df: DataFrame, group_cols: Sequence[str], stage: str) -> DataFrame:
    """Per group: `group_cols`, ``<stage>_buckets`` (ids ascending, SMALLINT) and
    ``<stage>_counts`` (BIGINT), the sum of the group's histograms. Rows with null arrays
    add nothing, nor do entries with a null id or a null or non-positive count; a group
    with no counts gets empty arrays."""
    return _merge(df, list(group_cols), [stage], []).select(
        *group_cols, f"{stage}_buckets", f"{stage}_counts")


def stage_percentiles(df: DataFrame, group_cols: Sequence[str],
                      stages: Sequence[str] = STAGES, qs: Sequence[float] = QUANTILES, *,
                      totals: Sequence[str] = ("requests", "errors"),
                      sum_and_max: bool = True, keep_histograms: bool = True,
                      extra: Mapping[str, Column] | None = None) -> DataFrame:
    """Per group, in one aggregation: `group_cols`; the sums of `totals`; per stage its
    count n (``<stage>_count``), ``<stage>_sum_ms`` summed and ``<stage>_max_ms`` maxed
    (unless `sum_and_max` is false), ``<stage>_<label>_ms`` for each q (p50, p99, p999 by
    default) and, with `keep_histograms`, the merged ``<stage>_buckets`` / ``_counts`` (a
    further rollup can start from them: merging merged histograms is exact too); `extra`:
    more aggregates of the same groupBy (column name -> aggregate), kept after `totals`.

    group_cols decide the rollup: (cluster, broker, key, window_start_ms) for a broker's
    windows (its emissions merged), window_start_ms floored to the minute by the caller for
    a minute, (cluster, key, window_start_ms) for the fleet. Which rows count (controller
    traffic, say) is the caller's filter.
    """
    group_cols = list(group_cols)
    extra = dict(extra or {})
    aggs = [F.sum(c).alias(c) for c in totals] + [a.alias(n) for n, a in extra.items()]
    if sum_and_max:
        for s in stages:
            aggs += [F.sum(f"{s}_sum_ms").alias(f"{s}_sum_ms"),
                     F.max(f"{s}_max_ms").alias(f"{s}_max_ms")]
    out = _merge(df, group_cols, list(stages), aggs, sum_runs=keep_histograms)
    out = _with_quantiles(out, stages, qs, {s: s for s in stages},
                          {s: f"{s}_count" for s in stages})
    cols: list[str] = [*group_cols, *totals, *extra]
    for s in stages:
        cols += [f"{s}_count", *([f"{s}_sum_ms", f"{s}_max_ms"] if sum_and_max else []),
                 *[f"{s}_{quantile_label(q)}_ms" for q in qs]]
        if keep_histograms:
            cols += [f"{s}_buckets", f"{s}_counts"]
    return out.select(*cols)


def _check_q(q: float) -> None:
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be within [0, 1], got {q!r}")


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _total_sql(counts: str) -> str:
    return f"aggregate({counts}, 0L, (a, c) -> a + c)"


def _valued(ids: str) -> str:
    return f"transform({ids}, i -> {bucket_value_sql('i')})"


def _with_quantiles(df: DataFrame, stages: Sequence[str], qs: Sequence[float],
                    prefixes: dict[str, str], count_cols: dict[str, str | None]) -> DataFrame:
    """with_quantiles for several stages in four projections: n, the quantiles' bucket ids,
    their values, the columns. Each is computed once, not once per use; and the values of
    every stage are looked up by one expression: each copy of the value table literal adds
    planning time (a copy per stage added ~1.4 s to building and running stage_percentiles
    on a loaded 2-core machine), and a stream plans every micro-batch."""
    names = {s: [f"{prefixes[s]}_{quantile_label(q)}_ms" for q in qs] for s in stages}
    for s in stages:
        if len(set(names[s])) != len(names[s]):
            raise ValueError(f"quantiles {list(qs)!r} give duplicate columns {names[s]!r}")
    n = {s: f"{_TMP}n_{s}" for s in stages}
    ids = {s: f"{_TMP}q_{s}" for s in stages}
    values = f"{_TMP}values"
    out = df.withColumns({n[s]: F.expr(_total_sql(_q(f"{s}_counts"))) for s in stages})
    out = out.withColumns({ids[s]: F.expr(quantile_bucket_sql(
        _q(f"{s}_buckets"), _q(f"{s}_counts"), qs, _q(n[s]))) for s in stages})
    out = out.withColumn(values, F.expr(_valued(
        "concat(" + ", ".join(_q(ids[s]) for s in stages) + ")")))
    cols = {name: F.col(values)[j * len(qs) + i]
            for j, s in enumerate(stages) for i, name in enumerate(names[s])}
    cols.update({c: F.col(n[s]) for s, c in count_cols.items() if c is not None})
    return out.withColumns(cols).drop(*n.values(), *ids.values(), values)


def _merge(df: DataFrame, group_cols: list[str], stages: list[str],
           aggs: list[Column], *, sum_runs: bool = True) -> DataFrame:
    """groupBy(group_cols) with `aggs` and every stage's histogram merged into
    ``<stage>_buckets`` / ``<stage>_counts``, in three steps:

    1. the aggregation: E = `collected_sql`, every entry of the group's rows sorted by id;
    2. ends: the 1-based positions where a run of equal ids ends in E (the next id differs,
       or there is none: `get` gives null past the end);
    3. one entry per run: its id, and the sum of the counts of E's slice from the end
       before it (0 for the first) to its end.

    Steps 2 and 3 are separate projections, so E and ends are columns: read in O(1) from
    inside a lambda, where an expression would be recomputed for every element.

    `sum_runs=False` stops after step 1: the arrays are E's fields (``E.b``, no lambda),
    an id held several times when several rows hold it (adjacent). Their total and their
    quantiles are the merged histogram's (`collected_sql` says why), so `stage_percentiles`
    without `keep_histograms` skips steps 2 and 3, two passes over every entry: on a
    2,000-broker lake (bench/bench_fleet.py --keep-lake, then bench/bench_detect_eval.py)
    they were most of the detector's stage-window read.
    """
    e = {s: f"{_TMP}e_{s}" for s in stages}
    ends = {s: f"{_TMP}ends_{s}" for s in stages}
    collected = [F.expr(collected_sql(s)).alias(e[s]) for s in stages]
    out = df.groupBy(*group_cols).agg(*aggs, *collected)
    if sum_runs:
        out = out.withColumns({ends[s]: F.expr(
            f"filter(transform({_q(e[s])}, (x, i) -> IF(x.b <=> get({_q(e[s])}, i + 1).b, "
            f"NULL, i + 1)), i -> i IS NOT NULL)") for s in stages})
        runs = {s: F.expr(
            f"transform({_q(ends[s])}, (hi, k) -> named_struct("
            f"'b', element_at({_q(e[s])}, hi).b, "
            f"'c', aggregate(slice({_q(e[s])}, coalesce(get({_q(ends[s])}, k - 1), 0) + 1, "
            f"hi - coalesce(get({_q(ends[s])}, k - 1), 0)), 0L, (a, x) -> a + x.c)))")
            for s in stages}
        out = out.withColumns({e[s]: runs[s] for s in stages}).drop(*ends.values())
    out = out.withColumns({c: F.col(e[s])[f] for s in stages
                           for c, f in ((f"{s}_buckets", "b"), (f"{s}_counts", "c"))})
    return out.drop(*e.values())
