"""Latency histograms merged in DuckDB SQL: the live detector's reads (infra/lake_sql.py).

The same merge and quantile rule as jobs/histogram_sql.py gives in Spark SQL and
core.latency_histogram in Python: per group, the counts of equal bucket ids summed over
every row (windows, emissions, keys, brokers), n = their sum, rank = greatest(1,
ceil(q * n)) with q the Python double, the q-quantile the first bucket by ascending id
whose running count reaches the rank; null when n = 0. The SQL returns bucket ids, and
`valued` turns them into values with core.latency_histogram.value_of itself, so the value
is that function's double (tests/unit/test_histogram_duckdb.py holds the two equal).

The SQL is plain relational work DuckDB vectorizes: each stage's ``<stage>_buckets`` /
``<stage>_counts`` arrays are unnested in lockstep, summed per (group, id), given a
running sum by a window function, and the first id past each rank is a filtered min.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from core.latency_histogram import MIN_BUCKET, ZERO_BUCKET, bucket_of, value_of

__all__ = ["first_bucket_at_or_over", "merged_sql", "valued"]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _double(q: float) -> str:
    # From the shortest repr: DuckDB parses a string as the nearest double, the same one.
    return f"CAST('{float(q)!r}' AS DOUBLE)"


def merged_sql(source: str, group_cols: Sequence[str], stages: Sequence[str],
               qs: Sequence[float], *, totals: Sequence[str] = ("requests",),
               extra: Mapping[str, str] | None = None,
               at_or_over: Mapping[str, str] | None = None) -> str:
    """SQL: per group of `source` (an SQL query, or a relation's name), `group_cols`, the
    sums of `totals` (BIGINT), the `extra` aggregates (name -> SQL aggregate over the
    source's rows) and per stage ``<stage>_count`` (n, BIGINT) and, for the i-th q of
    `qs`, ``<stage>_b<i>``: the bucket id of the q-quantile of the group's merged
    histogram (null when n = 0). `at_or_over` (stage -> an SQL expression of the group
    columns giving a bucket id) adds ``<stage>_at_or_over``: the requests in buckets at or
    over that id (0 without any); a group without any count has ``<stage>_count`` 0."""
    for q in qs:
        if not 0.0 <= float(q) <= 1.0:
            raise ValueError(f"q must be within [0, 1], got {q!r}")
    g = [_ident(c) for c in group_cols]
    gl = ", ".join(g)
    extra = dict(extra or {})
    at_or_over = dict(at_or_over or {})
    ctes = [f"src AS ({source})" if " " in source.strip() else f"src AS (SELECT * FROM {source})"]
    aggs = [f"CAST(sum({_ident(t)}) AS BIGINT) AS {_ident(t)}" for t in totals]
    aggs += [f"{a} AS {_ident(n)}" for n, a in extra.items()]
    ctes.append(f"tot AS (SELECT {gl}{', ' if aggs else ''}{', '.join(aggs)} "
                f"FROM src GROUP BY {gl})")
    selects = ["tot.*"]
    joins = []
    for k, s in enumerate(stages):
        b, c = _ident(f"{s}_buckets"), _ident(f"{s}_counts")
        ctes.append(f"h{k} AS (SELECT {gl}, b, CAST(sum(c) AS BIGINT) AS c FROM "
                    f"(SELECT {gl}, unnest({b}) AS b, unnest({c}) AS c FROM src) "
                    f"WHERE b IS NOT NULL AND c > 0 GROUP BY {gl}, b)")
        ctes.append(f"r{k} AS (SELECT {gl}, b, c, "
                    f"sum(c) OVER (PARTITION BY {gl} ORDER BY b) AS run, "
                    f"sum(c) OVER (PARTITION BY {gl}) AS n FROM h{k})")
        cols = [f"CAST(any_value(n) AS BIGINT) AS {_ident(s + '_count')}"]
        cols += [f"min(b) FILTER (WHERE run >= greatest(1, ceil({_double(q)} * n))) "
                 f"AS {_ident(f'{s}_b{i}')}" for i, q in enumerate(qs)]
        if s in at_or_over:
            cols.append(f"CAST(coalesce(sum(c) FILTER (WHERE b >= ({at_or_over[s]})), 0) "
                        f"AS BIGINT) AS {_ident(s + '_at_or_over')}")
        ctes.append(f"q{k} AS (SELECT {gl}, {', '.join(cols)} FROM r{k} GROUP BY {gl})")
        on = " AND ".join(f"tot.{c} IS NOT DISTINCT FROM q{k}.{c}" for c in g)
        joins.append(f"LEFT JOIN q{k} ON {on}")
        selects.append(f"coalesce(q{k}.{_ident(s + '_count')}, 0) AS {_ident(s + '_count')}")
        selects += [f"q{k}.{_ident(f'{s}_b{i}')}" for i in range(len(qs))]
        if s in at_or_over:
            selects.append(f"coalesce(q{k}.{_ident(s + '_at_or_over')}, 0) "
                           f"AS {_ident(s + '_at_or_over')}")
    return (f"WITH {', '.join(ctes)} SELECT {', '.join(selects)} FROM tot "
            + " ".join(joins))


def valued(row: Mapping[str, Any], stage: str, i: int) -> float | None:
    """The value of the q-quantile's bucket id ``<stage>_b<i>`` of a `merged_sql` row."""
    b = row.get(f"{stage}_b{i}")
    return None if b is None else value_of(int(b))


def first_bucket_at_or_over(threshold_ms: float) -> int:
    """The smallest bucket id whose value (value_of) is at least `threshold_ms`: a bucket
    counts as at or over a threshold when its value reaches it (as jobs/histogram_sql.py's
    `bucket_value_sql(b) >= threshold` does in Spark). Values grow with the id; no id lies between ZERO_BUCKET and MIN_BUCKET."""
    if threshold_ms <= 0.0:
        return ZERO_BUCKET
    i = bucket_of(threshold_ms)
    while i > MIN_BUCKET and value_of(i - 1) >= threshold_ms:
        i -= 1
    while value_of(i) < threshold_ms:
        i += 1
    return i

