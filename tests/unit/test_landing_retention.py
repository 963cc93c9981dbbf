"""jobs/landing_retention.py's rules: which landing files a pass may delete, from the
checkpoint's source log as Spark writes it (the format checked on a real query in
tests/spark/test_maintenance.py)."""

from __future__ import annotations

import json

from jobs.landing_retention import (consumed_files, log_batch, normalized, source_log_entries,
                                    to_delete)

H = 3_600_000


def _log(*entries: tuple[str, int]) -> str:
    return "v1\n" + "\n".join(json.dumps({"path": p, "timestamp": 1, "batchId": b})
                              for p, b in entries)


def test_spark_and_hadoop_spellings_of_a_path_are_one():
    assert normalized("file:///lake/landing/x/a%20b.jsonl") == \
        normalized("file:/lake/landing/x/a b.jsonl")
    assert normalized("/lake/landing/x/a.jsonl") == normalized("file:/lake/landing/x/a.jsonl")
    assert normalized("s3a://bucket/lake/landing/x/a.jsonl") != \
        normalized("s3a://other/lake/landing/x/a.jsonl")


def test_log_file_names():
    assert log_batch("12") == 12
    assert log_batch("19.compact") == 19
    assert log_batch(".12.crc") is None
    assert log_batch(".12.9a1b.tmp") is None
    assert log_batch("metadata") is None


def test_only_file_entries_count():
    text = _log(("file:///l/landing/a/1.jsonl", 0)) + '\n{"broker_metrics":{"0":5}}\nnot json'
    assert source_log_entries(text) == [("file:///l/landing/a/1.jsonl", 0)]
    # a Kafka source's offsets file is not a file list
    assert source_log_entries('v1\n{"kmon.telemetry.x":{"0":42}}') == []


def test_a_file_counts_as_read_only_up_to_the_last_commit():
    logs = [_log(("file:///l/landing/a/1.jsonl", 0), ("file:///l/landing/a/2.jsonl", 1)),
            _log(("file:///l/landing/a/3.jsonl", 2))]
    assert consumed_files(logs, None) == set()
    assert consumed_files(logs, 1) == {normalized("file:///l/landing/a/1.jsonl"),
                                       normalized("file:///l/landing/a/2.jsonl")}


def test_only_files_read_and_older_than_the_retention_go():
    now = 100 * H
    consumed = {normalized("file:///l/landing/a/old-read.jsonl"),
                normalized("file:///l/landing/a/new-read.jsonl")}
    files = [("file:/l/landing/a/old-read.jsonl", now - 25 * H, 10),
             ("file:/l/landing/a/new-read.jsonl", now - 1 * H, 20),
             ("file:/l/landing/a/old-unread.jsonl", now - 99 * H, 30)]
    assert to_delete(files, consumed, now, retain_h=24) == [("file:/l/landing/a/old-read.jsonl", 10)]
    assert to_delete(files, consumed, now, retain_h=0) == [
        ("file:/l/landing/a/old-read.jsonl", 10), ("file:/l/landing/a/new-read.jsonl", 20)]
