"""Silver's high waters per source (jobs/silver.py `batch_stats`): what each batch hands on
to the next, without Spark. The rows themselves are judged in tests/spark/test_pipeline.py."""

from __future__ import annotations

import pytest

from jobs.silver import SOURCE_MEMORY_MS, HighWater, batch_stats

pytestmark = pytest.mark.unit

T = 1_795_343_920_000


def counts(**sources) -> dict:
    """One stream's counts with these sources' newest valid times (None: none valid)."""
    per = {k.replace("_", "/"): {"max_ms": v, "lead_ms": -5_000, "ahead": 0}
           for k, v in sources.items()}
    valid = [v for v in sources.values() if v is not None]
    return {"rows_in": len(per), "rows_valid": len(valid), "late_in": 0, "late_out": 0,
            "ahead": 0, "max_ms": max(valid, default=None), "min_ms": min(valid, default=None),
            "sources": per}


def test_each_source_keeps_its_own_high_water_and_the_batch_row_says_what_moved():
    stats, hw = batch_stats("silver", 1, {"log_events": counts(c_1=T, c_2=T - 600_000)},
                            HighWater(), now_ms=T)
    assert hw.of_sources("log_events") == {"c/1": T, "c/2": T - 600_000}
    assert stats[0]["source_high_water"] == {"c/1": T, "c/2": T - 600_000}
    assert stats[0]["high_water_ms"] == T
    # a batch with an older row of c/1 and none valid of c/2 moves neither
    stats, hw = batch_stats("silver", 2, {"log_events": counts(c_1=T - 1_000, c_2=None)},
                            hw, now_ms=T + 10_000)
    assert hw.of_sources("log_events") == {"c/1": T, "c/2": T - 600_000}
    assert stats[0]["source_high_water"] == {"c/1": T}     # the running max, re-stated
    assert stats[0]["source_lead_ms"] == {"c/1": -5_000, "c/2": -5_000}


def test_a_source_silent_longer_than_the_memory_is_forgotten():
    _, hw = batch_stats("silver", 1, {"log_events": counts(c_1=T, c_2=T)}, HighWater(), T)
    _, hw = batch_stats("silver", 2, {"log_events": counts(c_1=T + SOURCE_MEMORY_MS)}, hw,
                        T + SOURCE_MEMORY_MS)
    assert set(hw.of_sources("log_events")) == {"c/1", "c/2"}
    _, hw = batch_stats("silver", 3, {"log_events": counts(c_1=T + SOURCE_MEMORY_MS + 1)}, hw,
                        T + SOURCE_MEMORY_MS + 1)
    assert set(hw.of_sources("log_events")) == {"c/1"}
    # a stream with no rows in a batch keeps its sources, forgotten by the same clock
    # (gold.pipeline_batches is read back the same way after a restart)
    _, hw2 = batch_stats("silver", 4, {"broker_metrics": counts(c_1=T)}, hw,
                         T + SOURCE_MEMORY_MS + 2)
    assert hw2.of_sources("log_events") == hw.of_sources("log_events") == {
        "c/1": T + SOURCE_MEMORY_MS + 1}
    _, hw3 = batch_stats("silver", 5, {"broker_metrics": counts(c_1=T)}, hw2,
                         T + 2 * SOURCE_MEMORY_MS + 2)
    assert hw3.of_sources("log_events") == {}
