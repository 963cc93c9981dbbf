"""Micro-batch appends written at most once (jobs/batch_appends.py), on real Delta tables:
a batch replayed after a restart, a table written the old way (Delta transactions only),
and two queries sharing one table."""

from __future__ import annotations

import pytest

from jobs.batch_appends import BatchAppends, last_marked_batch, mark, parse_mark


def _rows(spark, batch_id: int, n: int = 3):
    return spark.createDataFrame([(batch_id, i) for i in range(n)], "batch long, i long")


def _batches_in(spark, path: str) -> list[int]:
    return sorted(r["batch"] for r in spark.read.format("delta").load(path).collect())


@pytest.fixture()
def table(tmp_path) -> str:
    return str(tmp_path / "t")


def test_a_batch_replayed_after_a_restart_is_not_written_again(spark, table):
    run1 = BatchAppends(spark)
    for b in (0, 1, 2):
        assert run1.append(_rows(spark, b), table, "silver", b)
    assert last_marked_batch(spark, table, "silver") == 2
    # The process dies after batch 2's append, before the query recorded batch 2 as done:
    # the next run replays batch 2.
    run2 = BatchAppends(spark)
    assert not run2.append(_rows(spark, 2), table, "silver", 2)
    assert run2.append(_rows(spark, 3), table, "silver", 3)
    assert _batches_in(spark, table) == [b for b in (0, 1, 2, 3) for _ in range(3)]


def test_in_one_run_a_batch_seen_already_is_skipped_without_reading_the_table(spark, table):
    run = BatchAppends(spark)
    assert run.append(_rows(spark, 7), table, "silver", 7)
    assert not run.append(_rows(spark, 7), table, "silver", 7)
    assert _batches_in(spark, table) == [7, 7, 7]


def test_a_table_written_with_delta_transactions_only_is_checked_by_delta(spark, table):
    # How kmon wrote before marks: txnAppId/txnVersion, no userMetadata.
    (_rows(spark, 5).write.format("delta").mode("append")
     .option("txnAppId", "silver").option("txnVersion", 5).save(table))
    assert last_marked_batch(spark, table, "silver") is None
    run = BatchAppends(spark)
    run.append(_rows(spark, 5), table, "silver", 5)     # Delta's check: already there
    assert _batches_in(spark, table) == [5, 5, 5]
    assert run.append(_rows(spark, 6), table, "silver", 6)
    assert run.append(_rows(spark, 7), table, "silver", 7)
    assert _batches_in(spark, table) == [5] * 3 + [6] * 3 + [7] * 3


def test_two_queries_sharing_a_table_are_told_apart(spark, table):
    run = BatchAppends(spark)
    for b in range(4):
        run.append(_rows(spark, b, 1), table, "silver_batches", b)
    run.append(_rows(spark, 100, 1), table, "silver_slow_batches", 0)
    restarted = BatchAppends(spark)
    assert not restarted.append(_rows(spark, 3, 1), table, "silver_batches", 3)
    assert restarted.append(_rows(spark, 101, 1), table, "silver_slow_batches", 1)
    assert _batches_in(spark, table) == [0, 1, 2, 3, 100, 101]


def test_marks_name_the_app_and_batch():
    assert parse_mark(mark("silver_quarantine", 42)) == ("silver_quarantine", 42)
    assert parse_mark("some operator's note") is None
    assert parse_mark(None) is None
