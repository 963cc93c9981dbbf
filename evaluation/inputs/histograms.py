"""Latency histograms merged for the window reads: DuckDB selects, numpy merges.

The same merge and quantile rule as jobs/histogram_sql.py gives in Spark SQL and
core.latency_histogram in Python: per group, the counts of equal bucket ids summed over
every row (windows, emissions, keys, brokers), n = their sum, rank = max(1, ceil(q * n))
with q the Python double, the q-quantile the first bucket by ascending id whose running
count reaches the rank; none when n = 0. `merged_rows` gives bucket ids, and `valued`
turns them into values with core.latency_histogram.value_of itself
(tests/unit/test_histograms.py holds the result equal to the Python rule).

Why two engines: DuckDB reads the Delta scan (filters and projections pushed down) and
numbers the groups; the merge of the ``<stage>_buckets`` / ``<stage>_counts`` arrays is
then core.histogram_merge's, in numpy. The same merge in SQL (unnest, group, a window
function per stage) took about four times as long, and a 2,000-broker fleet's windows are
most of an evaluation's reads (bench/bench_fleet.py).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from core.histogram_merge import merge
from core.latency_histogram import MIN_BUCKET, ZERO_BUCKET, bucket_of, value_of
from infra.lake_sql import LakeSql

__all__ = ["first_bucket_at_or_over", "merged_rows", "valued"]

GROUP = "_g"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def merged_rows(sql: LakeSql, source: str, params: Sequence[Any], tables: Mapping[str, Any],
                group_cols: Sequence[str], stages: Sequence[str], qs: Sequence[float], *,
                totals: Sequence[str] = ("requests",),
                extra: Mapping[str, tuple[str, str]] | None = None,
                at_or_over: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Per group (`group_cols`) of the rows of `source` (DuckDB SQL over `tables`, with
    `params`), in group order: the group columns, the sums of `totals`, the `extra`
    aggregates (name -> (aggregate, column), e.g. ("max", "max_fetch_gap_ms")), and per
    stage ``<stage>_count`` (n) and, for the i-th q of `qs`, ``<stage>_b<i>``: the bucket
    id of the q-quantile of the group's merged histogram (None when n = 0). `at_or_over`
    (stage -> an SQL expression of the group columns giving a bucket id) adds
    ``<stage>_at_or_over``: the requests in buckets at or over that id (0 without any)."""
    for q in qs:
        if not 0.0 <= float(q) <= 1.0:
            raise ValueError(f"q must be within [0, 1], got {q!r}")
    extra, at_or_over = dict(extra or {}), dict(at_or_over or {})
    gl = ", ".join(_ident(c) for c in group_cols)
    lists = [_ident(f"{s}_{part}") for s in stages for part in ("buckets", "counts")]
    row_cols = [*(_ident(c) for c in group_cols), *(_ident(t) for t in totals),
                *sorted({_ident(col) for _, col in extra.values()}), *lists]
    rows = sql.table(f"SELECT dense_rank() OVER (ORDER BY {gl}) - 1 AS {GROUP}, "
                     f"{', '.join(row_cols)} FROM ({source}) ORDER BY {GROUP}", params, **tables)
    if rows.num_rows == 0:
        return []
    aggs = [f"any_value({_ident(c)}) AS {_ident(c)}" for c in group_cols]
    aggs += [f"CAST(sum({_ident(t)}) AS BIGINT) AS {_ident(t)}" for t in totals]
    aggs += [f"{fn}({_ident(col)}) AS {_ident(name)}" for name, (fn, col) in extra.items()]
    aggs += [f"any_value({expr}) AS {_ident('_over_' + s)}" for s, expr in at_or_over.items()]
    groups = sql.table(f"SELECT {', '.join(aggs)} FROM r GROUP BY {GROUP} ORDER BY {GROUP}",
                       r=rows)
    out = {c: groups.column(c).to_pylist() for c in groups.column_names
           if not c.startswith("_over_")}
    group_of = rows.column(GROUP).to_numpy()
    for s in stages:
        over = (groups.column(f"_over_{s}").to_numpy(zero_copy_only=False)
                if s in at_or_over else None)
        n, ids, at_over, *_ = merge(s, rows.column(f"{s}_buckets"),
                                    rows.column(f"{s}_counts"), group_of, groups.num_rows,
                                    qs, over)
        out[f"{s}_count"] = n.tolist()
        for i, col in enumerate(ids):
            out[f"{s}_b{i}"] = [None if m == 0 else int(b) for b, m in zip(col, n)]
        if at_over is not None:
            out[f"{s}_at_or_over"] = at_over.tolist()
    names = list(out)
    return [dict(zip(names, values)) for values in zip(*(out[k] for k in names))]


def valued(row: Mapping[str, Any], stage: str, i: int) -> float | None:
    """The value of the q-quantile's bucket id ``<stage>_b<i>`` of a `merged_rows` row."""
    b = row.get(f"{stage}_b{i}")
    return None if b is None else value_of(int(b))


def first_bucket_at_or_over(threshold_ms: float) -> int:
    """The smallest bucket id whose value (value_of) is at least `threshold_ms`: a bucket
    counts as at or over a threshold when its value reaches it (as jobs/histogram_sql.py's
    `bucket_value_sql(b) >= threshold` does in Spark). Values grow with the id; no id lies
    between ZERO_BUCKET and MIN_BUCKET."""
    if threshold_ms <= 0.0:
        return ZERO_BUCKET
    i = bucket_of(threshold_ms)
    while i > MIN_BUCKET and value_of(i - 1) >= threshold_ms:
        i -= 1
    while value_of(i) < threshold_ms:
        i += 1
    return i
