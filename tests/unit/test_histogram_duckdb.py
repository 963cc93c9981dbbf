"""jobs/histogram_duckdb.py: DuckDB's merge and quantiles equal core.latency_histogram's."""

import random

import pyarrow as pa
import pytest

from core.latency_histogram import ZERO_BUCKET, bucket_of, quantile_of_arrays, value_of
from infra.lake_sql import LakeSql
from infra.lake import Lake
from jobs.histogram_duckdb import first_bucket_at_or_over, merged_sql, valued

pytestmark = pytest.mark.unit

QS = (0.5, 0.99, 0.999)


def _histogram(rnd: random.Random) -> tuple[list[int], list[int]]:
    ids = sorted(rnd.sample(range(-20, 400), rnd.randint(0, 12)))
    if rnd.random() < 0.2:
        ids.insert(0, ZERO_BUCKET)
    return ids, [rnd.randint(1, 50) for _ in ids]


def test_merge_and_quantiles_equal_the_python_rule():
    rnd = random.Random(7)
    rows = []
    for _ in range(600):
        b, c = _histogram(rnd)
        rows.append({"g": rnd.choice("abcdefg"), "w": rnd.randint(0, 3), "requests": sum(c),
                     "total_buckets": b, "total_counts": c,
                     "send_buckets": None if rnd.random() < 0.1 else b[::-1][:0] + b,
                     "send_counts": None if rnd.random() < 0.1 else c})
    rows.append({"g": "empty", "w": 0, "requests": 0, "total_buckets": [], "total_counts": [],
                 "send_buckets": None, "send_counts": None})
    table = pa.Table.from_pylist(rows)
    sql = LakeSql(Lake("/nonexistent"))
    got = sql.rows(merged_sql("t", ["g", "w"], ["total", "send"], QS,
                              at_or_over={"total": "CASE WHEN g = 'a' THEN 100 ELSE 50 END"}),
                   t=table)
    assert len(got) == len({(r["g"], r["w"]) for r in rows})
    for out in got:
        group = [r for r in rows if (r["g"], r["w"]) == (out["g"], out["w"])]
        assert out["requests"] == sum(r["requests"] for r in group)
        for stage in ("total", "send"):
            merged: dict[int, int] = {}
            for r in group:
                for b, c in zip(r[f"{stage}_buckets"] or [], r[f"{stage}_counts"] or []):
                    merged[b] = merged.get(b, 0) + c
            ids = sorted(merged)
            counts = [merged[b] for b in ids]
            assert (out[f"{stage}_count"] or 0) == sum(counts)
            for i, q in enumerate(QS):
                assert valued(out, stage, i) == quantile_of_arrays(ids, counts, q)
        threshold = 100 if out["g"] == "a" else 50
        merged = {}
        for r in group:
            for b, c in zip(r["total_buckets"], r["total_counts"]):
                merged[b] = merged.get(b, 0) + c
        assert out["total_at_or_over"] == sum(c for b, c in merged.items() if b >= threshold)


@pytest.mark.parametrize("ms", [0.0, 0.0005, 0.001, 1.0, 299.9, 300.0, 300.1, 1e6])
def test_first_bucket_at_or_over(ms):
    b = first_bucket_at_or_over(ms)
    assert value_of(b) >= ms
    if ms > 0.001:
        assert value_of(b - 1) < ms
        assert abs(b - bucket_of(ms)) <= 1
