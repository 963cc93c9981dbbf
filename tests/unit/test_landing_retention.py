"""jobs/landing_retention.py's rules: which landing files a pass may delete, from the
checkpoint's source log as Spark writes it (the format checked on a real query in
tests/spark/test_maintenance.py)."""

from __future__ import annotations

import json

from jobs.landing_retention import (consumed_files, forget_gone, log_batch, normalized,
                                    source_log_entries, to_delete)

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


def test_a_compacted_log_forgets_only_files_gone_that_a_committed_batch_read():
    a, b, c, d = (f"file:///l/landing/a/{n}.jsonl" for n in "abcd")
    text = _log((a, 0), (b, 1), (c, 2), (d, 3))
    gone = {normalized(a), normalized(b), normalized(d)}
    pruned, dropped = forget_gone(text, 2, gone.__contains__)
    # d is gone but batch 3 is not committed: a restart plans it again from the log
    assert dropped == 2
    assert source_log_entries(pruned) == [(c, 2), (d, 3)]
    assert pruned.startswith("v1\n") and not pruned.endswith("\n")   # Spark's own layout


def test_a_log_with_nothing_gone_or_of_an_unknown_shape_is_left_alone():
    a = "file:///l/landing/a/a.jsonl"
    assert forget_gone(_log((a, 0)), 5, lambda p: False) is None
    assert forget_gone(_log((a, 0)), None, lambda p: True) is None
    assert forget_gone("v2" + _log((a, 0))[2:], 5, lambda p: True) is None
    assert forget_gone(_log((a, 0)) + '\n{"topic":{"0":5}}', 5, lambda p: True) is None
    assert forget_gone(_log((a, 0)) + "\nnot json", 5, lambda p: True) is None


def test_a_log_whose_every_file_is_gone_keeps_its_version_line():
    a = "file:///l/landing/a/a.jsonl"
    assert forget_gone(_log((a, 0)), 0, lambda p: True) == ("v1", 1)
