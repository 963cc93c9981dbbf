"""The detectors on Spark: telemetry records through the landing sink and the real bronze,
silver and gold jobs, then `evaluation.detect` evaluates, writes gold.anomalies, resolves and
replays.

One minute of a three-broker cluster, from T0:
- slow broker: broker 1's Produce TP99 is 600 ms, almost all Remote, from the fourth
  10-second window on, while follower 3 leaves 1.5 s between its fetches from leaders 1
  and 2 (and leader 1 shrinks its ISR to drop 3);
- offset rewind: group g-rewind commits orders-0 back from 800 to 50 with nothing to
  explain it;
- unclean election: unclean-t-0 gets leader 2 out of sync (every controller logs it and
  counts it in its meter), the old leader 1 truncates below its high watermark, and group
  g-unclean, which had read past the new end, commits a lower offset;
- a dead log-cleaner thread on broker 2;
- who committed: group g-seek's one member (its OffsetCommit lines in the request log)
  commits orders-1 back below its own earlier commits, inside the log (an application
  seek); group g-moved, whose coordinator partition __consumer_offsets-9 broker 2 loaded
  at epoch 1 just before (and broker 1, the old coordinator, later truncated below its
  high watermark: the move lost commits), commits orders-2 back (a coordinator move;
  broker 1's epoch-0 load of __consumer_offsets-8 is a first leader, no move).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from core.findings import AnomalyType, Status
from core.latency_histogram import ALPHA
from infra.lake import Lake
from ingest.broker_log import parse_lines
from ingest.consumer_offsets import encode_key, encode_value, parse_offset_record
from ingest.partition_offsets_agent import partition_offsets_record
from ingest.request_log import parse_request_line
from ingest.sinks import LandingSink
from evaluation.detect import (
    carried_findings,
    evaluate,
    read_findings,
    replay,
    start_detector_query,
)
from infra.lake_sql import LakeSql
from ingest.request_log_agent import WHOLE_APIS
from ingest.request_windows import aggregate
from evaluation.inputs import UNCLEAN_METER, TimeRange, read_inputs
from jobs.pipeline import Pipeline
from jobs.streams import QUARANTINE, stream
from schemas import broker_metrics
from schemas.anomalies import ANOMALY_SCHEMA

T0 = 1_767_225_600_000            # 2026-01-01T00:00:00Z, on the 10 s and minute grids
W = 10_000
SLOW_FROM = T0 + 3 * W            # broker 1 and follower 3 are slow from the 4th window
END = T0 + 6 * W                  # the last telemetry (the closing record aside)
NOW_A = END                       # evaluation time: all six windows closed
CLUSTER = "c1"
TOPIC_ID = "v2CcNjHzQ-qHdPLiDA1chw"
REQUEST_LOG = Path(__file__).parent.parent / "fixtures" / "request_log" / "kafka-4.3.1-request.log"


# --- telemetry --------------------------------------------------------------------------------

def _templates() -> dict[str, dict]:
    """A Produce and a follower Fetch record as the request-log parser makes them."""
    out = {}
    for line in REQUEST_LOG.read_text().splitlines():
        rec = parse_request_line(line, cluster=CLUSTER, broker=1)
        if not isinstance(rec, dict) or rec["is_controller_traffic"]:
            continue
        if rec["api"] == "Produce":
            out.setdefault("produce", rec)
        elif rec["fetch_kind"] == "follower":
            out.setdefault("follower_fetch", rec)
        elif rec["api"] == "OffsetCommit":
            out.setdefault("offset_commit", rec)
    assert set(out) == {"produce", "follower_fetch", "offset_commit"}
    return out


def request_records() -> list[dict]:
    t = _templates()
    recs = []

    def add(template: str, broker: int, ts_ms: int, **stages) -> None:
        recs.append(dict(t[template], broker=broker, ts_ms=ts_ms, correlation_id=len(recs),
                         **stages))

    for w in range(6):
        for b in (1, 2, 3):
            slow = b == 1 and T0 + w * W >= SLOW_FROM
            # 100 a window: slow_broker.min_requests_per_window (fewer, and a TP99 is one
            # request).
            for i in range(100):
                stages = (dict(total_ms=600.0, request_queue_ms=2.0, local_ms=5.0,
                               remote_ms=590.0, response_queue_ms=1.0, send_ms=2.0)
                          if slow else
                          dict(total_ms=10.0, request_queue_ms=1.0, local_ms=5.0, remote_ms=3.0,
                               response_queue_ms=0.5, send_ms=0.5))
                add("produce", b, T0 + w * W + 500 + i * 95, throttle_ms=0.0,
                    client_id="producer-acks-all", remote_addr=f"10.0.0.9:{4000 + b}", **stages)
    for leader in (1, 2, 3):
        for follower in (x for x in (1, 2, 3) if x != leader):
            arrival = T0 - 2_000 + leader * 37 + follower * 11
            while arrival + 500 < END:
                done = arrival + 500
                add("follower_fetch", leader, done, total_ms=500.0, request_queue_ms=0.3,
                    local_ms=1.0, remote_ms=498.0, throttle_ms=0.0, response_queue_ms=0.2,
                    send_ms=0.5, fetch_replica_id=follower,
                    client_id=f"broker-{follower}-fetcher-0",
                    remote_addr=f"10.0.0.{follower}:{5000 + leader}")
                lagging = follower == 3 and leader in (1, 2) and arrival >= SLOW_FROM - 2_000
                arrival = arrival + 2_000 if lagging else done + 1
    for group, member, partition, ts, offset in COMMIT_LINES:
        add("offset_commit", 1, ts + 40, group_id=group, member_id=member, generation=1,
            client_id=f"{group}-client",
            committed=[{"topic": "orders", "partition": partition, "offset": offset}])
    # Closes every window of the stage tables (their watermarks trail the newest row).
    add("produce", 1, T0 + 600_000)
    return recs


def _stamp(ms: int) -> str:
    t = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S") + f",{ms % 1000:03d}"


def log_event_records() -> list[dict]:
    unclean = ("INFO [QuorumController id={b}] UNCLEAN partition change for unclean-t-0 with "
               f"topic ID {TOPIC_ID}: isr: [1] -> [2], leader: 1 -> 2, leaderRecoveryState: "
               "RECOVERED -> RECOVERING, leaderEpoch: 0 -> 1, partitionEpoch: 1 -> 2 "
               "(org.apache.kafka.controller.ReplicationControlManager)")
    setting = (f"INFO Setting new leader for topicId {TOPIC_ID}, partition 0 to 2 using an unclean "
               "election. Previous partition: PartitionRegistration(replicas=[1, 2], isr=[1], "
               "removingReplicas=[], addingReplicas=[], elr=[], lastKnownElr=[], leader=1, "
               "leaderRecoveryState=RECOVERED, leaderEpoch=0, partitionEpoch=1) "
               "(org.apache.kafka.controller.PartitionChangeBuilder)")
    lines = {
        1: [(T0 + 19_990, setting), (T0 + 20_000, unclean.format(b=1)),
            (T0 + 28_000, "INFO [UnifiedLog partition=unclean-t-0, dir=/data] Truncating to "
                          "offset 100 (org.apache.kafka.storage.internals.log.UnifiedLog)"),
            (T0 + 28_001, "WARN [UnifiedLog partition=unclean-t-0, dir=/data] Truncating "
                          "unclean-t-0 to offset 100 below high watermark 200 "
                          "(org.apache.kafka.storage.internals.log.UnifiedLog)"),
            (T0 + 32_000, "INFO [Partition orders-0 broker=1] Shrinking ISR from 1,2,3 to 1,2. "
                          "Leader: (highWatermark: 399, endOffset: 441). Out of sync replicas: "
                          "(brokerId: 3, endOffset: 399, lastCaughtUpTimeMs: 1). "
                          "(kafka.cluster.Partition)"),
            (T0 + 32_300, "INFO [Partition orders-0 broker=1] ISR updated to 1,2  and version "
                          "updated to 2 (kafka.cluster.Partition)"),
            (T0 + 30_000, "WARN [UnifiedLog partition=__consumer_offsets-9, dir=/data] "
                          "Truncating __consumer_offsets-9 to offset 40 below high watermark 52 "
                          "(org.apache.kafka.storage.internals.log.UnifiedLog)"),
            (T0 + 32_400, "INFO [GroupCoordinator id=1] Scheduling loading of metadata from "
                          "__consumer_offsets-8 with epoch 0 "
                          "(org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime)")],
        2: [(T0 + 20_003, unclean.format(b=2)),
            (T0 + 13_000, "INFO [GroupCoordinator id=2] Scheduling loading of metadata from "
                          "__consumer_offsets-9 with epoch 1 "
                          "(org.apache.kafka.coordinator.common.runtime.CoordinatorRuntime)")],
        3: [(T0 + 20_005, unclean.format(b=3))],
    }
    recs = []
    for broker, events in lines.items():
        text = [f"[{_stamp(ms)}] {body}" for ms, body in events]
        for i, rec in enumerate(parse_lines(text, cluster=CLUSTER, broker=broker, log="server")):
            assert isinstance(rec, dict), rec
            recs.append(dict(rec, record_id=f"{CLUSTER}:{broker}:log:{i}"))
    return recs


# (group, member, partition of orders, commit ms, offset): commits whose request-log lines
# are there too; g-seek's group is in __consumer_offsets-8, g-moved's in -9.
COMMIT_LINES = [*(("g-seek", "m-seek", 1, T0 + k * 5_000, off)
                  for k, off in enumerate([100, 200, 300, 150])),
                *(("g-moved", "m-moved", 2, T0 + 1_000 + k * 5_000, off)
                  for k, off in enumerate([100, 200, 300, 120]))]
SOURCE_PARTITION = {"g-seek": 8, "g-moved": 9}


def commit_records() -> list[dict]:
    commits = [("g-rewind", "orders", 0, T0 + k * 5_000, off)
               for k, off in enumerate([100, 200, 300, 400, 500, 600, 700, 800, 50, 60, 70, 80])]
    commits += [("g-unclean", "unclean-t", 0, T0 + ms, off)
                for ms, off in ((5_000, 150), (10_000, 180), (35_000, 100))]
    commits += [(group, "orders", p, ts, off) for group, _, p, ts, off in COMMIT_LINES]
    recs = []
    for i, (group, topic, p, ts, offset) in enumerate(sorted(commits, key=lambda c: c[3])):
        rec = parse_offset_record(encode_key(group, topic, p), encode_value(offset, "", ts),
                                  cluster=CLUSTER,
                                  source_partition=SOURCE_PARTITION.get(group, 7),
                                  source_offset=1000 + i, ts_ms=ts)
        assert isinstance(rec, dict), rec
        recs.append(dict(rec, record_id=f"{CLUSTER}:offsets:{rec['source_partition']}:{1000 + i}"))
    return recs


def partition_offset_records() -> list[dict]:
    recs = [partition_offsets_record(CLUSTER, T0 + k * W, "orders", p, 0, 1000 + 10 * k, 1)
            for k in range(-6, 6) for p in (0, 1)]
    recs += [partition_offsets_record(CLUSTER, T0 + ms, "unclean-t", 0, 0, end, leader)
             for ms, end, leader in ((0, 200, 1), (30_000, 100, 2), (40_000, 110, 2))]
    return recs


def metric_records() -> list[dict]:
    def metric(broker: int, ts: int, name: str, value: float) -> dict:
        return {"cluster": CLUSTER, "broker": broker, "ts_ms": ts, "metric": name,
                "request": None, "quantile": None, "topic": None, "labels": {},
                "value": value, "record_id": f"{CLUSTER}:{broker}:{ts}:{name}"}

    recs = []
    for b in (1, 2, 3):
        for ts, count in ((T0 - 30_000, 0.0), (T0, 0.0), (T0 + 25_000, 1.0)):
            recs.append(metric(b, ts + b, UNCLEAN_METER, count))
    for ts, dead in ((T0, 0.0), (T0 + 30_000, 1.0)):
        recs.append(metric(2, ts, "kafka_log_logcleaner_deadthreadcount", dead))
        recs.append(metric(2, ts, "kafka_log_logcleanermanager_time_since_last_run_ms", 5_000.0))
    return recs


def request_stream_records(config) -> list[tuple[str, dict]]:
    """(stream, record) of what the request-log agents send for `request_records()`: each
    broker's windows (its lines in time order, as its log holds them), and the OffsetCommit
    lines whole."""
    by_broker: dict[int, list[dict]] = {}
    for rec in sorted(request_records(), key=lambda r: r["ts_ms"]):
        lines = by_broker.setdefault(rec["broker"], [])
        lines.append(dict(rec, record_id=f"{CLUSTER}:{rec['broker']}:1:{100 * len(lines)}"))
    out = []
    for broker, lines in sorted(by_broker.items()):
        out += [(o.stream, o.record) for o in aggregate(
            lines, CLUSTER, broker, **config.request_log.aggregator_options())]
        out += [("request_stages", r) for r in lines if r["api"] in WHOLE_APIS]
    return out


@pytest.fixture(scope="module")
def lake(spark, kmon_config, tmp_path_factory) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("detect") / "lake"))
    sink = LandingSink(lake.landing_root, "test")
    for name, rec in request_stream_records(kmon_config):
        sink.send(name, "k", rec)
    for name, records in (("log_events", log_event_records()),
                          ("offset_commits", commit_records()),
                          ("partition_offsets", partition_offset_records())):
        for i, rec in enumerate(records):
            rec.setdefault("record_id", f"test:{name}:{i}")
            sink.send(name, "k", rec)
    sink.flush()
    # client_offset_events is left out: a table that does not exist yields no input.
    streams = tuple(stream(s) for s in ("request_stages", "request_windows",
                                        "follower_fetch_windows", "client_send_windows",
                                        "request_exemplars", "log_events", "offset_commits",
                                        "partition_offsets", QUARANTINE))
    Pipeline(spark, lake, kmon_config.pipeline, streams=streams).process_available()
    quarantined = spark.read.format("delta").load(lake.table("silver", QUARANTINE)).count()
    assert quarantined == 0
    write_silver_broker_metrics(spark, lake, metric_records())
    return lake


def write_silver_broker_metrics(spark, lake: Lake, records: list[dict]) -> None:
    """silver.broker_metrics rows written as the silver job would write them.

    The broker_metrics stream cannot go through jobs/silver.py yet: its record has a
    `value` column, and silver's decode keeps bronze's raw `value` beside the record's
    columns, so Spark finds `value` ambiguous (AMBIGUOUS_REFERENCE in silver.classify).
    """
    schema = StructType([*broker_metrics.SCHEMA.fields, StructField("record_id", StringType())])
    (spark.createDataFrame(records, schema)
     .select(*[F.col(f.name) for f in broker_metrics.SCHEMA.fields],
             F.timestamp_millis("ts_ms").alias("ts"), "record_id")
     .withColumn("date", F.to_date("ts"))
     .write.format("delta").partitionBy("date", "cluster")
     .save(lake.table("silver", "broker_metrics")))


@pytest.fixture(scope="module")
def findings_a(spark, lake, kmon_config):
    return evaluate(spark, lake, kmon_config, NOW_A, 300, table="anomalies_a")


def _one(findings, type_, entity):
    found = [f for f in findings if f.type is type_ and f.entity == entity]
    assert len(found) == 1, [(f.type.value, f.entity) for f in findings]
    return found[0]


def _table_rows(spark, lake, table):
    return spark.read.format("delta").load(lake.table("gold", table))


# --- tests ------------------------------------------------------------------------------------

def test_inputs_are_aggregated_in_spark(spark, lake, kmon_config):
    inputs = read_inputs(lake, kmon_config, NOW_A - 300_000, NOW_A)
    # Closed windows of three brokers' Produce and Fetch (and broker 1's OffsetCommit lines),
    # nothing past NOW_A (the closing record's window is later).
    assert {(w.broker, w.api) for w in inputs.stage_windows} == {
        (b, api) for b in (1, 2, 3) for api in ("Produce", "Fetch")} | {(1, "OffsetCommit")}
    assert {w.window_start_ms for w in inputs.stage_windows if w.api == "Produce"} == {
        T0 + k * W for k in range(6)}
    slow = [w for w in inputs.stage_windows if w.api == "Produce" and w.broker == 1
            and w.window_start_ms >= SLOW_FROM]
    # The edge's histograms: within their bucket error (core/latency_histogram.py).
    assert len(slow) == 3 and all(w.total_p99_ms == pytest.approx(600.0, rel=ALPHA)
                                  and w.remote_p99_ms == pytest.approx(590.0, rel=ALPHA)
                                  for w in slow)
    gaps = {(f.leader, f.follower, f.window_start_ms): f.max_fetch_gap_ms
            for f in inputs.follower_fetches}
    assert gaps[(1, 3, SLOW_FROM + W)] == 1500.0
    assert gaps[(1, 2, SLOW_FROM + W)] == 1.0
    assert [(s.leader, s.out_of_sync) for s in inputs.isr_shrinks] == [(1, (3,))]
    # Three controllers logged the election and counted it: one election, one tick.
    assert [(e.topic, e.partition, e.old_leader, e.new_leader, e.leader_epoch, e.event_ms)
            for e in inputs.elections] == [("unclean-t", 0, 1, 2, 1, T0 + 19_990)]
    # The count rose between each controller's samples at T0 + b and T0 + 25_000 + b.
    assert [(t.count_delta, t.observed_ms, t.previous_ms)
            for t in inputs.meter_ticks] == [(1.0, T0 + 25_001, T0 + 1)]
    assert {(c.group, c.topic, c.source_partition) for c in inputs.commits} == {
        ("g-rewind", "orders", 7), ("g-unclean", "unclean-t", 7), ("g-seek", "orders", 8),
        ("g-moved", "orders", 9)}
    # Who committed: the request-log lines of the groups of those commits, one per
    # committed partition, as the rules' CommitRequest.
    assert sorted((x.group, x.member_id, x.generation, x.client_id, x.broker, x.topic,
                   x.partition, x.offset, x.request_ms) for x in inputs.commit_requests) == sorted(
        (g, m, 1, f"{g}-client", 1, "orders", p, off, ts + 40)
        for g, m, p, ts, off in COMMIT_LINES)
    assert [(x.broker, x.offsets_partition, x.leader_epoch, x.event_ms)
            for x in inputs.coordinator_loads] == [(2, 9, 1, T0 + 13_000), (1, 8, 0, T0 + 32_400)]
    assert inputs.resets == [] and inputs.memberships == [] and inputs.partition_sizes == []
    dead = [g for g in inputs.cleaner_gauges if g.dead_thread_count]
    assert [(g.broker, g.dead_thread_count) for g in dead] == [(2, 1)]


def test_a_producers_own_requests_per_window_and_broker(spark, lake, kmon_config):
    """The slow-link rule's broker side (read_window_producer_times): the producers asked
    for only, whole windows of the range, the p99 and p50 of their own Produce TotalTime
    (from the edge's histograms: within their bucket error)."""
    from evaluation.inputs import read_window_producer_times

    sb = kmon_config.slow_broker
    r = TimeRange(T0, END)
    sql = LakeSql(lake)
    got = read_window_producer_times(sql, sb, r, {"producer-acks-all", "nobody"})
    assert {((x.window_start_ms - T0) // W, x.broker): (x.client_id, x.requests)
            for x in got} == {(w, b): ("producer-acks-all", 100)
                              for w in range(6) for b in (1, 2, 3)}
    for x in got:
        want = 600.0 if x.broker == 1 and x.window_start_ms >= SLOW_FROM else 10.0
        assert x.total_p99_ms == pytest.approx(want, rel=ALPHA)
        assert x.total_p50_ms == pytest.approx(want, rel=ALPHA)
    assert read_window_producer_times(sql, sb, r, set()) == []
    assert read_window_producer_times(sql, sb, TimeRange(T0 + 5, T0 + W + 5),
                                      {"producer-acks-all"}) == [], "no whole window"


def test_the_live_detectors_cached_reads_equal_whole_reads(spark, lake, kmon_config):
    """The live detector's window cache (window_cache.py; here reading
    20 s again of a 60 s range, as the lake holds 60 s): evaluated every 10 s across the
    slow windows, then once past the last telemetry, the per-window reads give what whole
    reads give, and after the first read only the newest windows are read again."""
    from evaluation.inputs import WindowReadCache

    cache = WindowReadCache(reread_s=20)
    first = SLOW_FROM + 3_000
    for now in (first, first + W, first + 2 * W, END + W + 3_000):
        cached = read_inputs(lake, kmon_config, now - 60_000, now, window_cache=cache)
        whole = read_inputs(lake, kmon_config, now - 60_000, now)
        for name in ("stage_windows", "follower_fetches", "client_rtts", "producer_times"):
            assert sorted(map(repr, getattr(cached, name))) == sorted(
                map(repr, getattr(whole, name))), (name, now - T0)
        assert whole.stage_windows and whole.follower_fetches
        if now > first:       # from the newest window the last read had, or 20 s back
            assert cache.windows_read["stage_windows"] < 40_000, now - T0


def test_slow_broker_names_the_stage_and_the_follower(findings_a):
    victim = _one(findings_a, AnomalyType.SLOW_BROKER, "broker:1")
    assert victim.status is Status.OPEN
    assert victim.cause == "remote_produce_slow_follower"
    assert victim.evidence["stage"] == "remote"
    assert victim.evidence["api"] == "Produce"
    assert victim.evidence["slow_follower"] == "broker:3"
    assert victim.evidence["total_p99_ms"] == pytest.approx(600.0, rel=ALPHA)
    assert (victim.first_seen_ms, victim.last_seen_ms) == (SLOW_FROM, END)
    # the slow requests themselves, exact (the edge keeps them whole): broker 1's slowest
    # Produce requests of the span (all 600 ms here: the earliest first), with their stage
    # times and client
    slow = victim.evidence["slow_requests"]
    assert victim.evidence["slow_requests_source"] == "silver.request_exemplars"
    assert [r["ts_ms"] for r in slow] == [SLOW_FROM + 500 + i * 95 for i in range(5)]
    assert {(r["api"], r["client_id"], r["total_ms"], r["remote_ms"], r["judged_ms"])
            for r in slow} == {("Produce", "producer-acks-all", 600.0, 590.0, 600.0)}
    follower = _one(findings_a, AnomalyType.SLOW_BROKER, "broker:3")
    assert "slow_requests" not in follower.evidence
    assert follower.cause == "slow_follower"
    assert follower.evidence["held_back_leaders"] == [1]
    assert victim.incident_id == follower.finding_id == follower.incident_id
    assert not any(f.entity == "broker:2" and f.type is AnomalyType.SLOW_BROKER
                   for f in findings_a)


def test_commits_that_go_backwards_are_an_offset_rewind(findings_a):
    rewind = _one(findings_a, AnomalyType.OFFSET_REWIND, "group:g-rewind/orders-0")
    assert (rewind.evidence["old_position"], rewind.evidence["new_position"]) == (800, 50)
    assert rewind.evidence["active"] is True
    assert rewind.evidence["duplicates"] == 750
    assert rewind.cause == "unknown"       # no membership source, no client line
    assert rewind.first_seen_ms == T0 + 40_000


def test_the_request_log_and_coordinator_loads_tell_why_a_group_went_back(findings_a):
    seek = _one(findings_a, AnomalyType.OFFSET_REWIND, "group:g-seek/orders-1")
    assert (seek.cause, seek.severity.value, seek.suggested_action.value) == (
        "application_seek", "info", "none")
    assert {k: seek.evidence["committer"][k] for k in ("member_id", "client_id", "generation",
                                                       "own_last_offset")} == {
        "member_id": "m-seek", "client_id": "g-seek-client", "generation": 1,
        "own_last_offset": 300}
    assert "coordinator_load" not in seek.evidence   # the epoch-0 load is no move
    moved = _one(findings_a, AnomalyType.OFFSET_REWIND, "group:g-moved/orders-2")
    assert (moved.cause, moved.severity.value, moved.suggested_action.value) == (
        "stale_offset_after_coordinator_move", "high", "restore_group_offsets")
    assert moved.evidence["coordinator_load"] == {"event_ms": T0 + 13_000, "broker": 2,
                                                  "offsets_partition": 9, "leader_epoch": 1}
    assert moved.evidence["offsets_loss"] == {"event_ms": T0 + 30_000, "kind": "truncation",
                                              "offsets_partition": 9}


def test_unclean_election_and_its_effects_are_one_incident(findings_a):
    election = _one(findings_a, AnomalyType.UNCLEAN_ELECTION, "unclean-t-0")
    truncation = _one(findings_a, AnomalyType.LOG_TRUNCATION, "unclean-t-0")
    rewind = _one(findings_a, AnomalyType.OFFSET_REWIND, "group:g-unclean/unclean-t-0")
    assert (election.evidence["lost_from"], election.evidence["lost_until"]) == (100, 200)
    assert election.evidence["groups_inside"] == [{"group": "g-unclean", "committed_offset": 180}]
    assert rewind.cause == "auto_reset_after_out_of_range"
    assert election.is_root_cause
    assert {f.incident_id for f in (election, truncation, rewind)} == {election.finding_id}
    assert set(election.related) == {truncation.finding_id, rewind.finding_id}
    # The meter's tick is the logged election's: no cluster-level "unlogged" election.
    assert not [f for f in findings_a if f.entity == f"cluster:{CLUSTER}"]
    dead = _one(findings_a, AnomalyType.COMPACTION_LAG, "broker:2")
    assert dead.cause == "cleaner_dead"


def test_rows_hold_the_finding_and_read_back_the_same(spark, lake, kmon_config, findings_a):
    table = _table_rows(spark, lake, "anomalies_a")
    assert table.schema == ANOMALY_SCHEMA
    assert table.count() == len(findings_a)
    row = table.where(F.col("entity") == "broker:1").first()
    assert json.loads(row["evidence_json"])["slow_follower"] == "broker:3"
    assert row["date"] == dt.date(2026, 1, 1)
    back = read_findings(spark, lake.table("gold", "anomalies_a"), NOW_A, kmon_config)
    assert {f.finding_id: f.to_row() for f in back} == {f.finding_id: f.to_row()
                                                        for f in findings_a}


def test_evaluating_again_adds_no_rows_and_a_signal_gone_long_enough_resolves(
        spark, lake, kmon_config):
    first = evaluate(spark, lake, kmon_config, NOW_A, 300, table="anomalies_d")
    path = lake.table("gold", "anomalies_d")
    version = DeltaTable.forPath(spark, path).history(1).first()["version"]
    again = evaluate(spark, lake, kmon_config, NOW_A, 300, table="anomalies_d")
    assert [f.to_row() for f in again] == [f.to_row() for f in first]
    # Nothing changed: nothing was written.
    assert DeltaTable.forPath(spark, path).history(1).first()["version"] == version
    assert _table_rows(spark, lake, "anomalies_d").count() == len(first)

    resolve_after_ms = int(kmon_config.findings.resolve_after_s * 1000)
    later = END + resolve_after_ms
    evaluate(spark, lake, kmon_config, later, 300, table="anomalies_d")
    rows = {(r["type"], r["entity"]): r for r in _table_rows(spark, lake, "anomalies_d").collect()}
    assert len(rows) == len(first)
    for entity in ("broker:1", "broker:3"):
        r = rows[("slow_broker", entity)]
        assert (r["status"], r["resolved_ms"]) == ("resolved", later)
    # One-off events stay open longer (findings.resolve_after_s_by_type).
    assert rows[("unclean_election", "unclean-t-0")]["status"] == "open"


def test_carrying_the_last_result_reads_what_the_table_holds(spark, lake, kmon_config):
    # The detector query starts each evaluation from the last one's result (carried)
    # instead of reading the table back: after a first sighting and after a resolution,
    # what it carries is what the table would give, row for row.
    path = lake.table("gold", "anomalies_c")
    chain_ms = int(kmon_config.correlation.chain_window_s * 1000)
    later = END + int(kmon_config.findings.resolve_after_s * 1000)

    def same(carried, now_ms):
        back = read_findings(spark, path, now_ms, kmon_config)
        assert back, now_ms
        assert ({f.finding_id: f.to_row() for f in carried_findings(carried, now_ms,
                                                                     kmon_config)}
                == {f.finding_id: f.to_row() for f in back}), now_ms

    first = evaluate(spark, lake, kmon_config, NOW_A, 300, table="anomalies_c")
    same(first, later)
    carried = evaluate(spark, lake, kmon_config, later, 300, table="anomalies_c",
                       previous=first)
    assert any(f.status is Status.RESOLVED for f in carried)
    for now_ms in (later, later + chain_ms + 1):    # resolved ones leave the carry in step
        same(carried, now_ms)


def test_replay_gives_the_same_finding_ids_and_is_idempotent(spark, lake, kmon_config, findings_a):
    start, end = T0, END + 300_000
    replayed = replay(spark, lake, kmon_config, start, end, 180, lookback_s=300,
                      table="anomalies_r")
    assert {f.finding_id for f in replayed} == {f.finding_id for f in findings_a}
    rows = sorted(tuple(r) for r in _table_rows(spark, lake, "anomalies_r").collect())
    again = replay(spark, lake, kmon_config, start, end, 180, lookback_s=300,
                   table="anomalies_r")
    assert [f.to_row() for f in again] == [f.to_row() for f in replayed]
    assert sorted(tuple(r) for r in _table_rows(spark, lake, "anomalies_r").collect()) == rows


def test_detector_query_evaluates_on_its_trigger_and_hands_findings_over(
        spark, lake, kmon_config, findings_a):
    calls, background = [], []

    def on_findings(findings, now_ms):
        # Handed over before the MERGE: the (new) table does not hold them yet.
        calls.append((findings, now_ms, _table_rows(spark, lake, "anomalies_q").count()))

    def in_background(findings, now_ms):
        # The write-behind: after the hand-over, before the MERGE.
        background.append((findings, now_ms, _table_rows(spark, lake, "anomalies_q").count()))

    read = []
    query = start_detector_query(spark, lake, kmon_config, {"availableNow": True},
                                 on_findings, clock=lambda: NOW_A, lookback_s=300,
                                 table="anomalies_q", query_name="detect_anomalies_test",
                                 in_background=in_background,
                                 on_inputs=lambda now, inputs: read.append((now, inputs)))
    query.awaitTermination()        # also waits for the write-behind
    assert query.exception() is None
    assert len(calls) == 1 and len(background) == 1
    # What the evaluation read: a live matrix run keeps it for a failed scenario's rescore.
    assert [now for now, _ in read] == [NOW_A] and read[0][1].stage_windows
    findings, now_ms, rows_when_handed = calls[0]
    assert now_ms == NOW_A
    assert [f.to_row() for f in findings] == [f.to_row() for f in findings_a]
    assert rows_when_handed == 0
    assert background[0][0] is findings and background[0][1:] == (NOW_A, 0)
    assert _table_rows(spark, lake, "anomalies_q").count() == len(findings_a)


def test_the_running_query_writes_behind_and_stop_waits_for_the_last_write(
        spark, lake, kmon_config, findings_a):
    """On a processing-time trigger each tick's MERGE runs while the next tick reads; the
    writes stay in order (one at a time) and stop() leaves the table holding the last
    evaluation's rows. Each tick first waits for fresh data (`wait_for_data`, silver's
    commit in `kmon run`), then reads the clock."""
    ticks, background, order = [], [], []
    times = iter(range(NOW_A, NOW_A + 3_600_000, 1_000))

    def clock():
        order.append("clock")
        return next(times)

    def wait_for_data():
        order.append("wait")
        return 0.25

    query = start_detector_query(spark, lake, kmon_config, {"processingTime": "1 second"},
                                 lambda findings, now_ms: ticks.append(now_ms),
                                 clock=clock, lookback_s=300,
                                 table="anomalies_w", query_name="detect_anomalies_wb",
                                 in_background=lambda f, now_ms: background.append(now_ms),
                                 wait_for_data=wait_for_data)
    try:
        deadline = time.monotonic() + 300
        while len(ticks) < 3 and query.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        query.stop()
    assert query.exception() is None
    assert len(ticks) >= 3
    assert background == ticks              # every evaluation's write ran, in order
    assert order[:2 * len(ticks)] == ["wait", "clock"] * len(ticks)
    rows = {r["finding_id"]: r for r in _table_rows(spark, lake, "anomalies_w").collect()}
    assert set(rows) == {f.finding_id for f in findings_a}
    last = max(ticks)
    assert all(r["last_seen_ms"] <= last for r in rows.values())


def test_the_runbooks_slow_requests_query_reads_the_findings_evidence(spark, lake,
                                                                       findings_a):
    """docs/runbook.md's KmonSlowBroker query for the slow requests, run as printed
    against the table the evaluation wrote."""
    import re

    text = (Path(__file__).parents[2] / "docs" / "runbook.md").read_text()
    section = text[text.index("The slow requests themselves"):]
    sql = re.search(r"```sql\n(.*?)```", section, re.S).group(1)
    victim = _one(findings_a, AnomalyType.SLOW_BROKER, "broker:1")
    path = lake.table("gold", "anomalies_a")
    rows = spark.sql(sql.replace("gold.anomalies", f"delta.`{path}`")
                     .replace("<finding>", victim.finding_id)).collect()
    assert [(r.ts_ms, r.client_id, r.total_ms) for r in rows] == [
        (q["ts_ms"], q["client_id"], q["total_ms"]) for q in victim.evidence["slow_requests"]]
    assert len(rows) == 5
