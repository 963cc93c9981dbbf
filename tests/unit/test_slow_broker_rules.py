"""The slow-broker rules (detectors/slow_broker/rules.py), each at its boundary: at the
traffic floor and one under it, at the threshold and just over it, at the ratio and just
under it, at the fewest windows or peers a reference needs and one fewer."""

from __future__ import annotations

import pytest

from detectors.slow_broker import RequestStageWindow
from detectors.slow_broker.rules import (
    MIN_HISTORY_WINDOWS,
    MIN_REFERENCE_MS,
    POOL_WINDOWS,
    History,
    baseline,
    dominant_stage,
    enough_traffic,
    judge_row,
    judged_latency,
    over_threshold,
    peer_median,
    pool_quiet,
    stands_out,
)

pytestmark = pytest.mark.unit

FLOOR = 100
THRESHOLD = 300.0
RATIO = 3.0


def row(api: str = "Produce", requests: int = 500, total: float = 10.0, **stages
        ) -> RequestStageWindow:
    return RequestStageWindow("c1", 1, api, 0, requests, total,
                              **{f"{s}_p99_ms": ms for s, ms in stages.items()})


@pytest.mark.parametrize("name,r,expected", [
    ("a write is judged on its total, Remote (acks=all) included",
     row("Produce", total=900.0, remote=880.0), 900.0),
    ("a fetch is judged outside purgatory: total minus Remote",
     row("Fetch", total=502.0, remote=499.0, local=1.0), 3.0),
    ("a fetch's own stage bounds its judged latency from below",
     row("Fetch", total=500.0, remote=499.0, local=400.0), 400.0),
    ("the exact p99 of (total - remote) wins when given",
     row("Fetch", total=500.0, remote=499.0, total_excl_remote=12.5), 12.5),
])
def test_judged_latency(name, r, expected):
    assert judged_latency(r) == expected


@pytest.mark.parametrize("requests,expected", [(FLOOR, True), (FLOOR - 1, False), (0, False)])
def test_the_traffic_floor_is_inclusive(requests, expected):
    assert enough_traffic(requests, FLOOR) is expected


@pytest.mark.parametrize("name,requests,latency,earlier,expected", [
    ("at the threshold a quiet window is not pooled",
     40, THRESHOLD, [(400, 900.0)], None),
    ("just over it, pooled with the window before, at the least latency",
     40, THRESHOLD + 1, [(60, 900.0)], (2, 100, THRESHOLD + 1)),
    ("a pool one request short of the floor is not judged",
     40, 900.0, [(59, 900.0)], None),
    ("an earlier window at the threshold ends the pool",
     40, 900.0, [(40, THRESHOLD), (400, 900.0)], None),
    ("a window with no row ends the pool",
     40, 900.0, [None, (400, 900.0)], None),
    ("a window at the floor alone is its own pool of one",
     FLOOR, 900.0, [], (1, FLOOR, 900.0)),
    ("the floor at the POOL_WINDOWS-th window: pooled",
     17, 900.0, [(17, 800.0)] * POOL_WINDOWS, (POOL_WINDOWS, 17 * POOL_WINDOWS, 800.0)),
    ("the floor only one window past POOL_WINDOWS: never",
     16, 900.0, [(16, 800.0)] * POOL_WINDOWS, None),
])
def test_pool_quiet(name, requests, latency, earlier, expected):
    assert pool_quiet(requests, latency, THRESHOLD, earlier, FLOOR) == expected


@pytest.mark.parametrize("latency,expected", [(THRESHOLD, False), (THRESHOLD + 0.1, True)])
def test_the_threshold_is_exclusive(latency, expected):
    assert over_threshold(latency, THRESHOLD) is expected


@pytest.mark.parametrize("name,value,reference,expected", [
    ("at the ratio", 300.0, 100.0, True),
    ("just under the ratio", 299.9, 100.0, False),
    ("no reference", 1e6, None, False),
    ("a reference under MIN_REFERENCE_MS counts as it", RATIO * MIN_REFERENCE_MS, 0.0, True),
    ("and just under that", RATIO * MIN_REFERENCE_MS - 0.01, 0.0, False),
])
def test_stands_out(name, value, reference, expected):
    assert stands_out(value, reference, RATIO) is expected


N = MIN_HISTORY_WINDOWS
# N quiet windows holding exactly FLOOR requests together.
QUIET_AT_FLOOR = [(FLOOR // N, 50.0)] * (N - 1) + [(FLOOR - (N - 1) * (FLOOR // N), 50.0)]


@pytest.mark.parametrize("name,external,healthy,quiet,expected", [
    ("the external baseline wins", 7.0, [10.0] * N, [], 7.0),
    ("MIN_HISTORY_WINDOWS healthy windows give their median", None,
     [10.0] * (N - 1) + [99.0], [], 10.0),
    ("one fewer give none", None, [10.0] * (N - 1), [], None),
    ("quiet windows holding the floor together give their median", None, [10.0] * (N - 1),
     QUIET_AT_FLOOR, 50.0),
    ("one request short of the floor give none", None, [],
     QUIET_AT_FLOOR[:-1] + [(QUIET_AT_FLOOR[-1][0] - 1, 50.0)], None),
    ("one quiet window fewer than MIN_HISTORY_WINDOWS", None, [],
     [(FLOOR, 50.0)] * (N - 1), None),
])
def test_baseline(name, external, healthy, quiet, expected):
    assert baseline(external, healthy, quiet, FLOOR) == expected


@pytest.mark.parametrize("name,latencies,own,expected", [
    ("two peers besides itself", [10.0, 20.0, 900.0], 900.0, 15.0),
    ("one peer besides itself: no median", [10.0, 900.0], 900.0, None),
    ("a pooled row (no own latency) against two", [10.0, 20.0], None, 15.0),
    ("a pooled row against one", [10.0], None, None),
])
def test_peer_median_needs_min_peers(name, latencies, own, expected):
    assert peer_median(latencies, own) == expected


@pytest.mark.parametrize("name,r,expected", [
    ("the largest stage p99", row(local=10.0, remote=30.0), ("remote", 0.75)),
    ("Remote is never a purgatory API's stage", row("Fetch", local=10.0, remote=30.0),
     ("local", 1.0)),
    ("a tie goes to the earlier stage", row(request_queue=5.0, send=5.0),
     ("request_queue", 0.5)),
    ("no stage data", row(), (None, 0.0)),
])
def test_dominant_stage(name, r, expected):
    assert dominant_stage(r) == expected


@pytest.mark.parametrize("name,latency,requests,pool,base,peers,suspect", [
    ("over the threshold at the history ratio", 301.0, 500, None, 301.0 / RATIO, None, True),
    ("just under the history ratio, no peers", 301.0, 500, None, 301.0 / RATIO + 1, None,
     False),
    ("at the peer ratio", 301.0, 500, None, None, 301.0 / RATIO, True),
    ("at the threshold, however far above its usual", THRESHOLD, 500, None, 1.0, 1.0, False),
    ("under the floor, not pooled", 900.0, FLOOR - 1, None, 1.0, 1.0, False),
    ("under the floor, pooled: judged at the pool's least", 900.0, 40, (3, 120, 400.0), 100.0,
     None, True),
    ("pooled, the pool's least under the ratio", 900.0, 40, (3, 120, 299.0), 100.0, None,
     False),
])
def test_judge_row(name, latency, requests, pool, base, peers, suspect):
    r = row(requests=requests, total=latency)
    v = judge_row(r, latency, THRESHOLD, enough_traffic(requests, FLOOR), pool, base,
                  peers, RATIO, RATIO)
    assert v.suspect is suspect
    assert v.latency_ms == (pool[2] if pool else latency)
    assert v.pooled_windows == (pool[0] if pool else 1)


def test_history_remembers_only_non_suspect_windows_and_pools_the_latest():
    h = History()
    w = 10_000
    quiet = RequestStageWindow("c1", 1, "Produce", 0, 40, 900.0)
    h.note(quiet, 900.0)
    later = RequestStageWindow("c1", 1, "Produce", w, 40, 800.0)
    assert h.earlier(later, w)[0] == (40, 900.0)
    far = RequestStageWindow("c1", 1, "Produce", POOL_WINDOWS * w, 40, 800.0)
    h.note(far, 800.0)
    assert h.earlier(far, w) == [None] * (POOL_WINDOWS - 1)   # older than a pool can use
    busy_row = RequestStageWindow("c1", 2, "Produce", 0, 500, 20.0)
    slow_row = RequestStageWindow("c1", 2, "Produce", w, 500, 900.0)
    busy = judge_row(busy_row, 20.0, THRESHOLD, True, None, None, None, RATIO, RATIO)
    slow = judge_row(slow_row, 900.0, THRESHOLD, True, None, 10.0, None, RATIO, RATIO)
    for r, v in ((busy_row, busy), (slow_row, slow)):
        h.note(r, v.latency_ms)
    h.remember([busy, slow])
    assert h.usual(RequestStageWindow("c1", 2, "Produce", 2 * w, 500, 30.0), 100) == (
        [20.0], [])
