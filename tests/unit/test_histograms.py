"""evaluation/inputs/histograms.py and core/histogram_merge.py: the merge and quantiles equal
core.latency_histogram's."""

import random

import numpy as np
import pyarrow as pa
import pytest

from core.histogram_merge import merge, values_of
from core.latency_histogram import ZERO_BUCKET, bucket_of, quantile_of_arrays, value_of
from evaluation.inputs.histograms import first_bucket_at_or_over, merged_rows, valued
from infra.lake import Lake
from infra.lake_sql import LakeSql

pytestmark = pytest.mark.unit

QS = (0.5, 0.99, 0.999)


def _histogram(rnd: random.Random) -> tuple[list[int], list[int]]:
    ids = sorted(rnd.sample(range(-20, 400), rnd.randint(0, 12)))
    if rnd.random() < 0.2:
        ids.insert(0, ZERO_BUCKET)
    return ids, [rnd.choice([0, *range(1, 50)]) for _ in ids]


def _merged(group: list[dict], stage: str) -> dict[int, int]:
    merged: dict[int, int] = {}
    for r in group:
        for b, c in zip(r[f"{stage}_buckets"] or [], r[f"{stage}_counts"] or []):
            merged[b] = merged.get(b, 0) + c
    return merged


def test_merge_and_quantiles_equal_the_python_rule():
    rnd = random.Random(7)
    rows = []
    for _ in range(600):
        b, c = _histogram(rnd)
        rows.append({"g": rnd.choice([*"abcdefg", None]), "w": rnd.randint(0, 3),
                     "requests": sum(c), "gap": rnd.choice([None, rnd.random()]),
                     "total_buckets": b, "total_counts": c,
                     "send_buckets": None if rnd.random() < 0.1 else list(b),
                     "send_counts": None if rnd.random() < 0.1 else list(c)})
    rows.append({"g": "empty", "w": 0, "requests": 0, "gap": None, "total_buckets": [],
                 "total_counts": [], "send_buckets": None, "send_counts": None})
    for r in rows:   # the silver rule: parallel arrays, or none
        if (r["send_buckets"] is None) != (r["send_counts"] is None):
            r["send_buckets"] = r["send_counts"] = None
    sql = LakeSql(Lake("/nonexistent"))
    got = merged_rows(sql, "SELECT * FROM t WHERE w >= ?", [0], {"t": pa.Table.from_pylist(rows)},
                      ["g", "w"], ["total", "send"], QS, extra={"gap": ("max", "gap")},
                      at_or_over={"total": "CASE WHEN g = 'a' THEN 100 ELSE 50 END"})
    assert len(got) == len({(r["g"], r["w"]) for r in rows})
    for out in got:
        group = [r for r in rows if (r["g"], r["w"]) == (out["g"], out["w"])]
        assert out["requests"] == sum(r["requests"] for r in group)
        gaps = [r["gap"] for r in group if r["gap"] is not None]
        assert out["gap"] == (max(gaps) if gaps else None)
        for stage in ("total", "send"):
            merged = {b: c for b, c in _merged(group, stage).items() if c > 0}
            ids = sorted(merged)
            counts = [merged[b] for b in ids]
            assert out[f"{stage}_count"] == sum(counts)
            for i, q in enumerate(QS):
                assert valued(out, stage, i) == quantile_of_arrays(ids, counts, q)
        threshold = 100 if out["g"] == "a" else 50
        assert out["total_at_or_over"] == sum(c for b, c in _merged(group, "total").items()
                                              if b >= threshold)


def test_no_rows_and_no_counts():
    sql = LakeSql(Lake("/nonexistent"))
    table = pa.Table.from_pylist([{"g": "a", "requests": 1, "total_buckets": [3],
                                   "total_counts": [0]}])
    assert merged_rows(sql, "SELECT * FROM t WHERE g = 'b'", [], {"t": table}, ["g"],
                       ["total"], (0.99,)) == []
    [row] = merged_rows(sql, "SELECT * FROM t", [], {"t": table}, ["g"], ["total"], (0.99,),
                        at_or_over={"total": "0"})
    assert row == {"g": "a", "requests": 1, "total_count": 0, "total_b0": None,
                   "total_at_or_over": 0}


def test_unequal_arrays_are_named_by_their_columns():
    sql = LakeSql(Lake("/nonexistent"))
    table = pa.Table.from_pylist([{"g": "a", "requests": 1, "send_buckets": [3],
                                   "send_counts": [1]},
                                  {"g": "a", "requests": 1, "send_buckets": [3, 4],
                                   "send_counts": [1]}])
    with pytest.raises(ValueError, match=r"send_buckets and send_counts: .* unequal length "
                                         r"in row 1"):
        merged_rows(sql, "SELECT * FROM t ORDER BY len(send_buckets)", [], {"t": table},
                    ["g"], ["send"], (0.99,))


@pytest.mark.parametrize("ms", [0.0, 0.0005, 0.001, 1.0, 299.9, 300.0, 300.1, 1e6])
def test_first_bucket_at_or_over(ms):
    b = first_bucket_at_or_over(ms)
    assert value_of(b) >= ms
    if ms > 0.001:
        assert value_of(b - 1) < ms
        assert abs(b - bucket_of(ms)) <= 1


def test_kept_histograms_are_the_merged_ones_in_any_row_order():
    """core.histogram_merge.merge with keep: each group's merged histogram (ascending ids,
    summed counts, zero and null entries left out), whatever order the rows come in; a
    group with no count gets an empty histogram."""
    rnd = random.Random(11)
    rows = [(rnd.randint(0, 9), *_histogram(rnd)) for _ in range(400)]
    rows.append((10, [5, 6], [0, 0]))
    group = np.array([g for g, _, _ in rows])
    m = merge("total", pa.array([b for _, b, _ in rows], pa.list_(pa.int16())),
              pa.array([c for _, _, c in rows], pa.list_(pa.int32())), group, 11, QS,
              keep=True)
    for g in range(11):
        want: dict[int, int] = {}
        for gg, b, c in rows:
            for i, n in zip(b, c):
                if gg == g and n > 0:
                    want[i] = want.get(i, 0) + n
        lo, hi = m.offsets[g], m.offsets[g + 1]
        assert (m.ids[lo:hi].tolist(), m.counts[lo:hi].tolist()) == (
            sorted(want), [want[i] for i in sorted(want)])
        assert m.n[g] == sum(want.values())
        for q, ids in zip(QS, m.quantile_ids):
            if want:
                assert value_of(int(ids[g])) == quantile_of_arrays(
                    sorted(want), [want[i] for i in sorted(want)], q)
    assert m.n[10] == 0 and m.offsets[10] == m.offsets[11]


def test_values_of_is_value_of():
    ids = np.array([ZERO_BUCKET, -172, -1, 0, 9, 258, 378, 600, 9])
    assert values_of(ids).tolist() == [value_of(int(i)) for i in ids]
    assert values_of(np.array([], np.int64)).tolist() == []
