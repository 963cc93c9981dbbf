"""Latency histograms merged in bulk: numpy over Arrow list columns.

core.latency_histogram's merge and quantile rule, for many groups at once: given the
rows' ``<stage>_buckets`` / ``<stage>_counts`` list columns and a group number per row,
per group the counts of equal bucket ids summed over its rows, n = their sum, and for each
q the bucket id of the q-quantile (rank = max(1, ceil(q * n)) with q the Python double,
the first bucket by ascending id whose running count reaches the rank); optionally the
merged histogram itself. An entry with a null id or count, or a count <= 0, adds nothing.

Both sides use it, so the merge is written once: the detectors' window reads
(evaluation/inputs/histograms.py, after DuckDB) and the gold minute rollup
(jobs/gold_windows.py, in Spark's Python workers). tests/unit/test_histograms.py and
tests/spark/test_gold_windows.py hold it equal to the Python rule.

How: the (group, id) pairs flattened, one stable sort (each row's ids come ascending, so
the sort merges sorted runs), equal pairs summed, a running sum and one binary search per
group and q. Imports numpy and pyarrow: the agents never import this module.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core.latency_histogram import value_of

__all__ = ["Merged", "merge", "values_of"]


class Merged(NamedTuple):
    """`merge`'s result, per group: `n`; per q the quantile's bucket id (meaningless where
    n = 0); with `over`, the counts at or over it; with `keep`, the merged histograms as
    `offsets` (groups + 1 positions) into ascending `ids` and their `counts`."""
    n: np.ndarray
    quantile_ids: list[np.ndarray]
    at_or_over: np.ndarray | None
    offsets: np.ndarray | None = None
    ids: np.ndarray | None = None
    counts: np.ndarray | None = None


def merge(stage: str, buckets: pa.ChunkedArray | pa.Array, counts: pa.ChunkedArray | pa.Array,
          group_of: np.ndarray, groups: int, qs: Sequence[float],
          over: np.ndarray | None = None, keep: bool = False) -> Merged:
    """Merge one stage's columns (`stage` names them in errors) per group: `group_of` is
    each row's group number in [0, groups). `over`: a bucket id per group, to count the
    requests at or over it. `keep`: also return the merged histograms."""
    b_list, c_list = (x.combine_chunks() if isinstance(x, pa.ChunkedArray) else x
                      for x in (buckets, counts))
    lengths = [pc.list_value_length(x).fill_null(0).to_numpy(zero_copy_only=False)
               for x in (b_list, c_list)]
    if (bad := np.flatnonzero(lengths[0] != lengths[1])).size:
        raise ValueError(f"{stage}_buckets and {stage}_counts: bucket ids and counts of "
                         f"unequal length in row {int(bad[0])} of the read")
    parent = pc.list_parent_indices(b_list).to_numpy()
    b_flat, c_flat = pc.list_flatten(b_list), pc.list_flatten(c_list)
    present = pc.and_(pc.is_valid(b_flat), pc.is_valid(c_flat)).to_numpy(zero_copy_only=False)
    b = b_flat.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    c = c_flat.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    g = np.asarray(group_of)[parent].astype(np.int64)
    keep_entry = present & (c > 0)
    b, c, g = b[keep_entry], c[keep_entry], g[keep_entry]
    n = _sums(g, c, groups)
    at_over = None
    if over is not None:
        at_over = _sums(g, np.where(b >= over[g], c, 0), groups)
    if not len(b):
        empty = np.zeros(0, np.int64)
        return Merged(n, [np.full(groups, -1) for _ in qs], at_over,
                      *((np.zeros(groups + 1, np.int64), empty, empty) if keep else ()))
    # (group, id) pairs in order, equal pairs summed: each group's merged histogram
    low, span = int(b.min()), int(b.max()) - int(b.min()) + 1
    key = g * span + (b - low)
    # rows come in group order or not; each row's ids ascending: a stable sort (timsort)
    # merges the sorted runs in about linear time
    order = np.argsort(key, kind="stable")
    key, c = key[order], c[order]
    first_of = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    keys, merged = key[first_of], np.add.reduceat(c, first_of)
    ids = keys % span + low
    running = np.concatenate(([0], np.cumsum(merged)))
    start = np.searchsorted(keys // span, np.arange(groups + 1), "left")
    quantile_ids = []
    for q in qs:
        rank = np.maximum(1, np.ceil(float(q) * n.astype(np.float64))).astype(np.int64)
        first = np.searchsorted(running, running[start[:-1]] + rank, "left") - 1
        quantile_ids.append(np.where(n > 0, ids[np.minimum(first, len(ids) - 1)], -1))
    if not keep:
        return Merged(n, quantile_ids, at_over)
    return Merged(n, quantile_ids, at_over, start.astype(np.int64), ids, merged)


def _sums(g: np.ndarray, c: np.ndarray, groups: int) -> np.ndarray:
    """Per group the sum of `c` (float weights: exact below 2^53 requests)."""
    return np.bincount(g, weights=c, minlength=groups).astype(np.int64)


def values_of(ids: np.ndarray) -> np.ndarray:
    """core.latency_histogram.value_of of every bucket id, the same doubles."""
    ids = np.asarray(ids, np.int64)
    if not len(ids):
        return np.zeros(0, np.float64)
    distinct, where = np.unique(ids, return_inverse=True)
    return np.array([value_of(int(i)) for i in distinct], np.float64)[where]
