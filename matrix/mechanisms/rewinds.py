"""Offset rewinds (and one healthy look-alike), each on a topic and group of its own.

Every mechanism creates its topic (3 partitions, RF 3) and a producer at ~20 msg/s in
prepare(), so the workload's billing and analytics groups are not touched. Ground truth
goes in run.notes: group, topic, the committed offsets before and after per partition;
run.fault_ms is the commit that moved the group back.

1. `ApplicationSeekCommit`: the group's one live member seeks back (N messages per
   partition, or to the offsets of N seconds ago) and commits the older positions while
   the group stays stable: same member, no rebalance, no coordinator change. The member is
   our own `SeekingConsumer` (the workload's consumers cannot be told to seek); it logs
   through librdkafka into ctx.workload.consumer_log(group), and its group is entered in
   ctx.workload.consumer_specs in prepare(), before the runner builds the client-log agent
   from that dict, so the agent follows the file. librdkafka logs no seek at its default
   level, so the log shows nothing: the group's stable membership is the evidence.
   Expected: offset_rewind on group:<g>/<topic>-<p>, cause application_seek.
2. `StaleProcessCommit`: demo.faults.offset_rewind's second half on our own group: a
   process remembers the group's offsets, waits while the live member moves on, joins the
   group and commits what it remembered. Expected: offset_rewind, cause stale_process.
3. `OperatorResetEmptyGroup`: the member stops, the group empties, an admin resets it
   (to earliest, shift-by -N, or to the offsets of N seconds ago: kafka-consumer-groups
   --reset-offsets), the member starts again. Expected: offset_rewind, operator_reset.
4. `AutoResetOutOfRange` (rewinds_out_of_range.py): the committed offset stops existing
   and the client resets itself; a rewind or a forward skip, by direction.
5. `CoordinatorFailover`: the group's coordinator is killed (-9) and restarted ~15 s
   later while the member commits every second. The offsets are replicated with acks=all,
   the new coordinator loads them, nothing goes back: a correct monitor finds no rewind.
   fault_class rewind_healthy: expect nothing, explain nothing.

Causes: for the member-made rewinds (1, 2) "member_commit" (a member committed an older
offset, which of the two is not known) is accepted too, as matrix.mechanisms.demo_faults
accepts it for the demo's stale commit.
"""

from __future__ import annotations

import re
import time

from demo.faults.base import FaultContext, FaultRun, now_ms, wait_for
from matrix.fault import COMMITS_RETRIED, PARTNERS_LOADED, MatrixFault
from matrix.mechanisms.rewind_clients import (
    SeekingConsumer, alter_offsets, committed, coordinator_partition, fresh_admin, group_state,
    isr_full, killable, offsets_at, own_topic, start_producer, stop_producer, wait_group_empty,
    watermarks)
from matrix.truth import Expect


def group_partitions(group: str, topic: str) -> str:
    """Entity regex: any partition of `topic` as `group` commits it."""
    return rf"group:{re.escape(group)}/{re.escape(topic)}-\d+"


def moved(before: dict[int, int], after: dict[int, int]) -> dict:
    """run.notes' per-partition record: {p: {"before": o, "after": o}}."""
    return {str(p): {"before": before.get(p), "after": after.get(p)} for p in sorted(after)}


class OwnTopicRewind(MatrixFault):
    """A topic, a producer and a group of the mechanism's own."""
    fault_class = "rewind"
    causes: tuple[str, ...] = ()

    def __init__(self, topic: str, group: str, partitions: int = 3, rate_per_s: float = 20.0):
        self.topic, self.group = topic, group
        self.partitions, self.rate_per_s = partitions, rate_per_s
        self.producer: str | None = None

    def prepare(self, ctx: FaultContext) -> None:
        own_topic(ctx, self.topic, self.partitions)
        self.producer = start_producer(ctx, self.topic, self.rate_per_s)

    def start_member(self, ctx: FaultContext) -> None:
        from demo.workload import ConsumerSpec
        ctx.workload.start_consumer(ConsumerSpec(self.group, (self.topic,)))

    def committed(self, ctx: FaultContext) -> dict[int, int]:
        return committed(ctx.bootstrap, self.group, self.topic, self.partitions)

    def wait_committed(self, ctx: FaultContext, at_least: int = 1, timeout_s: float = 90) -> bool:
        """Until the group has committed `at_least` on every partition."""
        return wait_for(f"{self.group} committed {at_least}",
                        lambda: min(self.committed(ctx).values()) >= at_least, timeout_s, ctx)

    def expect(self):
        return (Expect(f"rewind of {self.group}", "offset_rewind",
                       group_partitions(self.group, self.topic), self.causes),)

    def heal(self, ctx: FaultContext) -> None:
        ctx.workload.stop_consumer(self.group)
        if self.producer:
            stop_producer(ctx, self.producer)


class ApplicationSeekCommit(OwnTopicRewind):
    name = "application_seek_commit"
    title = "a live member seeks back and commits"
    causes = ("application_seek", "member_commit")

    def __init__(self, topic: str = "rw-seek", group: str = "rw-seek-g", back_messages: int = 100,
                 back_s: float | None = None, **kw):
        super().__init__(topic, group, **kw)
        self.back_messages, self.back_s = back_messages, back_s
        self.member: SeekingConsumer | None = None

    def prepare(self, ctx: FaultContext) -> None:
        from demo.workload import ConsumerSpec, _file_logger

        super().prepare(ctx)
        # Entered so the runner's client-log agent follows the member's log (not started
        # by the workload: our own member runs instead).
        ctx.workload.consumer_specs[self.group] = ConsumerSpec(self.group, (self.topic,))
        logger = _file_logger(ctx.workload.consumer_log(self.group), self.group)
        self.member = SeekingConsumer(ctx.bootstrap, self.group, self.topic, logger).start()

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        need = self.back_messages if self.back_s is None else 1
        self.wait_committed(ctx, need)
        members_before, coordinator_before = group_state(ctx.admin(), self.group)
        how = (f"{self.back_messages} messages" if self.back_s is None
               else f"to the offsets of {self.back_s:.0f}s ago")
        ctx.say(f"'{self.group}': its live member seeks back {how} and commits")
        result = self.member.seek_back(None if self.back_s is not None else self.back_messages,
                                       self.back_s)
        run.fault_ms = result.get("ms")
        members, coordinator = group_state(ctx.admin(), self.group)
        run.notes.update(group=self.group, topic=self.topic, mechanism="application_seek",
                         offsets=moved(result.get("before", {}), result.get("after", {})),
                         members=[members_before, members],
                         coordinator=[coordinator_before, coordinator])

    def heal(self, ctx: FaultContext) -> None:
        if self.member is not None:
            self.member.stop()
            self.member = None
        super().heal(ctx)


class StaleProcessCommit(OwnTopicRewind):
    name = "stale_process_commit"
    title = "a stale process joins and commits remembered offsets"
    causes = ("stale_process", "member_commit")

    def __init__(self, topic: str = "rw-stale", group: str = "rw-stale-g",
                 stale_age_s: float = 20.0, **kw):
        super().__init__(topic, group, **kw)
        self.stale_age_s = stale_age_s

    def prepare(self, ctx: FaultContext) -> None:
        super().prepare(ctx)
        self.start_member(ctx)

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.wait_committed(ctx)
        remembered = self.committed(ctx)
        ctx.say(f"a stale '{self.group}' process remembers {remembered}; waiting "
                f"{self.stale_age_s:.0f}s while the live member moves on")
        ctx.sleep(self.stale_age_s)
        stale = Consumer({"bootstrap.servers": ctx.bootstrap, "group.id": self.group,
                          "client.id": f"{self.group}-stale", "enable.auto.commit": False,
                          "auto.offset.reset": "latest"})
        stale.subscribe([self.topic])
        try:
            def assigned() -> bool:
                stale.poll(0.5)
                return bool(stale.assignment())
            wait_for("stale process assigned", assigned, 60, ctx)
            mine = {tp.partition for tp in stale.assignment()} or set(remembered)
            newer = self.committed(ctx)
            old = {p: o for p, o in remembered.items() if p in mine and 0 <= o < newer[p]}
            stale.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in old.items()],
                         asynchronous=False)
            run.fault_ms = now_ms()
        finally:
            stale.close()
        run.notes.update(group=self.group, topic=self.topic, mechanism="stale_process",
                         offsets=moved(newer, old))


class OperatorResetEmptyGroup(OwnTopicRewind):
    name = "operator_reset_empty_group"
    title = "an operator resets an emptied group"
    causes = ("operator_reset",)

    def __init__(self, mode: str = "earliest", amount: float = 100, topic: str | None = None,
                 group: str | None = None, **kw):
        """mode: earliest; shift (back `amount` messages per partition); datetime (to
        the offsets of `amount` seconds ago)."""
        if mode not in ("earliest", "shift", "datetime"):
            raise ValueError(f"mode: earliest, shift or datetime, not {mode}")
        super().__init__(topic or f"rw-reset-{mode}", group or f"rw-reset-{mode}-g", **kw)
        self.mode, self.amount = mode, amount

    def prepare(self, ctx: FaultContext) -> None:
        super().prepare(ctx)
        self.start_member(ctx)

    def targets(self, ctx: FaultContext, before: dict[int, int]) -> dict[int, int]:
        marks = watermarks(ctx.bootstrap, self.topic, self.partitions)
        if self.mode == "earliest":
            return {p: marks[p][0] for p in before}
        if self.mode == "shift":
            return {p: max(o - int(self.amount), marks[p][0]) for p, o in before.items()}
        at = offsets_at(ctx.bootstrap, self.topic, self.partitions,
                        now_ms() - int(self.amount * 1000))
        return {p: at[p] if at[p] >= 0 else marks[p][1] for p in before}

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        self.wait_committed(ctx, int(self.amount) if self.mode == "shift" else 1)
        ctx.say(f"operator: stop '{self.group}', reset it ({self.mode}), start it again")
        ctx.workload.stop_consumer(self.group)
        wait_group_empty(ctx, self.group)
        before = self.committed(ctx)
        after = self.targets(ctx, before)
        alter_offsets(ctx.admin(), self.group, self.topic, after)
        run.fault_ms = now_ms()
        run.notes.update(group=self.group, topic=self.topic, mechanism=f"operator_reset_{self.mode}",
                         offsets=moved(before, after))
        self.start_member(ctx)


class CoordinatorFailover(OwnTopicRewind):
    """Kill -9 the group's coordinator, restart it after `down_s`. The group is chosen in
    inject (not prepare: __consumer_offsets may not exist yet) among rw-coord-0..49 so
    that its coordinator is a broker whose crash keeps the KRaft quorum."""
    name = "coordinator_failover"
    title = "the group coordinator crashes and comes back"
    fault_class = "rewind_healthy"
    observe_s = 60.0

    def __init__(self, topic: str = "rw-coord", group_prefix: str = "rw-coord",
                 down_s: float = 15.0, **kw):
        super().__init__(topic, f"{group_prefix}-0", **kw)
        self.group_prefix, self.down_s = group_prefix, down_s
        self.killed: int | None = None

    def expect(self):
        return ()

    def explained(self):
        # The killed broker coordinated other groups too. Seen live: the
        # workload's billing group, coordinated there, committed 4 messages back right
        # after the move: a real rewind, which a correct monitor reports with the move as
        # its evidence. What must not appear is a rewind without a move, or data loss.
        return (Expect("rewinds after the coordinator move", "offset_rewind", r"group:.+",
                       ("stale_offset_after_coordinator_move",)), COMMITS_RETRIED,
                PARTNERS_LOADED)

    def pick_group(self, ctx: FaultContext) -> str:
        md = ctx.admin().list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
        n, controllers = len(md.partitions), ctx.cluster.controller_ids()
        for i in range(50):
            group = f"{self.group_prefix}-{i}"
            if n and killable(md.partitions[coordinator_partition(group, n)].leader, controllers):
                return group
        return f"{self.group_prefix}-0"

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        self.group = self.pick_group(ctx)
        self.start_member(ctx)
        self.wait_committed(ctx)
        ctx.sleep(5)   # a few commits before the crash
        members, coordinator = group_state(ctx.admin(), self.group)
        before = self.committed(ctx)
        if not killable(coordinator, ctx.cluster.controller_ids()):
            run.notes.update(group=self.group, skipped=f"coordinator {coordinator} is the quorum")
            return
        ctx.say(f"kill -9 broker {coordinator}, the coordinator of '{self.group}'; "
                f"restart it in {self.down_s:.0f}s")
        self.killed = coordinator
        ctx.cluster.kill(coordinator)
        run.fault_ms = now_ms()
        ctx.sleep(self.down_s)
        # Asked with a new client each attempt: the kept one has the dead broker cached as
        # the group's coordinator and waits for it to come back (in CI, no answer for
        # 90 s). The dead broker comes back only after this answer.
        asked = time.monotonic()
        _, moved_to = group_state(lambda: fresh_admin(ctx.bootstrap), self.group,
                                  retry_s=90.0)
        ctx.say(f"'{self.group}' moved to broker {moved_to} "
                f"(answered {time.monotonic() - asked:.0f}s after asking)")
        ctx.cluster.restart(coordinator)
        self.killed = None
        wait_for("ISR full again", lambda: isr_full(ctx.admin()), 120, ctx)
        after = self.committed(ctx)
        run.notes.update(group=self.group, topic=self.topic, mechanism="coordinator_failover",
                         coordinator=[coordinator, moved_to], members=members,
                         offsets=moved(before, after))

    def heal(self, ctx: FaultContext) -> None:
        if self.killed is not None:
            ctx.cluster.restart(self.killed)
            self.killed = None
        wait_for("ISR full again", lambda: isr_full(ctx.admin()), 120, ctx)
        super().heal(ctx)

