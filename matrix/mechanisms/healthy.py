"""Healthy scenarios: everyday operations a monitor must sit through without paging.

Each one is something operators and applications do every week, on a cluster that loses
no committed record and slows no broker beyond the moment:

- BrokerCrashRestart  kill -9 one broker, restart it after ~20 s, wait for full ISR. The
                      restarted broker may truncate its log to the leader's high
                      watermark ("Truncating partition ... to offset"): records above the
                      high watermark were never committed, so nothing acknowledged with
                      acks=all is lost. Not a data-loss page.
- RollingRestart      stop (controlled shutdown) and restart each broker in turn, the
                      active controller last, waiting for full ISR between them.
- ControllerFailover  kill -9 the active KRaft controller and restart it: another voter
                      takes over within seconds (with one controller the quorum is out
                      until it is back; run.notes says so).
- Rebalances          members join and leave a consumer group every ~10 s for a minute.
- TopicChurn          topics created, written to for a few seconds, deleted, again.
- BurstyLoad          a producer sending bursts at 10-20x the workload's rate.

Ground truth: nothing expected; explained only a member's retried commit that lands
after its newer one (matrix.fault.COMMITS_RETRIED, info). An unclean_election or log_truncation
(critical) page, an offset rewind or reset of a group that only rebalanced, or a slow
broker after a restart is a false page. observe_s keeps the runner watching two minutes
after the event for late findings (a truncation read from a log the agent reaches late, a
latency window that closes after the restart).
"""

from __future__ import annotations

import threading
import time
import uuid

from demo.faults.base import FaultContext, FaultRun, now_ms, wait_for
from matrix.fault import COMMITS_RETRIED, PARTNERS_LOADED, MatrixFault
from matrix.mechanisms.healthy_clients import BurstProducer, GroupMember, churn_cycle
from matrix.mechanisms.cluster_ops import (active_controller, isr_without, replicas_on,
                                           restore_cluster, rf, stop_workload_producer,
                                           wait_healthy)


class _Healthy(MatrixFault):
    fault_class = "healthy"
    observe_s = 120.0

    def explained(self):
        return (COMMITS_RETRIED,)

    def heal(self, ctx: FaultContext) -> None:
        restore_cluster(ctx)


def bounce(ctx: FaultContext, broker: int, *, crash: bool, down_s: float,
           while_down=None, await_shrink: bool = True, after_restart=None) -> dict:
    """Kill (crash) or stop one broker, leave it down `down_s` (and until the ISRs show
    it: just after a crash the old registration is still in the metadata with full ISRs,
    and "whole again" would pass at once), restart it, wait until the cluster is whole
    again; what happened, with epoch-ms times. `while_down` (returning notes) runs right
    after it went down, `after_restart` (the same) right after the restart."""
    cl = ctx.cluster
    old_pid = cl.node(broker).pid
    hosted = replicas_on(ctx.admin(), broker)
    t0 = time.monotonic()
    (cl.kill if crash else cl.stop_node)(broker)
    out = {"broker": broker, "how": "kill -9" if crash else "controlled shutdown",
           "old_pid": old_pid, "replicas": hosted, "down_ms": now_ms()}
    if while_down is not None:
        out.update(while_down())
    shrunk: list[str] = []

    def isr_shrank() -> bool:
        shrunk[:] = isr_without(ctx.admin(), broker)
        return bool(shrunk)

    # A crashed broker leaves the ISRs once the controller fences it (broker.session
    # .timeout.ms, 9 s); a stopped one at once. It stays down until the cluster has seen
    # that (at most 30 s), then for the rest of `down_s`. (Not when the quorum is down
    # with it: no ISR changes then.)
    if hosted and await_shrink and wait_for(f"ISRs without broker {broker}", isr_shrank,
                                            max(down_s, 30), ctx, interval_s=0.5):
        out["isr_shrank_ms"], out["isr_without"] = now_ms(), len(shrunk)
    ctx.sleep(max(0.0, down_s - (time.monotonic() - t0)))
    cl.restart(broker)
    out["restarted_ms"], out["new_pid"] = now_ms(), cl.node(broker).pid
    if after_restart is not None:
        out.update(after_restart())
    out["isr_full"] = wait_healthy(ctx, f"broker {broker} back in every ISR")
    out["isr_full_ms"] = now_ms()
    out["recovery_s"] = round((out["isr_full_ms"] - out["restarted_ms"]) / 1000, 1)
    return out


class BrokerCrashRestart(_Healthy):
    """kill -9 one broker, restart it after `down_s`."""

    name = "broker_crash_restart"
    title = "a broker crashes and restarts"

    def explained(self):
        return (COMMITS_RETRIED, PARTNERS_LOADED)

    def __init__(self, broker: int = 2, down_s: float = 20):
        self.broker, self.down_s = broker, down_s

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        ctx.say(f"killing broker {self.broker} (kill -9); restarting it in {self.down_s:.0f}s")
        run.fault_ms = now_ms()
        run.notes.update(bounce(ctx, self.broker, crash=True, down_s=self.down_s))


class RollingRestart(_Healthy):
    """Each broker in turn: controlled shutdown, restart, full ISR; controllers last, the
    active one last of all, as operators do (one controller election, not several)."""

    name = "rolling_restart"
    title = "a rolling restart of every broker"

    def explained(self):
        return (COMMITS_RETRIED, PARTNERS_LOADED)

    def __init__(self, down_s: float = 5):
        self.down_s = down_s

    @staticmethod
    def order(nodes: list[int], controllers: list[int], active: int | None) -> list[int]:
        """Brokers first, then controllers, the active controller last."""
        rest = [n for n in nodes if n not in controllers]
        return rest + [c for c in controllers if c != active] + ([active] if active else [])

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        cl = ctx.cluster
        order = self.order([n.node_id for n in cl.nodes], cl.controller_ids(),
                           active_controller(cl))
        run.notes["order"], run.notes["restarts"] = order, []
        run.fault_ms = now_ms()
        for broker in order:
            if ctx.stopping():
                return
            ctx.say(f"rolling restart: broker {broker}")
            run.notes["restarts"].append(bounce(ctx, broker, crash=False, down_s=self.down_s))


class ControllerFailover(_Healthy):
    """kill -9 the active KRaft controller; restart it after `down_s`."""

    name = "controller_failover"
    title = "the active KRaft controller crashes"

    def explained(self):
        return (COMMITS_RETRIED, PARTNERS_LOADED)

    def __init__(self, down_s: float = 15):
        self.down_s = down_s

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        cl = ctx.cluster
        voters = cl.controller_ids()
        seen: dict = {}
        wait_for("an active controller", lambda: seen.update(a=active_controller(cl)) or
                 seen["a"] is not None, 60, ctx)
        old = seen.get("a") or voters[-1]
        run.notes.update(voters=voters, old_controller=old)
        if len(voters) < 2:
            run.notes["single_controller"] = (
                f"one KRaft controller (node {old}): no failover possible; the quorum is "
                f"out until it is back (metadata frozen, no ISR change, no election)")
        ctx.say(f"killing the active controller, node {old} (voters {voters})")
        t0 = time.monotonic()

        def failover() -> dict:
            if len(voters) < 2:
                return {}

            def moved() -> bool:
                seen["a"] = active_controller(cl)
                return seen["a"] not in (None, old)

            if not wait_for("a new active controller", moved, 60, ctx):
                return {"new_controller": None}
            return {"new_controller": seen["a"],
                    "failover_s": round(time.monotonic() - t0, 1)}

        run.fault_ms = now_ms()
        run.notes.update(bounce(ctx, old, crash=True, down_s=self.down_s,
                                while_down=failover, await_shrink=len(voters) >= 2))
        if len(voters) < 2:   # no ISR to watch: wait for the quorum to be back
            run.notes["quorum_back"] = wait_for(
                f"node {old} active again", lambda: active_controller(cl) == old, 120, ctx)
        run.notes["controller_after"] = active_controller(cl)


def joins_at(step: int, max_extra: int) -> bool:
    """Whether step `step` of Rebalances adds a member (else one leaves): `max_extra`
    joins, as many leaves, again."""
    return step % (2 * max_extra) < max_extra


class Rebalances(_Healthy):
    """Extra members join and leave `group` every `interval_s` for `duration_s`.

    By default the workload's own `billing` group on `orders` (its commits go on through
    every rebalance); with `own_topic`, a topic and group of the mechanism's own, with a
    producer and a first member started in prepare."""

    name = "rebalances"
    title = "consumer group members come and go"

    def __init__(self, group: str = "billing", topic: str = "orders", own_topic: bool = False,
                 interval_s: float = 10, duration_s: float = 60, max_extra: int = 2):
        self.group, self.topic, self.own_topic = group, topic, own_topic
        self.interval_s, self.duration_s, self.max_extra = interval_s, duration_s, max_extra
        self.members: list[GroupMember] = []     # in the group now
        self.joined: list[GroupMember] = []      # every extra member of the run

    def prepare(self, ctx: FaultContext) -> None:
        if not self.own_topic:
            return
        from confluent_kafka.admin import NewTopic

        from demo.workload import ConsumerSpec, ProducerSpec, create_topics
        create_topics(ctx.bootstrap, [NewTopic(self.topic, 6, rf(ctx.cluster))])
        ctx.workload.start_producer(ProducerSpec(f"{self.topic}-producer", self.topic, 20))
        ctx.workload.start_consumer(ConsumerSpec(self.group, (self.topic,)))

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        run.fault_ms = now_ms()
        events = run.notes.setdefault("events", [])
        end, k = time.monotonic() + self.duration_s, 0
        while time.monotonic() < end and not ctx.stopping():
            # Two joins, two leaves, again: the group goes 1, 2, 3, 2, 1, 2, ... members.
            if joins_at(k, self.max_extra):
                m = GroupMember(ctx.bootstrap, self.group, (self.topic,),
                                f"{self.group}-extra-{k}", ctx.workload.log_dir)
                m.start()
                self.members.append(m)
                self.joined.append(m)
                events.append([now_ms(), "join", m.client_id])
            else:
                m = self.members.pop(0)
                m.stop()
                events.append([now_ms(), "leave", m.client_id])
            k += 1
            ctx.sleep(self.interval_s)
        self._stop_members()
        # Each extra member is handed an assignment at every rebalance it takes part in.
        run.notes["extra_member_assignments"] = {m.client_id: m.assignments for m in self.joined}
        run.notes["extra_member_messages"] = sum(m.messages for m in self.joined)

    def _stop_members(self) -> None:
        while self.members:
            self.members.pop().stop()

    def heal(self, ctx: FaultContext) -> None:
        self._stop_members()
        if self.own_topic:
            ctx.workload.stop_consumer(self.group)
            stop_workload_producer(ctx.workload, f"{self.topic}-producer")
        super().heal(ctx)


class TopicChurn(_Healthy):
    """`cycles` times: create a topic, write to it for `produce_s`, delete it."""

    name = "topic_churn"
    title = "topics created and deleted"

    def __init__(self, cycles: int = 5, produce_s: float = 5, rate_per_s: float = 50,
                 prefix: str = "churn", pause_s: float = 5):
        self.cycles, self.produce_s, self.rate_per_s = cycles, produce_s, rate_per_s
        self.prefix, self.pause_s = prefix, pause_s
        self.created: list[str] = []

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        run.fault_ms = now_ms()
        cycles = run.notes.setdefault("cycles", [])
        for i in range(self.cycles):
            if ctx.stopping():
                return
            topic = f"{self.prefix}-{i}-{uuid.uuid4().hex[:6]}"
            self.created.append(topic)
            cycles.append(churn_cycle(ctx, topic, rf(ctx.cluster), self.produce_s,
                                      self.rate_per_s))
            ctx.sleep(self.pause_s)

    def heal(self, ctx: FaultContext) -> None:
        left = set(self.created) & set(ctx.admin().list_topics(timeout=10).topics)
        if left:
            for f in ctx.admin().delete_topics(sorted(left), operation_timeout=30).values():
                try:
                    f.result(30)
                except Exception:  # noqa: BLE001 - deleted meanwhile
                    pass
        super().heal(ctx)


class BurstyLoad(_Healthy):
    """Bursts of `burst_rate` msg/s for `burst_s`, idle `idle_s`, for `duration_s`, on a
    topic of its own that a group reads (its lag spikes and drains each burst)."""

    name = "bursty_load"
    title = "bursts at 20x the workload's rate"

    def __init__(self, topic: str = "bursts", burst_rate: float = 800, burst_s: float = 3,
                 idle_s: float = 10, duration_s: float = 90, value_bytes: int = 200):
        self.topic, self.burst_rate, self.burst_s = topic, burst_rate, burst_s
        self.idle_s, self.duration_s, self.value_bytes = idle_s, duration_s, value_bytes
        self.group = f"{topic}-readers"
        self._stop = threading.Event()

    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import ConsumerSpec, create_topics
        create_topics(ctx.bootstrap, [NewTopic(self.topic, 6, rf(ctx.cluster),
                                               config={"min.insync.replicas": "2"})])
        ctx.workload.start_consumer(ConsumerSpec(self.group, (self.topic,), "latest"))

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        self._stop.clear()
        producer = BurstProducer(ctx.bootstrap, self.topic, f"{self.topic}-producer",
                                 self.value_bytes)
        run.fault_ms = now_ms()
        bursts = run.notes.setdefault("bursts", [])
        end = time.monotonic() + self.duration_s
        while time.monotonic() < end and not ctx.stopping() and not self._stop.is_set():
            bursts.append(producer.burst(self.burst_rate, self.burst_s))
            ctx.sleep(self.idle_s)
        producer.close()
        run.notes["delivered"] = sum(b["delivered"] for b in bursts)
        run.notes["errors"] = sum(b["errors"] for b in bursts)

    def heal(self, ctx: FaultContext) -> None:
        self._stop.set()
        ctx.workload.stop_consumer(self.group)
        super().heal(ctx)
