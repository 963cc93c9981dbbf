"""Unclean-election rules on named scenarios: the lost range and where each bound came
from, which groups read into it, then the findings. The election is of orders-2 at
t=100 s, broker 1 (the old leader, with offsets up to 1000 acknowledged) -> broker 3
(out of sync, its log ending at 900)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from core.findings import ActionKind, AnomalyType, Severity
from detectors.lost_range import (
    LeaderEpochSeen,
    UncleanElection,
    committed_at,
    lost_range,
    place_groups,
    truncations_after,
)
from detectors.partition_signals import LogTruncation, OffsetCommit, PartitionOffsets
from detectors.unclean_election import (
    UncleanElectionMeterTick,
    UncleanElectionSection,
    detect_unclean_elections,
    unexplained_meter_ticks,
)

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
CONFIG = UncleanElectionSection()


def at(seconds: float) -> int:
    return T0 + int(seconds * 1000)


ELECTION = UncleanElection("c1", "orders", 2, at(100), old_leader=1, new_leader=3, leader_epoch=5)
OLD_LEADER_BACK = LogTruncation("c1", 1, "orders", 2, at(700), 900, 1000)
ROUTINE = LogTruncation("c1", 2, "orders", 2, at(105), 850)


def commit(group, seconds, offset, topic="orders", partition=2):
    return OffsetCommit("c1", group, topic, partition, offset, at(seconds))


def ends(*pairs):
    return [PartitionOffsets("c1", "orders", 2, at(t), end, 0) for t, end in pairs]


# RF 1: solo-0's one replica on broker 2, which led it from epoch 0 (its start line then)
# and again at epoch 2 after it was killed (epoch 1: leader -1, offline), from offset 5,000.
SOLE = UncleanElection("c1", "solo", 0, at(100), old_leader=-1, new_leader=2, leader_epoch=2,
                       last_known_elr=(2,))
SOLE_STARTS = [LeaderEpochSeen("c1", "solo", 0, 0, at(-600), broker=2, leader=2, log_end=0),
               LeaderEpochSeen("c1", "solo", 0, 2, at(101), broker=2, leader=2, log_end=5000)]


def solo_ends(*pairs):
    return [PartitionOffsets("c1", "solo", 0, at(t), end, 0) for t, end in pairs]


COMMITS = [commit("reporting", 50, 700), commit("reporting", 95, 800),
           commit("billing", 60, 900), commit("billing", 95, 950),
           commit("audit", 99, 1000),
           commit("billing", 200, 905)]  # after the election: the reset, not the position


@dataclass
class Scenario:
    name: str
    elections: list
    truncations: list = field(default_factory=list)
    offsets: list = field(default_factory=list)
    commits: list = field(default_factory=list)
    ticks: list = field(default_factory=list)
    lost: tuple | None = None      # (lost_from, source, lost_until, source) of the first election
    groups: dict | None = None     # inside/beyond/behind/unknown of the first election
    detections: dict = field(default_factory=dict)  # (type, entity) -> (cause, severity)
    evidence: dict = field(default_factory=dict)
    now_ms: int | None = None      # the evaluation time (None: a replay, every tick judged)
    epochs: list = field(default_factory=list)  # LeaderEpochSeen of the partitions


def scenarios():
    yield Scenario(
        "unclean_election_loses_range_and_names_groups", [ELECTION],
        truncations=[ROUTINE, OLD_LEADER_BACK], offsets=ends((90, 1000), (110, 905)),
        commits=COMMITS,
        lost=(900, "old_leader_truncation", 1000, "truncation_high_watermark"),
        groups={"inside": [("audit", 1000), ("billing", 950)], "beyond": [],
                "behind": [("reporting", 800)], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL),
                    (AnomalyType.LOG_TRUNCATION, "orders-2"): ("truncated_below_high_watermark",
                                                               Severity.HIGH)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): {
            "lost_from": 900, "lost_until": 1000, "messages_lost": 100,
            "groups_inside": [{"group": "audit", "committed_offset": 1000},
                              {"group": "billing", "committed_offset": 950}],
            "groups_inside_count": 2, "groups_behind_count": 1, "old_leader": 1,
            "new_leader": 3, "leader_epoch": 5},
            (AnomalyType.LOG_TRUNCATION, "orders-2"): {"broker": 1, "messages_discarded": 100}})

    # The old leader is still down: no truncation yet. The broker offsets bound the range,
    # and a sparse sample before the election makes a group look beyond it.
    yield Scenario(
        "lost_range_from_end_offsets_before_old_leader_returns", [ELECTION],
        offsets=ends((60, 1000), (110, 905)),
        commits=COMMITS + [commit("search", 98, 1040)],
        lost=(905, "first_end_offset_after_election", 1000, "last_end_offset_before_election"),
        groups={"inside": [("audit", 1000), ("billing", 950)], "beyond": [("search", 1040)],
                "behind": [("reporting", 800)], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): {
            "groups_beyond": [{"group": "search", "committed_offset": 1040}],
            "messages_lost": 95}})

    # Seen in the demo: the producer (acks=1) wrote to the new leader before the first end
    # offset after the election was sampled, past the old high watermark. Not "0 lost".
    yield Scenario(
        "end_offset_after_election_past_the_old_high_watermark_leaves_the_start_unknown",
        [ELECTION], offsets=ends((60, 1000), (110, 1475)), commits=COMMITS,
        lost=(None, "unknown", 1000, "last_end_offset_before_election"),
        groups={"inside": [], "beyond": [], "behind": [],
                "unknown": [("audit", 1000), ("billing", 950), ("reporting", 800)]},
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): {"messages_lost": None,
                                                               "lost_until": 1000}})

    # Matrix scenario unclean-noloss: writes had stopped; the elected replica had all 1000
    # records. The controller logs an unclean election, nothing committed is lost.
    yield Scenario(
        "unclean_election_that_lost_nothing_is_not_a_data_loss_page", [ELECTION],
        truncations=[LogTruncation("c1", 1, "orders", 2, at(700), 1000, 1000)],
        offsets=ends((60, 1000), (110, 1000)), commits=COMMITS,
        lost=(1000, "old_leader_truncation", 1000, "truncation_high_watermark"),
        groups={"inside": [], "beyond": [], "behind": [("audit", 1000), ("billing", 950),
                                                        ("reporting", 800)], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.WARNING)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): {"messages_lost": 0}})

    # The same before the old leader is back: the end offsets before and after agree.
    yield Scenario(
        "end_offsets_equal_around_the_election_mean_nothing_lost", [ELECTION],
        offsets=ends((60, 1000), (110, 1000)), commits=COMMITS,
        lost=(1000, "first_end_offset_after_election", 1000, "last_end_offset_before_election"),
        groups={"inside": [], "beyond": [], "behind": [("audit", 1000), ("billing", 950),
                                                        ("reporting", 800)], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.WARNING)})

    yield Scenario(
        "nothing_known_about_the_range_still_reports_the_election", [ELECTION],
        commits=COMMITS,
        lost=(None, "unknown", None, "unknown"),
        groups={"inside": [], "beyond": [], "behind": [],
                "unknown": [("audit", 1000), ("billing", 950), ("reporting", 800)]},
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): {"messages_lost": None,
                                                               "lost_from": None}})

    # A ZooKeeper-mode controller logs nothing: only its meter moved. The truncation
    # below the high watermark that follows hints at the partition.
    yield Scenario(
        "zk_controller_meter_only_emits_unknown_partitions", [],
        ticks=[UncleanElectionMeterTick("c1", at(120), 1.0, controller=0)],
        truncations=[LogTruncation("c1", 2, "payments", 0, at(300), 400, 450)],
        detections={(AnomalyType.UNCLEAN_ELECTION, "cluster:c1"): (
                        "unclean_leader_election_unlogged", Severity.CRITICAL),
                    (AnomalyType.LOG_TRUNCATION, "payments-0"): (
                        "truncated_below_high_watermark", Severity.HIGH)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "cluster:c1"): {
            "partitions": "unknown", "count": 1, "candidate_partitions": ["payments-0"]}})

    yield Scenario(
        "meter_tick_explained_by_logged_election_is_not_duplicated", [ELECTION],
        ticks=[UncleanElectionMeterTick("c1", at(130), 1.0)],
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL)})

    # Seen in the live demo: brokers restarting, the scrape that saw the count move came
    # 169 s after the election; the previous sample (count unchanged) was before it.
    yield Scenario(
        "meter_tick_seen_late_after_a_scrape_gap_is_the_logged_election", [ELECTION],
        ticks=[UncleanElectionMeterTick("c1", at(269), 1.0, controller=1, previous_ms=at(60))],
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL)})

    # The count was already sampled unchanged well after the logged election: this tick
    # counts another election, one nobody logged.
    yield Scenario(
        "meter_tick_after_a_sample_that_already_followed_the_election_is_another",
        [ELECTION],
        ticks=[UncleanElectionMeterTick("c1", at(530), 1.0, controller=1, previous_ms=at(500))],
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL),
                    (AnomalyType.UNCLEAN_ELECTION, "cluster:c1"): (
                        "unclean_leader_election_unlogged", Severity.CRITICAL)})

    yield Scenario(
        "meter_counts_more_than_the_logs_show", [ELECTION],
        ticks=[UncleanElectionMeterTick("c1", at(130), 2.0)],
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL),
                    (AnomalyType.UNCLEAN_ELECTION, "cluster:c1"): (
                        "unclean_leader_election_unlogged", Severity.CRITICAL)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "cluster:c1"): {"count": 1}})

    # Seen in the demo (KRaft): the JMX sample counted the election 4 s after it, the
    # controller's log line reached the lake 30 s later. Meanwhile the tick is not an
    # unlogged election: reporting it paged twice for one election.
    yield Scenario(
        "meter_tick_waits_for_the_log_line_still_on_its_way", [],
        ticks=[UncleanElectionMeterTick("c1", at(104), 1.0, controller=3)],
        now_ms=at(134))

    yield Scenario(
        "meter_tick_no_log_line_explains_after_the_wait_is_unlogged", [],
        ticks=[UncleanElectionMeterTick("c1", at(104), 1.0, controller=3)],
        now_ms=at(104 + 90),
        detections={(AnomalyType.UNCLEAN_ELECTION, "cluster:c1"): (
                        "unclean_leader_election_unlogged", Severity.CRITICAL)})

    yield Scenario(
        "meter_tick_then_its_log_line_is_one_election", [ELECTION],
        ticks=[UncleanElectionMeterTick("c1", at(104), 1.0, controller=3)],
        now_ms=at(300),
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL)})

    # Seen live (unclean-noloss-3b): 500 records written between two 10 s samples of the
    # end offsets (the last before the election said 0), nothing written after. The new
    # leader took over at its log end 500 and the old leader came back with 500 too:
    # nothing at all was on the old leader that the new one lacked.
    quiet = UncleanElection("c1", "orders", 2, at(100), old_leader=1, new_leader=3,
                            leader_epoch=5)
    took_over = LeaderEpochSeen("c1", "orders", 2, 5, at(100.04), broker=3, leader=3,
                                log_end=500, high_watermark=500)
    came_back = LeaderEpochSeen("c1", "orders", 2, 5, at(102.5), broker=1, leader=3,
                                log_end=500, high_watermark=500)
    yield Scenario(
        "start_lines_of_both_leaders_at_one_end_mean_nothing_lost", [quiet],
        offsets=ends((92, 0), (112, 500)), epochs=[took_over, came_back],
        lost=(500, "new_leader_start", 500, "old_leader_log_end"),
        groups={"inside": [], "beyond": [], "behind": [], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.WARNING)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): {"messages_lost": 0}})

    # The same as KRaft logs it: the partition went offline first, so the line says
    # "leader: -1 -> 3"; broker 2's follower line named broker 1 leader at epoch 4.
    offline = replace(quiet, old_leader=-1)
    yield Scenario(
        "after_an_offline_partition_the_last_named_leader_is_the_old_one", [offline],
        offsets=ends((92, 0), (112, 500)),
        epochs=[LeaderEpochSeen("c1", "orders", 2, 4, at(20), broker=3, leader=1,
                                log_end=0, high_watermark=0),
                LeaderEpochSeen("c1", "orders", 2, 4, at(95), broker=3, leader=-1,
                                log_end=500, high_watermark=500),
                took_over, came_back],
        lost=(500, "new_leader_start", 500, "old_leader_log_end"),
        groups={"inside": [], "beyond": [], "behind": [], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.WARNING)})

    # Before the old leader is back: the new leader's end is known, the stale sample below
    # it bounds nothing. Not "0 lost": the loss cannot be ruled out yet.
    yield Scenario(
        "a_sample_below_the_new_leaders_end_leaves_the_loss_open", [quiet],
        offsets=ends((92, 0), (112, 500)), epochs=[took_over],
        lost=(500, "new_leader_start", None, "unknown"),
        groups={"inside": [], "beyond": [], "behind": [], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL)})

    # The old leader back with more than the new leader had: records were lost, and its
    # log end is no bound of the committed ones: the range end stays the sample's.
    yield Scenario(
        "old_leader_back_with_more_than_the_new_leader_is_a_loss", [quiet],
        offsets=ends((92, 520), (112, 505)),
        epochs=[took_over, replace(came_back, log_end=530, high_watermark=520)],
        lost=(500, "new_leader_start", 520, "last_end_offset_before_election"),
        groups={"inside": [], "beyond": [], "behind": [], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): {"messages_lost": 20}})

    # Seen in the matrix (rolling-restart-3b): the restarted KRaft controller replayed its
    # metadata log and logged an election made minutes before ("leaderEpoch: 4 -> 5")
    # again, after the brokers had led the partition at epoch 7. Not a new election; its
    # meter tick (the replaying controller counts it again) is not an unlogged one either.
    yield Scenario(
        "election_line_below_an_epoch_the_brokers_already_led_is_a_replay", [ELECTION],
        epochs=[LeaderEpochSeen("c1", "orders", 2, 7, at(60))],
        ticks=[UncleanElectionMeterTick("c1", at(104), 1.0, controller=3)])

    yield Scenario(
        "election_line_at_an_epoch_elected_long_before_is_a_replay", [ELECTION],
        epochs=[LeaderEpochSeen("c1", "orders", 2, 5, at(-1500), "unclean_election"),
                LeaderEpochSeen("c1", "orders", 2, 5, at(-1499))])

    # The new leader's own "starts at leader epoch 5" comes just after the line (and may
    # be stamped a little before it, by another host's clock); a higher epoch within the
    # clock skew is a quick second change, not proof of a replay.
    yield Scenario(
        "the_elected_leaders_own_epoch_line_and_a_quick_next_change_keep_the_election",
        [ELECTION],
        epochs=[LeaderEpochSeen("c1", "orders", 2, 5, at(99)),
                LeaderEpochSeen("c1", "orders", 2, 6, at(97)),
                LeaderEpochSeen("c1", "orders", 2, 4, at(-300)),
                LeaderEpochSeen("c1", "orders", 1, 9, at(50))],   # another partition
        detections={(AnomalyType.UNCLEAN_ELECTION, "orders-2"): ("unclean_leader_election",
                                                                 Severity.CRITICAL)})

    # RF 1 (topic-churn's topics in the matrix, 4.3.1): the sole replica's broker was killed
    # while the partition was written to; back, the controller elected it from the last
    # known ELR ("isr: [] -> [2], leader: -1 -> 2, ... lastKnownElr: [2] -> []") and logged
    # an unclean election. The last end offset sampled before (4,900) is below its log end
    # (5,000: writes after the sample), which bounds nothing for an out-of-sync replica, so
    # this was a critical "not known yet"; it was the last in-sync replica, so nothing went.
    yield Scenario(
        "sole_replica_back_from_the_last_known_elr_lost_nothing", [SOLE],
        offsets=solo_ends((60, 4900), (130, 5100)), epochs=SOLE_STARTS,
        lost=(5000, "new_leader_start", 5000, "elected_last_known_elr"),
        groups={"inside": [], "beyond": [], "behind": [], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "solo-0"): (
            "last_in_sync_replica_elected", Severity.WARNING)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "solo-0"): {"messages_lost": 0,
                                                             "last_known_elr": [2]}})

    # A line without lastKnownElr (before 4.x's ELR): the brokers' start lines show broker 2
    # led the partition last.
    yield Scenario(
        "last_leader_back_is_the_last_in_sync_replica_by_its_start_lines",
        [replace(SOLE, last_known_elr=None)],
        offsets=solo_ends((60, 4900), (130, 5100)), epochs=SOLE_STARTS,
        lost=(5000, "new_leader_start", 5000, "elected_last_leader"),
        groups={"inside": [], "beyond": [], "behind": [], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "solo-0"): (
            "last_in_sync_replica_elected", Severity.WARNING)})

    # Its broker came back with less than a sample had seen (unflushed records lost in the
    # crash itself, as an OS crash can): that is lost, and a page.
    yield Scenario(
        "last_in_sync_replica_back_with_less_than_was_seen_lost_the_difference", [SOLE],
        offsets=solo_ends((60, 5100), (130, 5100)), epochs=SOLE_STARTS,
        lost=(5000, "new_leader_start", 5100, "elected_last_known_elr"),
        groups={"inside": [], "beyond": [], "behind": [], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "solo-0"): (
            "last_in_sync_replica_elected", Severity.CRITICAL)},
        evidence={(AnomalyType.UNCLEAN_ELECTION, "solo-0"): {"messages_lost": 100}})

    # The matrix's RF 3 case: the last known ELR names broker 1, broker 2 (out of sync) is
    # elected: an unclean election as before, whatever the start lines say of broker 2.
    yield Scenario(
        "replica_outside_the_last_known_elr_is_out_of_sync", [replace(SOLE, last_known_elr=(1,))],
        offsets=solo_ends((60, 4900), (130, 5100)),
        epochs=[replace(s, broker=1, leader=1) if s.leader_epoch == 0 else s
                for s in SOLE_STARTS],
        lost=(5000, "new_leader_start", None, "unknown"),
        groups={"inside": [], "beyond": [], "behind": [], "unknown": []},
        detections={(AnomalyType.UNCLEAN_ELECTION, "solo-0"): (
            "unclean_leader_election", Severity.CRITICAL)})

    # Live (crash-rf1-dc): the controller's line reached the lake one silver batch before
    # broker 2's own start line for the partition; judged then, the range was unknown and
    # the finding a critical page that the next evaluation took back. The last in-sync
    # replica's election waits for that line (in_sync_wait_s, 30 s) ...
    before_its_start_line = [SOLE_STARTS[0]]
    yield Scenario(
        "last_in_sync_replica_election_waits_for_the_brokers_start_line", [SOLE],
        offsets=solo_ends((60, 4900), (104, 5000)), epochs=before_its_start_line,
        now_ms=at(110))
    # ... and is reported once the line is there, whenever that is,
    yield Scenario(
        "last_in_sync_replica_election_is_reported_once_the_start_line_is_in", [SOLE],
        offsets=solo_ends((60, 4900), (104, 5000)), epochs=SOLE_STARTS, now_ms=at(102),
        detections={(AnomalyType.UNCLEAN_ELECTION, "solo-0"): (
            "last_in_sync_replica_elected", Severity.WARNING)})
    # ... or, without it, after the wait, as what is known (a loss not ruled out: a page).
    yield Scenario(
        "last_in_sync_replica_election_without_its_start_line_pages_after_the_wait", [SOLE],
        offsets=solo_ends((60, 4900), (104, 5000)), epochs=before_its_start_line,
        now_ms=at(131),
        detections={(AnomalyType.UNCLEAN_ELECTION, "solo-0"): (
            "unclean_leader_election", Severity.CRITICAL)})
    # An out-of-sync replica's election is never held: its loss is likely.
    yield Scenario(
        "out_of_sync_election_is_not_held_for_a_start_line",
        [replace(SOLE, last_known_elr=(1,))], offsets=solo_ends((60, 4900), (104, 5000)),
        epochs=[replace(SOLE_STARTS[0], broker=1, leader=1)], now_ms=at(101),
        detections={(AnomalyType.UNCLEAN_ELECTION, "solo-0"): (
            "unclean_leader_election", Severity.CRITICAL)})

    yield Scenario(
        "truncation_of_an_uncommitted_tail_is_routine", [],
        truncations=[LogTruncation("c1", 2, "orders", 2, at(10), 1000, 1000), ROUTINE])


SCENARIOS = list(scenarios())


@pytest.mark.parametrize("s", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(s: Scenario):
    if s.lost is not None:
        e = s.elections[0]
        mine = [t for t in s.truncations if (t.topic, t.partition) == (e.topic, e.partition)]
        r = lost_range(e, truncations_after(e, mine, 3_600_000), s.offsets, s.epochs)
        assert (r.lost_from, r.lost_from_source, r.lost_until, r.lost_until_source) == s.lost
        g = place_groups(committed_at(s.commits, e.event_ms), r)
        assert {"inside": g.inside, "beyond": g.beyond, "behind": g.behind,
                "unknown": g.unknown} == s.groups

    detections = detect_unclean_elections(s.elections, meter_ticks=s.ticks,
                                          truncations=s.truncations, offsets=s.offsets,
                                          commits=s.commits, leader_epochs=s.epochs,
                                          config=CONFIG, now_ms=s.now_ms)
    got = {(d.type, d.entity): (d.cause, d.severity) for d in detections}
    assert got == s.detections
    by_key = {(d.type, d.entity): d for d in detections}
    for key, items in s.evidence.items():
        for k, v in items.items():
            assert by_key[key].evidence[k] == v, (key, k)
    for d in detections:
        assert d.suggested_action is ActionKind.PAGE_HUMAN  # lost data: nothing kmon can fix
        assert d.explanation.endswith(".")


def test_truncation_long_before_the_election_is_not_its_evidence():
    old = LogTruncation("c1", 1, "orders", 2, at(-600), 500, 600)
    assert truncations_after(ELECTION, [old, OLD_LEADER_BACK], 3_600_000) == [OLD_LEADER_BACK]


def test_each_logged_election_accounts_for_one_count_of_one_tick():
    e2 = UncleanElection("c1", "orders", 3, at(101))
    ticks = [UncleanElectionMeterTick("c1", at(110), 1.0),
             UncleanElectionMeterTick("c1", at(140), 2.0)]
    left = unexplained_meter_ticks(ticks, [ELECTION, e2], 120_000)
    assert [(t.observed_ms, n) for t, n in left] == [(at(140), 1)]


def test_group_lists_are_capped_but_counts_are_exact():
    many = [commit(f"g{i:03}", 90, 950) for i in range(80)]
    [election] = [d for d in detect_unclean_elections([ELECTION], truncations=[OLD_LEADER_BACK],
                                                      commits=many, config=CONFIG)
                  if d.type is AnomalyType.UNCLEAN_ELECTION]
    assert len(election.evidence["groups_inside"]) == CONFIG.max_groups_listed
    assert election.evidence["groups_inside_count"] == 80
