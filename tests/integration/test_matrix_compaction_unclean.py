"""The compaction and unclean-election mechanisms really happen on a real cluster.

One cluster: three brokers and a dedicated KRaft controller (node 4), so the RF 3 unclean
election may stop two brokers; broker settings as the demo's (replica.lag.time.max.ms
10 s, unclean elections looked for every 2 s, the cleaner looking for work every second).
Each mechanism runs prepare, inject, then the test reads Kafka itself (log-cleaner.log,
the controller's log, truncation lines, JMX, log ends), then heal.
"""

from __future__ import annotations

import itertools
import re
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from demo.faults.base import FaultContext, FaultRun, leader_and_isr, now_ms
from demo.faults.unclean_election import BROKER_CONFIG
from demo.workload import Workload
from matrix.mechanisms.compaction import CleanerStopped, GrowingCompactedPartition
from ingest.broker_log import parse_event
from matrix.mechanisms.unclean import SoleReplicaCrash, UncleanElection, UncleanNoLoss

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ctx(kmon_config):
    from infra.jvm_deps import JvmDeps
    from infra.local_cluster import LocalCluster

    work = Path(tempfile.mkdtemp(prefix="kmon-matrix-cu-", dir="/tmp"))
    config = kmon_config.with_overrides(
        kmon={"work_dir": str(work)},
        local_cluster={"controllers": 0, "dedicated_controllers": 1, "extra_broker_config": {
            **BROKER_CONFIG, "log.cleaner.backoff.ms": "1000"}})
    deps = JvmDeps(kmon_config.work_dir, kmon_config.jvm.maven_repo, kmon_config.jvm.offline)
    cluster = LocalCluster(config, deps, name="cu", brokers=3, owner_bound=True)
    c = None
    try:
        cluster.start()
        c = FaultContext(cluster, Workload(cluster.bootstrap_servers, work / "clients"))
        yield c
    finally:
        if c is not None:
            c.workload.stop()
            c.close()
        cluster.destroy()
        shutil.rmtree(work, ignore_errors=True)


def metric(node, name: str, **labels) -> list[float]:
    with urllib.request.urlopen(node.metrics_url, timeout=10) as r:
        text = r.read().decode()
    out = []
    for line in text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            out.append(float(line.rsplit(" ", 1)[1]))
    return out


def log_lines(node, pattern: str, files: str = "*.log") -> list[str]:
    rx = re.compile(pattern)
    return [line for f in sorted(node.log_dir.glob(files))
            for line in f.read_text(errors="replace").splitlines() if rx.search(line)]


def poll(check, timeout_s: float, what: str, interval_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(interval_s)
    raise AssertionError(f"timed out: {what}")


def test_corrupt_segment_makes_the_partition_uncleanable(ctx):
    f = CleanerStopped(leader=1, broker=2)
    r = FaultRun(f.name, now_ms())
    try:
        f.prepare(ctx)
        f.inject(ctx, r)
        assert r.notes["marked"] and r.fault_ms, r.notes
        node2 = ctx.cluster.node(2)
        lines = log_lines(node2, r"Marking its partition \(profiles-0\) as uncleanable",
                          "log-cleaner.log*")
        print(r.notes, lines[0])
        assert lines
        assert max(metric(node2, "kafka_log_logcleanermanager_uncleanable_partitions_count")) >= 1
        assert max(metric(ctx.cluster.node(1),
                          "kafka_log_logcleanermanager_uncleanable_partitions_count")) == 0
        assert metric(node2, "kafka_log_logcleaner_DeadThreadCount") in ([0.0], [])
    finally:
        f.heal(ctx)
    # Deleting the topic takes it off the uncleanable list at the cleaner's next look.
    poll(lambda: max(metric(ctx.cluster.node(2),
                            "kafka_log_logcleanermanager_uncleanable_partitions_count")) == 0,
         30, "broker 2's uncleanable count back to 0")


def test_never_repeated_keys_grow_the_compacted_partition(ctx):
    f = GrowingCompactedPartition(rate_per_s=200)
    r = FaultRun(f.name, now_ms())
    try:
        f.prepare(ctx)
        f.inject(ctx, r)
        leader = poll(lambda: max(leader_and_isr(ctx.admin(), "sessions")[0], 0), 20,
                      "sessions has a leader")
        node = ctx.cluster.node(leader)
        sizes = []
        for _ in range(5):
            time.sleep(4)
            sizes += metric(node, "kafka_log_log_size", topic="sessions", partition="0")[:1]
        print("sessions-0 sizes:", sizes)
        assert len(sizes) == 5 and sizes[0] > 0
        assert all(b > a for a, b in itertools.pairwise(sizes))
        assert not any(log_lines(ctx.cluster.node(b), r"cleaned log sessions-0",
                                 "log-cleaner.log*") for b in (1, 2, 3))
    finally:
        f.heal(ctx)


def unclean_lines(ctx, topic: str) -> list[str]:
    return log_lines(ctx.cluster.node(4), rf"UNCLEAN partition change for {topic}-0|"
                                          rf"unclean leader election for offline partition "
                                          rf"{topic}-0")


def truncations(ctx, broker: int, topic: str) -> list[str]:
    return log_lines(ctx.cluster.node(broker), rf"{topic}-0.*[Tt]runcat|[Tt]runcat.*{topic}-0")


def test_unclean_election_without_loss(ctx):
    f = UncleanNoLoss(leader=1, follower=2, records=500)
    r = FaultRun(f.name, now_ms())
    try:
        f.prepare(ctx)
        f.inject(ctx, r)
        n = r.notes
        print(n)
        assert n["isr_shrank"] and n["elected"] and n["isr_full"]
        # Every replica had every record: the old leader's end, the new leader's end.
        assert n["end_before"] == n["leader_end"] == n["end_after"] == 500
        lines = unclean_lines(ctx, "ledger-quiet")
        print("\n".join(lines))
        assert lines
        below = [t for t in truncations(ctx, 1, "ledger-quiet") if "below high watermark" in t]
        assert below == [], below
    finally:
        f.heal(ctx)


def test_unclean_election_rf3_loses_committed_records(ctx):
    f = UncleanElection(leader=1, insync=3, stale=2, leader_only_read=100)
    r = FaultRun(f.name, now_ms())
    try:
        f.prepare(ctx)
        f.inject(ctx, r)
        n = r.notes
        print(n)
        for b in (1, 2, 3, 4):
            print(b, "\n".join(log_lines(ctx.cluster.node(b), "ledger3-0|ledger3")[-25:]))
        assert n["isr_shrank"] and n["readers_past_stale_end"] and n["elected"] and n["isr_full"]
        # The new leader had what the stale replica had fetched, far less than the old ISR
        # had committed; the readers had committed past its end.
        assert 0 < n["new_leader_end"] < n["committed_end"] - 50
        assert n["stale_end"] + 100 < n["committed_end"]
        lines = unclean_lines(ctx, "ledger3")
        print("\n".join(lines))
        assert lines
        for b in (1, 3):     # both old ISR members cut their logs back to the new leader's
            t = [x for x in truncations(ctx, b, "ledger3") if "below high watermark" in x]
            print(b, "\n".join(t))
            assert t, f"broker {b} did not truncate below its high watermark"
    finally:
        f.heal(ctx)
    assert leader_and_isr(ctx.admin(), "__consumer_offsets")[1] == [1, 2, 3]


def test_sole_replica_crash_is_logged_unclean_from_the_last_known_elr(ctx):
    """What crash-rf1-dc's ground truth rests on: the RF 1 topic's broker killed and back,
    the controller logs each partition's return as an unclean election of that broker
    from the last known ELR, and no record is lost."""
    f = SoleReplicaCrash(topic="solo-t", broker=2, partitions=2, down_s=20)
    r = FaultRun(f.name, now_ms())
    try:
        f.prepare(ctx)
        f.inject(ctx, r)
        n = r.notes
        print(n)
        assert n["isr_full"] and n["elected"] and n["end_after"] >= n["end_before"] > 0
        lines = log_lines(ctx.cluster.node(4), r"UNCLEAN partition change for solo-t-\d")
        print("\n".join(lines))
        recs = [parse_event(x, cluster="t", broker=4, log="controller") for x in lines]
        assert {(x["partition"], x["new_leader"], tuple(x["last_known_elr"])) for x in recs} \
            == {(0, 2, (2,)), (1, 2, (2,))}
    finally:
        f.heal(ctx)
