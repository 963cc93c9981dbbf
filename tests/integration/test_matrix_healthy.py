"""The healthy mechanisms really happen on a real cluster, and leave it whole.

One 3-node KRaft cluster (every node a broker and a controller, so the controller can fail
over) with an acks=all producer on ``orders`` (6 partitions, RF 3, min.insync 2), as the
matrix's workload has. Each mechanism runs shortened (seconds, not minutes) and the test
checks the mechanism's effect in Kafka itself: a new broker pid and ISRs that shrank and
refilled, a new active controller, a group generation that grew (read from
__consumer_offsets), topics listed then gone, a topic whose records' timestamps come in
bursts. After each heal every ISR is full.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from demo.faults.base import FaultContext, FaultRun, now_ms
from demo.workload import ProducerSpec, Workload, create_topics
from matrix.fault import COMMITS_RETRIED, PARTNERS_LOADED
from matrix.mechanisms import healthy
from matrix.mechanisms.cluster_ops import broker_ids, under_replicated

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ctx(kmon_config):
    from infra.jvm_deps import JvmDeps
    from infra.local_cluster import LocalCluster

    work = Path(tempfile.mkdtemp(prefix="kmon-matrix-healthy-", dir="/tmp"))
    config = kmon_config.with_overrides(kmon={"work_dir": str(work)},
                                        local_cluster={"controllers": 0})
    deps = JvmDeps(kmon_config.work_dir, kmon_config.jvm.maven_repo, kmon_config.jvm.offline)
    cluster = LocalCluster(config, deps, name="healthy", brokers=3, owner_bound=True)
    c = None
    try:
        cluster.start()
        c = FaultContext(cluster, Workload(cluster.bootstrap_servers, work / "clients"))
        create_topics(cluster.bootstrap_servers, [NewTopic(
            "orders", 6, 3, config={"min.insync.replicas": "2"})])
        c.workload.start_producer(ProducerSpec("orders-producer", "orders", 40))
        yield c
    finally:
        if c is not None:
            c.workload.stop()
            c.close()
        cluster.destroy()
        shutil.rmtree(work, ignore_errors=True)


def run(ctx, fault) -> FaultRun:
    """prepare, inject, heal, as the matrix runner does; the cluster must be whole after."""
    r = FaultRun(fault.name, now_ms())
    fault.prepare(ctx)
    try:
        fault.inject(ctx, r)
    finally:
        fault.heal(ctx)
    assert fault.fault_class == "healthy" and fault.expect() == ()
    # only a retried commit landing late, and the load an outage leaves on its partners
    assert fault.explained()[0] == COMMITS_RETRIED
    assert set(fault.explained()) <= {COMMITS_RETRIED, PARTNERS_LOADED}
    assert fault.observe_s >= 90
    assert under_replicated(ctx.admin(), broker_ids(ctx.cluster)) == []
    assert r.fault_ms is not None
    print(fault.name, r.notes)
    return r


def test_broker_crash_restart(ctx):
    r = run(ctx, healthy.BrokerCrashRestart(broker=2, down_s=12))
    n = r.notes
    assert n["new_pid"] != n["old_pid"] and n["how"] == "kill -9"
    assert n["replicas"] > 0 and n["isr_without"] > 0, n      # the ISRs shrank...
    # ...and refilled after the restart.
    assert n["isr_full"] and n["isr_shrank_ms"] < n["restarted_ms"] < n["isr_full_ms"]


def test_controller_failover(ctx):
    r = run(ctx, healthy.ControllerFailover(down_s=4))
    n = r.notes
    assert n["voters"] == [1, 2, 3] and "single_controller" not in n
    assert n["new_controller"] not in (None, n["old_controller"]), n
    assert n["new_pid"] != n["old_pid"] and n["isr_full"]
    assert n["isr_without"] > 0 and n["isr_shrank_ms"] < n["restarted_ms"] < n["isr_full_ms"]


def test_rolling_restart(ctx):
    r = run(ctx, healthy.RollingRestart(down_s=1))
    restarts = r.notes["restarts"]
    assert sorted(x["broker"] for x in restarts) == [1, 2, 3]
    for x in restarts:
        assert x["how"] == "controlled shutdown" and x["new_pid"] != x["old_pid"], x
        assert x["isr_without"] > 0 and x["isr_full"], x
    # One at a time: each broker was down only after the one before it was back.
    for a, b in zip(restarts, restarts[1:]):
        assert a["isr_full_ms"] <= b["down_ms"]


def group_generations(bootstrap: str, group: str) -> list[int]:
    """Every generation of `group` in __consumer_offsets (its GroupMetadata records)."""
    from ingest.consumer_offsets import decode_group_value, is_group_key

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{now_ms()}",
                  "enable.auto.commit": False})
    md = c.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    c.assign([TopicPartition("__consumer_offsets", p, 0) for p in md.partitions])
    ends = {p: c.get_watermark_offsets(TopicPartition("__consumer_offsets", p), 10)[1]
            for p in md.partitions}
    gens, done, deadline = [], {p for p, e in ends.items() if e == 0}, time.monotonic() + 30
    while len(done) < len(ends) and time.monotonic() < deadline:
        for m in c.consume(500, timeout=1):
            if m.error() is None and m.value() and is_group_key(m.key()) \
                    and group.encode() in m.key():
                gens.append(decode_group_value(m.value())["generation"])
            if m.error() is None and m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
    c.close()
    return gens


def test_rebalances(ctx):
    fault = healthy.Rebalances(group="hr-group", topic="hr-topic", own_topic=True,
                               interval_s=5, duration_s=20)
    r = run(ctx, fault)
    events = [e[1] for e in r.notes["events"]]
    assert events == ["join", "join", "leave", "leave"], events
    # Every extra member was handed partitions. How many times depends on whether two
    # membership changes fall into one rebalance (CI once saw 2 in all at a 2.5-s pace).
    assigned = r.notes["extra_member_assignments"]
    assert sorted(assigned) == ["hr-group-extra-0", "hr-group-extra-1"], assigned
    assert all(n >= 1 for n in assigned.values()), assigned
    gens = group_generations(ctx.bootstrap, "hr-group")
    # The first member's join, two joins, two leaves, the first member leaving in heal.
    assert max(gens) >= 5, gens


def test_topic_churn(ctx):
    fault = healthy.TopicChurn(cycles=2, produce_s=1, pause_s=0, prefix="hchurn")
    r = run(ctx, fault)
    cycles = r.notes["cycles"]
    assert len(cycles) == 2 and all(c["led"] and c["gone"] for c in cycles), cycles
    assert all(c["delivered"] == c["sent"] > 0 and c["errors"] == 0 for c in cycles)
    assert not [t for t in ctx.admin().list_topics(timeout=10).topics if t.startswith("hchurn")]


def test_bursty_load(ctx):
    fault = healthy.BurstyLoad(topic="hbursts", burst_rate=800, burst_s=2, idle_s=4,
                               duration_s=12)
    r = run(ctx, fault)
    bursts = r.notes["bursts"]
    assert len(bursts) >= 2 and r.notes["errors"] == 0
    assert all(b["delivered"] == b["sent"] >= 1200 for b in bursts), bursts
    # Kafka's own record timestamps: as many clusters as bursts, each within its burst.
    c = Consumer({"bootstrap.servers": ctx.bootstrap, "group.id": f"check-{now_ms()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["hbursts"])
    stamps, deadline = [], time.monotonic() + 30
    while len(stamps) < r.notes["delivered"] and time.monotonic() < deadline:
        stamps += [m.timestamp()[1] for m in c.consume(1000, timeout=1) if m.error() is None]
    c.close()
    assert len(stamps) == r.notes["delivered"]
    stamps.sort()
    groups = [[stamps[0]]]
    for t in stamps[1:]:
        (groups[-1].append(t) if t - groups[-1][-1] < 2000 else groups.append([t]))
    assert len(groups) == len(bursts), [(g[0], g[-1], len(g)) for g in groups]
    for g, b in zip(groups, bursts):
        assert b["start_ms"] - 500 <= g[0] and g[-1] <= b["sent_ms"] + 500
