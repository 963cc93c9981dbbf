"""The landing sink's flush is all or nothing (ingest/sinks.py `LandingSink`): a flush
that fails part-way leaves no file, so the agent's retry (ingest/tail_agent.py rewinds
and sends again) is the records' only copy, however long the failure lasted."""

from __future__ import annotations

import json

import pytest

from ingest.sinks import LandingSink, SinkError


def landed(root) -> dict[str, list[str]]:
    return {d.name: sorted(p.name for p in d.iterdir())
            for d in sorted(root.iterdir()) if d.is_dir()}


def test_a_flush_writes_one_whole_file_per_stream(tmp_path):
    sink = LandingSink(tmp_path, "a1")
    sink.send("log_events", "k", {"record_id": "e1"})
    sink.send("request_windows", "k", {"record_id": "w1"})
    sink.send("request_windows", "k", {"record_id": "w2"})
    sink.flush()
    files = landed(tmp_path)
    assert [len(v) for v in files.values()] == [1, 1]
    assert all(not n.startswith(".") for names in files.values() for n in names)
    (w,) = (tmp_path / "request_windows").iterdir()
    assert [json.loads(x)["record_id"] for x in w.read_text().splitlines()] == ["w1", "w2"]


def test_a_flush_that_fails_on_one_stream_leaves_no_file_of_any(tmp_path):
    sink = LandingSink(tmp_path, "a1")
    (tmp_path / "request_windows").write_text("not a folder")   # its mkdir fails: OSError
    sink.send("log_events", "k", {"record_id": "e1"})           # written first
    sink.send("request_windows", "k", {"record_id": "w1"})
    with pytest.raises(SinkError, match="could not write 2 records"):
        sink.flush()
    assert list((tmp_path / "log_events").iterdir()) == []     # no copy, no dot-file

    # The agent sends the same records again once the cause is gone: one copy each.
    (tmp_path / "request_windows").unlink()
    sink.send("log_events", "k", {"record_id": "e1"})
    sink.send("request_windows", "k", {"record_id": "w1"})
    sink.flush()
    assert [len(v) for v in landed(tmp_path).values()] == [1, 1]


def test_a_record_is_written_with_its_id_first_and_nothing_else_moved(tmp_path):
    """silver reads the id from the head of the line (jobs/silver.py HEAD_RECORD_ID)."""
    import re

    from jobs.silver import HEAD_RECORD_ID

    sink = LandingSink(tmp_path, "a1")
    sink.send("log_events", "k", {"ts_ms": 1, "kind": "other", "record_id": "c1:1:log:7"})
    sink.send("log_events", "k", {"ts_ms": 2})                   # no id: as it came
    sink.send("log_events", "k", {"record_id": "c1:1:log:8", "ts_ms": 3})  # id first already
    sink.flush()
    (f,) = (tmp_path / "log_events").iterdir()
    first, second, third = f.read_text().splitlines()
    assert first == '{"record_id":"c1:1:log:7","ts_ms":1,"kind":"other"}'
    assert re.match(HEAD_RECORD_ID, first).group(1) == "c1:1:log:7"
    assert second == '{"ts_ms":2}'
    assert third == '{"record_id":"c1:1:log:8","ts_ms":3}'
