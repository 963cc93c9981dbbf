"""The soak benchmark's clock handling (bench/bench_soak.py): the root-cause queries it
times are the cookbook's, anchored at the simulated now instead of the wall clock; its
state file, which a stopped run goes on from."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from bench.bench_soak import WINDOWS_QUERIES, at_sim_now, query_title, scaled_hours, sim_day0
from jobs.table_docs import cookbook_queries

NOW_MS = 1_795_000_000_000


def test_every_timed_query_loses_the_wall_clock():
    queries = [*cookbook_queries(), *WINDOWS_QUERIES]
    anchored = [q for q in queries if "current_" in q.lower()]
    assert len(anchored) >= 4          # the stage, request, follower and cleaner queries
    for q in queries:
        moved = at_sim_now(q, NOW_MS)
        assert "current_timestamp" not in moved.lower()
        assert "current_date" not in moved.lower()
    assert "timestamp_millis(1795000000000) - INTERVAL 1 DAY" in at_sim_now(
        queries[0], NOW_MS)
    assert "to_date(timestamp_millis(1795000000000)) - 1" in at_sim_now(
        "SELECT 1 WHERE date >= CURRENT_DATE() - 1", NOW_MS)


def test_titles_are_the_queries_comments():
    assert query_title(WINDOWS_QUERIES[0]) == "One broker's stage breakdown over the last day"
    assert query_title("SELECT 1") == "SELECT 1"


def test_the_simulated_week_starts_at_a_midnight_and_ends_before_now():
    now = datetime(2026, 11, 28, 8, 30, tzinfo=timezone.utc)
    day0 = sim_day0(7, now)
    assert datetime.fromtimestamp(day0 / 1000, tz=timezone.utc) == datetime(
        2026, 11, 20, tzinfo=timezone.utc)
    assert day0 + 7 * 86_400_000 < now.timestamp() * 1000


def test_retentions_scale_with_the_compression():
    assert scaled_hours(168, 168) == 1.0
    assert scaled_hours(24, 240) == 0.1


def test_soak_state_survives_a_restart_and_a_missing_one_is_named(tmp_path):
    from bench.bench_soak import SoakState

    state = SoakState.new(tmp_path, brokers=3, days=7, batch_minutes=240, vacuum_sim_h=48.0,
                          landing_sim_h=24.0, day0=1_700_000_000_000)
    state.doc.update(delivered=9, delivering=10, pending=[[2, 1_700_172_800_000]])
    state.save()
    again = SoakState.load(tmp_path)
    assert again.doc == state.doc
    assert not (tmp_path / (SoakState.FILE + ".tmp")).exists()
    with pytest.raises(SystemExit, match="no soak-state.json"):
        SoakState.load(tmp_path / "elsewhere")
