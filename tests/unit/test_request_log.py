"""ingest/request_log.py on real Kafka 4.3.1 request-log lines, legacy text lines and bad input."""

from __future__ import annotations

import json
import re
from zoneinfo import ZoneInfo

import pytest
from tests.unit.captured import fixture_lines, line_containing

from ingest import request_log
from ingest.malformed import Malformed
from ingest.request_log import parse_request_line

pytestmark = pytest.mark.unit

REAL = "request_log/kafka-4.3.1-request.log"
LEGACY = "request_log/kafka-2.x-request.log"


def parse(line, **kw):
    return parse_request_line(line, cluster="test", broker=1, **kw)


def real(needle: str) -> str:
    return line_containing(REAL, needle)


# ---- every captured line ----------------------------------------------------------------

@pytest.mark.parametrize("line", fixture_lines(REAL), ids=lambda line: line[1:24] + "/" + line[
    line.find('"requestApiKeyName":"') + 21:line.find('"', line.find('"requestApiKeyName":"') + 21)])
def test_every_captured_line_parses_and_the_fast_path_agrees_with_the_full_decode(line):
    fast = parse(line)
    full = parse(line, full_decode=True)
    assert not isinstance(fast, Malformed), fast
    assert fast == full
    assert list(fast) == list(full) == list(request_log.RECORD_FIELDS)
    json.dumps(fast)  # published as JSON


def test_every_captured_line_takes_the_fast_path():
    for line in fixture_lines(REAL):
        message = line[request_log.LINE_RE.match(line).end():]
        assert request_log.parse_json_message_fast(
            message, "test", 1, 0, request_log.CONTROLLER_LISTENERS) is not None, line[:200]


# ---- what each kind of request gives ----------------------------------------------------

CASES = [
    ("produce_acks_all_librdkafka", '"clientId":"producer-acks-all"', {
        "ts_ms": 1795343920123, "api": "Produce", "api_key": 0, "api_version": 10,
        "correlation_id": 2, "client_id": "producer-acks-all",
        "client_software_name": "confluent-kafka-python",
        "client_software_version": "2.16.1-rdkafka-2.16.0", "principal": "User:ANONYMOUS",
        "listener": "PLAINTEXT", "security_protocol": "PLAINTEXT",
        "local_addr": "127.0.0.1:58979", "remote_addr": "127.0.0.1:48008",
        "total_ms": 158.479, "request_queue_ms": 2.069, "local_ms": 102.403,
        "remote_ms": 52.892, "throttle_ms": 0.0, "response_queue_ms": 0.735, "send_ms": 0.378,
        "acks": -1, "topics": ["orders"], "topic_ids": [], "partition_count": 1,
        "request_bytes": 23007, "response_bytes": None, "fetch_kind": None,
        "fetch_replica_id": None, "error_codes": [], "is_forwarded": False,
        "is_controller_traffic": False}),
    ("produce_acks_1", '"clientId":"producer-acks-1"', {"api": "Produce", "acks": 1,
                                                          "request_bytes": 11821}),
    ("produce_acks_0", '"clientId":"producer-acks-0"', {"api": "Produce", "acks": 0,
                                                          "request_bytes": 2491}),
    ("fetch_consumer_librdkafka_v16_sends_no_replica_id", '"correlationId":3,"clientId":"fixture-group-client","requestApiKeyName":"FETCH"', {
        "api": "Fetch", "api_version": 16, "fetch_kind": "consumer", "fetch_replica_id": None,
        "topics": [], "topic_ids": ["sd-eH7reRR6GS5bfdXKJOA"], "partition_count": 1,
        "response_bytes": 37319, "acks": None, "request_bytes": None}),
    ("fetch_consumer_java_v18", '"correlationId":16,"clientId":"java-group-client"', {
        "api": "Fetch", "api_version": 18, "fetch_kind": "consumer", "fetch_replica_id": None,
        "client_software_name": "apache-kafka-java", "client_software_version": "4.3.1"}),
    ("fetch_follower_replica_state_replica_id", '"clientId":"broker-3-fetcher-0"', {
        "api": "Fetch", "fetch_kind": "follower", "fetch_replica_id": 3,
        "remote_ms": 508.325, "is_controller_traffic": False}),
    ("fetch_follower_many_partitions", '"clientId":"broker-1-fetcher-0"', {
        "fetch_kind": "follower", "fetch_replica_id": 1, "partition_count": 14,
        "response_bytes": 148}),
    ("fetch_follower_errors_after_unclean_election", '"correlationId":4,"clientId":"broker-2-fetcher-0"', {
        "fetch_kind": "follower", "fetch_replica_id": 2, "error_codes": [6, 75]}),
    ("fetch_consumer_out_of_range_librdkafka", '"clientId":"rdkafka-retention-group-client","requestApiKeyName":"FETCH"', {
        "fetch_kind": "consumer", "error_codes": [1], "topic_ids": ["wL2c4i_GTdOL3ahyGW6d1Q"]}),
    ("fetch_consumer_out_of_range_java", '"clientId":"java-retention-group-client","requestApiKeyName":"FETCH"', {
        "fetch_kind": "consumer", "error_codes": [1]}),
    ("fetch_kraft_voter_on_controller_listener", '"correlationId":269,"clientId":"raft-client-2"', {
        "api": "Fetch", "fetch_kind": "follower", "fetch_replica_id": 2, "listener": "CONTROLLER",
        "is_controller_traffic": True, "topic_ids": ["AAAAAAAAAAAAAAAAAAAAAQ"]}),
    ("metadata_for_missing_topic_unknown_topic_error", '"name":"no-such-topic"', {
        "api": "Metadata", "topics": ["no-such-topic"], "topic_ids": [], "error_codes": [3],
        "partition_count": None}),
    ("offset_commit_java", '"correlationId":20,"clientId":"java-group-client"', {
        "api": "OffsetCommit", "api_key": 8, "topics": ["orders"], "partition_count": 3,
        "group_id": "java-group", "generation": 1,
        "member_id": "java-group-client-0d4a5d6c-6eef-456f-8b75-5533795ced15",
        "committed": [{"topic": "orders", "partition": 0, "offset": 0},
                      {"topic": "orders", "partition": 1, "offset": 0},
                      {"topic": "orders", "partition": 2, "offset": 315}]}),
    ("offset_commit_consumer_protocol_member_epoch", '"correlationId":7,"clientId":"fixture-group-848-client"', {
        "api": "OffsetCommit", "group_id": "fixture-group-848", "generation": 2,
        "member_id": "jVJ8VnlhRIqMycOBSq6x7g",
        "committed": [{"topic": "orders", "partition": 0, "offset": 50}]}),
    ("offset_fetch_groups_v9", '"correlationId":5,"clientId":"fixture-group-848-client"', {
        "api": "OffsetFetch", "topics": ["orders"], "partition_count": 3,
        "group_id": None, "member_id": None, "generation": None, "committed": None}),
    ("api_versions_handshake", '"correlationId":1,"clientId":"rdkafka","requestApiKeyName":"API_VERSIONS"', {
        "api": "ApiVersions", "api_key": 18, "client_software_name": "unknown",
        "topics": [], "partition_count": None}),
    ("create_topics_forwarded_to_controller", '"isForwarded":true', {
        "api": "CreateTopics", "is_forwarded": True, "is_controller_traffic": True,
        "topics": ["orders", "compacted-keys", "unclean-t"]}),
    ("vote_names_topic_by_topic_name", '"correlationId":34,"clientId":"raft-client-3"', {
        "api": "Vote", "topics": ["__cluster_metadata"], "partition_count": 1}),
    ("join_group_member_id_required", '"correlationId":5,"clientId":"java-group-client","requestApiKeyName":"JOIN_GROUP"', {
        "api": "JoinGroup", "error_codes": [79]}),
    ("broker_heartbeat_numeric_client_id", '"correlationId":39,"clientId":"1"', {
        "api": "BrokerHeartbeat", "client_id": "1", "is_controller_traffic": True}),
]


@pytest.mark.parametrize("needle,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_request_kinds(needle, expected):
    rec = parse(real(needle))
    assert {k: rec[k] for k in expected} == expected


def test_controller_listeners_come_from_the_broker_config():
    line = real('"correlationId":269,"clientId":"raft-client-2"')
    assert parse(line, controller_listeners=frozenset({"QUORUM"}))["is_controller_traffic"] is False


def test_fetch_before_v15_names_the_replica_at_the_top_level():
    v18 = real('"clientId":"broker-3-fetcher-0"')
    follower = re.sub(r'"replicaState":\{"replicaId":3,"replicaEpoch":\d+\},', '"replicaId":3,',
                      v18.replace('"requestApiVersion":18', '"requestApiVersion":12'))
    assert '"replicaState"' not in follower
    consumer = follower.replace('"replicaId":3,', '"replicaId":-1,')
    for line, kind, replica in ((follower, "follower", 3), (consumer, "consumer", None)):
        for rec in (parse(line), parse(line, full_decode=True)):
            assert (rec["fetch_kind"], rec["fetch_replica_id"]) == (kind, replica)


def test_broker_local_time_is_read_in_the_broker_zone():
    line = real('"clientId":"producer-acks-all"')
    # November: Paris is UTC+1, so 10:38:40 there is 09:38:40 UTC.
    assert parse(line, tz=ZoneInfo("Europe/Paris"))["ts_ms"] == parse(line)["ts_ms"] - 3_600_000


def test_bytes_input_is_decoded():
    line = real('"clientId":"producer-acks-all"')
    assert parse(line.encode()) == parse(line)


# ---- the text line of Kafka up to 2.7 ---------------------------------------------------

LEGACY_CASES = [
    ("list_offsets_kip673_example", "apiKey=LIST_OFFSETS", {
        "api": "ListOffsets", "api_key": 2, "api_version": 5, "correlation_id": 8799,
        "client_id": "consumer-group-1", "total_ms": 0.085, "request_queue_ms": 0.013,
        "local_ms": 0.033, "remote_ms": 0.011, "throttle_ms": 0.0, "response_queue_ms": 0.011,
        "send_ms": 0.015, "security_protocol": "PLAINTEXT", "principal": "User:ANONYMOUS",
        "listener": "PLAINTEXT", "client_software_name": "apache-kafka-java",
        "client_software_version": "unknown", "local_addr": "127.0.0.1:62610",
        "remote_addr": "127.0.0.1:62622", "topics": ["test_topic"], "partition_count": 1,
        "error_codes": [], "is_forwarded": None}),
    ("produce_2_7_acks_all_waiting_on_followers", "apiKey=PRODUCE", {
        "api": "Produce", "acks": -1, "partition_count": 2, "remote_ms": 1500.0,
        "error_codes": [19], "client_software_version": "2.7.0"}),
    ("fetch_follower_2_4_without_client_information", "apiKey=FETCH", {
        "api": "Fetch", "fetch_kind": "follower", "fetch_replica_id": 2, "topics": ["orders"],
        "request_queue_ms": 0.0001, "client_software_name": None, "listener": "PLAINTEXT"}),
]


@pytest.mark.parametrize("needle,expected", [c[1:] for c in LEGACY_CASES],
                         ids=[c[0] for c in LEGACY_CASES])
def test_legacy_text_lines(needle, expected):
    rec = parse(line_containing(LEGACY, needle))
    assert not isinstance(rec, Malformed), rec
    assert {k: rec[k] for k in expected} == expected
    assert list(rec) == list(request_log.RECORD_FIELDS)


# ---- bad input: a Malformed with a reason, never an exception, never None -----------------

PRODUCE = '"clientId":"producer-acks-all"'


def edited(old: str, new: str, needle: str = PRODUCE) -> str:
    line = real(needle)
    assert old in line
    return line.replace(old, new, 1)


MALFORMED = [
    ("empty_line", "", "empty_line"),
    ("blank_line", "   \r\n", "empty_line"),
    ("garbage_bytes", b"\xff\xfe\x00\x81garbage", "not_utf8"),
    ("other_logger_line", "[2026-11-22 10:39:32,243] INFO [Partition orders-2 broker=1] "
                          "Shrinking ISR from 2,3,1 to 1,2. (kafka.cluster.Partition)",
     "not_request_line"),
    ("no_layout_prefix", '{"isForwarded":false}', "not_request_line"),
    ("impossible_timestamp", edited("[2026-11-22 10:38:40,123]", "[2026-13-45 10:38:40,123]"),
     "bad_timestamp"),
    ("line_cut_in_the_middle", real(PRODUCE)[:400], "truncated_json"),
    ("line_cut_before_logger_name", real(PRODUCE).rsplit(" (", 1)[0], "truncated_json"),
    ("line_cut_inside_a_string_then_closed", real(PRODUCE)[:-60] + "} (kafka.request.logger)",
     "truncated_json"),
    ("damaged_in_the_middle", edited('"response":{', '"response":{{'), "invalid_json"),
    ("broken_number", edited('"totalTimeMs":158.479', '"totalTimeMs":158..479'), "invalid_json"),
    ("time_as_string", edited('"totalTimeMs":158.479', '"totalTimeMs":"158.479"'),
     "wrong_type:totalTimeMs"),
    ("time_as_boolean", edited('"sendTimeMs":0.378', '"sendTimeMs":true'),
     "wrong_type:sendTimeMs"),
    ("version_as_string", edited('"requestApiVersion":10', '"requestApiVersion":"10"'),
     "wrong_type:requestApiVersion"),
    ("header_not_an_object", edited('"requestHeader":{', '"requestHeader":[{').replace(
        '"PRODUCE"}', '"PRODUCE"}]', 1), "wrong_type:requestHeader"),
    ("missing_local_time", edited('"localTimeMs":102.403,', ''), "missing_field:localTimeMs"),
    ("missing_total_time", edited('"totalTimeMs":158.479,', ''), "missing_field:totalTimeMs"),
    ("missing_api_key", edited('"requestApiKey":0,', ''), "missing_field:requestApiKey"),
    ("missing_connection", edited('"connection":"127.0.0.1:58979-127.0.0.1:48008-0-1",', ''),
     "missing_field:connection"),
    ("negative_local_time", edited('"localTimeMs":102.403', '"localTimeMs":-1.5'),
     "negative_time:localTimeMs"),
    ("negative_total_time", edited('"totalTimeMs":158.479', '"totalTimeMs":-0.001'),
     "negative_time:totalTimeMs"),
    ("unknown_api_key_without_name", edited('"requestApiKey":0,', '"requestApiKey":999,').replace(
        ',"requestApiKeyName":"PRODUCE"', ''), "unknown_api"),
    ("api_name_not_an_enum_constant", edited('"requestApiKey":0,', '"requestApiKey":999,').replace(
        '"requestApiKeyName":"PRODUCE"', '"requestApiKeyName":"no such api"'), "unknown_api"),
    ("key_and_name_disagree", edited('"requestApiKeyName":"PRODUCE"', '"requestApiKeyName":"FETCH"'),
     "api_mismatch"),
    ("connection_without_ports", edited('"127.0.0.1:58979-127.0.0.1:48008-0-1"', '"somewhere"'),
     "bad_connection"),
    ("legacy_line_without_timings", "[2020-11-03 10:35:02,083] DEBUG Completed request:"
     "RequestHeader(apiKey=PRODUCE, apiVersion=8, clientId=p, correlationId=5) -- {acks=-1},"
     "response:{} from connection 10.0.0.5:9092-10.0.0.9:5-3;securityProtocol:PLAINTEXT "
     "(kafka.request.logger)", "missing_field:totalTime"),
    ("legacy_line_unknown_api", "[2020-11-03 10:35:02,083] DEBUG Completed request:"
     "RequestHeader(apiKey=FROBNICATE, apiVersion=8, clientId=p, correlationId=5) -- {},"
     "response:{} from connection a:1-b:2-3;totalTime:1.0 (kafka.request.logger)", "unknown_api"),
    # Values that cannot be true (schemas/plausible.py), accepted before issue 59.
    ("total_beyond_a_day", edited('"totalTimeMs":158.479', '"totalTimeMs":1e308'),
     "time_over_a_day:total_ms"),
    ("stage_longer_than_its_total", edited('"localTimeMs":102.403', '"localTimeMs":1e9'),
     "stage_over_total:local_ms"),
    ("correlation_id_wider_than_int32", edited('"correlationId":2,', f'"correlationId":{2 ** 70},'),
     "out_of_range:correlation_id"),
    ("api_version_wider_than_int16", edited('"requestApiVersion":10', '"requestApiVersion":40000'),
     "out_of_range:api_version"),
    ("time_before_2000", edited("[2026-11-22 10:38:40,123]", "[1999-12-31 23:59:59,999]"),
     "implausible_event_time"),
    # The fast path let RecursionError out of msgspec on JSON nested ~1,000 levels.
    ("request_nested_a_thousand_levels",
     edited('"request":{', '"request":{"deep":' + "[" * 1000 + "]" * 1000 + ","),
     "nested_too_deep"),
]


@pytest.mark.parametrize("line,reason", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_bad_input_gives_malformed_with_reason(line, reason):
    for full_decode in (False, True):
        got = parse(line, full_decode=full_decode)
        assert isinstance(got, Malformed), got
        assert (got.source, got.reason) == ("request_log", reason)
        assert got.raw == line


def test_a_stage_within_rounding_of_its_total_and_a_long_throttle_are_plausible():
    """Stages are sub-intervals of the total, each rounded on its own; throttling follows
    the response (KIP-219), so it may outlast the request."""
    line = edited('"localTimeMs":102.403', '"localTimeMs":158.9').replace(
        '"throttleTimeMs":0,"response', '"throttleTimeMs":30000,"response', 1)
    for full_decode in (False, True):
        rec = parse(line, full_decode=full_decode)
        assert (rec["local_ms"], rec["throttle_ms"]) == (158.9, 30000.0)


def test_an_api_newer_than_the_table_is_named_from_its_enum_constant():
    line = edited('"requestApiKey":0,', '"requestApiKey":93,').replace(
        '"requestApiKeyName":"PRODUCE"', '"requestApiKeyName":"FUTURE_THING"')
    rec = parse(line)
    assert (rec["api"], rec["api_key"]) == ("FutureThing", 93)


def test_oversize_line(monkeypatch):
    monkeypatch.setattr(request_log, "MAX_LINE_CHARS", 500)
    got = parse(real(PRODUCE))
    assert isinstance(got, Malformed) and got.reason == "oversize_line"


def test_malformed_keeps_the_event_time_when_it_got_that_far():
    got = parse(edited('"localTimeMs":102.403', '"localTimeMs":-1.5'))
    assert got.ts_ms == 1795343920123


# ---- never an exception: escapes, numbers and text no test line holds ---------------------

# Each quoted string of the header and the tail, as the captured Produce line holds it.
HEADER_STRINGS = [
    ("clientId", '"clientId":"producer-acks-all"'),
    ("principal", '"principal":"User:ANONYMOUS"'),
    ("listener", '"listener":"PLAINTEXT"'),
    ("softwareName", '"softwareName":"confluent-kafka-python"'),
    ("softwareVersion", '"softwareVersion":"2.16.1-rdkafka-2.16.0"'),
]
# JSON has no \q; \u needs four hex digits; \ud800 is a lone surrogate: valid JSON, but no
# UTF-8 text, so no sink could encode a record holding it.
BAD_ESCAPES = [("unknown_escape", "\\q"), ("short_unicode_escape", "\\u12zz"),
               ("lone_surrogate", "\\ud800"), ("after_an_escaped_quote", '\\"\\q')]


@pytest.mark.parametrize("escape", [e for _, e in BAD_ESCAPES], ids=[n for n, _ in BAD_ESCAPES])
@pytest.mark.parametrize("key,field", HEADER_STRINGS, ids=[k for k, _ in HEADER_STRINGS])
def test_a_bad_escape_in_a_header_string_is_malformed_not_an_exception(key, field, escape):
    line = edited(field, field[:-1] + escape + '"')
    for full_decode in (False, True):
        got = parse(line, full_decode=full_decode)
        assert isinstance(got, Malformed), got
        assert (got.source, got.reason, got.raw) == ("request_log", f"bad_escape:{key}", line)
        assert got.ts_ms == 1795343920123


NEVER_RAISES = [
    ("escape_in_a_produce_topic_name", edited('"name":"orders"', '"name":"or\\qders"'),
     "bad_escape:name"),
    ("lone_surrogate_in_a_produce_topic_name", edited('"name":"orders"', '"name":"\\udc00"'),
     "bad_escape:name"),
    ("lone_surrogate_in_the_connection",
     edited('"connection":"127.0.0.1:58979', '"connection":"127.0.0.1:58979\\ud800'),
     "bad_escape:connection"),
    ("version_too_long_to_convert", edited('"requestApiVersion":10',
                                           '"requestApiVersion":' + "1" * 5000),
     "oversize_number"),
    ("byte_count_too_long_to_convert", edited('"recordsSizeInBytes":23007',
                                              '"recordsSizeInBytes":' + "2" * 5000),
     "oversize_number"),
    ("time_beyond_a_double", edited('"totalTimeMs":158.479', '"totalTimeMs":1e999'),
     "wrong_type:totalTimeMs"),
    ("integer_time_beyond_a_double", edited('"sendTimeMs":0.378', '"sendTimeMs":' + "9" * 400),
     "wrong_type:sendTimeMs"),
    ("time_infinity", edited('"localTimeMs":102.403', '"localTimeMs":Infinity'),
     "wrong_type:localTimeMs"),
    ("legacy_number_too_long_to_convert", line_containing(LEGACY, "LIST_OFFSETS").replace(
        "correlationId=8799", "correlationId=" + "8" * 5000), "oversize_number"),
    ("legacy_time_beyond_a_double", line_containing(LEGACY, "LIST_OFFSETS").replace(
        "totalTime:0.085", "totalTime:1E999"), "wrong_type:totalTime"),
]


@pytest.mark.parametrize("line,reason", [c[1:] for c in NEVER_RAISES],
                         ids=[c[0] for c in NEVER_RAISES])
def test_input_python_cannot_convert_is_malformed_not_an_exception(line, reason):
    for full_decode in (False, True):
        got = parse(line, full_decode=full_decode)
        assert isinstance(got, Malformed), got
        assert (got.reason, got.raw) == (reason, line)


def test_text_with_a_lone_surrogate_given_as_str_is_not_utf8():
    got = parse(real(PRODUCE).replace("User:ANONYMOUS", "User:\ud800"))
    assert isinstance(got, Malformed) and got.reason == "not_utf8"
    q = got.to_quarantine_record(cluster="test", ingest_ts_ms=0)
    json.dumps(q, ensure_ascii=False).encode("utf-8")  # quarantine can encode it


def test_mutated_captured_lines_never_raise_and_every_record_can_be_encoded():
    """Seeded mutations of every captured line (escapes, quotes, brackets, cuts, huge
    numbers): a record or a Malformed each time, never an exception."""
    import random

    rnd = random.Random(20261122)
    pieces = ["\\", '"', "{", "}", "[", "]", ",", ":", "q", "u", "0", "-", "e", ".", " ",
              "\x00", "é", "\ud800", "\\ud800", "\\u12", "null", "NaN", "1e999", "9" * 5000]
    lines = fixture_lines(REAL) + [line for line in fixture_lines(LEGACY) if line.strip()]
    for _ in range(1500):
        line = rnd.choice(lines)
        for _ in range(rnd.randint(1, 3)):
            i = rnd.randrange(len(line))
            cut = rnd.choice((0, 1, rnd.randint(1, 6)))
            line = line[:i] + rnd.choice(pieces) + line[i + cut:]
        for full_decode in (False, True):
            got = parse(line, full_decode=full_decode)
            if not isinstance(got, Malformed):
                json.dumps(got, ensure_ascii=False, allow_nan=False).encode("utf-8")


def test_offset_commit_keeps_the_first_partitions_and_reads_the_old_generation_key():
    """generationId before the KIP-848 rename; at most MAX_COMMITTED partitions kept;
    partitions named by topic id (v10+) keep a null topic; both paths agree."""
    base = real('"correlationId":20,"clientId":"java-group-client"')
    parts = ",".join(f'{{"partitionIndex":{i},"committedOffset":{i * 10},"committedMetadata":""}}'
                     for i in range(150))
    line = re.sub(r'"request":\{.*\},"response":',
                  '"request":{"groupId":"g","generationId":4,"memberId":"m-1",'
                  '"topics":[{"name":"t","partitions":[' + parts + ']},'
                  '{"topicId":"x","partitions":[{"partitionIndex":0,"committedOffset":5}]}]},'
                  '"response":', base)
    fast, full = parse(line), parse(line, full_decode=True)
    assert fast == full
    assert (fast["group_id"], fast["member_id"], fast["generation"]) == ("g", "m-1", 4)
    assert len(fast["committed"]) == request_log.MAX_COMMITTED == 100
    assert fast["committed"][-1] == {"topic": "t", "partition": 99, "offset": 990}
    short = line.replace(parts, parts[:parts.index('{"partitionIndex":2,')].rstrip(","))
    assert parse(short)["committed"][-1] == {"topic": None, "partition": 0, "offset": 5}


def test_an_admin_commit_has_an_empty_member_and_generation_minus_one():
    base = real('"correlationId":20,"clientId":"java-group-client"')
    line = re.sub(r'"request":\{"groupId":"java-group","generationIdOrMemberEpoch":1,'
                  r'"memberId":"[^"]*"',
                  '"request":{"groupId":"java-group","generationIdOrMemberEpoch":-1,'
                  '"memberId":""', base)
    rec = parse(line)
    assert (rec["group_id"], rec["member_id"], rec["generation"]) == ("java-group", "", -1)
    assert rec == parse(line, full_decode=True)
