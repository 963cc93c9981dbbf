"""The pure parts of the detectors' Spark adapter (evaluation/inputs/): turning log, metric
and client rows into rule inputs. No SparkSession."""

from __future__ import annotations

import pytest

from detectors.compaction_lag import CompactedTopicConfig
from detectors.partition_signals import ResetReason, ResetTarget
from detectors.unclean_election import UncleanElectionMeterTick
from evaluation.inputs import (
    CLEANER_METRICS,
    UNCLEAN_METER,
    BaselineCache,
    TimeRange,
    TopicConfigCache,
    check_config,
    cleaner_runs_from,
    client_reset_from_row,
    compacted_topic_config,
    compacted_topics,
    dedupe_elections,
    leader_epochs_from,
    growth_range,
    merge_controller_ticks,
    shrinks_from_isr_events,
    topic_ids,
    truncations_from,
)
from kmon.config import Config, ConfigError
from schemas import broker_metrics
from schemas.broker_metrics import LOG_SIZE

pytestmark = pytest.mark.unit

T0 = 1_767_225_600_000
TID = "v2CcNjHzQ-qHdPLiDA1chw"


def event(kind, ts, broker=1, **kw):
    return {"cluster": "c1", "broker": broker, "ts_ms": ts, "kind": kind, "topic": None,
            "partition": None, "topic_id": None, "offset": None, "high_watermark": None,
            "old_leader": None, "new_leader": None, "leader_epoch": None, "isr_before": None,
            "isr_after": None, "seconds": None, "reduction_pct": None, **kw}


# --- unclean elections -----------------------------------------------------------------------

def change_line(ts, broker, epoch=1):
    """"UNCLEAN partition change for t-0 with topic ID ...: ..., leaderEpoch: 0 -> 1" as
    every controller logs it."""
    return event("unclean_election", ts, broker, topic="t", partition=0, topic_id=TID,
                 old_leader=1, new_leader=2, leader_epoch=epoch, isr_before=[1], isr_after=[2])


def setting_line(ts):
    """"Setting new leader for topicId ..., partition 0 to 2 using an unclean election"."""
    return event("unclean_election", ts, 1, partition=0, topic_id=TID, new_leader=2,
                 old_leader=1, isr_before=[1])


def test_the_lines_of_one_election_from_every_controller_are_one_election():
    rows = [setting_line(T0 - 10), change_line(T0, 1), change_line(T0 + 3, 2),
            change_line(T0 + 5, 3)]
    [e] = dedupe_elections(rows, topic_ids(rows))
    assert (e.topic, e.partition, e.event_ms) == ("t", 0, T0 - 10)
    assert (e.old_leader, e.new_leader, e.leader_epoch) == (1, 2, 1)


def test_two_elections_of_a_partition_stay_two():
    rows = [change_line(T0, 1, epoch=1), change_line(T0 + 2, 2, epoch=1),
            change_line(T0 + 600_000, 1, epoch=3)]
    assert [(e.leader_epoch, e.event_ms) for e in dedupe_elections(rows, {})] == [
        (1, T0), (3, T0 + 600_000)]


def test_an_election_line_whose_topic_cannot_be_resolved_is_left_out():
    assert dedupe_elections([setting_line(T0)], {}) == []


def test_a_trigger_line_far_from_any_change_is_its_own_election():
    trigger = event("unclean_election", T0, 1, topic="t", partition=0)
    both = dedupe_elections([trigger, change_line(T0 + 3_600_000, 1)], {})
    assert [(x.event_ms, x.new_leader, x.leader_epoch) for x in both] == [
        (T0, None, None), (T0 + 3_600_000, 2, 1)]


def test_leader_epochs_come_from_brokers_epoch_lines_and_election_lines():
    rows = [event("leader_change", T0, 2, topic="t", partition=0, new_leader=2, leader_epoch=5),
            change_line(T0 + 1, 3, epoch=2),
            event("unclean_election", T0 + 2, 3, partition=0, topic_id=TID, new_leader=2),
            event("leader_change", T0 + 3, 2, topic="t", partition=1),   # no epoch
            event("isr_shrink", T0 + 4, 2, topic="t", partition=0, leader_epoch=9)]
    seen = leader_epochs_from(rows, topic_ids(rows))
    assert [(s.topic, s.partition, s.leader_epoch, s.event_ms, s.source) for s in seen] == [
        ("t", 0, 5, T0, "leader_change"), ("t", 0, 2, T0 + 1, "unclean_election")]


# --- meter ticks -----------------------------------------------------------------------------

def tick(ms, controller, delta=1.0, cluster="c1"):
    return UncleanElectionMeterTick(cluster, ms, delta, controller)


def test_every_controllers_tick_for_one_election_is_one_tick():
    [t] = merge_controller_ticks([tick(T0 + 2, 2), tick(T0 + 1, 1), tick(T0 + 3_000, 3)], 120_000)
    assert (t.observed_ms, t.count_delta, t.controller) == (T0 + 1, 1.0, 1)


def test_a_burst_keeps_the_earliest_previous_sample():
    ticks = [UncleanElectionMeterTick("c1", T0 + 5, 1.0, 1, previous_ms=T0 - 30_000),
             UncleanElectionMeterTick("c1", T0 + 9, 1.0, 2, previous_ms=T0 - 170_000),
             UncleanElectionMeterTick("c1", T0 + 12, 1.0, 3)]
    [t] = merge_controller_ticks(ticks, 120_000)
    assert t.previous_ms == T0 - 170_000


def test_ticks_far_apart_or_in_other_clusters_stay_apart():
    ticks = [tick(T0, 1), tick(T0 + 600_000, 1), tick(T0, 1, cluster="c2")]
    merged = merge_controller_ticks(ticks, 120_000)
    assert [(t.cluster, t.observed_ms) for t in merged] == [("c1", T0), ("c1", T0 + 600_000),
                                                            ("c2", T0)]


def test_a_burst_counts_the_largest_total_of_one_controller():
    ticks = [tick(T0, 1, 2.0), tick(T0 + 10, 2, 1.0), tick(T0 + 20_000, 2, 1.0)]
    [t] = merge_controller_ticks(ticks, 120_000)
    assert t.count_delta == 2.0


# --- ISR shrinks -----------------------------------------------------------------------------

def isr(kind, ts, before=None, after=(1, 2), broker=1, **kw):
    return event(kind, ts, broker, topic="orders", partition=0,
                 isr_before=list(before) if before else None, isr_after=list(after), **kw)


def test_a_shrink_line_is_a_shrink_and_the_update_that_confirms_it_is_not_another():
    rows = [isr("isr_shrink", T0, before=(1, 2, 3), after=(1, 2)),
            isr("isr_update", T0 + 300, after=(1, 2))]
    [s] = shrinks_from_isr_events(rows, since_ms=T0)
    assert (s.leader, s.isr_before, s.isr_after, s.out_of_sync) == (1, (1, 2, 3), (1, 2), (3,))


def test_an_update_that_drops_replicas_from_the_known_isr_is_a_shrink():
    rows = [isr("leader_change", T0 - 60_000, after=(1, 2, 3), new_leader=1),
            isr("isr_update", T0, after=(1, 3)),
            isr("isr_update", T0 + 1_000, after=(1, 2, 3))]   # expansion: not a shrink
    [s] = shrinks_from_isr_events(rows, since_ms=T0)
    assert (s.event_ms, s.isr_before, s.out_of_sync) == (T0, (1, 2, 3), (2,))


def test_an_update_with_nothing_known_before_it_says_nothing():
    assert shrinks_from_isr_events([isr("isr_update", T0, after=(1,))], since_ms=T0) == []


def test_a_followers_leader_line_does_not_set_the_leaders_isr():
    rows = [isr("leader_change", T0 - 1_000, after=(1, 2, 3), new_leader=2),
            isr("isr_update", T0, after=(1,))]
    assert shrinks_from_isr_events(rows, since_ms=T0) == []


def test_shrinks_before_the_range_only_give_context():
    rows = [isr("isr_shrink", T0 - 5_000, before=(1, 2, 3), after=(1, 2)),
            isr("isr_update", T0, after=(1,))]
    [s] = shrinks_from_isr_events(rows, since_ms=T0)
    assert (s.event_ms, s.isr_before, s.isr_after) == (T0, (1, 2), (1,))


# --- other rows ------------------------------------------------------------------------------

def reset_row(kind, **kw):
    return {"cluster": "c1", "ts_ms": T0, "client_id": "c", "group_id": "g", "topic": "t",
            "partition": 3, "kind": kind, "from_offset": None, "to_offset": None,
            "reset_target": None, "reason": None, **kw}


@pytest.mark.parametrize("row, reason, target", [
    (reset_row("offset_out_of_range", from_offset=200), ResetReason.OUT_OF_RANGE,
     ResetTarget.UNKNOWN),
    (reset_row("truncation_detected", from_offset=200, to_offset=100, reset_target="explicit"),
     ResetReason.TRUNCATION, ResetTarget.OFFSET),
    (reset_row("offset_reset", to_offset=0, reset_target="earliest", reason="seek"),
     ResetReason.APPLICATION_SEEK, ResetTarget.EARLIEST),
    (reset_row("offset_reset", reset_target="latest",
               reason="fetch failed due to requested offset not available on the broker: "
                      "Broker: Offset out of range"), ResetReason.OUT_OF_RANGE, ResetTarget.LATEST),
    (reset_row("offset_reset", to_offset=7), ResetReason.UNKNOWN, ResetTarget.UNKNOWN),
])
def test_client_offset_event_rows_become_resets(row, reason, target):
    e = client_reset_from_row(row)
    assert (e.reason, e.target) == (reason, target)
    assert (e.cluster, e.group, e.client_id, e.topic, e.partition, e.event_ms) == (
        "c1", "g", "c", "t", 3, T0)
    assert (e.from_offset, e.to_offset) == (row["from_offset"], row["to_offset"])


def test_truncations_and_cleaner_runs_from_log_rows():
    rows = [event("truncation", T0, 1, topic="t", partition=0, offset=100, high_watermark=200),
            event("truncation", T0 - 10, 1, topic="t", partition=0, offset=100),
            event("cleaner_run", T0, 2, topic="__consumer_offsets", partition=7, seconds=0.2,
                  reduction_pct=97.4),
            event("isr_shrink", T0, 1, topic="t", partition=0)]
    [t] = truncations_from(rows, since_ms=T0)
    assert (t.broker, t.truncated_to, t.high_watermark) == (1, 100, 200)
    assert t.below_high_watermark
    assert len(truncations_from(rows, since_ms=T0 - 10)) == 2
    [c] = cleaner_runs_from(rows, since_ms=T0)
    assert (c.broker, c.topic, c.partition, c.end_ms, c.duration_s, c.size_reduction_pct) == (
        2, "__consumer_offsets", 7, T0, 0.2, 97.4)


@pytest.mark.parametrize("entries, expected", [
    ({"cleanup.policy": "delete"}, None),
    ({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.5",
      "max.compaction.lag.ms": str(2 ** 63 - 1)},
     CompactedTopicConfig("c1", "t", 0.5, None)),
    ({"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.1",
      "max.compaction.lag.ms": "3600000", "segment.bytes": "104857600"},
     CompactedTopicConfig("c1", "t", 0.1, 3_600_000, 104_857_600)),
])
def test_topic_configs_keep_compacted_topics_only(entries, expected):
    assert compacted_topic_config("c1", "t", entries) == expected


def test_topic_configs_are_fetched_again_only_after_the_refresh_interval():
    calls = []

    def fetch():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("broker unreachable")
        return [CompactedTopicConfig("c1", f"t{len(calls)}")]

    cache = TopicConfigCache(fetch, refresh_s=60)
    assert [c.topic for c in cache(T0)] == ["t1"]
    assert [c.topic for c in cache(T0 + 59_000)] == ["t1"] and len(calls) == 1
    assert [c.topic for c in cache(T0 + 60_000)] == ["t1"]        # failed: last answer kept
    assert [c.topic for c in cache(T0 + 120_000)] == ["t3"]


def test_baselines_are_read_again_once_the_range_start_moved_a_refresh_on():
    reads = []

    def read():
        reads.append(len(reads))
        return [f"read {len(reads)}"]

    cache = BaselineCache(refresh_s=60)
    assert cache(T0, read) == ["read 1"]
    assert cache(T0 + 59_999, read) == ["read 1"]
    assert cache(T0 + 60_000, read) == ["read 2"]
    assert cache(T0 + 30_000, read) == ["read 3"]      # an earlier range: never a later read
    assert len(reads) == 3


def test_every_metric_the_adapter_reads_is_one_the_scraper_keeps():
    assert set(CLEANER_METRICS) | {UNCLEAN_METER, LOG_SIZE} <= set(broker_metrics.METRICS)


def test_sizes_and_runs_are_read_over_the_growth_window_and_two_steps():
    r = TimeRange(T0, T0 + 300_000)
    assert growth_range(r, 7200) == TimeRange(T0 + 300_000 - 7_320_000, T0 + 300_000)
    assert growth_range(r, 600, step_s=30) == TimeRange(T0 + 300_000 - 660_000, T0 + 300_000)


def test_compacted_topics_by_cluster():
    assert compacted_topics([CompactedTopicConfig("c1", "users"),
                             CompactedTopicConfig("c1", "orders-state"),
                             CompactedTopicConfig("c2", "users")]) == {
        "c1": {"users", "orders-state"}, "c2": {"users"}}


def test_the_stage_windows_must_be_the_detectors_windows():
    check_config(Config())
    bad = Config().with_overrides(slow_broker={"window_s": 15})
    with pytest.raises(ConfigError, match="slow_broker.window_s.*request_log.window_s"):
        check_config(bad)
    check_config(bad.with_overrides(request_log={"window_s": 15}))


def test_a_time_range_is_not_empty_and_reaches_back():
    r = TimeRange(T0, T0 + 1_000)
    assert r.back(2) == TimeRange(T0 - 2_000, T0 + 1_000)
    with pytest.raises(ValueError):
        TimeRange(T0, T0)
