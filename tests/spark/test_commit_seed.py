"""The live detector's incremental commit read (evaluation/inputs/partition_signals.py
`CommitSeedCache`) gives what a whole read of the COMMIT_SEED_S before each range gives.

The commits span 70 minutes: a group that commits every minute and goes back twice (once
inside a range, once just before it), a group whose starting position is 50 minutes old, a
group whose last commit before its rewind is in the first seed but past the hour before
the rewind's ranges (no starting position, either way), a tombstone, and two commits at
one record time told apart by their offsets in __consumer_offsets. Evaluated every 80 s
(the seed moves every 60 s; then once with the clock stepped back), each read equals the
whole one, with every partition asked for and with none, while silver is read from at
most a minute before each range.
"""

from __future__ import annotations

import pytest

from infra.lake import Lake
from infra.lake_sql import LakeSql
from ingest.consumer_offsets import encode_key, encode_value, parse_offset_record
from ingest.sinks import LandingSink
from evaluation.inputs import CommitSeedCache, TimeRange, read_commits
from evaluation.inputs.partition_signals import (read_removals, with_delete_requests,
                                                    with_positions)
from jobs.pipeline import Pipeline
from jobs.streams import QUARANTINE, stream

T0 = 1_767_225_600_000            # 2026-01-01T00:00:00Z
MIN = 60_000
CLUSTER = "c1"
LOOKBACK = 300_000
# (group, partition, record time, offset); None is a tombstone
COMMITS = [
    *(("g-steady", 0, T0 + k * MIN, 1000 + 10 * k) for k in range(-70, 11) if k not in (-2, 3)),
    ("g-steady", 0, T0 - 2 * MIN, 500),          # back, just before the first ranges
    ("g-steady", 0, T0 + 3 * MIN, 700),          # back, inside the ranges
    ("g-rare", 1, T0 - 50 * MIN, 500),
    ("g-rare", 1, T0 + 4 * MIN, 300),            # back: its start is 50 minutes old
    ("g-old", 2, T0 - 64 * MIN, 900),            # in the first seed, past the later hours
    ("g-old", 2, T0 + 5 * MIN, 100),
    ("g-tomb", 3, T0 - 10 * MIN, 400),
    ("g-tomb", 3, T0 - 9 * MIN, None),
    ("g-tomb", 3, T0 + 2 * MIN, 350),
    ("g-twice", 4, T0 + 1 * MIN, 80),            # same record time, told apart by source_offset
    ("g-twice", 4, T0 + 1 * MIN, 60),
    ("g-long", 5, T0 - 120 * MIN, 777),          # removed two hours after its last commit
    ("g-long", 5, T0 - 1 * MIN, None),
]
ALL_TPS = {(CLUSTER, "orders", p) for p in range(5)}


@pytest.fixture(scope="module")
def lake(spark, kmon_config, tmp_path_factory) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("commit-seed") / "lake"))
    sink = LandingSink(lake.landing_root, "test")
    for i, (group, p, ts, offset) in enumerate(COMMITS):
        value = None if offset is None else encode_value(offset, "", ts)
        rec = parse_offset_record(encode_key(group, "orders", p), value, cluster=CLUSTER,
                                  source_partition=7, source_offset=1000 + i, ts_ms=ts)
        assert isinstance(rec, dict), rec
        sink.send("offset_commits", "k", dict(rec, record_id=f"{CLUSTER}:offsets:7:{1000 + i}"))
    sink.flush()
    Pipeline(spark, lake, kmon_config.pipeline,
             streams=(stream("offset_commits"), stream(QUARANTINE))).process_available()
    return lake


def test_the_live_detectors_seeded_commit_reads_equal_whole_reads(spark, lake):
    seed, sql = CommitSeedCache(), LakeSql(lake)
    times = list(range(T0 + 20_000, T0 + 10 * MIN, 80_000)) + [T0 + 3 * MIN + 30_000]
    went_down, starts = set(), 0
    for now in times:
        r = TimeRange(now - LOOKBACK, now)
        for wanted in (ALL_TPS, set()):
            got = read_commits(sql, r, wanted, seed=seed)
            want = read_commits(sql, r, wanted)
            assert got == want, (now, sorted(wanted))
            if not wanted:
                went_down |= {c.group for c in want}
            starts += sum(c.commit_ms < r.start_ms for c in want)
        assert r.start_ms - MIN < seed.silver_from_ms <= r.start_ms, now
    # The reads found what the data holds: both rewinds of g-steady, g-rare's from its old
    # start, g-twice's order within one record time, g-tomb's 350 after 400 (a tombstone
    # is no commit); not g-old (no start within the hour).
    assert went_down == {"g-steady", "g-rare", "g-twice", "g-tomb"}
    assert starts > 20


def test_removed_offsets_come_with_the_position_they_held(spark, lake):
    """A tombstone is a removal, with the group's last commit before it: within the hour
    (g-tomb) or days back (g-long, past the commit seed); the cache answers again without
    a read, and forgets removals older than every one asked for."""
    sql = LakeSql(lake)
    removals = read_removals(sql, TimeRange(T0 - 15 * MIN, T0))
    assert [(x.group, x.partition, x.removed_ms, x.position) for x in removals] == [
        ("g-long", 5, T0 - 1 * MIN, None), ("g-tomb", 3, T0 - 9 * MIN, None)]
    cache: dict = {}
    placed = with_positions(sql, removals, cache)
    assert [(x.group, x.position, x.position_ms) for x in placed] == [
        ("g-long", 777, T0 - 120 * MIN), ("g-tomb", 400, T0 - 10 * MIN)]
    assert with_positions(LakeSql(Lake(str(lake.root) + "-none")), removals, cache) == placed
    with_positions(sql, removals[:1], cache)    # g-long alone: g-tomb's is older
    assert set(cache) == {removals[0]}
    # no request windows in this lake: how the offsets went is not known
    assert [x.delete_requests_near for x in with_delete_requests(sql, placed)] == [None, None]


def test_a_seed_step_must_be_positive():
    with pytest.raises(ValueError, match="step_s"):
        CommitSeedCache(0)
