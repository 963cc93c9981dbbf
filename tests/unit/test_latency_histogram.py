"""core/latency_histogram.py: the bucket bound, exact merges, quantiles, the array form."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.latency_histogram import (ALPHA, GAMMA, MIN_BUCKET, MIN_MS, ZERO_BUCKET, Histogram,
                                    bucket_of, quantile_of_arrays, value_of)

pytestmark = pytest.mark.unit

HYP = settings(derandomize=True, deadline=None, database=None, max_examples=400)
# Rounding of the logarithm at a bucket edge may put a value in the next bucket, whose
# value is then ALPHA off plus an ulp or two (module docstring).
ROUNDING = 1e-12

timings = st.floats(min_value=MIN_MS, max_value=3.6e6, allow_nan=False, allow_infinity=False)
any_timing = st.one_of(st.just(0.0), st.floats(min_value=MIN_MS, max_value=1e5),
                       st.sampled_from([0.001, 0.018, 0.061, 1.772, 300.0, 646.592]))


def nearest_rank(values: list[float], q: float) -> float:
    return sorted(values)[max(1, math.ceil(q * len(values))) - 1]


@HYP
@given(timings)
def test_a_bucket_value_is_within_alpha_of_every_value_in_it(v):
    assert abs(value_of(bucket_of(v)) - v) <= ALPHA * v * (1 + ROUNDING)


def test_the_bound_is_tight_at_both_edges_of_a_bucket():
    for i in (-100, 0, 1, 17, 250):
        upper, lower = GAMMA ** i, GAMMA ** (i - 1)
        assert value_of(i) / upper == pytest.approx(1 - ALPHA, rel=1e-12)
        assert value_of(i) / lower == pytest.approx(1 + ALPHA, rel=1e-12)
        inside = math.sqrt(upper * lower)
        assert bucket_of(inside) == i


def test_buckets_are_monotone_over_captured_precision():
    # Timings as Kafka logs them (whole microseconds) from 1 µs to 2 s: ids never go down,
    # and once the 7-µs step is less than a bucket wide (4 % of the value), by one at most.
    prev = bucket_of(0.001)
    for us in range(2, 2_000_000, 7):
        b = bucket_of(us / 1000)
        assert prev <= b
        assert us < 200 or b <= prev + 1
        prev = b


def test_zero_and_below_the_minimum():
    assert bucket_of(0.0) == bucket_of(-0.0) == bucket_of(-3.5) == ZERO_BUCKET
    assert value_of(ZERO_BUCKET) == 0.0
    assert bucket_of(MIN_MS) == bucket_of(0.0004) == MIN_BUCKET == -172
    assert abs(value_of(MIN_BUCKET) - 0.0004) <= MIN_MS * (1 + ALPHA)
    assert ZERO_BUCKET < MIN_BUCKET  # the zero bucket sorts first
    h = Histogram.of([0.0, 0.0, 0.0, 5.0])
    assert h.counts[ZERO_BUCKET] == 3
    assert h.quantile(0.75) == 0.0 and h.quantile(0.76) == value_of(bucket_of(5.0))


def test_the_id_range_of_timings_kafka_logs():
    assert bucket_of(30_000.0) == 258 and bucket_of(3_600_000.0) == 378
    assert -32768 <= ZERO_BUCKET < MIN_BUCKET and bucket_of(86_400_000.0) < 32767


@HYP
@given(st.lists(any_timing, max_size=60), st.lists(any_timing, max_size=60))
def test_merge_is_exact(a, b):
    merged = Histogram.of(a).merge(Histogram.of(b))
    assert merged == Histogram.of(a + b)
    assert merged.count == len(a) + len(b)


@HYP
@given(st.lists(any_timing, min_size=1, max_size=200),
       st.floats(min_value=0.0, max_value=1.0))
def test_quantile_is_within_alpha_of_the_exact_nearest_rank(values, q):
    exact = nearest_rank(values, q)
    got = Histogram.of(values).quantile(q)
    assert abs(got - exact) <= ALPHA * exact * (1 + ROUNDING)


def test_quantile_rule_on_a_small_case():
    h = Histogram.of([1.0] * 98 + [100.0, 500.0])
    assert h.quantile(0.98) == value_of(bucket_of(1.0))    # rank 98
    assert h.quantile(0.99) == value_of(bucket_of(100.0))  # rank 99
    assert h.quantile(1.0) == value_of(bucket_of(500.0))
    assert h.quantile(0.0) == value_of(bucket_of(1.0))     # rank 1 at least
    assert Histogram().quantile(0.5) is None
    with pytest.raises(ValueError):
        h.quantile(1.5)
    # q * n is a double product: 0.07 * 100 = 7.000000000000001, rank 8
    h = Histogram.of([float(i) for i in range(1, 101)])
    assert h.quantile(0.07) == value_of(bucket_of(8.0))


@HYP
@given(st.lists(any_timing, max_size=100))
def test_arrays_round_trip(values):
    h = Histogram.of(values)
    ids, counts = h.to_arrays()
    assert ids == sorted(ids) and len(ids) == len(set(ids)) and all(c > 0 for c in counts)
    assert Histogram.from_arrays(ids, counts) == h
    assert sum(counts) == len(values)
    if values:
        assert quantile_of_arrays(ids, counts, 0.5) == h.quantile(0.5)


def test_from_arrays_sums_repeated_ids_and_checks_lengths():
    assert Histogram.from_arrays([3, 3, 5], [1, 2, 0]).counts == {3: 3}
    with pytest.raises(ValueError):
        Histogram.from_arrays([1, 2], [1])
