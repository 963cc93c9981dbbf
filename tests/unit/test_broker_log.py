"""ingest/broker_log.py: whole events from broker logs, classified, on real 4.3.1 lines and older forms."""

from __future__ import annotations

import json
from zoneinfo import ZoneInfo

import pytest

from ingest import broker_log
from ingest.broker_log import EventAssembler, parse_event, parse_lines
from ingest.malformed import Malformed
from schemas.log_events import LogEventKind
from tests.unit.captured import fixture_lines

pytestmark = pytest.mark.unit

REAL = {
    "server": "broker_log/kafka-4.3.1-server.log",
    "controller": "broker_log/kafka-4.3.1-controller.log",
    "state-change": "broker_log/kafka-4.3.1-state-change.log",
    "log-cleaner": "broker_log/kafka-4.3.1-log-cleaner.log",
}
OLDER = "broker_log/from-source-and-docs.log"


def events(fixture: str) -> list[str]:
    return list(EventAssembler().feed_all(fixture_lines(fixture)))


def record(fixture: str, needle: str) -> dict:
    hits = [e for e in events(fixture) if needle in e]
    assert len(hits) == 1, f"{len(hits)} events of {fixture} contain {needle!r}"
    rec = parse_event(hits[0], cluster="test", broker=1, log="server")
    assert not isinstance(rec, Malformed), rec
    return rec


# ---- every captured event ---------------------------------------------------------------

@pytest.mark.parametrize("log,fixture", REAL.items(), ids=list(REAL))
def test_every_captured_event_parses_with_level_and_logger(log, fixture):
    recs = list(parse_lines(fixture_lines(fixture), cluster="test", broker=1, log=log))
    assert recs
    for rec in recs:
        assert not isinstance(rec, Malformed), rec
        assert list(rec) == list(broker_log.RECORD_FIELDS)
        assert rec["level"] in ("INFO", "WARN", "ERROR") and rec["logger"]
        assert rec["kind"] in {k.value for k in LogEventKind}
        assert rec["log"] == log
        json.dumps(rec)


# ---- kinds, on real 4.3.1 events --------------------------------------------------------

CASES = [
    ("unclean_election_replayed_by_controller", "controller", "UNCLEAN partition change", {
        "kind": "unclean_election", "level": "INFO", "ts_ms": 1795344027485,
        "logger": "org.apache.kafka.controller.ReplicationControlManager",
        "topic": "unclean-t", "partition": 0, "topic_id": "v2CcNjHzQ-qHdPLiDA1chw",
        "isr_before": [1], "isr_after": [2], "old_leader": 1, "new_leader": 2,
        "leader_epoch": 1}),
    ("unclean_election_decided_by_active_controller", "controller", "using an unclean election", {
        "kind": "unclean_election", "topic": None, "partition": 0,
        "topic_id": "v2CcNjHzQ-qHdPLiDA1chw", "new_leader": 2, "old_leader": 1,
        "isr_before": [1], "logger": "org.apache.kafka.controller.PartitionChangeBuilder"}),
    ("controller_housekeeping_is_other", "controller", "Registering periodic task electUnclean", {
        "kind": "other", "topic": None}),
    ("isr_shrink_paused_follower", "server", "Shrinking ISR from 2,3,1 to 1,2", {
        "kind": "isr_shrink", "topic": "orders", "partition": 2, "isr_before": [2, 3, 1],
        "isr_after": [1, 2], "high_watermark": 399, "logger": "kafka.cluster.Partition"}),
    ("isr_update_after_shrink", "server", "ISR updated to 3,1  and version updated to 1", {
        "kind": "isr_update", "topic": "orders", "partition": 1, "isr_before": None,
        "isr_after": [3, 1]}),
    ("isr_update_after_follower_caught_up", "server", "ISR updated to 1,2,3  and version", {
        "kind": "isr_update", "isr_after": [1, 2, 3]}),
    ("truncation_follower_to_diverging_epoch", "server", "TruncationState(offset=100", {
        "kind": "truncation", "topic": "unclean-t", "partition": 0, "offset": 100,
        "logger": "kafka.server.ReplicaFetcherThread"}),
    ("truncation_log_to_offset", "server", "] Truncating to offset 100", {
        "kind": "truncation", "topic": "unclean-t", "partition": 0, "offset": 100,
        "high_watermark": None}),
    ("truncation_below_high_watermark_loses_data", "server", "below high watermark 200", {
        "kind": "truncation", "level": "WARN", "topic": "unclean-t", "partition": 0,
        "offset": 100, "high_watermark": 200}),
    ("truncation_with_no_effect_is_other", "server", "has no effect", {
        "kind": "other", "topic": "orders", "partition": 0, "offset": 0}),
    ("follower_start_truncation_to_high_watermark", "server",
     "Truncating partition orders-1 with TruncationState(offset=0", {
         "kind": "truncation", "topic": "orders", "partition": 1, "offset": 0}),
    ("cleaner_run_summary_in_server_log", "server", "cleaned log compacted-keys-0", {
        "kind": "cleaner_run", "topic": "compacted-keys", "partition": 0, "dirty_start": 0,
        "dirty_end": 800, "mb_processed": 0.1, "seconds": 0.2, "start_size_mb": 0.1,
        "end_size_mb": 0.0, "start_messages": 800, "end_messages": 20, "reduction_pct": 97.4,
        "buffer_utilization_pct": 0.0,
        "logger": "org.apache.kafka.storage.internals.log.LogCleaner$CleanerThread"}),
    ("stack_trace_kept_with_its_line", "server", "Client was shutdown before response was read", {
        "kind": "other", "logger": "org.apache.kafka.clients.FetchSessionHandler"}),
    ("leader_start_new_partition", "state-change", "Leader unclean-t-0", {
        "kind": "leader_change", "topic": "unclean-t", "partition": 0, "new_leader": 1,
        "old_leader": None, "leader_epoch": 0, "offset": 0, "high_watermark": 0,
        "isr_after": [1, 2], "topic_id": "v2CcNjHzQ-qHdPLiDA1chw",
        "logger": "state.change.logger"}),
    ("leader_moved_here_from_stopped_broker", "state-change", "Leader __consumer_offsets-6", {
        "kind": "leader_change", "topic": "__consumer_offsets", "partition": 6, "new_leader": 1,
        "old_leader": 2, "leader_epoch": 1, "isr_after": [1, 3]}),
    ("follower_sees_new_leader", "state-change", "Follower orders-0 starts", {
        "kind": "leader_change", "topic": "orders", "partition": 0, "new_leader": 3,
        "old_leader": 2, "leader_epoch": 1, "offset": 767, "high_watermark": 767}),
    ("follower_after_unclean_election", "state-change", "Follower unclean-t-0 starts", {
        "kind": "leader_change", "new_leader": 2, "old_leader": None, "leader_epoch": 1,
        "offset": 200, "high_watermark": 200}),
    ("skipped_state_change_is_other", "state-change", "Skipped the become-leader", {
        "kind": "other"}),
]


@pytest.mark.parametrize("log,needle,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_real_events(log, needle, expected):
    rec = record(REAL[log], needle)
    assert {k: rec[k] for k in expected} == expected


# ---- line forms the local cluster did not produce (source and docs) ---------------------

OLDER_CASES = [
    ("unclean_trigger_error_3_9", "Triggering unclean leader election", {
        "kind": "unclean_election", "level": "ERROR", "topic": "payments", "partition": 7}),
    ("unclean_setting_new_leader_3_7", "partition 7 to 3 using an unclean election", {
        "kind": "unclean_election", "topic_id": "Yh3bT1xXQ5iY4f3u3cF1Zw", "partition": 7,
        "new_leader": 3, "old_leader": None}),
    ("isr_expand_zookeeper_mode", "Expanding ISR from 2,3 to 2,3,1", {
        "kind": "isr_expand", "topic": "orders", "partition": 3, "isr_before": [2, 3],
        "isr_after": [2, 3, 1]}),
    ("isr_expand_before_2_0", "Expanding ISR from 1003 to 1003,1001", {
        "kind": "isr_expand", "topic": "kbrep3-async-px2", "partition": 1,
        "isr_before": [1003], "isr_after": [1003, 1001]}),
    ("isr_shrink_before_2_0", "Shrinking ISR from 1003,1001 to 1003", {
        "kind": "isr_shrink", "topic": "kbrep3-async-px2", "partition": 1,
        "isr_before": [1003, 1001], "isr_after": [1003], "high_watermark": None}),
    ("isr_update_under_min_isr", "(under-min-isr)", {
        "kind": "isr_update", "topic": "orders", "partition": 5, "isr_after": [1]}),
    ("isr_update_zookeeper_version", "zkVersion updated to [12]", {
        "kind": "isr_update", "isr_after": [1, 2]}),
    ("follower_fetch_out_of_range", "Current offset 1500", {
        "kind": "offset_out_of_range", "topic": "orders", "partition": 5, "from_offset": 1500,
        "offset": 1200}),
    ("follower_reset_to_leader_end", "to current leader's latest offset 1200", {
        "kind": "offset_reset", "level": "WARN", "from_offset": 1500, "offset": 1200}),
    ("follower_reset_to_leader_start", "to current leader's start offset 900", {
        "kind": "offset_reset", "from_offset": 100, "offset": 900}),
    ("truncation_log_before_3_0", "[Log partition=orders-5", {
        "kind": "truncation", "topic": "orders", "partition": 5, "offset": 1200}),
    ("cleaner_run_thousands_separators", "cleaned log __consumer_offsets-13", {
        "kind": "cleaner_run", "topic": "__consumer_offsets", "partition": 13,
        "dirty_start": 1234567, "dirty_end": 2345678, "mb_processed": 1024.5,
        "seconds": 1234.5, "start_size_mb": 1024.5, "end_size_mb": 10.2,
        "start_messages": 12345678, "end_messages": 123456, "reduction_pct": 99.0,
        "buffer_utilization_pct": 12.5, "logger": "kafka.log.LogCleaner"}),
    ("cleaner_run_nothing_read_prints_nan", "cleaned log compacted-7", {
        "kind": "cleaner_run", "start_messages": 0, "reduction_pct": None,
        "mb_processed": 0.0}),
]


@pytest.mark.parametrize("needle,expected", [c[1:] for c in OLDER_CASES],
                         ids=[c[0] for c in OLDER_CASES])
def test_older_and_unseen_forms(needle, expected):
    rec = record(OLDER, needle)
    assert {k: rec[k] for k in expected} == expected


# ---- the last known ELR of an unclean election (4.x), on real 4.3.1 lines ---------------

ELR = "broker_log/kafka-4.3.1-controller-elr.log"


@pytest.mark.parametrize("needle,expected", [
    ("UNCLEAN partition change", {"kind": "unclean_election", "topic": "ledger3",
                                  "new_leader": 2, "old_leader": -1, "isr_before": [],
                                  "leader_epoch": 2, "last_known_elr": [1]}),
    ("using an unclean election", {"kind": "unclean_election", "new_leader": 2,
                                   "old_leader": -1, "isr_before": [],
                                   "last_known_elr": [1]}),
], ids=["replayed_change_names_it_before", "active_controller_previous_registration"])
def test_unclean_election_names_the_last_known_elr(needle, expected):
    rec = record(ELR, needle)
    assert {k: rec[k] for k in expected} == expected


def test_lines_without_elr_fields_leave_it_null():
    assert record(REAL["controller"], "UNCLEAN partition change")["last_known_elr"] is None
    assert record(REAL["controller"], "using an unclean election")["last_known_elr"] == []


# ---- assembling events ------------------------------------------------------------------

def test_cleaner_summary_is_one_event_with_its_logger_from_the_last_line():
    evs = events(REAL["server"])
    cleaner = [e for e in evs if "cleaned log" in e]
    assert len(cleaner) == 1 and cleaner[0].count("\n") == 9
    rec = parse_event(cleaner[0], cluster="test", broker=1)
    assert rec["message"].startswith("[kafka-log-cleaner-thread-0]: \n\tLog cleaner thread 0")
    assert rec["message"].endswith("(97.5% fewer messages)")


def test_stack_trace_lines_stay_with_their_event():
    (trace,) = [e for e in events(REAL["server"]) if "Error sending fetch request" in e]
    rec = parse_event(trace, cluster="test", broker=1)
    assert rec["message"].count("\n\tat ") == 10
    assert "java.io.IOException: Client was shutdown" in rec["message"]


def test_an_event_is_complete_only_when_the_next_one_starts_or_on_flush():
    a = EventAssembler()
    assert list(a.feed("[2026-11-22 10:39:21,624] INFO [kafka-log-cleaner-thread-0]: \n")) == []
    assert list(a.feed("\tLog cleaner thread 0 cleaned log t-0 (dirty section = [0, 8])\n")) == []
    done = list(a.feed("[2026-11-22 10:39:22,000] INFO next (x.Y)\n"))
    assert len(done) == 1 and done[0].count("\n") == 1
    assert list(a.flush()) == ["[2026-11-22 10:39:22,000] INFO next (x.Y)"]
    assert list(a.flush()) == []


def test_a_line_starting_with_a_bracket_but_no_stamp_continues_the_event():
    lines = ["[2026-11-22 10:39:21,624] WARN something (x.Y)", "[not a stamp] more"]
    assert len(list(EventAssembler().feed_all(lines))) == 1


def test_a_runaway_event_stops_growing_at_the_bound():
    a = EventAssembler(max_event_chars=1000)
    lines = ["[2026-11-22 10:39:21,624] ERROR boom (x.Y)"] + ["\tat frame" + "x" * 90] * 100
    (event,) = list(a.feed_all(lines))
    assert 1000 <= len(event) < 1200


def test_one_huge_line_is_cut_to_the_event_bound():
    (event,) = list(EventAssembler(max_event_chars=1000).feed_all(
        ["[2026-11-22 10:39:21,624] INFO " + "x" * 5000]))
    assert len(event) == 1000


def test_long_messages_are_cut_and_flagged():
    line = "[2026-11-22 10:39:21,624] INFO " + "x" * 20000 + " (x.Y)"
    rec = parse_event(line, cluster="test", broker=1)
    assert rec["message_truncated"] is True
    assert len(rec["message"]) == broker_log.MAX_MESSAGE_CHARS


def test_broker_local_time_is_read_in_the_broker_zone():
    line = "[2026-07-01 12:00:00,500] INFO hello (x.Y)"
    utc = parse_event(line, cluster="test", broker=1)["ts_ms"]
    assert parse_event(line, cluster="test", broker=1, tz=ZoneInfo("America/New_York"))[
        "ts_ms"] == utc + 4 * 3_600_000


# ---- bad input --------------------------------------------------------------------------

MALFORMED = [
    ("empty_event", "", "empty_line"),
    ("continuation_lines_before_any_stamp", "\tat x.Y.z(Y.java:1)\n\tat a.B.c(B.java:2)",
     "orphan_lines"),
    ("impossible_timestamp", "[2026-02-30 10:00:00,000] INFO x (x.Y)", "bad_timestamp"),
    # Values that cannot be true (schemas/plausible.py), accepted before issue 59.
    ("level_log4j_does_not_have", "[2026-11-22 10:39:50,867] LOUD x (x.Y)", "unknown_level"),
    ("time_before_2000", "[1999-12-31 23:59:59,999] INFO x (x.Y)", "implausible_event_time"),
    ("new_leader_minus_two", "[2026-11-22 10:39:50,867] INFO [Broker id=1] Follower orders-0 "
     "starts at leader epoch 1 from offset 767 with partition epoch 3 and high watermark 767. "
     "Current leader is -2. (state.change.logger)", "negative_leader:new_leader"),
    ("negative_out_of_range_offset", "[2026-11-22 10:39:50,867] INFO [ReplicaFetcher "
     "replicaId=2, leaderId=1, fetcherId=0] Current offset -5 for partition orders-0 is out of "
     "range, which typically implies a leader change. Reset fetch offset to 10 "
     "(kafka.server.ReplicaFetcherThread)", "negative_offset:from_offset"),
]


def test_no_leader_is_plausible():
    """-1 is Kafka's "no leader": a partition gone offline."""
    rec = parse_event("[2026-11-22 10:39:50,867] INFO [Broker id=1] Follower orders-0 starts at "
                      "leader epoch 1 from offset 767 with partition epoch 3 and high watermark "
                      "767. Current leader is -1. (state.change.logger)", cluster="t", broker=1)
    assert rec["new_leader"] == -1


@pytest.mark.parametrize("event,reason", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_bad_events_give_malformed(event, reason):
    got = parse_event(event, cluster="test", broker=1)
    assert isinstance(got, Malformed) and (got.source, got.reason) == ("broker_log", reason)
    assert got.raw == event


def test_garbage_bytes_are_malformed_and_do_not_break_the_event_around_them():
    lines = [b"[2026-11-22 10:39:21,624] INFO a (x.Y)", b"\xff\xfe\x81", b"\tmore of a"]
    out = list(parse_lines(lines, cluster="test", broker=1))
    assert [type(o).__name__ for o in out] == ["Malformed", "dict"]
    assert out[0].reason == "not_utf8"
    assert out[1]["message"] == "a\n\tmore of a"


def test_orphan_lines_at_the_start_of_a_file_are_quarantined_not_dropped():
    lines = ["\tat x.Y.z(Y.java:1)", "[2026-11-22 10:39:21,624] INFO a (x.Y)"]
    out = list(parse_lines(lines, cluster="test", broker=1))
    assert isinstance(out[0], Malformed) and out[0].reason == "orphan_lines"
    assert out[1]["message"] == "a"


# ---- group coordinator moves (real 4.3.1 lines; older forms from GroupMetadataManager) ---

COORDINATOR_CASES = [
    ("load_first_leader_4_3_1",
     "[2026-11-26 04:15:54,105] INFO [GroupCoordinator id=1] Scheduling loading of metadata "
     "from __consumer_offsets-9 with epoch 0 "
     "(org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime)",
     {"kind": "coordinator_load", "topic": "__consumer_offsets", "partition": 9,
      "leader_epoch": 0, "ts_ms": 1795666554105,
      "logger": "org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime"}),
    ("load_after_a_leader_change_4_3_1",
     "[2026-11-26 04:23:03,642] INFO [GroupCoordinator id=1] Scheduling loading of metadata "
     "from __consumer_offsets-7 with epoch 1 "
     "(org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime)",
     {"kind": "coordinator_load", "partition": 7, "leader_epoch": 1}),
    ("unload_4_3_1",
     "[2026-11-26 04:23:05,280] INFO [GroupCoordinator id=1] Scheduling unloading of metadata "
     "for __consumer_offsets-6 with epoch OptionalInt[1] "
     "(org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime)",
     {"kind": "coordinator_unload", "topic": "__consumer_offsets", "partition": 6,
      "leader_epoch": 1}),
    ("unload_of_a_deleted_topic_has_no_epoch",
     "[2026-11-26 04:23:05,280] INFO [GroupCoordinator id=1] Scheduling unloading of metadata "
     "for __consumer_offsets-6 with epoch OptionalInt.empty "
     "(org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime)",
     {"kind": "coordinator_unload", "partition": 6, "leader_epoch": None}),
    ("load_before_4_0_with_epoch",
     "[2021-03-01 10:00:00,000] INFO [GroupMetadataManager brokerId=2] Scheduling loading of "
     "offsets and group metadata from __consumer_offsets-7 for epoch 3 "
     "(kafka.coordinator.group.GroupMetadataManager)",
     {"kind": "coordinator_load", "partition": 7, "leader_epoch": 3}),
    ("unload_before_4_0",
     "[2021-03-01 10:00:00,000] INFO [GroupMetadataManager brokerId=2] Scheduling unloading of "
     "offsets and group metadata from __consumer_offsets-7 "
     "(kafka.coordinator.group.GroupMetadataManager)",
     {"kind": "coordinator_unload", "partition": 7, "leader_epoch": None}),
    ("share_coordinator_is_other",
     "[2026-11-26 04:15:54,105] INFO [ShareCoordinator id=1] Scheduling loading of metadata "
     "from __share_group_state-3 with epoch 0 "
     "(org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime)",
     {"kind": "other", "topic": None, "partition": None}),
]


@pytest.mark.parametrize("line,expected", [c[1:] for c in COORDINATOR_CASES],
                         ids=[c[0] for c in COORDINATOR_CASES])
def test_group_coordinator_loads_and_unloads(line, expected):
    rec = parse_event(line, cluster="test", broker=1, log="server")
    assert not isinstance(rec, Malformed), rec
    assert {k: rec[k] for k in expected} == expected


# ---- the controller on brokers' sessions (real 4.3.1 lines; the 3.x unfence form) ---------

BROKER_STATE_CASES = [
    ("fenced_session_timeout_4_3_1",
     "[2026-11-26 06:18:30,728] INFO [QuorumController id=3] Fencing broker 2 at epoch 11 "
     "because its session has timed out. (org.apache.kafka.controller.ReplicationControlManager)",
     {"kind": "broker_fenced", "subject_broker": 2, "broker": 3, "ts_ms": 1795673910728}),
    ("fenced_before_4_0",
     "[2023-07-13 14:11:49,313] INFO [QuorumController id=1] Fencing broker 4 because its "
     "session has timed out. (org.apache.kafka.controller.ReplicationControlManager)",
     {"kind": "broker_fenced", "subject_broker": 4}),
    ("controlled_shutdown_4_3_1",
     "[2026-11-26 06:29:10,252] INFO [QuorumController id=3] Unfenced broker 1 has requested "
     "and been granted a controlled shutdown. (org.apache.kafka.controller.BrokerHeartbeatManager)",
     {"kind": "broker_shutdown", "subject_broker": 1}),
    ("new_incarnation_4_3_1",
     "[2026-11-26 06:29:22,969] INFO [QuorumController id=3] Registering a new incarnation of "
     "broker 1. Previous incarnation ID was V-npppnVRr-4t9Xbbw8VeA; new incarnation ID is "
     "jMaLDRv_TyyCx2IpmvCwaQ. Generated 0 record(s) to clean up previous incarnation "
     "(org.apache.kafka.controller.ClusterControlManager)",
     {"kind": "broker_registered", "subject_broker": 1}),
    ("unfenced_4_3_1",
     "[2026-11-26 06:29:23,035] INFO [QuorumController id=3] The request from broker 1 to "
     "unfence has been granted because it has caught up with the offset of its register "
     "broker record 4704. (org.apache.kafka.controller.BrokerHeartbeatManager)",
     {"kind": "broker_unfenced", "subject_broker": 1}),
    ("unfenced_3_x",
     "[2023-07-13 14:11:49,313] INFO [Controller 1] The request from broker 1 to unfence has "
     "been granted because it has caught up with the last committed metadata offset 1. "
     "(org.apache.kafka.controller.BrokerHeartbeatManager)",
     {"kind": "broker_unfenced", "subject_broker": 1}),
    # a broker's own line that it is going (the only one when the controller is on it)
    ("own_shutdown_4_3_1",
     "[2026-12-06 21:33:47,891] INFO [BrokerServer id=3] Transition from STARTED to "
     "SHUTTING_DOWN (kafka.server.BrokerServer)",
     {"kind": "broker_shutdown", "subject_broker": 3, "ts_ms": 1796592827891}),
    ("own_start_is_other",
     "[2026-12-06 21:34:11,047] INFO [BrokerServer id=3] Transition from SHUTDOWN to STARTING "
     "(kafka.server.BrokerServer)",
     {"kind": "other", "subject_broker": None}),
    # the other brokers' view: a replica fetcher that cannot connect to its leader
    ("unreachable_leader_4_3_1",
     "[2026-12-02 17:20:08,687] WARN [ReplicaFetcher replicaId=1, leaderId=3, fetcherId=0] "
     "Connection to node 3 (/127.0.0.1:38101) could not be established. Node may not be "
     "available. (org.apache.kafka.clients.NetworkClient)",
     {"kind": "broker_unreachable", "subject_broker": 3, "ts_ms": 1796232008687}),
    ("unreachable_leader_2_x",
     "[2021-03-01 10:00:00,000] WARN [ReplicaFetcher replicaId=1, leaderId=2, fetcherId=0] "
     "Connection to node 2 (kafka-2.kafka/10.0.0.7:9092) could not be established. Broker "
     "may not be available. (org.apache.kafka.clients.NetworkClient)",
     {"kind": "broker_unreachable", "subject_broker": 2}),
    # the controller's port (RaftManager) or a client's connection is not a broker's data path
    ("unreachable_controller_is_other",
     "[2026-12-02 17:20:07,725] WARN [RaftManager id=1] Connection to node 3 "
     "(/127.0.0.1:36165) could not be established. Node may not be available. "
     "(org.apache.kafka.clients.NetworkClient)",
     {"kind": "other", "subject_broker": None}),
    ("duplicate_registration_is_other",
     "[2026-11-26 06:29:16,955] INFO [QuorumController id=3] registerBroker: event failed with "
     "DuplicateBrokerRegistrationException in 172 microseconds. Exception message: Another "
     "broker is registered with that broker id. (org.apache.kafka.controller.QuorumController)",
     {"kind": "other", "subject_broker": None}),
]


@pytest.mark.parametrize("line,expected", [c[1:] for c in BROKER_STATE_CASES],
                         ids=[c[0] for c in BROKER_STATE_CASES])
def test_controller_lines_on_brokers_sessions(line, expected):
    rec = parse_event(line, cluster="test", broker=3, log="controller")
    assert not isinstance(rec, Malformed), rec
    assert {k: rec.get(k) for k in expected} == expected
