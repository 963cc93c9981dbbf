"""The two slow mechanisms of the fault matrix bite on a real cluster, as the request log
shows: a broker starved of CPU by a cgroup quota answers Produce and Fetch late, and a
reader that drains its socket slowly makes the broker's ResponseSend for its own fetches
take seconds while every other client is served at once."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from demo.faults.base import FaultContext, FaultRun, now_ms
from ingest.request_log import parse_request_line
from matrix.mechanisms.cpu_quota import CPU_ROOT, CpuStarvedBroker, cpu_cgroup_of
from matrix.mechanisms.slow_client import SlowReader
from tests.integration.test_local_cluster import create_topic

needs_cgroup = pytest.mark.skipif(not os.access(CPU_ROOT, os.W_OK),
                                  reason=f"{CPU_ROOT} (cgroup v1 cpu) is not writable")


def requests(cluster, since_ms: int, until_ms: int) -> list[dict]:
    out = []
    for n in cluster.nodes:
        for line in open(n.request_log, errors="replace"):
            r = parse_request_line(line, cluster="t", broker=n.node_id)
            if (isinstance(r, dict) and since_ms <= r["ts_ms"] <= until_ms
                    and not r["is_controller_traffic"]):
                out.append(r)
    return out


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else 0.0


class Traffic:
    """An acks=all producer (~50 msg/s) and a consumer on one topic: the requests the
    brokers serve while a fault is in place."""

    def __init__(self, cluster, topic: str):
        self.stop = threading.Event()
        bootstrap = cluster.bootstrap_servers
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "linger.ms": 20, "client.id": "traffic-producer"})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                                  "client.id": "traffic-consumer",
                                  "auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])
        self.topic = topic
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]
        for t in self.threads:
            t.start()

    def _produce(self):
        while not self.stop.is_set():
            self.producer.produce(self.topic, value=b"v" * 200)
            self.producer.poll(0)
            time.sleep(0.02)
        self.producer.flush(30)

    def _consume(self):
        while not self.stop.is_set():
            self.consumer.poll(0.5)
        self.consumer.close()

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)


def partitions_behind(ctx) -> list[str]:
    """Partitions whose ISR is short of their replicas. Other tests share the cluster and
    leave topics of replication factor 1 or 2: an ISR is full when it holds every replica
    the partition has, not three."""
    md = ctx.admin().list_topics(timeout=10)
    return [f"{name}-{p.id} replicas {p.replicas} isr {p.isrs}"
            for name, t in md.topics.items() for p in t.partitions.values()
            if set(p.isrs) != set(p.replicas)]


@needs_cgroup
def test_heal_moves_back_what_is_left_and_skips_a_pid_that_is_gone():
    """A real cgroup, no Kafka: a process starved then gone (a restarted broker)."""
    proc = subprocess.Popen(["sleep", "60"])
    f = CpuStarvedBroker(broker=900 + os.getpid() % 50, quota_share=0.05)
    try:
        f.starve(proc.pid)
        assert (f.group / "cpu.cfs_quota_us").read_text().strip() == "5000"
        assert cpu_cgroup_of(proc.pid) == f"/{f.group.name}"
        proc.kill()
        proc.wait()
        f.heal(None)
        assert not f.group.exists()
        f.heal(None)   # idempotent
    finally:
        proc.kill()
        f.heal(None)


@needs_cgroup
def test_cpu_starved_broker_answers_late(kafka_cluster):
    topic = f"starve-{uuid.uuid4().hex[:6]}"
    create_topic(kafka_cluster, topic, **{"min.insync.replicas": "2"})
    ctx = FaultContext(kafka_cluster, workload=None, say=lambda s: None)
    traffic = Traffic(kafka_cluster, topic)
    f = CpuStarvedBroker(broker=2, quota_share=0.05, duration_s=25)
    pid = kafka_cluster.node(2).pid
    try:
        time.sleep(5)
        run = FaultRun(f.name, now_ms())
        f.inject(ctx, run)
        until = now_ms()
        assert run.fault_ms and run.notes["cfs_quota_us"] == 5000
        assert not f.group.exists() and cpu_cgroup_of(pid) == "/", "heal left the cgroup"
    finally:
        traffic.close()
        f.heal(ctx)
    rs = [r for r in requests(kafka_cluster, run.fault_ms + 5000, until)
          if r["api"] in ("Produce", "Fetch")]
    starved = [r["total_ms"] for r in rs if r["broker"] == 2]
    # The others wait for broker 2 in Remote (acks=all, follower fetches): their own part
    # of each request stays fast.
    others_own = [r["total_ms"] - r["remote_ms"] for r in rs if r["broker"] != 2]
    print(f"starved broker p99 {p99(starved):.0f} ms over {len(starved)} requests; "
          f"others' non-remote p99 {p99(others_own):.0f} ms")
    assert p99(starved) > 300, f"broker 2 p99 {p99(starved):.0f} ms"
    assert p99(others_own) < 300
    try:
        # A hang guard, not a timing check: on a loaded CI machine the broker starved for
        # 25 s took over a minute to catch up and rejoin every ISR. Starved, it can miss
        # its heartbeats and be fenced (broker.session.timeout.ms): it leaves the metadata
        # until it registers again after the heal (seen once, by hand, right after heal),
        # so the test waits for it to be back, not for it never to have left.
        deadline = time.monotonic() + 240
        while (brokers := set(ctx.admin().list_topics(timeout=10).brokers)) != {1, 2, 3}:
            assert time.monotonic() < deadline, f"brokers {sorted(brokers)} four minutes after heal"
            time.sleep(1)
        while behind := partitions_behind(ctx):
            assert time.monotonic() < deadline, f"ISR not full four minutes after heal: {behind}"
            time.sleep(1)
    finally:
        ctx.close()


def test_slow_reader_makes_its_own_response_sends_slow(kafka_cluster):
    topic = f"busy-{uuid.uuid4().hex[:6]}"
    create_topic(kafka_cluster, topic)
    ctx = FaultContext(kafka_cluster, workload=None, say=lambda s: None)
    f = SlowReader(broker=1, topic=f"slow-reads-{uuid.uuid4().hex[:6]}", backlog_mb=3)
    traffic = Traffic(kafka_cluster, topic)
    try:
        f.prepare(ctx)
        run = FaultRun(f.name, now_ms())
        f.inject(ctx, run)
        time.sleep(25)
        until = now_ms()
    finally:
        f.heal(ctx)
        traffic.close()
        ctx.close()
    assert f.stats["responses"] >= 4 and not f._readers
    b1 = [r for r in requests(kafka_cluster, run.fault_ms, until) if r["broker"] == 1]
    mine = [r for r in b1 if r["client_id"] == f.client_id]
    others = [r for r in b1 if r["client_id"] != f.client_id]
    sends = sorted(r["send_ms"] for r in mine)
    print(f"{f.client_id}: {len(mine)} of {len(b1)} requests on broker 1, send ms {sends}; "
          f"others' send p99 {p99([r['send_ms'] for r in others]):.1f} ms")
    assert mine and all(r["api"] == "Fetch" and r["fetch_kind"] == "consumer" for r in mine)
    assert sends[len(sends) // 2] > 1000, "the slow reader's sends are not slow"
    assert p99([r["send_ms"] for r in others]) < 100
    assert len(mine) < 0.2 * len(b1)
