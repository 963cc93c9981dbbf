"""ingest/log_time.py (log4j stamps to epoch ms) and ingest/malformed.py (quarantine rows)."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from ingest.log_time import UTC, stamp_to_ms, zone
from ingest.malformed import RAW_MAX_CHARS, Malformed, Skipped, raw_as_text
from schemas import quarantine

pytestmark = pytest.mark.unit


def epoch_ms(*args, tz=timezone.utc) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


STAMPS = [
    ("utc_with_comma", "2026-11-22 10:35:02,083", UTC, epoch_ms(2026, 11, 22, 10, 35, 2) + 83),
    ("dot_before_millis", "2026-11-22 10:35:02.083", UTC, epoch_ms(2026, 11, 22, 10, 35, 2) + 83),
    ("paris_winter", "2026-01-15 12:00:00,000", ZoneInfo("Europe/Paris"),
     epoch_ms(2026, 1, 15, 11, 0, 0)),
    ("paris_summer", "2026-07-15 12:00:00,000", ZoneInfo("Europe/Paris"),
     epoch_ms(2026, 7, 15, 10, 0, 0)),
    ("first_of_repeated_hour_after_fall_back", "2026-10-25 02:30:00,000",
     ZoneInfo("Europe/Paris"), epoch_ms(2026, 10, 25, 0, 30, 0)),
    ("last_millisecond_of_a_minute", "2026-12-31 23:59:59,999", UTC,
     epoch_ms(2027, 1, 1, 0, 0, 0) - 1),
]


@pytest.mark.parametrize("stamp,tz,expected", [c[1:] for c in STAMPS], ids=[c[0] for c in STAMPS])
def test_stamps(stamp, tz, expected):
    assert stamp_to_ms(stamp, tz) == expected
    assert stamp_to_ms(stamp, tz) == expected  # again, from the per-minute cache


@pytest.mark.parametrize("stamp", ["2026-13-01 00:00:00,000", "2026-02-30 00:00:00,000",
                                   "2026-01-01 24:00:00,000", "2026-01-01 00:00:61,000"],
                         ids=["month_13", "february_30", "hour_24", "second_61"])
def test_impossible_stamps_raise(stamp):
    with pytest.raises(ValueError):
        stamp_to_ms(stamp)


def test_zone_names():
    assert zone(None) is UTC and zone("UTC") is UTC and zone("Europe/Paris").key == "Europe/Paris"


def test_malformed_and_skipped_are_never_mistaken_for_records():
    assert not Malformed("request_log", "empty_line", "")
    assert not Skipped("consumer_offsets", "group_metadata")


QUARANTINE_CASES = [
    ("text_line", "bad line ü", ("bad line ü", "utf8", 11, False)),
    ("utf8_bytes", "bad ü".encode(), ("bad ü", "utf8", 6, False)),
    ("binary_bytes_as_hex", b"\xff\x00", ("ff00", "hex", 2, False)),
    # A lone surrogate has no UTF-8 form, so no sink could send it as text.
    ("text_with_a_lone_surrogate_as_hex", "a\ud800", ("61eda080", "hex", 4, False)),
    ("huge_line_cut", "x" * (RAW_MAX_CHARS + 5), ("x" * RAW_MAX_CHARS, "utf8",
                                                   RAW_MAX_CHARS + 5, True)),
]


@pytest.mark.parametrize("raw,expected", [c[1:] for c in QUARANTINE_CASES],
                         ids=[c[0] for c in QUARANTINE_CASES])
def test_quarantine_record_bounds_raw_and_keeps_its_size(raw, expected):
    q = Malformed("request_log", "oversize_line", raw, ts_ms=5).to_quarantine_record(
        cluster="c", ingest_ts_ms=9, broker=2, origin="/var/log/kafka/kafka-request.log",
        source_offset=1234)
    assert (q["raw"], q["raw_encoding"], q["raw_bytes_len"], q["raw_truncated"]) == expected
    assert (q["cluster"], q["broker"], q["source"], q["reason"], q["ts_ms"], q["ingest_ts_ms"],
            q["origin"], q["source_partition"], q["source_offset"]) == (
        "c", 2, "request_log", "oversize_line", 5, 9, "/var/log/kafka/kafka-request.log",
        None, 1234)
    assert list(q) == quarantine.SCHEMA.fieldNames()


def test_raw_as_text_of_nothing():
    assert raw_as_text(None) == ("", "utf8", 0)
