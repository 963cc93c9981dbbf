"""ingest/consumer_offsets.py: __consumer_offsets records from Kafka 4.3.1, every value version, bad bytes."""

from __future__ import annotations

import json

import pytest

from ingest import consumer_offsets
from ingest.consumer_offsets import encode_key, encode_value, parse_offset_record
from ingest.malformed import Malformed, Skipped
from tests.unit.captured import fixture_json

pytestmark = pytest.mark.unit

REAL = fixture_json("consumer_offsets/kafka-4.3.1.jsonl")


def parse_captured(r: dict):
    return parse_offset_record(
        bytes.fromhex(r["key"]) if r["key"] is not None else None,
        bytes.fromhex(r["value"]) if r["value"] is not None else None,
        cluster="test", source_partition=r["partition"], source_offset=r["offset"],
        ts_ms=r["timestamp"])


def captured(partition: int, offset: int) -> dict:
    (r,) = [r for r in REAL if (r["partition"], r["offset"]) == (partition, offset)]
    return r


# ---- real records -----------------------------------------------------------------------

def test_every_captured_record_is_a_commit_a_tombstone_or_a_documented_skip():
    kinds = set()
    for r in REAL:
        got = parse_captured(r)
        if isinstance(got, Skipped):
            kinds.add(got.reason)
            assert got.reason in ("group_metadata", "newer_group_record")
        else:
            assert not isinstance(got, Malformed), (r, got)
            assert list(got) == list(consumer_offsets.RECORD_FIELDS)
            json.dumps(got)
            kinds.add("tombstone" if got["is_tombstone"] else f"v{got['value_version']}")
    assert kinds == {"v4", "tombstone", "group_metadata", "newer_group_record"}


CASES = [
    ("commit_v4_with_topic_id", (9, 2), {
        "cluster": "test", "ts_ms": 1795343984917, "group_id": "rdkafka-unclean-group",
        "topic": "unclean-t", "partition": 0, "offset": 50, "leader_epoch": 0, "metadata": "",
        "commit_ts_ms": 1795343984917, "expire_ts_ms": None,
        "topic_id": "v2CcNjHzQ-qHdPLiDA1chw", "key_version": 1, "value_version": 4,
        "is_tombstone": False, "source_partition": 9, "source_offset": 2}),
]


@pytest.mark.parametrize("coords,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_real_records(coords, expected):
    assert parse_captured(captured(*coords)) == expected


def test_tombstone_of_a_deleted_group_keeps_the_key_and_the_record_time():
    (r,) = [r for r in REAL if r["value"] is None and r["key"].startswith("0001")][:1]
    rec = parse_captured(r)
    assert rec["is_tombstone"] is True and rec["group_id"] == "fixture-group"
    assert rec["offset"] is None and rec["value_version"] is None
    assert rec["ts_ms"] == r["timestamp"] and rec["commit_ts_ms"] is None


@pytest.mark.parametrize("key_version,reason", [(2, "group_metadata"), (3, "newer_group_record"),
                                                (8, "newer_group_record")],
                         ids=["classic_group_metadata", "consumer_group_metadata_kip848",
                              "consumer_group_target_assignment_kip848"])
def test_non_commit_keys_are_documented_skips(key_version, reason):
    r = next(r for r in REAL if int(r["key"][:4], 16) == key_version)
    got = parse_captured(r)
    assert isinstance(got, Skipped) and not got and got.reason == reason


# ---- every layout round-trips through the test encoder ----------------------------------

TOPIC_ID = bytes.fromhex("bf609c3631f343ea8774f2e20c0d5c87")

ROUND_TRIPS = [
    ("v0_offset_metadata_commit_time", 0, dict(), {"leader_epoch": None, "expire_ts_ms": None}),
    ("v1_adds_expire_time", 1, dict(expire_ts_ms=1700000099000),
     {"expire_ts_ms": 1700000099000}),
    ("v1_no_expire_time", 1, dict(expire_ts_ms=-1), {"expire_ts_ms": None}),
    ("v2_same_layout_as_v0", 2, dict(), {"leader_epoch": None}),
    ("v3_adds_leader_epoch", 3, dict(leader_epoch=7), {"leader_epoch": 7}),
    ("v3_unknown_leader_epoch", 3, dict(leader_epoch=-1), {"leader_epoch": None}),
    ("v4_flexible_with_topic_id", 4, dict(leader_epoch=7, topic_id=TOPIC_ID),
     {"leader_epoch": 7, "topic_id": "v2CcNjHzQ-qHdPLiDA1chw"}),
    ("v4_flexible_without_tags", 4, dict(leader_epoch=7), {"topic_id": None}),
]


@pytest.mark.parametrize("version,kwargs,expected", [c[1:] for c in ROUND_TRIPS],
                         ids=[c[0] for c in ROUND_TRIPS])
@pytest.mark.parametrize("key_version", [0, 1], ids=["legacy_key_v0", "key_v1"])
def test_value_versions_round_trip(key_version, version, kwargs, expected):
    key = encode_key("billing-ü", "orders.eu-1", 11, version=key_version)
    value = encode_value(123456789012, "meta:é", 1700000000000, version=version, **kwargs)
    rec = parse_offset_record(key, value, cluster="test", source_partition=3, source_offset=9)
    assert {k: rec[k] for k in expected} == expected
    assert (rec["group_id"], rec["topic"], rec["partition"]) == ("billing-ü", "orders.eu-1", 11)
    assert (rec["offset"], rec["metadata"], rec["commit_ts_ms"]) == (123456789012, "meta:é",
                                                                   1700000000000)
    assert (rec["key_version"], rec["value_version"]) == (key_version, version)
    assert rec["ts_ms"] == 1700000000000  # no record timestamp given: the commit time


def test_the_encoder_reproduces_the_captured_bytes():
    r = captured(9, 2)
    assert encode_key("rdkafka-unclean-group", "unclean-t", 0).hex() == r["key"]
    assert encode_value(50, "", 0x000001A202D72915, version=4, leader_epoch=0,
                        topic_id=TOPIC_ID).hex() == r["value"]


# ---- bad bytes --------------------------------------------------------------------------

GOOD_KEY = encode_key("g", "t", 0)
GOOD_VALUE = encode_value(5, "", 1, version=3)

MALFORMED = [
    ("missing_key", None, GOOD_VALUE, "missing_field:key"),
    ("empty_key", b"", GOOD_VALUE, "truncated_key"),
    ("key_cut_in_the_topic", GOOD_KEY[:6], GOOD_VALUE, "truncated_key"),
    ("negative_key_version", b"\xff\xff" + GOOD_KEY[2:], GOOD_VALUE, "bad_key_version"),
    ("key_with_trailing_bytes", GOOD_KEY + b"\x00", GOOD_VALUE, "trailing_bytes"),
    ("group_not_utf8", b"\x00\x01\x00\x02\xff\xfe\x00\x01t\x00\x00\x00\x00", GOOD_VALUE,
     "not_utf8"),
    ("empty_value", GOOD_KEY, b"", "truncated_value"),
    ("value_cut_in_the_offset", GOOD_KEY, GOOD_VALUE[:6], "truncated_value"),
    ("value_cut_in_the_tagged_fields", GOOD_KEY,
     encode_value(5, "", 1, version=4, topic_id=TOPIC_ID)[:-3], "truncated_value"),
    ("value_version_from_the_future", GOOD_KEY, b"\x00\x05" + GOOD_VALUE[2:],
     "unknown_value_version:5"),
    ("value_with_trailing_bytes", GOOD_KEY, GOOD_VALUE + b"\x00", "trailing_bytes"),
    ("metadata_not_utf8", GOOD_KEY, b"\x00\x00" + b"\x00" * 8 + b"\x00\x01\xff" + b"\x00" * 8,
     "not_utf8"),
    ("garbage_key_version_far_beyond_any_record_type", b"\x13\x37garbage!",
     b"\xde\xad\xbe\xef", "bad_key_version"),
]


@pytest.mark.parametrize("key,value,reason", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_bad_bytes_give_malformed_with_both_halves_in_hex(key, value, reason):
    got = parse_offset_record(key, value, cluster="test", source_partition=1, source_offset=2,
                              ts_ms=3)
    assert isinstance(got, Malformed), got
    assert (got.source, got.reason, got.ts_ms) == ("consumer_offsets", reason, 3)
    assert got.raw == (f"key={key.hex() if key is not None else 'null'} "
                       f"value={value.hex() if value is not None else 'null'}")


TS_MS = 1_795_343_920_123

# Records that decode but cannot be true (schemas/plausible.py), accepted before issue 59.
IMPLAUSIBLE = [
    ("null_group", b"\x00\x01\xff\xff" + encode_key("g", "t", 0)[5:],
     encode_value(1, "", TS_MS), "missing_field:group_id"),
    ("null_topic", encode_key("g", "t", 0)[:5] + b"\xff\xff\x00\x00\x00\x00",
     encode_value(1, "", TS_MS), "missing_field:topic"),
    ("negative_partition", encode_key("g", "t", -3), encode_value(1, "", TS_MS),
     "negative_partition"),
    ("offset_minus_five", encode_key("g", "t", 0), encode_value(-5, "", TS_MS),
     "negative_offset"),
    ("commit_time_minus_one", encode_key("g", "t", 0), encode_value(5, "", -1),
     "implausible_commit_time"),
]


@pytest.mark.parametrize("key,value,reason", [c[1:] for c in IMPLAUSIBLE],
                         ids=[c[0] for c in IMPLAUSIBLE])
def test_implausible_commits_give_malformed(key, value, reason):
    got = parse_offset_record(key, value, cluster="test", ts_ms=TS_MS)
    assert isinstance(got, Malformed) and got.reason == reason, got


def test_offset_minus_one_is_kafkas_no_offset_and_kept():
    got = parse_offset_record(encode_key("g", "t", 0), encode_value(-1, "", TS_MS),
                              cluster="test", ts_ms=TS_MS)
    assert got["offset"] == -1


def test_a_negative_generation_gives_malformed():
    got = consumer_offsets.parse_group_record(
        consumer_offsets.encode_group_key("g"),
        consumer_offsets.encode_group_value([], generation=-5), cluster="c", ts_ms=TS_MS)
    assert isinstance(got, Malformed) and got.reason == "negative_generation", got


# ---- group metadata (stream group_members) -------------------------------------------------

def parse_captured_group(r: dict):
    return consumer_offsets.parse_group_record(
        bytes.fromhex(r["key"]), bytes.fromhex(r["value"]) if r["value"] is not None else None,
        cluster="test", source_partition=r["partition"], source_offset=r["offset"],
        ts_ms=r["timestamp"])


def test_captured_group_metadata_gives_members_and_client_ids():
    joined = parse_captured_group(captured(9, 1))
    assert joined["group_id"] == "rdkafka-unclean-group"
    assert (joined["member_count"], joined["generation"], joined["value_version"]) == (1, 1, 3)
    assert joined["client_ids"] == ["rdkafka-unclean-group-client"]
    assert joined["protocol"] == "range" and joined["leader"].startswith("rdkafka-unclean-group")
    assert list(joined) == list(consumer_offsets.GROUP_RECORD_FIELDS)
    json.dumps(joined)


def test_captured_empty_group_has_no_members():
    empty = parse_captured_group(captured(9, 0))
    assert empty["member_count"] == 0 and empty["client_ids"] == [] and not empty["is_tombstone"]


def test_deleted_group_is_a_tombstone_with_no_members():
    deleted = parse_captured_group(captured(1, 27))
    assert deleted["is_tombstone"] and deleted["member_count"] == 0
    assert deleted["group_id"] == "fixture-group" and deleted["ts_ms"] is not None


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("members", [[], [("m-1", "billing-1")],
                                     [("m-1", "billing-1"), ("m-2", "billing-2"),
                                      ("m-3", "billing-1")]],
                         ids=["empty", "one", "three_two_clients"])
def test_group_value_versions_round_trip(version, members):
    key = consumer_offsets.encode_group_key("billing")
    value = consumer_offsets.encode_group_value(members, generation=7, version=version,
                                                state_ts_ms=1_700_000_000_000)
    got = consumer_offsets.parse_group_record(key, value, cluster="c",
                                              ts_ms=1_700_000_000_005)
    assert got["member_count"] == len(members) and got["generation"] == 7
    assert got["client_ids"] == sorted({c for _, c in members})
    assert got["state_ts_ms"] == (1_700_000_000_000 if version >= 2 else None)


@pytest.mark.parametrize("value,reason", [
    (lambda v: v[:-3], "truncated_value"),
    (lambda v: v + b"\x00", "trailing_bytes"),
    (lambda v: b"\x00\x09" + v[2:], "unknown_value_version:9"),
], ids=["cut_short", "extra_bytes", "future_version"])
def test_damaged_group_values_are_malformed(value, reason):
    good = consumer_offsets.encode_group_value([("m-1", "c-1")], version=3)
    got = consumer_offsets.parse_group_record(consumer_offsets.encode_group_key("g"),
                                              value(good), cluster="c", ts_ms=1)
    assert isinstance(got, Malformed) and got.reason == reason
