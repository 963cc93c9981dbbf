"""What operational mechanisms ask of a live cluster: is it whole, who is the active
controller, put every broker back, stop a client the workload started.

"Healthy" here means what an operator checks before the next step of a rolling restart:
every broker in the metadata, every partition led, and every ISR equal to its replica list
(no under-replicated partition, internal topics included). The active KRaft controller is
read from each controller's JMX exporter (ActiveControllerCount is 1 on the active one
only): DescribeCluster answered by a broker names a random live broker in KRaft, not the
quorum leader.
"""

from __future__ import annotations

import logging
import urllib.request

from demo.faults.base import FaultContext, wait_for

log = logging.getLogger(__name__)

ACTIVE_METRIC = "kafka_controller_kafkacontroller_activecontrollercount"


def under_replicated(admin, brokers: set[int], timeout_s: float = 5) -> list[str]:
    """What keeps the cluster from being whole: missing brokers, partitions without a
    leader or with an ISR short of their replicas. Empty: healthy."""
    md = admin.list_topics(timeout=timeout_s)
    out = [f"broker {b} not in metadata" for b in sorted(brokers - set(md.brokers))]
    for t in md.topics.values():
        if t.error is not None:
            out.append(f"{t.topic}: {t.error}")
            continue
        for p in t.partitions.values():
            if p.leader < 0 or sorted(p.isrs) != sorted(p.replicas):
                out.append(f"{t.topic}-{p.id} leader {p.leader} isr {sorted(p.isrs)} "
                           f"replicas {sorted(p.replicas)}")
    return out


def isr_without(admin, broker: int, timeout_s: float = 5) -> list[str]:
    """Partitions that have `broker` as a replica but not in their ISR."""
    md = admin.list_topics(timeout=timeout_s)
    return [f"{t.topic}-{p.id}" for t in md.topics.values() if t.error is None
            for p in t.partitions.values() if broker in p.replicas and broker not in p.isrs]


def replicas_on(admin, broker: int, timeout_s: float = 5) -> int:
    md = admin.list_topics(timeout=timeout_s)
    return sum(broker in p.replicas for t in md.topics.values() for p in t.partitions.values())


def broker_ids(cluster) -> set[int]:
    """Nodes that serve clients (not controller-only nodes, where the layout has them)."""
    return {n.node_id for n in getattr(cluster, "broker_nodes", cluster.nodes)}


def wait_healthy(ctx: FaultContext, what: str, timeout_s: float = 180) -> bool:
    """Until every broker is back and every ISR is full; False at the timeout."""
    brokers = broker_ids(ctx.cluster)
    last: dict = {}

    def whole() -> bool:
        last["short"] = under_replicated(ctx.admin(), brokers)
        return not last["short"]

    ok = wait_for(what, whole, timeout_s, ctx)
    if not ok:
        ctx.say(f"{what}: not whole after {timeout_s:.0f}s: {last.get('short', [])[:5]}")
    return ok


def active_controller(cluster) -> int | None:
    """The node whose controller metrics say it is the active controller, if any."""
    for node_id in cluster.controller_ids():
        try:
            with urllib.request.urlopen(cluster.node(node_id).metrics_url, timeout=5) as r:
                text = r.read().decode(errors="replace")
        except OSError:
            continue
        if is_active(text):
            return node_id
    return None


def is_active(metrics_text: str) -> bool:
    """Does this JMX exporter page say its node is the active controller?"""
    for line in metrics_text.splitlines():
        if line.startswith(ACTIVE_METRIC) and not line.startswith("#"):
            try:
                if float(line.rsplit(" ", 1)[1]) >= 1:
                    return True
            except (IndexError, ValueError):
                continue
    return False


def elect_preferred(ctx: FaultContext) -> None:
    """Give leadership back to each partition's preferred replica, as after a real rolling
    restart (auto.leader.rebalance would do it within 5 minutes): the next scenario finds
    leaders where the topology put them. Best effort: "election not needed" is fine."""
    from confluent_kafka import ElectionType

    try:
        ctx.admin().elect_leaders(ElectionType.PREFERRED, None).result(30)
    except Exception as e:  # noqa: BLE001 - partitions already led by their preferred replica
        log.debug("preferred leader election: %s", e)


def restore_cluster(ctx: FaultContext, timeout_s: float = 180) -> bool:
    """Resume paused and restart stopped brokers, then wait until the cluster is whole.
    Idempotent: on a healthy cluster it only checks."""
    cl = ctx.cluster
    for row in cl.status():
        if row["state"] == "paused":
            cl.resume(row["node"])
        elif row["state"] == "stopped":
            ctx.say(f"restarting broker {row['node']}")
            cl.restart(row["node"])
    ok = wait_healthy(ctx, "every broker back with a full ISR", timeout_s)
    if ok:
        elect_preferred(ctx)
    return ok


def stop_workload_producer(workload, name: str, timeout_s: float = 30) -> None:
    """Stop one producer the workload started (Workload has stop_consumer, not this)."""
    run = workload.producers.pop(name, None)
    if run:
        run.stop.set()
        run.thread.join(timeout_s)


def rf(cluster) -> int:
    return min(3, len(cluster.nodes))
