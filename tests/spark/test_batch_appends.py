"""Micro-batch appends written at most once (jobs/batch_appends.py), on real Delta tables:
a batch replayed after a restart, a table written the old way (Delta transactions only),
and two queries sharing one table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.batch_appends import BatchAppends, app_history, last_marked_batch, mark, parse_mark


def _rows(spark, batch_id: int, n: int = 3):
    return spark.createDataFrame([(batch_id, i) for i in range(n)], "batch long, i long")


def _txn_apps(path: str) -> set[str]:
    """The apps with a Delta transaction action (txnAppId) in the table's log."""
    return {json.loads(line)["txn"]["appId"]
            for f in sorted(Path(path, "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines() if '"txn"' in line}


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
    assert app_history(spark, table, "silver").unmarked_rows
    run = BatchAppends(spark)
    run.append(_rows(spark, 5), table, "silver", 5)     # Delta's check: already there
    assert _batches_in(spark, table) == [5, 5, 5]
    assert run.append(_rows(spark, 6), table, "silver", 6)
    assert run.append(_rows(spark, 7), table, "silver", 7)
    assert _batches_in(spark, table) == [5] * 3 + [6] * 3 + [7] * 3


def test_a_table_holding_no_unmarked_rows_is_written_without_delta_s_check(spark, table):
    # Made as kmon makes its tables: an empty write, a constraint; then another app's batch.
    spark.createDataFrame([], "batch long, i long").write.format("delta").save(table)
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT i_set CHECK (i IS NOT NULL)")
    BatchAppends(spark).append(_rows(spark, 1), table, "other", 1)
    assert app_history(spark, table, "silver").unmarked_rows is False
    run = BatchAppends(spark)
    assert run.append(_rows(spark, 4), table, "silver", 4)
    assert _txn_apps(table) == set()
    assert not BatchAppends(spark).append(_rows(spark, 4), table, "silver", 4)
    assert _batches_in(spark, table) == [1] * 3 + [4] * 3


def test_rows_written_without_marks_are_seen(spark, table):
    spark.createDataFrame([], "batch long, i long").write.format("delta").save(table)
    _rows(spark, 5).write.format("delta").mode("append").save(table)
    seen = app_history(spark, table, "silver")
    assert seen.last_batch is None and seen.unmarked_rows
    # History cut short before version 0 may hide such rows.
    BatchAppends(spark).append(_rows(spark, 6), table, "other", 6)
    assert app_history(spark, table, "other", versions=1).unmarked_rows


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
