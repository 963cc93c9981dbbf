"""Offset rewind and reset rules on named scenarios, each asserting the rewind found, every
rule's result, then the detections. Group "billing" reads orders-2 unless said otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from core.findings import ActionKind, AnomalyType, Severity
from detectors.offset_rewind_config import OffsetRewindSection
from detectors.offset_rewind import (
    PartitionInputs,
    assess_rewind,
    detect_offset_anomalies,
    find_rewinds,
    offsets_losses,
)
from detectors.partition_signals import (
    ClientOffsetReset,
    CommitRequest,
    CoordinatorLoad,
    GroupMembership,
    LogTruncation,
    OffsetCommit,
    PartitionOffsets,
    ResetReason,
    ResetTarget,
    client_event_meaning,
    pair_reset_events,
)

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000
S = 1000
CONFIG = OffsetRewindSection()
ENTITY = "group:billing/orders-2"


def at(seconds: float) -> int:
    return T0 + int(seconds * S)


def commits(*pairs, group="billing"):
    """(seconds, offset) pairs -> commits of `group` on orders-2 (in __consumer_offsets-7)."""
    return [OffsetCommit("c1", group, "orders", 2, off, at(t), source_partition=7)
            for t, off in pairs]


def lines(member, generation, *pairs, client="billing-1", group="billing", partition=2):
    """(seconds, offset) pairs -> the coordinator's request-log lines of those commits by
    `member`, each 40 ms after the commit (the line is written when the response goes)."""
    return [CommitRequest("c1", group, "orders", partition, off, at(t) + 40, member, generation,
                          client, 1) for t, off in pairs]


def load(t, offsets_partition=7, epoch=2, broker=3):
    return CoordinatorLoad("c1", broker, offsets_partition, at(t), epoch)


def offsets_lost(t, offsets_partition=7, broker=1):
    """The old coordinator, back, truncates its __consumer_offsets partition below the
    high watermark: commits were lost in the move."""
    return LogTruncation("c1", broker, "__consumer_offsets", offsets_partition, at(t),
                         truncated_to=40, high_watermark=52)


def ends(*triples):
    """(seconds, end offset, log start) -> broker offsets of orders-2."""
    return [PartitionOffsets("c1", "orders", 2, at(t), end, start) for t, end, start in triples]


def members(*pairs, group="billing"):
    return [GroupMembership("c1", group, at(t), n) for t, n in pairs]


def reset(t, reason, *, frm=None, to=None, target=ResetTarget.UNKNOWN, group="billing"):
    return ClientOffsetReset("c1", "orders", 2, at(t), group, "billing-1", frm, to, target, reason)


STEADY = commits((0, 1000), (60, 2000), (120, 3000), (180, 4000), (240, 5000))
ACTIVE = members((0, 3), (60, 3), (120, 3), (180, 3), (240, 3), (300, 3))


@dataclass
class Scenario:
    name: str
    commits: list
    offsets: list = field(default_factory=list)
    resets: list = field(default_factory=list)
    members: list = field(default_factory=list)
    truncations: list = field(default_factory=list)
    requests: list = field(default_factory=list)   # OffsetCommit request-log lines
    loads: list = field(default_factory=list)      # coordinator loads
    now_s: float = 600
    rewind: dict | None = None       # the latest rewind's shape and every rule's result
    detections: dict = field(default_factory=dict)  # (type, entity) -> (cause, severity, action)
    evidence: dict = field(default_factory=dict)    # (type, entity) -> evidence items


def scenarios():
    yield Scenario(
        "operator_reset_to_earliest_with_no_members",
        commits((0, 1000), (60, 2000), (120, 3000), (400, 0)),
        offsets=ends((0, 1200, 0), (120, 3100, 0), (400, 3500, 0), (600, 3500, 0)),
        members=members((0, 3), (120, 3), (350, 0)),
        rewind={"old_position": 3000, "new_position": 0, "drops": 1, "active": True,
                "member_count": 0, "admin_commit": True, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 3000,
                "cause": "operator_reset"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("operator_reset", Severity.INFO,
                                                          ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"reset_target": "earliest",
                                                        "duplicates": 3000, "member_count": 0,
                                                        "lag_now": 3500}})

    # The demo's stale process: it remembered the group's offsets, joined the live group
    # (a new member, generation 4) and committed them. Its first commit on the partition
    # is the rewind, over the live member's.
    yield Scenario(
        "stale_process_commits_old_offset",
        STEADY + commits((300, 3000)),
        offsets=ends((240, 5100, 0), (300, 5200, 0)), members=ACTIVE,
        requests=(lines("m-live", 3, (0, 1000), (60, 2000), (120, 3000), (180, 4000),
                        (240, 5000))
                  + lines("m-stale", 4, (300, 3000), client="billing-stale")),
        rewind={"old_position": 5000, "new_position": 3000, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 2000,
                "cause": "stale_process"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_process", Severity.HIGH, ActionKind.RESTORE_GROUP_OFFSETS)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {
            "restore_to": 5000, "old_position": 5000, "new_position": 3000,
            "previous_commit_offset": 5000,
            "committer": {"client_id": "billing-stale", "member_id": "m-stale",
                          "generation": 4, "request_ms": at(300) + 40, "broker": 1,
                          "own_last_offset": None, "group_newest_generation": 3,
                          "previous_member_id": "m-live", "previous_client_id": "billing-1",
                          "earlier_commit_ms": None}}})

    # The same commit with no request log (or its line not found): a member committed an
    # older offset, and nothing says whether it sought back or was stale.
    yield Scenario(
        "live_member_commit_without_its_line_is_member_commit",
        STEADY + commits((300, 3000)),
        offsets=ends((240, 5100, 0), (300, 5200, 0)), members=ACTIVE,
        requests=lines("m-live", 3, (0, 1000), (60, 2000), (120, 3000), (180, 4000),
                       (240, 5000)),
        rewind={"old_position": 5000, "new_position": 3000, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 2000,
                "cause": "member_commit"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"restore_to": None}})

    # A zombie: m-old read the partition in generation 4, lost it in a rebalance it never
    # saw, and commits its own next position after m-new (generation 5) moved far on.
    yield Scenario(
        "zombie_of_an_older_generation_is_a_stale_process",
        commits((0, 1000), (60, 2000), (120, 3000), (180, 1500)),
        offsets=ends((0, 1100, 0), (180, 3200, 0)), members=members((0, 2)), now_s=200,
        requests=(lines("m-old", 4, (0, 1000), (180, 1500), client="billing-old")
                  + lines("m-new", 5, (60, 2000), (120, 3000), client="billing-new")),
        rewind={"old_position": 3000, "new_position": 1500, "drops": 1, "active": True,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 1500,
                "cause": "stale_process"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_process", Severity.HIGH, ActionKind.RESTORE_GROUP_OFFSETS)})

    # The application (the one live member) seeks back and commits: the same member had
    # committed the higher offsets itself. librdkafka logs no seek: the line is the proof.
    yield Scenario(
        "member_that_committed_the_higher_offsets_goes_back_itself_is_an_application_seek",
        STEADY + commits((300, 3000), (305, 3100)),
        offsets=ends((240, 5100, 0), (300, 5200, 0)), members=ACTIVE,
        requests=lines("m-live", 3, (0, 1000), (60, 2000), (120, 3000), (180, 4000),
                       (240, 5000), (300, 3000), (305, 3100)),
        rewind={"old_position": 5000, "new_position": 3000, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 2000,
                "cause": "application_seek"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "application_seek", Severity.INFO, ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {
            "restore_to": None,
            "committer": {"client_id": "billing-1", "member_id": "m-live", "generation": 3,
                          "request_ms": at(300) + 40, "broker": 1, "own_last_offset": 5000,
                          "group_newest_generation": 3, "previous_member_id": "m-live",
                          "previous_client_id": "billing-1", "earlier_commit_ms": None}}})

    # Seen in the live matrix (coordinator-failover-3b): a partition leader died; the
    # coordinator appended the member's commit of 5000 at 240 s but its replication timed
    # out (offsets.commit.timeout.ms): COORDINATOR_NOT_AVAILABLE after 5,006 ms. The member
    # committed 5010 meanwhile, then retried 5000, which was appended after it; its next
    # commit put 5010 back. Nothing moved back: no rewind to page on.
    reordered = [(0, 1000), (60, 2000), (120, 3000), (180, 4000), (240, 5000), (245.05, 5010),
                 (245.4, 5000), (249.45, 5010), (250, 5020)]
    steady_lines = lines("m-live", 3, (0, 1000), (60, 2000), (120, 3000), (180, 4000))
    waited = [CommitRequest("c1", "billing", "orders", 2, 5000, at(245.006), "m-live", 3,
                            "billing-1", 1, failed=True, total_ms=5006.0),
              CommitRequest("c1", "billing", "orders", 2, 5010, at(249.38), "m-live", 3,
                            "billing-1", 1, total_ms=4330.0),
              CommitRequest("c1", "billing", "orders", 2, 5000, at(249.38), "m-live", 3,
                            "billing-1", 1, total_ms=3980.0)]
    yield Scenario(
        "retried_commit_landing_after_a_newer_one_is_a_reordered_commit",
        commits(*reordered), offsets=ends((240, 5100, 0), (250, 5200, 0)), members=ACTIVE,
        requests=steady_lines + waited + lines("m-live", 3, (249.45, 5010), (250, 5020)),
        now_s=260,
        rewind={"old_position": 5010, "new_position": 5000, "drops": 1, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 10,
                "cause": "commit_reordered"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "commit_reordered", Severity.INFO, ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {
            "committer": {"client_id": "billing-1", "member_id": "m-live", "generation": 3,
                          "request_ms": at(249.38), "broker": 1, "own_last_offset": 5010,
                          "group_newest_generation": 3, "previous_member_id": "m-live",
                          "previous_client_id": "billing-1",
                          "earlier_commit_ms": at(245.006)}}})

    # A commit sent between the member's last two positions lands after the newer one
    # (5005 after 5010), and the next commit puts 5010 back: a reordered commit. Judged
    # before that next commit was in (cpu-starved-3b replayed: member_commit warnings, one
    # evaluation later the commit_reordered they were), the rewind waits for the
    # partition's next REORDER_WINDOW_MS of commits ...
    in_flight = [(0, 1000), (60, 2000), (120, 3000), (180, 4000), (240, 5000),
                 (245.05, 5010), (245.4, 5005)]
    pending = {"old_position": 5010, "new_position": 5005, "drops": 1, "active": True,
               "member_count": 3, "admin_commit": False, "reset_event": False,
               "truncation": False, "past_log_end": 0, "duplicates": 5,
               "cause": "member_commit"}
    yield Scenario(
        "rewind_that_may_be_a_reordered_commit_waits_for_the_next_commits",
        commits(*in_flight), offsets=ends((240, 5100, 0)), members=ACTIVE, now_s=247,
        rewind=pending)
    # ... which tell it,
    yield Scenario(
        "rewind_undone_by_the_next_commit_is_then_a_reordered_commit",
        commits(*in_flight, (249.45, 5010), (250, 5020)), offsets=ends((240, 5100, 0)),
        members=ACTIVE, now_s=251,
        rewind={**pending, "active": False, "cause": "commit_reordered"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "commit_reordered", Severity.INFO, ActionKind.NONE)})
    # ... or, with none in, after reorder_wait_s (30 s): then it says what is known.
    yield Scenario(
        "rewind_that_may_be_a_reordered_commit_is_judged_after_the_wait",
        commits(*in_flight), offsets=ends((240, 5100, 0)), members=ACTIVE, now_s=276,
        rewind=pending,
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)})
    # A rewind that cannot be a reordered commit (below the member's last two positions,
    # no failed commit of its offset) is reported at once.
    yield Scenario(
        "rewind_far_back_is_not_held_for_a_reorder",
        commits(*in_flight[:-1], (245.4, 1500)), offsets=ends((240, 5100, 0)),
        members=ACTIVE, now_s=247,
        rewind={**pending, "new_position": 1500, "duplicates": 3510},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)})

    # Seen in the corpus (throttled-cleaner-3b, the broker restarted): the group's
    # coordinator moved at 151.84 s; the member's commit of 36820 was answered
    # NOT_COORDINATOR, its newer 37355 landed at the new coordinator, then its queued
    # commits did, in a burst: the retry of 36820, then 36920, 36870, 36920 ... 37390
    # within 0.8 s, then 37455 at its usual pace. Several drops, each a commit sent before
    # 37355; nothing was re-read (the burst is ten times the member's pace).
    burst = [(150.86, 36770), (151.867, 36870), (152.357, 37355), (152.974, 36820),
             (152.983, 36920), (153.161, 36870), (153.18, 36920), (153.488, 36965),
             (153.631, 37015), (153.653, 37065), (153.706, 37110), (153.718, 37160),
             (153.727, 37210), (153.736, 37260), (153.742, 37310), (153.747, 37390),
             (153.907, 37455), (154.9, 37500)]
    retry_first = [CommitRequest("c1", "billing", "orders", 2, 36820, at(151.844), "m-live", 1,
                                 "billing-1", 2, failed=True, total_ms=1.0)]
    yield Scenario(
        "a_retried_commit_landing_in_a_burst_of_queued_ones_is_a_reordered_commit",
        commits(*burst), offsets=ends((150, 38000, 0), (155, 38100, 0)), members=ACTIVE,
        requests=retry_first + lines("m-live", 1, *burst), loads=[load(151.841)],
        now_s=170,
        rewind={"old_position": 37355, "new_position": 36820, "drops": 2, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 535,
                "cause": "commit_reordered"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "commit_reordered", Severity.INFO, ActionKind.NONE)})

    # Seen in the live matrix (cpu-starved-3b): a __consumer_offsets follower held to 5% of a
    # core; the coordinator held the member's commits of 8509 for 2,992 ms and 1,043 ms
    # waiting on it, 8521 landed right after, then 8509 again 1.4 s later (sent again while
    # the coordinator was slow), then 8513, 8517 and 8521 within 225 ms. The member was 530
    # messages behind the log end and read nothing again.
    starved = [(450, 8497), (453.885, 8509), (456.876, 8509), (456.884, 8521),
               (458.265, 8509), (458.268, 8513), (458.280, 8517), (458.490, 8521),
               (459.830, 8521)]
    slow_lines = [CommitRequest("c1", "billing", "orders", 2, 8509, at(456.874), "m-live", 3,
                                "billing-1", 1, total_ms=2992.0),
                  CommitRequest("c1", "billing", "orders", 2, 8509, at(457.919), "m-live", 3,
                                "billing-1", 1, total_ms=1043.0),
                  CommitRequest("c1", "billing", "orders", 2, 8521, at(457.919), "m-live", 3,
                                "billing-1", 1, total_ms=1042.0)]
    yield Scenario(
        "a_slow_commit_sent_again_landing_after_a_newer_one_is_a_reordered_commit",
        commits(*starved), offsets=ends((455, 9000, 0), (460, 9053, 0)), members=ACTIVE,
        requests=(lines("m-live", 3, (450, 8497)) + slow_lines
                  + lines("m-live", 3, *starved[4:])),
        now_s=470,
        rewind={"old_position": 8521, "new_position": 8509, "drops": 1, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 12,
                "cause": "commit_reordered"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "commit_reordered", Severity.INFO, ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {
            "committer": {"client_id": "billing-1", "member_id": "m-live", "generation": 3,
                          "request_ms": at(458.265) + 40, "broker": 1,
                          "own_last_offset": 8521, "group_newest_generation": 3,
                          "previous_member_id": "m-live", "previous_client_id": "billing-1",
                          "earlier_commit_ms": at(457.919)}}})

    # Seen in the live matrix (throttled-cleaner-3b, a __consumer_offsets follower killed):
    # the coordinator held the member's commits 4-6 s each, waiting on it, and failed them.
    # 180940 (its position, sent on its other connection) landed with 180545, which had
    # waited on the first connection behind the failed 180505 and was read the moment that
    # one was answered; then the positions queued behind 180545 landed one by one, each read
    # as the one before it was answered: 180460, 180505 ... 181435 within 1.2 s (twenty
    # times the member's pace). Sent while the coordinator stalled; nothing was re-read.
    def line(t_answered, off, total_ms=5.0, failed=False):
        return CommitRequest("c1", "billing", "orders", 2, off, at(t_answered), "m-live", 3,
                             "billing-1", 2, failed=failed, total_ms=total_ms)

    queued = [(27.813, 180505), (27.827, 180545), (27.861, 180600), (27.887, 180620),
              (27.927, 180705), (27.974, 180810), (28.411, 180900), (28.575, 181005),
              (28.992, 181435)]
    stalled_lines = [line(6.354, 180410), line(23.987, 180505, 6059.0, failed=True),
                     line(27.762, 180940, 3778.0), line(27.763, 180545, 3775.0),
                     line(27.810, 180460, 47.0)]
    answered, queued_lines = 27.810, []
    for t, off in queued:      # each read when the one before was answered
        queued_lines.append(line(t + 0.005, off, (t + 0.005 - answered) * 1000))
        answered = t + 0.005
    yield Scenario(
        "commits_queued_behind_a_stalled_one_landing_after_a_newer_one_are_reordered",
        commits((6.352, 180410), (17.953, 180505), (24.019, 180940), (24.020, 180545),
                (27.767, 180460), *queued, (29.55, 181487), (30.712, 181531)),
        offsets=ends((5, 179885, 0), (15, 180361, 0), (25, 181550, 0)), members=ACTIVE,
        requests=stalled_lines + queued_lines + lines("m-live", 3, (29.55, 181487)),
        now_s=45,
        rewind={"old_position": 180940, "new_position": 180460, "drops": 2, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 480,
                "cause": "commit_reordered"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "commit_reordered", Severity.INFO, ActionKind.NONE)})

    # Seen in the live matrix (coordinator-failover-3b at rules 33fe560fc449,
    # 20261206T185621Z): a __consumer_offsets follower killed, the coordinator failed the
    # member's commits of 12806 after 5 and 6.4 s; the positions the member queued behind
    # them drained in a burst as the ISR shrank: 12858 landed, then 12810 (read the moment
    # the request before it, itself read as the failed one was answered, was answered) and
    # 12806, nine more 12810s and 12858 again, within 0.7 s. The rewind's commit waited
    # behind the failed one through the request between: reordered, nothing re-read.
    def queued_line(t_answered, off, total_ms, failed=False):
        return CommitRequest("c1", "billing", "orders", 2, off, at(t_answered), "m-live", 3,
                             "billing-1", 2, failed=failed, total_ms=total_ms)

    burst = [(-0.962, 12802), (0.039, 12806), (5.142, 12806), (11.324, 12810),
             (11.556, 12810), (12.053, 12858), (12.056, 12810), (12.166, 12806),
             *[(12.185 + 0.03 * k, 12810) for k in range(9)], (12.714, 12858),
             (13.049, 12882), (14.049, 12890)]
    burst_lines = [queued_line(-0.947, 12802, 15.8), queued_line(5.043, 12806, 5004.4, True),
                   queued_line(11.555, 12806, 6413.3, True), queued_line(11.996, 12810, 672.3),
                   queued_line(12.055, 12810, 499.6), queued_line(12.165, 12810, 109.8),
                   queued_line(12.166, 12858, 113.1), queued_line(12.184, 12806, 18.2),
                   *[queued_line(12.2 + 0.03 * k, 12810, 10.0) for k in range(9)],
                   queued_line(12.732, 12858, 18.6), queued_line(13.774, 12882, 725.2),
                   queued_line(14.127, 12890, 78.1)]
    burst_offsets = ends((-10, 12900, 0), (12.1, 12950, 0), (20, 13000, 0))
    yield Scenario(
        "commits_queued_behind_a_failed_one_through_another_are_reordered",
        commits(*burst), offsets=burst_offsets, members=ACTIVE, requests=burst_lines,
        now_s=40,
        rewind={"old_position": 12858, "new_position": 12806, "drops": 2, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 52,
                "cause": "commit_reordered"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "commit_reordered", Severity.INFO, ActionKind.NONE)})

    # The same burst judged 2 s after it, when the request log's lines reach only the
    # failed commit before it (the lines arrive later than the commits): who committed the
    # rewind is not known yet, so it is not handed over (as member_commit) yet.
    yield Scenario(
        "a_rewind_waits_for_the_request_log_to_reach_it",
        commits(*burst[:-2]), offsets=burst_offsets, members=ACTIVE,
        requests=burst_lines[:3], now_s=14,
        rewind={"old_position": 12858, "new_position": 12806, "drops": 2, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 52,
                "cause": "member_commit"},
        detections={})

    # Seen in the live matrix (app-seek-3b): the application seeks back 100 messages at
    # 100 messages a second, so onto an offset it had committed (successfully) before, and
    # re-reads them within a second. A seek, not a retried commit.
    seek = [(0, 1000), (60, 2000), (120, 3000), (180, 4000), (240, 5000), (241, 5100),
            (241.5, 5000), (242.5, 5110)]
    yield Scenario(
        "going_back_to_an_offset_committed_before_and_reading_on_is_a_seek",
        commits(*seek), offsets=ends((240, 5200, 0), (250, 5300, 0)), members=ACTIVE,
        requests=lines("m-live", 3, *seek), now_s=260,
        rewind={"old_position": 5100, "new_position": 5000, "drops": 1, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 100,
                "cause": "application_seek"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "application_seek", Severity.INFO, ActionKind.NONE)})

    # Seen in the live matrix (rolling-restart-3b): the group's coordinator moved and
    # librdkafka sent the member's queued commits to the new one out of order: 17160, then
    # 17152 (a position passed between 17144 and 17160: sent before 17160) 71 ms later, then
    # 17160 again. The commit sent to the old coordinator left no request-log line, so no
    # failed first try is known; the coordinator move is seen. Nothing was re-read.
    in_flight = [(0, 17000), (60, 17100), (120, 17128), (123, 17144), (125.5, 17160),
                 (125.571, 17152), (125.966, 17160), (126.97, 17168)]
    yield Scenario(
        "a_commit_sent_before_a_newer_one_and_landing_after_it_is_a_reordered_commit",
        commits(*in_flight), offsets=ends((120, 17200, 0), (130, 17300, 0)), members=ACTIVE,
        requests=lines("m-live", 3, *[p for p in in_flight if p != (125.571, 17152)]),
        loads=[load(125.3)], now_s=140,
        rewind={"old_position": 17160, "new_position": 17152, "drops": 1, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 8,
                "cause": "commit_reordered"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "commit_reordered", Severity.INFO, ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"before_previous_offset": 17144}})

    # Seen live (unclean-rf2-3b, 54729Z): on a busy partition the group's coordinator
    # moved (broker 1 loaded its __consumer_offsets partition at 30.04 s) between the
    # member's commits of 2082 (to the old coordinator) and 2098 (the first at the new
    # one); then 2090, a position passed between them, landed 0.2 s after 2098 (the
    # client's correlation ids show it was sent again after 2098), and the next commit
    # was 2114: the consumer had read on, so it is no commit of the old position itself.
    busy = [(26.2, 2058), (27.4, 2074), (29.38, 2082), (31.42, 2098), (31.63, 2090),
            (32.38, 2114), (33.38, 2122)]
    yield Scenario(
        "a_commit_resent_across_a_coordinator_move_on_a_busy_partition_is_a_reordered_commit",
        commits(*busy), offsets=ends((29, 2140, 0), (33, 2160, 0)), members=ACTIVE,
        requests=lines("m-live", 3, *busy), loads=[load(30.04, epoch=1, broker=1)],
        now_s=60,
        rewind={"old_position": 2098, "new_position": 2090, "drops": 1, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 8,
                "cause": "commit_reordered"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "commit_reordered", Severity.INFO, ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {
            "queued_across_coordinator_load": {"event_ms": at(30.04), "broker": 1,
                                               "offsets_partition": 7, "leader_epoch": 1}}})

    # The same commits with no coordinator move: the member went back itself (the next
    # commit past the old position says nothing when the partition is busy).
    yield Scenario(
        "the_same_commits_without_a_coordinator_move_are_the_members_own_seek",
        commits(*busy), offsets=ends((29, 2140, 0), (33, 2160, 0)), members=ACTIVE,
        requests=lines("m-live", 3, *busy), loads=[load(25.0, epoch=1, broker=1)],
        now_s=60,
        rewind={"old_position": 2098, "new_position": 2090, "drops": 1, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 8,
                "cause": "application_seek"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "application_seek", Severity.INFO, ActionKind.NONE)})

    # Seen in the live matrix (unclean-rf3-dc): the group's coordinator was down 28 s; the
    # idle member then committed 1249 again and again, then 1241 (a position it passed
    # between 1225 and 1249, sent while the coordinator was down), then 1249 25 ms later.
    # The two commits just before the drop are both 1249: the position before them is
    # the one that counts. Nothing was re-read.
    idle = [(0, 1169), (1, 1177), (2, 1193), (3, 1209), (5, 1217), (6, 1225),
            *[(34 + k * 0.2, 1249) for k in range(8)], (35.66, 1241), (35.685, 1249),
            (35.71, 1249)]
    yield Scenario(
        "an_idle_members_late_commit_of_a_position_it_passed_is_a_reordered_commit",
        commits(*idle), offsets=ends((30, 1300, 0), (40, 1300, 0)), members=ACTIVE,
        loads=[load(33)], now_s=50,
        rewind={"old_position": 1249, "new_position": 1241, "drops": 1, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 8,
                "cause": "commit_reordered"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "commit_reordered", Severity.INFO, ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"before_previous_offset": 1225}})

    # The same coordinator move, but it lost commits (the old coordinator truncated its
    # __consumer_offsets partition below the high watermark when it came back) and the
    # member resumed from an older commit it had made (17128, below the commit before the
    # last one) and read on from there: a stale offset.
    stale = [(0, 17000), (60, 17100), (120, 17128), (123, 17144), (125.5, 17160),
             (125.571, 17128), (126.5, 17160), (127.5, 17190)]
    yield Scenario(
        "a_commit_of_an_older_landed_offset_after_a_coordinator_move_stays_stale",
        commits(*stale), offsets=ends((120, 17200, 0), (130, 17300, 0)), members=ACTIVE,
        requests=lines("m-live", 3, *stale), loads=[load(125.3)],
        truncations=[offsets_lost(129)], now_s=140,
        rewind={"old_position": 17160, "new_position": 17128, "drops": 1, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 32,
                "cause": "stale_offset_after_coordinator_move"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_offset_after_coordinator_move", Severity.HIGH, ActionKind.NONE)})

    # A short seek (20 messages, less than one commit interval) that reads on past the old
    # position: the next commit is not the old position unchanged, so it is a seek.
    short_seek = [(0, 5000), (60, 5050), (61, 5100), (61.3, 5080), (62.3, 5130)]
    yield Scenario(
        "a_short_seek_that_reads_on_is_no_reordered_commit",
        commits(*short_seek), offsets=ends((60, 5200, 0), (70, 5300, 0)), members=ACTIVE,
        requests=lines("m-live", 3, *short_seek), now_s=80,
        rewind={"old_position": 5100, "new_position": 5080, "drops": 1, "active": False,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 20,
                "cause": "application_seek"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "application_seek", Severity.INFO, ActionKind.NONE)})

    # The demo's unclean election, its truncation line missing: the readers' one member
    # went back to the new leader's end. Its own higher commit before is no proof of a
    # seek: the old position lay past the log end, the client reset itself.
    yield Scenario(
        "same_member_back_to_the_new_log_end_is_an_automatic_reset_not_a_seek",
        commits((0, 21000), (60, 21340), (70, 21330)),
        offsets=ends((65, 21330, 0)), members=members((0, 1)), now_s=100,
        requests=lines("m-1", 1, (0, 21000), (60, 21340), (70, 21330)),
        rewind={"old_position": 21340, "new_position": 21330, "drops": 1, "active": True,
                "member_count": 1, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 10, "duplicates": 0,
                "cause": "auto_reset_after_out_of_range"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "auto_reset_after_out_of_range", Severity.HIGH, ActionKind.PAGE_HUMAN)})

    # The same member back to the log start (retention had moved it to 21330): where
    # auto.offset.reset=earliest puts a consumer too. A seekToBeginning replay looks the
    # same; which it was is not known.
    yield Scenario(
        "same_member_back_to_the_log_start_is_no_proof_of_a_seek",
        commits((0, 21000), (60, 21340), (70, 21330)),
        offsets=ends((75, 21400, 21330)), members=members((0, 1)), now_s=100,
        requests=lines("m-1", 1, (0, 21000), (60, 21340), (70, 21330)),
        rewind={"old_position": 21340, "new_position": 21330, "drops": 1, "active": True,
                "member_count": 1, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 10,
                "cause": "member_commit"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)})

    # The group's coordinator moved (broker 3 loaded __consumer_offsets-7 at epoch 2) 10 s
    # before the member committed an old offset, and the move lost commits (the old
    # coordinator truncated -7 below its high watermark when it came back, after the
    # rewind): the only case that cause is claimed.
    yield Scenario(
        "coordinator_load_before_the_rewind_is_a_coordinator_move",
        STEADY + commits((300, 3000)),
        offsets=ends((240, 5100, 0), (300, 5200, 0)), members=ACTIVE,
        requests=lines("m-live", 3, (0, 1000), (60, 2000), (120, 3000), (180, 4000),
                       (240, 5000), (300, 3000)),
        loads=[load(150), load(290, offsets_partition=3), load(290)],
        truncations=[offsets_lost(330)],
        rewind={"old_position": 5000, "new_position": 3000, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 2000,
                "cause": "stale_offset_after_coordinator_move"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_offset_after_coordinator_move", Severity.HIGH,
            ActionKind.RESTORE_GROUP_OFFSETS)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {
            "restore_to": 5000,
            "coordinator_load": {"event_ms": at(290), "broker": 3, "offsets_partition": 7,
                                 "leader_epoch": 2},
            "offsets_loss": {"event_ms": at(330), "kind": "truncation",
                             "offsets_partition": 7}}})

    # Seen in CI (test_oncall_end_to_end): a preferred-leader rebalance moved the group's
    # coordinator 100 s before a stale process, a new member whose first commit on the
    # partition is the rewind, committed a remembered offset over another member's. The
    # move lost nothing (no truncation below the high watermark, no unclean election of
    # __consumer_offsets-7; one of another partition, one of -7 that kept every commit):
    # the committer's identity tells the cause.
    yield Scenario(
        "a_clean_coordinator_move_before_a_stale_process_explains_nothing",
        STEADY + commits((300, 3000)),
        offsets=ends((240, 5100, 0), (300, 5200, 0)), members=ACTIVE,
        requests=(lines("m-reader", 3, (0, 1000), (60, 2000), (120, 3000), (180, 4000),
                        (240, 5000))
                  + lines("m-stale", 4, (300, 3000), client="billing-stale")),
        loads=[load(200)],
        truncations=[offsets_lost(210, offsets_partition=8),
                     LogTruncation("c1", 1, "__consumer_offsets", 7, at(205), truncated_to=52,
                                   high_watermark=52)],
        rewind={"old_position": 5000, "new_position": 3000, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 2000,
                "cause": "stale_process"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "stale_process", Severity.HIGH, ActionKind.RESTORE_GROUP_OFFSETS)})

    # Loads that are no move of this group's coordinator: the partition's first leader
    # (epoch 0, a new cluster), another __consumer_offsets partition, one longer than
    # evidence_window_s before, one after the rewind.
    yield Scenario(
        "coordinator_loads_that_are_not_this_groups_move_explain_nothing",
        STEADY + commits((300, 3000)),
        offsets=ends((240, 5100, 0), (300, 5200, 0)), members=ACTIVE,
        loads=[load(290, epoch=0), load(295, offsets_partition=8), load(170), load(301)],
        rewind={"old_position": 5000, "new_position": 3000, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 2000,
                "cause": "member_commit"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)})

    # The membership samples lag (they still say 3 members) but the commit's own line is
    # an admin's: no member id, generation -1, which only an empty group accepts.
    yield Scenario(
        "memberless_commit_line_in_a_group_with_members_is_an_operator_reset",
        STEADY + commits((300, 0)),
        offsets=ends((240, 5100, 0), (300, 5200, 0)), members=ACTIVE,
        requests=(lines("m-live", 3, (0, 1000), (60, 2000), (120, 3000), (180, 4000),
                        (240, 5000))
                  + lines("", -1, (300, 0), client="adminclient-1")),
        rewind={"old_position": 5000, "new_position": 0, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": True, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 5000,
                "cause": "operator_reset"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("operator_reset", Severity.INFO,
                                                          ActionKind.NONE)})

    # No membership source at all, but the rewind's line is a member's: the group has
    # members, and which member and why is not told (no line of the commit before).
    yield Scenario(
        "a_members_line_alone_says_a_member_committed",
        commits((0, 1000), (60, 2000), (120, 1500)),
        offsets=ends((0, 2100, 0)), now_s=150,
        requests=lines("m-1", 2, (120, 1500)),
        rewind={"old_position": 2000, "new_position": 1500, "drops": 1, "active": True,
                "member_count": None, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 500,
                "cause": "member_commit"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)})

    # A standalone committer (assign(), no member id, generation -1) in a group that
    # never has members: its lines prove nothing about an operator.
    yield Scenario(
        "standalone_committer_lines_are_not_an_operator_reset",
        commits((0, 1000), (60, 2000), (120, 1200)),
        offsets=ends((0, 2100, 0)), now_s=150,
        requests=lines("", -1, (0, 1000), (60, 2000), (120, 1200), client="flink-1"),
        rewind={"old_position": 2000, "new_position": 1200, "drops": 1, "active": True,
                "member_count": None, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 800, "cause": "unknown"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("unknown", Severity.WARNING,
                                                          ActionKind.PAGE_HUMAN)})

    # A broker bug answers OffsetOutOfRange for a valid position (KAFKA-9543 and kin); the
    # consumer resets to earliest and re-reads everything.
    yield Scenario(
        "spurious_out_of_range_resets_to_earliest",
        STEADY + commits((305, 100)),
        offsets=ends((240, 5100, 100), (300, 5200, 100)), members=ACTIVE,
        resets=[reset(301, ResetReason.OUT_OF_RANGE, frm=5000, to=100,
                      target=ResetTarget.EARLIEST)],
        rewind={"old_position": 5000, "new_position": 100, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "reset_event": True,
                "truncation": False, "past_log_end": 0, "duplicates": 4900,
                "cause": "auto_reset_after_out_of_range"},
        detections={
            (AnomalyType.OFFSET_REWIND, ENTITY): ("auto_reset_after_out_of_range", Severity.HIGH,
                                                  ActionKind.RESTORE_GROUP_OFFSETS),
            (AnomalyType.OFFSET_RESET, ENTITY): ("auto_reset_after_out_of_range", Severity.HIGH,
                                                 ActionKind.PAGE_HUMAN)},
        evidence={(AnomalyType.OFFSET_RESET, ENTITY): {"from_offset": 5000, "to_offset": 100,
                                                       "duplicates": 4900, "skipped": 0,
                                                       "target": "earliest"}})

    yield Scenario(
        "reset_to_latest_skips_messages",
        commits((0, 1000), (300, 5000)),
        offsets=ends((0, 1500, 0), (200, 5000, 0), (300, 5000, 0)),
        members=members((0, 2), (300, 2)),
        resets=[reset(200, ResetReason.OUT_OF_RANGE, frm=1000, target=ResetTarget.LATEST)],
        detections={(AnomalyType.OFFSET_RESET, ENTITY): ("auto_reset_after_out_of_range",
                                                         Severity.HIGH,
                                                         ActionKind.RESTORE_GROUP_OFFSETS)},
        evidence={(AnomalyType.OFFSET_RESET, ENTITY): {"from_offset": 1000, "to_offset": 5000,
                                                       "skipped": 4000, "possible_loss": True,
                                                       "restore_to": 1000, "target": "latest"}})

    # delete_records (or retention) moved the log start past a stopped group's commit; the
    # member comes back, is out of range and resets to BEGINNING (librdkafka logs no
    # offset): forward, past the deleted records. The sample before the reset still has
    # the old log start; the one after has the new.
    yield Scenario(
        "reset_to_earliest_past_deleted_records_is_forward",
        commits((0, 1000), (60, 1435), (320, 1500)),
        offsets=ends((0, 1100, 0), (240, 1520, 0), (310, 1560, 1500)),
        members=members((0, 1), (200, 0), (300, 1)),
        resets=[reset(300, ResetReason.OUT_OF_RANGE, frm=1435, target=ResetTarget.EARLIEST)],
        detections={(AnomalyType.OFFSET_RESET, ENTITY): ("auto_reset_after_out_of_range",
                                                         Severity.HIGH, ActionKind.PAGE_HUMAN)},
        evidence={(AnomalyType.OFFSET_RESET, ENTITY): {
            "from_offset": 1435, "to_offset": 1500, "skipped": 65, "duplicates": 0,
            "log_start_at_reset": 1500, "target": "earliest", "restore_to": None}})

    # The same before the next sample: the target is unknown, not offset 0.
    yield Scenario(
        "reset_to_earliest_before_the_next_sample_is_of_unknown_size",
        commits((0, 1000), (60, 1435)),
        offsets=ends((0, 1100, 0), (240, 1520, 0)),
        members=members((0, 1), (200, 0), (300, 1)),
        resets=[reset(300, ResetReason.OUT_OF_RANGE, frm=1435, target=ResetTarget.EARLIEST)],
        now_s=305,
        detections={(AnomalyType.OFFSET_RESET, ENTITY): ("auto_reset_after_out_of_range",
                                                         Severity.HIGH, ActionKind.PAGE_HUMAN)},
        evidence={(AnomalyType.OFFSET_RESET, ENTITY): {
            "from_offset": 1435, "to_offset": None, "skipped": 0, "duplicates": 0,
            "target": "earliest"}})

    # Burrow #714: lag was zero all along, then the group jumped back.
    yield Scenario(
        "zero_lag_does_not_hide_a_rewind",
        commits((0, 10), (60, 20), (120, 30), (180, 20)),
        offsets=ends((0, 10, 0), (60, 20, 0), (120, 30, 0), (180, 40, 0)),
        members=members((0, 1), (180, 1)),
        rewind={"old_position": 30, "new_position": 20, "drops": 1, "active": True,
                "member_count": 1, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 10,
                "cause": "member_commit"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)})

    yield Scenario(
        "recovered_rewind_is_reported_but_not_active",
        commits((0, 1000), (60, 2000), (120, 1500), (180, 2100)),
        offsets=ends((0, 1000, 0), (180, 2200, 0)), members=members((0, 2)), now_s=200,
        rewind={"old_position": 2000, "new_position": 1500, "drops": 1, "active": False,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 500,
                "cause": "member_commit"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"active": False,
                                                        "recovered_ms": at(180),
                                                        "restore_to": None}})

    # Burrow's lag only moves at commits; the group stopped after the rewind, and the
    # end offsets show how far behind it now is.
    yield Scenario(
        "stopped_group_after_rewind_stays_active_against_end_offsets",
        commits((0, 1000), (60, 2000), (120, 500)),
        offsets=ends((0, 1100, 0), (120, 2100, 0), (590, 9000, 0)), members=members((0, 2)),
        rewind={"old_position": 2000, "new_position": 500, "drops": 1, "active": True,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 1500,
                "cause": "member_commit"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"lag_now": 8500, "active": True}})

    # An unclean election truncated the log under the group: its old position no longer
    # exists, so the drop back to the new end is not re-reading.
    yield Scenario(
        "truncated_old_position_is_not_counted_as_duplicates",
        commits((0, 4000), (60, 5000), (130, 4200)),
        offsets=ends((60, 5000, 0), (125, 4200, 0)), members=members((0, 2)),
        truncations=[LogTruncation("c1", 1, "orders", 2, at(120), 4200, 5000)],
        rewind={"old_position": 5000, "new_position": 4200, "drops": 1, "active": True,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": True, "past_log_end": 800, "duplicates": 0,
                "cause": "auto_reset_after_out_of_range"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("auto_reset_after_out_of_range",
                                                          Severity.HIGH, ActionKind.PAGE_HUMAN)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"old_position_past_log_end": 800,
                                                        "truncation": {"event_ms": at(120),
                                                                       "broker": 1,
                                                                       "truncated_to": 4200,
                                                                       "high_watermark": 5000}}})

    # Seen in the demo once its quorum stayed up: the readers met the new leader's shorter
    # log and their rewind was committed 5.2 s before the old leader, restarted, logged
    # the truncation (more than the 5 s allowed for clock skew). The end offset had
    # already passed the old position again (the new leader takes writes), so only the
    # truncation can explain it.
    yield Scenario(
        "the_old_leaders_truncation_logged_after_the_readers_rewind_explains_it",
        commits((0, 28000), (60, 28545), (70, 28440)),
        offsets=ends((65, 28815, 0)), members=members((0, 1)), now_s=100,
        truncations=[LogTruncation("c1", 1, "orders", 2, at(75.2), 28120, 28545)],
        rewind={"old_position": 28545, "new_position": 28440, "drops": 1, "active": True,
                "member_count": 1, "admin_commit": False, "reset_event": False,
                "truncation": True, "past_log_end": 0, "duplicates": 105,
                "cause": "auto_reset_after_out_of_range"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("auto_reset_after_out_of_range",
                                                          Severity.HIGH, ActionKind.PAGE_HUMAN)})

    # Seen on a real 3-replica topic: followers log "Truncating partition ... due to local
    # high watermark 0" at creation and truncate to their high watermark after a leader
    # change. Neither removed anything a consumer read: a stale commit stays stale. Nor
    # does one that removed committed data but is farther than evidence_window_s away.
    yield Scenario(
        "follower_truncations_to_the_high_watermark_explain_no_rewind",
        commits((0, 1000), (60, 2000), (120, 1500)),
        offsets=ends((0, 1000, 0), (120, 2200, 0)), members=members((0, 2)), now_s=150,
        truncations=[LogTruncation("c1", 1, "orders", 2, at(-10), 900, 1000),
                     LogTruncation("c1", 2, "orders", 2, at(100), 0, None),
                     LogTruncation("c1", 3, "orders", 2, at(110), 2100, 2100)],
        rewind={"old_position": 2000, "new_position": 1500, "drops": 1, "active": True,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 500,
                "cause": "member_commit"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)})

    yield Scenario(
        "new_group_initial_reset_is_benign",
        commits((30, 0), (60, 700)),
        offsets=ends((0, 700, 0)), members=members((0, 1)),
        resets=[reset(10, ResetReason.NO_COMMITTED_OFFSET, to=0, target=ResetTarget.EARLIEST),
                reset(10, ResetReason.UNKNOWN, to=0, group="newcomer")])

    yield Scenario(
        "operator_moves_empty_group_forward",
        commits((0, 1000), (400, 9000)),
        offsets=ends((0, 1100, 0), (400, 9000, 0)),
        members=members((0, 2), (300, 0)),
        detections={(AnomalyType.OFFSET_RESET, ENTITY): ("operator_reset_forward",
                                                         Severity.WARNING, ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_RESET, ENTITY): {"skipped": 8000, "target": "latest"}})

    # Flink-style committers use assign(): the group never has members, so "empty" at
    # the rewind proves no operator was involved.
    yield Scenario(
        "standalone_committer_rewind_is_not_called_operator_reset",
        commits((0, 1000), (60, 2000), (120, 1200)),
        offsets=ends((0, 2100, 0)), members=members((0, 0), (60, 0), (120, 0)),
        rewind={"old_position": 2000, "new_position": 1200, "drops": 1, "active": True,
                "member_count": 0, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 800, "cause": "unknown"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("unknown", Severity.WARNING,
                                                          ActionKind.PAGE_HUMAN)})

    yield Scenario(
        "deepening_rewind_is_one_rewind",
        commits((0, 1000), (60, 2000), (120, 1500), (180, 800), (240, 900)),
        offsets=ends((0, 2100, 0)), members=members((0, 2)),
        rewind={"old_position": 2000, "new_position": 800, "drops": 2, "active": True,
                "member_count": 2, "admin_commit": False, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 1200,
                "cause": "member_commit"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): (
            "member_commit", Severity.WARNING, ActionKind.PAGE_HUMAN)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {"rewinds_seen": 1}})

    # A replay: the application sought back itself and committed from there.
    yield Scenario(
        "application_seek_replay_is_deliberate",
        STEADY + commits((305, 2000)),
        offsets=ends((240, 5100, 0), (300, 5200, 0)), members=ACTIVE,
        resets=[reset(302, ResetReason.APPLICATION_SEEK, to=2000, target=ResetTarget.OFFSET)],
        rewind={"old_position": 5000, "new_position": 2000, "drops": 1, "active": True,
                "member_count": 3, "admin_commit": False, "seek": True, "reset_event": False,
                "truncation": False, "past_log_end": 0, "duplicates": 3000,
                "cause": "application_seek"},
        detections={(AnomalyType.OFFSET_REWIND, ENTITY): ("application_seek", Severity.INFO,
                                                          ActionKind.NONE)},
        evidence={(AnomalyType.OFFSET_REWIND, ENTITY): {
            "reset_event": {"event_ms": at(302), "client_id": "billing-1",
                            "reason": "application_seek", "from_offset": None,
                            "to_offset": 2000}}})

    yield Scenario("monotonic_commits_are_healthy", STEADY, offsets=ends((0, 5100, 0)),
                   members=ACTIVE)


SCENARIOS = list(scenarios())


def rule_results(a) -> dict:
    r = a.rewind
    return {"old_position": r.old_position, "new_position": r.new_position, "drops": r.drops,
            "active": r.active, "member_count": a.member_count, "admin_commit": a.admin_commit,
            "seek": a.seek is not None, "reset_event": a.reset_event is not None, "truncation": a.truncation is not None,
            "past_log_end": a.past_log_end, "duplicates": a.duplicates, "cause": a.cause}


@pytest.mark.parametrize("s", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(s: Scenario):
    billing = [c for c in s.commits if c.group == "billing"]
    rewinds = find_rewinds(billing)
    if s.rewind is None:
        assert rewinds == []
    else:
        inputs = PartitionInputs(offsets=s.offsets, resets=pair_reset_events(s.resets, 5000),
                                 truncations=[t for t in s.truncations if t.topic == "orders"])
        expected = {"seek": False, **s.rewind}
        a = assess_rewind(rewinds[-1], inputs, s.members, CONFIG,
                          group_lines=sorted(s.requests, key=lambda x: x.request_ms),
                          coordinator_loads=s.loads,
                          offsets_losses=offsets_losses(s.truncations, ()))
        assert rule_results(a) == expected

    detections = detect_offset_anomalies(s.commits, offsets=s.offsets, resets=s.resets,
                                         memberships=s.members, truncations=s.truncations,
                                         commit_requests=s.requests, coordinator_loads=s.loads,
                                         now_ms=at(s.now_s), config=CONFIG)
    got = {(d.type, d.entity): (d.cause, d.severity, d.suggested_action) for d in detections}
    assert got == s.detections
    by_key = {(d.type, d.entity): d for d in detections}
    for key, items in s.evidence.items():
        for k, v in items.items():
            assert by_key[key].evidence[k] == v, (key, k)
    for d in detections:
        assert {"group", "topic", "partition"} <= set(d.evidence)
        assert d.explanation.endswith(".")


def test_an_unclean_election_of_the_offsets_partition_is_a_move_that_lost_commits():
    """The new coordinator of __consumer_offsets-7 was elected uncleanly (it had not got
    the latest commits): its members resume from and commit an older offset. An unclean
    election of -8, or of a topic's partition, loses none of this group's commits."""
    from detectors.lost_range import UncleanElection
    history = STEADY + commits((300, 3000))
    lines_ = lines("m-live", 3, (0, 1000), (60, 2000), (120, 3000), (180, 4000),
                   (240, 5000), (300, 3000))

    def cause(elections):
        [d] = detect_offset_anomalies(history, offsets=ends((240, 5100, 0), (300, 5200, 0)),
                                      memberships=ACTIVE, commit_requests=lines_,
                                      coordinator_loads=[load(290)], elections=elections,
                                      now_ms=at(310), config=CONFIG)
        return d.cause, d.evidence.get("offsets_loss")

    assert cause([UncleanElection("c1", "__consumer_offsets", 7, at(289), 1, 3, 2)]) == (
        "stale_offset_after_coordinator_move",
        {"event_ms": at(289), "kind": "unclean_election", "offsets_partition": 7})
    assert cause([UncleanElection("c1", "__consumer_offsets", 8, at(289), 1, 3, 2),
                  UncleanElection("c1", "orders", 7, at(289), 1, 3, 2)]) == (
        "application_seek", None)


def test_active_rewind_is_seen_until_now_and_recovered_one_until_recovery():
    active = detect_offset_anomalies(commits((0, 1000), (60, 2000), (120, 500)),
                                     memberships=members((0, 2)), now_ms=at(600))
    assert (active[0].first_seen_ms, active[0].last_seen_ms) == (at(120), at(600))
    recovered = detect_offset_anomalies(commits((0, 1000), (60, 2000), (120, 500), (180, 2000)),
                                        memberships=members((0, 2)), now_ms=at(600))
    assert (recovered[0].first_seen_ms, recovered[0].last_seen_ms) == (at(120), at(180))


def test_java_cause_and_position_lines_are_paired():
    cause = reset(100, ResetReason.OUT_OF_RANGE, frm=5000)
    position = reset(100.2, ResetReason.UNKNOWN, to=100)
    late = reset(200, ResetReason.UNKNOWN, to=300)
    paired = pair_reset_events([position, cause, late], 5000)
    assert [(e.reason, e.from_offset, e.to_offset, e.event_ms) for e in paired] == [
        (ResetReason.OUT_OF_RANGE, 5000, 100, at(100)),
        (ResetReason.UNKNOWN, None, 300, at(200)),
    ]


def test_small_drops_below_min_rewind_messages_are_ignored():
    cs = commits((0, 1000), (60, 995))
    assert find_rewinds(cs, min_messages=10) == []
    assert len(find_rewinds(cs, min_messages=1)) == 1


def test_groups_and_partitions_are_judged_apart():
    cs = (commits((0, 1000), (60, 2000), (120, 500), group="a")
          + commits((0, 1000), (60, 2000), (120, 2500), group="b")
          + [OffsetCommit("c1", "a", "orders", 3, off, at(t)) for t, off in ((0, 5), (60, 9))])
    got = {d.entity for d in detect_offset_anomalies(cs, now_ms=at(600))}
    assert got == {"group:a/orders-2"}


@pytest.mark.parametrize("kind,target,reason,expected", [
    ("offset_out_of_range", None, None, (ResetReason.OUT_OF_RANGE, ResetTarget.UNKNOWN)),
    ("truncation_detected", "explicit", None, (ResetReason.TRUNCATION, ResetTarget.OFFSET)),
    ("offset_reset", "explicit", "seek", (ResetReason.APPLICATION_SEEK, ResetTarget.OFFSET)),
    ("offset_reset", "latest",
     "fetch failed due to requested offset not available on the broker: Broker: Offset out of "
     "range", (ResetReason.OUT_OF_RANGE, ResetTarget.LATEST)),
    ("offset_reset", "explicit", None, (ResetReason.UNKNOWN, ResetTarget.OFFSET)),
    ("offset_reset", "earliest", None, (ResetReason.UNKNOWN, ResetTarget.EARLIEST)),
    ("offset_reset", "stored", None, (ResetReason.UNKNOWN, ResetTarget.OFFSET)),
], ids=["java_out_of_range_line", "java_truncation_line", "application_seek",
        "librdkafka_out_of_range_to_end", "java_position_line", "librdkafka_to_beginning",
        "librdkafka_to_stored"])
def test_silver_client_events_map_to_reasons_and_targets(kind, target, reason, expected):
    assert client_event_meaning(kind, target, reason) == expected


# ---- the order of the cause rules (detectors/rewind_cause.py) ---------------------------

def test_cause_rules_first_match_wins():
    from detectors.rewind_cause import Committer, RewindCause, classify_rewind

    own = lines("m", 3, (0, 5000), (60, 3000))
    seek_line = Committer(line=own[1], previous_line=own[0], own_last=own[0],
                          newest_generation=3)
    stale_line = Committer(line=lines("z", 2, (60, 3000))[0], previous_line=own[0],
                           newest_generation=3)
    logged_seek = reset(50, ResetReason.APPLICATION_SEEK, to=3000)
    out_of_range = reset(50, ResetReason.OUT_OF_RANGE)
    move = load(40)

    def cause(admin=False, seek=None, event=None, past_end=0, members=None,
              committer=Committer(), coordinator=None, inside_log=True):
        return classify_rewind(admin, seek, event, None, past_end, members, committer,
                               coordinator, inside_log)

    assert cause(admin=True, seek=logged_seek, committer=seek_line) == RewindCause.OPERATOR_RESET
    assert cause(seek=logged_seek, event=out_of_range,
                 coordinator=move) == RewindCause.APPLICATION_SEEK
    assert cause(event=out_of_range, coordinator=move) == RewindCause.AUTO_RESET_AFTER_OUT_OF_RANGE
    assert cause(past_end=5, committer=stale_line) == RewindCause.AUTO_RESET_AFTER_OUT_OF_RANGE
    assert cause(coordinator=move,
                 committer=seek_line) == RewindCause.STALE_OFFSET_AFTER_COORDINATOR_MOVE
    assert cause(committer=seek_line, members=3) == RewindCause.APPLICATION_SEEK
    # ... only to a position inside the log: at its edge an automatic reset is as likely.
    assert cause(committer=seek_line, members=3, inside_log=False) == RewindCause.MEMBER_COMMIT
    assert cause(committer=stale_line, members=3) == RewindCause.STALE_PROCESS
    assert cause(members=3) == RewindCause.MEMBER_COMMIT
    assert cause(committer=Committer(line=own[1])) == RewindCause.MEMBER_COMMIT
    assert cause(members=0) == cause() == RewindCause.UNKNOWN


def test_a_coordinator_clock_stepped_back_is_no_rewind():
    """The coordinator's clock steps back 300 s while the group commits steadily: commit
    times go back, the offsets in the order they were written never do. Judged by time,
    every partition of the group looked rewound (a HIGH page on a healthy group, seen with
    bench/bench_fault.py --fault clock-step); judged by the log order, nothing is. A real
    rewind among the same commits is still found."""
    steady = [OffsetCommit("c1", "billing", "orders", 2, 100 * i,
                           at(5 * i if i < 20 else 5 * i - 300), source_partition=7,
                           source_offset=1_000 + i) for i in range(40)]
    assert find_rewinds(sorted(steady, key=lambda c: c.commit_ms)), \
        "the time order must show the false rewind this test is about"
    assert detect_offset_anomalies(steady, now_ms=at(600)) == []
    rewound = steady + [OffsetCommit("c1", "billing", "orders", 2, 10, at(5 * 40 - 300),
                                     source_partition=7, source_offset=1_040)]
    got = detect_offset_anomalies(rewound, now_ms=at(600))
    assert [(d.type, d.entity) for d in got] == [(AnomalyType.OFFSET_REWIND,
                                                 "group:billing/orders-2")]
