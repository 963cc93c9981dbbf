"""The offsets reader and the partition end offsets agent against the real local cluster.

Two consumer groups commit known offsets (an old offset among them), one group is deleted
(offset tombstones); the reader publishes exactly those commits in order, survives being
abandoned mid-way and restarted over its position file, and a failed flush, without
losing or repeating a record. The end offsets equal what was produced.
"""

from __future__ import annotations

import json
import uuid
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from ingest.agent_metrics import AgentMetrics
from ingest.consumer_offsets import encode_key, encode_value
from ingest.offsets_agent import OffsetsAgent
from ingest.partition_offsets_agent import PartitionOffsetsAgent
from ingest.sinks import LandingSink, SinkError
from matrix.mechanisms.rewind_clients import watermarks
from tests.conftest import wait_until
from tests.integration.test_local_cluster import create_topic

CLUSTER = "it"


class FailingFirstFlushSink:
    """Buffers like a real sink; the first flush that holds records fails and loses them."""

    def __init__(self, inner: LandingSink):
        self.inner = inner
        self.buffer: list[tuple[str, str, dict]] = []
        self.failed = False

    def send(self, stream, key, record):
        self.buffer.append((stream, key, record))

    def flush(self, timeout=30.0):
        batch, self.buffer = self.buffer, []
        if batch and not self.failed:
            self.failed = True
            raise SinkError(f"{len(batch)} records not delivered (test)")
        for stream, key, record in batch:
            self.inner.send(stream, key, record)
        self.inner.flush(timeout)

    def close(self):
        self.flush()


def landed(root: Path, stream: str) -> list[dict]:
    """Every record of a stream in the landing folder, in the order the files were written."""
    d = root / stream
    if not d.exists():
        return []
    out = []
    for f in sorted(d.glob("*.jsonl")):  # <agent id>-<time ns>-<seq>.jsonl
        out.extend(json.loads(line) for line in f.read_text().splitlines() if line)
    return out


def offsets_ends(bootstrap: str) -> dict[int, int]:
    """The end offset of each __consumer_offsets partition now."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics("__consumer_offsets",
                                                                   timeout=30)
    partitions = len(md.topics["__consumer_offsets"].partitions)
    return {p: end for p, (_, end) in watermarks(bootstrap, "__consumer_offsets",
                                                 partitions).items()}


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, value=f"v{i}".encode(), partition=partition)
    assert p.flush(60) == 0


class Committer:
    """Commits explicit offsets for one group, remembering them in commit order."""

    def __init__(self, bootstrap: str, group: str, log: list):
        self.group = group
        self.log = log
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "enable.auto.commit": False})

    def commit(self, topic: str, partition: int, offset: int) -> None:
        def committed():
            try:
                self.consumer.commit(offsets=[TopicPartition(topic, partition, offset)],
                                     asynchronous=False)
                return True
            except KafkaException as e:
                # A fresh cluster answers COORDINATOR_LOAD_IN_PROGRESS (or NOT_COORDINATOR)
                # while __consumer_offsets loads; nothing was written, so commit again.
                if not e.args[0].retriable():
                    raise
                return False
        wait_until(committed, 60, f"{self.group} to commit {topic}-{partition}@{offset}")
        self.log.append((self.group, topic, partition, offset))

    def close(self):
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


def ours(records: list[dict], groups: set[str]) -> list[dict]:
    return [r for r in records if r["group_id"] in groups]


def by_group(records: list[dict]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for r in sorted(records, key=lambda r: (r["source_partition"], r["source_offset"])):
        out.setdefault(r["group_id"], []).append(
            (r["group_id"], r["topic"], r["partition"], r["offset"]))
    return out


def test_offset_commits_and_end_offsets_are_published_exactly_once_across_a_restart(
        kafka_cluster, tmp_path):
    with ExitStack() as cleanup:
        check_offsets_agents(kafka_cluster, tmp_path, cleanup)


def check_offsets_agents(kafka_cluster, tmp_path, cleanup: ExitStack):
    bs = kafka_cluster.bootstrap_servers
    tag = uuid.uuid4().hex[:6]
    topic_a, topic_b, topic_c = f"offs-a-{tag}", f"offs-b-{tag}", f"offs-c-{tag}"
    counts = {topic_a: {0: 10, 1: 20, 2: 30}, topic_b: {0: 12, 1: 5}, topic_c: {0: 4}}
    for topic, parts in counts.items():
        create_topic(kafka_cluster, topic, partitions=len(parts))
        produce(bs, topic, parts)
    g1, g2 = f"offs-g1-{tag}", f"offs-g2-{tag}"
    groups = {g1, g2}
    committed: list[tuple] = []
    c1, c2 = Committer(bs, g1, committed), Committer(bs, g2, committed)
    cleanup.callback(c1.close)
    cleanup.callback(c2.close)

    landing = tmp_path / "landing"
    positions = tmp_path / "offsets-positions.json"
    conf = {"bootstrap.servers": bs}
    # The cluster is shared by the integration tier: __consumer_offsets holds every earlier
    # test's commits. A reader catches up with them first, from the beginning, at its
    # default batch size (reading them 5 at a time took 20-104 s in CI, then past the
    # wait), and saves its positions; the reader abandoned mid-way starts from there.
    ends_before = offsets_ends(bs)
    m0 = AgentMetrics(CollectorRegistry(), "offsets")
    catch_up = OffsetsAgent(CLUSTER, conf, LandingSink(landing, "offsets-0"), positions, m0)
    cleanup.callback(catch_up.close)

    def caught_up():
        catch_up.poll_once()
        saved = catch_up.saved_positions()
        return all(saved.get(p, 0) >= end for p, end in ends_before.items() if end)

    wait_until(caught_up, 120, "a reader to catch up with __consumer_offsets")
    catch_up.close()
    # Phase 1, including an explicit old offset (a rewind of g1 on A-0 from 8 to 3).
    c1.commit(topic_a, 0, 5)
    c1.commit(topic_a, 1, 20)
    c1.commit(topic_a, 0, 8)
    c1.commit(topic_a, 2, 30)
    c2.commit(topic_b, 0, 7)
    c2.commit(topic_b, 1, 3)
    c1.commit(topic_a, 0, 3)

    m1 = AgentMetrics(CollectorRegistry(), "offsets")
    first = OffsetsAgent(CLUSTER, conf, LandingSink(landing, "offsets-1"), positions, m1,
                         batch_records=5)
    cleanup.callback(first.close)

    def first_got_some():
        first.poll_once()
        return ours(landed(landing, "offset_commits"), groups)

    by_first = wait_until(first_got_some, 120, "the first reader to publish some commits")
    # It stopped after the first batch (at most 5 records) holding any of ours, so part of
    # phase 1 is still unread. Abandoned mid-way like a killed process: whatever it fetched
    # but did not publish and save is the restarted reader's job.
    assert len(by_first) < len(committed)
    first.close()

    # Phase 2: more commits (another move backwards), then g2 is deleted -> tombstones.
    c1.commit(topic_a, 0, 10)
    c1.commit(topic_a, 1, 15)
    c2.commit(topic_b, 0, 12)
    c1.close()
    c2.close()
    admin = AdminClient(conf)
    admin.delete_consumer_groups([g2], request_timeout=30)[g2].result(60)

    registry = CollectorRegistry()
    m2 = AgentMetrics(registry, "offsets")
    sink2 = FailingFirstFlushSink(LandingSink(landing, "offsets-2"))
    second = OffsetsAgent(CLUSTER, conf, sink2, positions, m2)
    cleanup.callback(second.close)
    expected_g2_tombstones = {(g2, topic_b, 0, None), (g2, topic_b, 1, None)}

    def second_has_everything():
        second.poll_once()
        got = by_group(ours(landed(landing, "offset_commits"), groups))
        return (len(got.get(g1, [])) == len([c for c in committed if c[0] == g1])
                and len(got.get(g2, [])) == len([c for c in committed if c[0] == g2]) + 2
                and got)

    got = wait_until(second_has_everything, 180, "every commit and tombstone of both groups")
    assert sink2.failed
    assert registry.get_sample_value("kmon_agent_flush_failures_total",
                                     {"agent": "offsets"}) == 1

    # Record for record, in commit order per group (a group lives in one source partition).
    assert got[g1] == [c for c in committed if c[0] == g1]
    assert got[g2][:3] == [c for c in committed if c[0] == g2]
    assert set(got[g2][3:]) == expected_g2_tombstones

    everything = landed(landing, "offset_commits")
    ids = [r["record_id"] for r in everything]
    assert len(ids) == len(set(ids)), "a record was published twice"
    for r in everything:
        assert r["record_id"] == (f"{CLUSTER}:__consumer_offsets:{r['source_partition']}:"
                                  f"{r['source_offset']}")
    # In order per source partition, across both readers.
    by_source: dict[int, list[int]] = {}
    for r in everything:
        by_source.setdefault(r["source_partition"], []).append(r["source_offset"])
    assert all(offs == sorted(offs) for offs in by_source.values())

    mine = ours(everything, groups)
    assert all(r["cluster"] == CLUSTER and r["ts_ms"] for r in mine)
    assert all(r["is_tombstone"] == (r["offset"] is None) for r in mine)
    assert {r["value_version"] for r in mine if not r["is_tombstone"]} == {4}
    assert landed(landing, "quarantine") == []
    # Group metadata records go to group_members: here the deleted group's tombstone.
    members = [r for r in landed(landing, "group_members") if r["group_id"] in groups]
    assert any(r["group_id"] == g2 and r["is_tombstone"] and r["member_count"] == 0
               for r in members), members
    assert all(r["record_id"] == f"{CLUSTER}:__consumer_offsets:{r['source_partition']}:"
                                 f"{r['source_offset']}" for r in members)

    committed_partitions = second.committed_partitions()
    assert {(topic_a, 0), (topic_a, 1), (topic_a, 2), (topic_b, 0), (topic_b, 1)} <= \
        committed_partitions
    second.close()

    # End offsets of the partitions that appear in commits.
    pm = AgentMetrics(CollectorRegistry(), "partition_offsets")
    ends = PartitionOffsetsAgent(CLUSTER, conf, LandingSink(landing, "partition-offsets-1"), pm,
                                 partitions=lambda: committed_partitions)
    assert ends.poll_once() >= 5
    snapshot = {(r["topic"], r["partition"]): r for r in landed(landing, "partition_offsets")}
    for topic in (topic_a, topic_b):
        for partition, n in counts[topic].items():
            r = snapshot[(topic, partition)]
            assert (r["earliest_offset"], r["latest_offset"]) == (0, n)
            assert r["leader"] in {1, 2, 3}
            assert r["record_id"] == f"{CLUSTER}:{topic}:{partition}:{r['ts_ms']}"
    assert (topic_c, 0) not in snapshot  # nothing committed there
    ends.close()

    # With every non-internal topic.
    all_topics = PartitionOffsetsAgent(CLUSTER, conf, LandingSink(tmp_path / "all", "po-2"),
                                       pm, include_all_topics=True)
    all_topics.poll_once()
    every = {(r["topic"], r["partition"]): r for r in landed(tmp_path / "all",
                                                              "partition_offsets")}
    assert every[(topic_c, 0)]["latest_offset"] == 4
    assert not any(t.startswith("__") for t, _ in every)
    all_topics.close()


def test_records_deleted_before_the_reader_got_to_them_are_one_lost_span(kafka_cluster,
                                                                          tmp_path):
    """The broker refuses to delete records of __consumer_offsets, so the reader follows a
    copy: a one-partition topic of commit records in __consumer_offsets' own format, whose
    log start offset `delete_records` moves past the reader's saved position."""
    bs = kafka_cluster.bootstrap_servers
    tag = uuid.uuid4().hex[:6]
    copy = f"offs-copy-{tag}"
    create_topic(kafka_cluster, copy, partitions=1)

    class CopyReader(OffsetsAgent):
        TOPIC = copy

    producer = Producer({"bootstrap.servers": bs, "acks": "all"})

    def commit(offsets):
        for o in offsets:
            producer.produce(copy, key=encode_key(f"g-{tag}", "orders", 0),
                             value=encode_value(o, None, 1_700_000_000_000 + o), partition=0)
        assert producer.flush(60) == 0

    landing = tmp_path / "landing"
    positions = tmp_path / "positions.json"
    conf = {"bootstrap.servers": bs}
    commit(range(0, 5))                                   # source offsets 0..4
    first = CopyReader(CLUSTER, conf, LandingSink(landing, "copy-1"), positions,
                       AgentMetrics(CollectorRegistry(), "offsets"))
    wait_until(lambda: first.poll_once() >= 0 and first.saved_positions().get(0) == 5, 60,
               "the first reader to read the copy")
    first.close()

    commit(range(5, 12))                                  # 5..11 while the reader is down
    admin = AdminClient(conf)
    [fut] = admin.delete_records([TopicPartition(copy, 0, 9)]).values()
    assert fut.result(60).low_watermark == 9              # 5..8 are gone

    registry = CollectorRegistry()
    sink = FailingFirstFlushSink(LandingSink(landing, "copy-2"))
    second = CopyReader(CLUSTER, conf, sink, positions, AgentMetrics(registry, "offsets"))
    wait_until(lambda: second.poll_once() >= 0 and second.saved_positions().get(0) == 12, 120,
               "the second reader to go on after the gap")
    second.close()
    assert sink.failed                                    # the row was sent again after it
    rows = [r for r in landed(landing, "quarantine") if r["reason"].startswith("lost_span")]
    assert len(rows) == 1, rows
    [row] = rows
    assert row["reason"] == "lost_span:log_start_moved" and row["origin"] == copy
    assert json.loads(row["raw"]) == {"from": {"offset": 5}, "to": {"offset": 9}, "lost": 4}
    assert (row["source_partition"], row["source_offset"]) == (0, 5)
    assert row["record_id"] == f"{CLUSTER}:__consumer_offsets:0:lost_span:5"
    assert registry.get_sample_value("kmon_agent_dropped_records_total",
                                     {"agent": "offsets", "reason": "log_start_moved"}) == 4
    commits = [r["offset"] for r in landed(landing, "offset_commits")]
    assert commits == [0, 1, 2, 3, 4, 9, 10, 11]

    third = CopyReader(CLUSTER, conf, LandingSink(landing, "copy-3"), positions,
                       AgentMetrics(CollectorRegistry(), "offsets"))
    commit([12])
    wait_until(lambda: third.poll_once() >= 0 and third.saved_positions().get(0) == 13, 60,
               "the third reader to read on")
    third.close()
    assert len([r for r in landed(landing, "quarantine")
                if r["reason"].startswith("lost_span")]) == 1
