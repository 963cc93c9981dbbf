"""A broker behind the delay proxy is slow on the wire: acks=all Produce to partitions it
replicates (as follower or leader) takes the delay, partitions without it do not; the
leaders' request logs put the wait in Remote time. Delay off: back to normal, ISRs full."""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from demo.faults.base import FaultContext, FaultRun, now_ms
from matrix.mechanisms.delayed_broker import DelayedBroker

DELAY_MS = 200
# partition -> replicas (leader first): 0, 1 without broker 2; 2, 3 with 2 as follower;
# 4 led by 2.
ASSIGNMENT = [[1, 3], [3, 1], [1, 2], [3, 2], [2, 1]]


@pytest.fixture(scope="module")
def proxied(kmon_config, tmp_path_factory):
    from infra.local_cluster import LocalCluster

    config = kmon_config.with_overrides(kmon={"work_dir": str(tmp_path_factory.mktemp("dp"))})
    cluster = LocalCluster(config, name=f"pytest-dp-{os.getpid()}", brokers=3, owner_bound=True)
    fault = DelayedBroker(broker=2, delay_ms=DELAY_MS, duration_s=8)
    fault.install(cluster)
    try:
        cluster.start()
        yield cluster, fault
    finally:
        cluster.destroy()
        fault.uninstall()


def _latencies(bootstrap: str, topic: str, rounds: int) -> dict[int, float]:
    """Median acks=all latency (ms) per partition, one message per partition per round."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    lat: dict[int, list[float]] = {i: [] for i in range(len(ASSIGNMENT))}
    for _ in range(rounds):
        for part in lat:   # one partition per request: a request's latency is its slowest's
            p.produce(topic, b"x" * 100, partition=part,
                      on_delivery=lambda e, m: e is None and lat[m.partition()].append(m.latency()))
            p.flush(30)
    return {k: round(statistics.median(v) * 1000, 1) for k, v in lat.items() if v}


def _remote_ms(node, topic: str) -> list[float]:
    """remoteTimeMs of the node's acks=all Produce requests for `topic`, in log order."""
    out = []
    for line in open(node.request_log, errors="replace"):
        if "Completed request:" not in line or topic not in line:
            continue
        rec = json.loads(line.split("Completed request:", 1)[1].rsplit(" (kafka.request", 1)[0])
        if rec["requestHeader"]["requestApiKeyName"] == "PRODUCE" and \
                rec.get("request", {}).get("acks") == -1:
            out.append(float(rec["remoteTimeMs"]))
    return out


def test_delay_slows_partitions_that_replicate_to_the_delayed_broker(proxied):
    cluster, fault = proxied
    assert cluster.advertised_ports[2] != cluster.node(2).client_port
    topic = f"dp-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, len(ASSIGNMENT), replica_assignment=ASSIGNMENT,
                                  config={"min.insync.replicas": "2"})])[topic].result(30)
    time.sleep(2)
    _latencies(cluster.bootstrap_servers, topic, 3)           # connections, metadata
    before = _latencies(cluster.bootstrap_servers, topic, 15)

    ctx = FaultContext(cluster=cluster, workload=None, say=print)
    fault.proxy.set_delay(DELAY_MS)
    logged = {n: len(_remote_ms(cluster.node(n), topic)) for n in (1, 2, 3)}
    during = _latencies(cluster.bootstrap_servers, topic, 6)
    # Leaders 1 and 3 each lead a partition without broker 2 too: the top of their
    # Produce remote times is the one waiting for broker 2's fetches.
    remote = {n: sorted(_remote_ms(cluster.node(n), topic)[logged[n]:] or [0])
              for n in (1, 2, 3)}
    remote = {n: {"median": v[len(v) // 2], "p90": v[int(len(v) * 0.9)], "n": len(v)}
              for n, v in remote.items()}
    fault.heal(ctx)
    after = _latencies(cluster.bootstrap_servers, topic, 10)
    print(f"\nmedian acks=all latency ms per partition {ASSIGNMENT}:\n  before {before}\n"
          f"  delay {DELAY_MS} ms each way: {during}\n  after heal {after}\n"
          f"  leaders' median Produce remoteTimeMs with the delay: {remote}\n"
          f"  proxy {fault.proxy.stats}")

    for part in (0, 1):                        # broker 2 not involved
        assert during[part] < before[part] + DELAY_MS / 2, (part, before, during)
    for part in (2, 3):                        # broker 2 follows: a fetch round trip
        assert during[part] >= before[part] + 1.5 * DELAY_MS, (part, before, during)
    assert during[4] >= before[4] + 3 * DELAY_MS, (before, during)   # in, fetch, out
    assert remote[1]["p90"] >= 1.5 * DELAY_MS and remote[3]["p90"] >= 1.5 * DELAY_MS, remote
    assert remote[2]["p90"] >= 1.5 * DELAY_MS, remote
    assert max(after.values()) < DELAY_MS, after

    run = FaultRun("delayed_broker", now_ms())
    fault.duration_s = 2
    fault.inject(ctx, run)                      # on, then healed at the end
    assert fault.proxy.delay_ms == 0 and run.notes["delay_ms"] == DELAY_MS
    md = admin.list_topics(topic, timeout=10).topics[topic]
    assert all(len(p.isrs) == len(p.replicas) for p in md.partitions.values())
