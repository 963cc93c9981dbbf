"""ingest/client_log.py: offset resets, out-of-range fetches and truncations in client logs."""

from __future__ import annotations

import json

import pytest

from ingest import client_log
from ingest.client_log import parse_client_line
from ingest.malformed import Malformed, Skipped
from tests.unit.captured import fixture_lines, line_containing

pytestmark = pytest.mark.unit

JAVA = "client_log/java-4.3.1.log"
JAVA_OLDER = "client_log/java-older-and-seek.log"
RDKAFKA = "client_log/librdkafka-2.16.log"
TS_MS = 1_795_344_630_000  # the time an agent passes for a line without one


def parse(line, **kw):
    return parse_client_line(line, cluster="test", **kw)


CASES = [
    # Java 4.3.1, captured
    ("java_fresh_group_resets_to_earliest", JAVA, "Resetting offset for partition orders-2", {}, {
        "ts_ms": 1795343947582, "client_id": "java-group-client", "group_id": "java-group",
        "topic": "orders", "partition": 2, "kind": "offset_reset", "from_offset": None,
        "to_offset": 0, "leader_epoch": None, "broker": None, "reset_target": None,
        "reason": None, "client_software": "apache-kafka-java"}),
    ("java_fetch_below_log_start_after_retention", JAVA, "is out of range for partition retained-t-0",
     {}, {"kind": "offset_out_of_range", "topic": "retained-t", "partition": 0,
          "from_offset": 10, "to_offset": None, "group_id": "java-retention-group"}),
    ("java_reset_after_out_of_range_goes_to_log_start", JAVA,
     "Resetting offset for partition retained-t-0", {}, {
         "kind": "offset_reset", "to_offset": 50, "topic": "retained-t"}),
    ("java_truncation_after_unclean_election", JAVA, "Truncation detected", {}, {
        "kind": "truncation_detected", "topic": "unclean-t", "partition": 0,
        "from_offset": 200, "to_offset": 100, "leader_epoch": 0, "reset_target": "explicit",
        "group_id": "java-unclean-group"}),
    # Java, older forms and application seeks (formats from apache/kafka sources)
    ("java_2x_fetch_offset_out_of_range", JAVA_OLDER, "Fetch offset 42", {}, {
        "kind": "offset_out_of_range", "from_offset": 42, "topic": "orders", "partition": 0,
        "client_id": "legacy-client", "group_id": "legacy-group"}),
    ("java_2x_resetting_to_offset", JAVA_OLDER, "to offset 1000.", {}, {
        "kind": "offset_reset", "to_offset": 1000}),
    ("java_truncation_plain_offset", JAVA_OLDER, "at offset 5000", {}, {
        "kind": "truncation_detected", "from_offset": 5000, "to_offset": None,
        "reset_target": None}),
    ("java_application_seek_to_beginning", JAVA_OLDER, "Seeking to EARLIEST", {}, {
        "kind": "offset_reset", "reset_target": "earliest", "reason": "seek",
        "topic": "orders", "partition": 2, "to_offset": None}),
    ("java_application_seek_to_offset", JAVA_OLDER, "Seeking to offset 12345", {}, {
        "kind": "offset_reset", "reset_target": "explicit", "to_offset": 12345,
        "reason": "seek"}),
    # librdkafka 2.16, captured through the Python logger
    ("rdkafka_out_of_range_reset_to_beginning", RDKAFKA,
     "OFFSET [rdkafka-retention-group-client", {"group_id": "rdkafka-retention-group",
                                                 "ts_ms": 1795344630140}, {
         "ts_ms": 1795344630140, "client_id": "rdkafka-retention-group-client",
         "group_id": "rdkafka-retention-group", "topic": "retained-t", "partition": 0,
         "kind": "offset_out_of_range", "from_offset": 10, "to_offset": None,
         "leader_epoch": -1, "broker": 2, "reset_target": "earliest",
         "reason": "fetch failed due to requested offset not available on the broker: "
                   "Broker: Offset out of range", "client_software": "librdkafka"}),
    ("rdkafka_out_of_range_reset_to_end", RDKAFKA, "OFFSET [rdkafka-retention-latest-group-client",
     {"ts_ms": TS_MS}, {"reset_target": "latest", "kind": "offset_out_of_range",
                    "client_id": "rdkafka-retention-latest-group-client"}),
    ("rdkafka_stderr_format_carries_its_own_time", RDKAFKA, "%4|1795344630.140|OFFSET|",
     {"ts_ms": TS_MS}, {"ts_ms": 1795344630140, "client_id": "rdkafka-retention-group-client", "reset_target": "earliest",
        "from_offset": 10, "broker": 2}),
    # librdkafka, TELEMETRY.md forms
    ("rdkafka_reset_with_leader_epoch_to_end", RDKAFKA, "payments [3]: offset reset (at offset 1234 (leader epoch 5), broker 1) to offset END",
     {"ts_ms": TS_MS, "client_id": "payments-consumer"}, {
         "topic": "payments", "partition": 3, "from_offset": 1234, "leader_epoch": 5,
         "broker": 1, "reset_target": "latest", "kind": "offset_out_of_range",
         "client_id": "payments-consumer"}),
    ("rdkafka_reset_to_stored", RDKAFKA, "to offset STORED", {"ts_ms": TS_MS}, {
        "reset_target": "stored", "kind": "offset_reset", "to_offset": None}),
    ("rdkafka_reset_to_cached_log_start", RDKAFKA, "cached BEGINNING offset offset 500",
     {"ts_ms": TS_MS}, {"reset_target": "earliest", "to_offset": 500, "from_offset": 80,
                    "partition": 4}),
    ("rdkafka_truncation_detected", RDKAFKA, "Partition log truncation detected",
     {"ts_ms": TS_MS}, {
        "kind": "truncation_detected", "reset_target": "explicit", "to_offset": 8000,
        "from_offset": 9000, "leader_epoch": 7, "partition": 5}),
]


@pytest.mark.parametrize("fixture,needle,kwargs,expected", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_offset_events(fixture, needle, kwargs, expected):
    rec = parse(line_containing(fixture, needle), **kwargs)
    assert isinstance(rec, dict), rec
    assert {k: rec[k] for k in expected} == expected
    assert list(rec) == list(client_log.RECORD_FIELDS)
    json.dumps(rec)


@pytest.mark.parametrize("fixture", [JAVA, JAVA_OLDER, RDKAFKA])
def test_every_fixture_line_gives_a_record_or_a_documented_skip(fixture):
    for line in fixture_lines(fixture):
        got = parse(line, ts_ms=TS_MS)
        assert isinstance(got, dict) or (isinstance(got, Skipped) and
                                         got.reason == "not_offset_event"), (line, got)


def test_unrelated_client_lines_are_skipped_not_dropped_silently():
    line = line_containing(JAVA, "Successfully joined group")
    got = parse(line)
    assert isinstance(got, Skipped) and not got and got.reason == "not_offset_event"


def test_the_agent_knows_the_group_when_the_line_does_not_say():
    line = line_containing(RDKAFKA, "OFFSET [rdkafka-retention-group-client")
    rec = parse(line, ts_ms=TS_MS, group_id="billing", client_software="my-app/1.0")
    assert (rec["group_id"], rec["client_software"]) == ("billing", "librdkafka")


MALFORMED = [
    ("empty_line", "", {}, "empty_line"),
    ("garbage_bytes", b"\xff\xfeoffset\x81", {}, "not_utf8"),
    ("no_time_anywhere", "payments [3]: offset reset (at offset 1 (leader epoch 5), broker 1) "
                         "to offset END (leader epoch -1): x", {}, "missing_field:ts_ms"),
    ("impossible_timestamp", "[2026-02-30 10:00:00,000] INFO [Consumer clientId=c, groupId=g] "
                             "Resetting offset for partition t-0 to offset 5.", {},
     "bad_timestamp"),
]


@pytest.mark.parametrize("line,kwargs,reason", [c[1:] for c in MALFORMED],
                         ids=[c[0] for c in MALFORMED])
def test_bad_input_gives_malformed(line, kwargs, reason):
    got = parse(line, **kwargs)
    assert isinstance(got, Malformed) and (got.source, got.reason) == ("client_log", reason)
    assert got.raw == line


def test_oversize_line(monkeypatch):
    monkeypatch.setattr(client_log, "MAX_LINE_CHARS", 100)
    got = parse(line_containing(JAVA, "Truncation detected"))
    assert isinstance(got, Malformed) and got.reason == "oversize_line"
