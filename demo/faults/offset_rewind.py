"""Offset rewinds, two ways, on two groups of the workload.

1. An operator resets group ``billing`` to the earliest offsets: its consumer is stopped
   (the group empties), the offsets are set with the admin API (what
   kafka-consumer-groups.sh --reset-offsets --to-earliest does), the consumer starts again
   and re-reads everything. Expected: an offset_rewind on ``billing``, cause operator_reset.
2. A stale process of group ``analytics`` joins while the group is live and commits the
   offsets it remembered from a while ago over the newer ones. Expected: an offset_rewind
   on ``analytics``, cause stale_process (the coordinator's request log shows a new member
   whose first commit on the partition is the rewind; member_commit if no line of it is
   found), sized in messages.
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from core.findings import AnomalyType
from demo.faults.base import Fault, FaultContext, FaultRun, now_ms, wait_for


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[TopicPartition]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()


class OffsetRewinds(Fault):
    name = "offset_rewind"
    title = "offset rewinds (operator reset, stale process)"

    def __init__(self, reset_group: str = "billing", reset_topic: str = "orders",
                 stale_group: str = "analytics", stale_topic: str = "clicks",
                 partitions: int = 6, stale_age_s: float = 20.0):
        self.reset_group, self.reset_topic = reset_group, reset_topic
        self.stale_group, self.stale_topic = stale_group, stale_topic
        self.partitions, self.stale_age_s = partitions, stale_age_s

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions
        from confluent_kafka.admin import AdminClient

        bs = ctx.bootstrap
        # The stale process: remember the group's offsets now, commit them later.
        remembered = committed(bs, self.stale_group, self.stale_topic, self.partitions)
        ctx.say(f"a stale '{self.stale_group}' process remembers its offsets; waiting "
                f"{self.stale_age_s:.0f}s while the live one moves on")
        ctx.sleep(self.stale_age_s)

        # 1. operator reset to earliest
        ctx.say(f"operator: stop '{self.reset_group}', reset it to the earliest offsets, "
                f"start it again")
        ctx.workload.stop_consumer(self.reset_group)
        admin = AdminClient({"bootstrap.servers": bs})
        wait_for(f"group {self.reset_group} empty",
                 lambda: _group_is_empty(admin, self.reset_group), 60, ctx)
        before = committed(bs, self.reset_group, self.reset_topic, self.partitions)
        earliest = [TopicPartition(self.reset_topic, p, 0) for p in range(self.partitions)]
        f = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(self.reset_group, earliest)])
        for fut in f.values():
            fut.result(30)
        run.fault_ms = now_ms()
        run.notes["reset_messages"] = sum(max(tp.offset, 0) for tp in before)
        ctx.workload.start_consumer(ctx.workload.consumer_specs[self.reset_group])

        # 2. the stale process commits what it remembered, as a live member of the group
        ctx.say(f"stale process: joins '{self.stale_group}' and commits its old offsets")
        stale = Consumer({"bootstrap.servers": bs, "group.id": self.stale_group,
                          "client.id": f"{self.stale_group}-stale", "enable.auto.commit": False,
                          "auto.offset.reset": "latest"})
        stale.subscribe([self.stale_topic])
        def assigned() -> bool:
            stale.poll(0.5)
            return bool(stale.assignment())

        joined = wait_for("stale process assigned", assigned, 60, ctx)
        now = committed(bs, self.stale_group, self.stale_topic, self.partitions)
        old = [tp for tp in remembered if tp.offset >= 0]
        mine = {tp.partition for tp in stale.assignment()} if joined else set()
        old = [tp for tp in old if tp.partition in mine] or old
        try:
            stale.commit(offsets=old, asynchronous=False)
        finally:
            stale.close()
        newer = {tp.partition: tp.offset for tp in now}
        run.notes["stale_messages"] = sum(max(newer.get(tp.partition, 0) - tp.offset, 0)
                                          for tp in old)

    @property
    def parts(self) -> tuple[str, ...]:
        return (self.reset_group, self.stale_group)

    def part_of(self, finding) -> str | None:
        """An offset_rewind on a partition of either group (entity group:<g>/<t>-<p>)."""
        if finding.type is not AnomalyType.OFFSET_REWIND:
            return None
        group = finding.entity.removeprefix("group:").rsplit("/", 1)[0]
        return group if group in self.parts else None


def _group_is_empty(admin, group: str) -> bool:
    desc = admin.describe_consumer_groups([group])[group].result(10)
    return not desc.members
