"""A consumer group whose committed offsets vanish while it is stopped and behind.

A group that commits no offsets has none to resume from: when its members start again
the client resets by auto.offset.reset, and with earliest it reads the whole log again,
every message it had already read a second time. No commit moves backwards (the offsets
are gone, not rewritten), so the rewind shows only in its effect: the group's offsets
disappear while it is behind, and its position then starts over at the log start. How
the offsets go in production:

- `OffsetsDeleted`: an operator deletes the group (kafka-consumer-groups --delete, the
  DeleteGroups API; KIP-496's --delete-offsets does the same per partition) while it is
  stopped, thinking it unused, or to clear it before a redeploy.
- `OffsetsExpired`: the group stays empty longer than offsets.retention.minutes and the
  coordinator drops its offsets (KIP-211, KAFKA-4682; before it KAFKA-3806: offsets of a
  live but idle group expired). The retention is a static broker setting of 7 days: the
  scenario runs on a topology whose brokers keep offsets one minute.

Each works on a topic, producer and group of its own, started in prepare so the client-log
agent follows the group's librdkafka log (the workload's consumer, auto.offset.reset
earliest). The fault stops the group, lets the producer put it `behind_s` behind, makes
the offsets vanish (run.fault_ms: when the committed offsets are gone), starts the group
again `restart_after_s` later and waits until it has read past where it was.
run.notes: the offsets before, the log start and end when they vanished, how many
messages the group read twice (committed minus log start, summed).

Expected: offset_rewind on the group's partitions, with a cause that says the offsets
vanished ("offsets_deleted" or "offsets_expired", detectors/vanished_offsets.py), or
"unknown" where nothing tells the two apart; an admin deletion may also be called an
operator reset. Explained: the
client's reset of the group (offset_reset, any cause: librdkafka logs the reset to
BEGINNING for want of a committed offset).
"""

from __future__ import annotations

import re

from demo.faults.base import FaultContext, FaultRun, now_ms, wait_for
from matrix.fault import COMMITS_RETRIED, MatrixFault
from matrix.mechanisms.compaction import delete_topic
from matrix.mechanisms.rewind_clients import (committed, own_topic, start_producer,
                                              stop_producer, wait_group_empty, watermarks)
from matrix.mechanisms.rewinds import group_partitions, moved
from matrix.truth import Expect


def read_twice(committed_before: dict[int, int], log_start: dict[int, int]) -> int:
    """Messages a group reads again when it restarts at the log start: on each partition,
    from the log start up to where it had committed."""
    return sum(max(0, o - log_start.get(p, 0)) for p, o in committed_before.items() if o >= 0)


def vanished(offsets: dict[int, int]) -> bool:
    """No partition has a committed offset (librdkafka answers -1001 where there is none)."""
    return bool(offsets) and all(o < 0 for o in offsets.values())


class VanishedOffsets(MatrixFault):
    fault_class = "rewind"
    how = ""                               # what made them vanish, for notes and parts
    causes: tuple[str, ...] = ("unknown",)
    observe_s = 60.0

    def __init__(self, topic: str, group: str, partitions: int = 3, rate_per_s: float = 20.0,
                 behind_s: float = 20.0, restart_after_s: float = 10.0):
        self.topic, self.group, self.partitions = topic, group, partitions
        self.rate_per_s, self.behind_s, self.restart_after_s = rate_per_s, behind_s, restart_after_s
        self.producer: str | None = None

    def expect(self) -> tuple[Expect, ...]:
        return (Expect(f"{self.group} re-reads after its offsets were {self.how}",
                       "offset_rewind", group_partitions(self.group, self.topic), self.causes),)

    def explained(self) -> tuple[Expect, ...]:
        readers = rf"(group:{re.escape(self.group)}/)?{re.escape(self.topic)}-\d+"
        return (Expect(f"{self.group} reset to the log start", "offset_reset", readers),
                COMMITS_RETRIED)

    def prepare(self, ctx: FaultContext) -> None:
        from demo.workload import ConsumerSpec

        own_topic(ctx, self.topic, self.partitions)
        self.producer = start_producer(ctx, self.topic, self.rate_per_s)
        ctx.workload.start_consumer(ConsumerSpec(self.group, (self.topic,), "earliest"))

    def committed(self, ctx: FaultContext) -> dict[int, int]:
        return committed(ctx.bootstrap, self.group, self.topic, self.partitions)

    def vanish(self, ctx: FaultContext, run: FaultRun) -> bool:
        """Make the stopped group's offsets go; True once they are gone."""
        raise NotImplementedError

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        from demo.workload import ConsumerSpec

        wait_for(f"{self.group} committed", lambda: min(self.committed(ctx).values()) >= 1,
                 90, ctx)
        ctx.say(f"stopping '{self.group}'; it falls {self.behind_s:.0f}s behind")
        ctx.workload.stop_consumer(self.group)
        wait_group_empty(ctx, self.group)
        ctx.sleep(self.behind_s)
        before = self.committed(ctx)
        marks = watermarks(ctx.bootstrap, self.topic, self.partitions)
        run.notes.update(group=self.group, topic=self.topic, mechanism=f"offsets_{self.how}",
                         committed_before=before,
                         log_start={p: lo for p, (lo, _) in marks.items()},
                         log_end={p: hi for p, (_, hi) in marks.items()},
                         behind=sum(max(0, hi - before.get(p, hi)) for p, (_, hi) in marks.items()))
        if not self.vanish(ctx, run):
            raise RuntimeError(f"the committed offsets of {self.group} did not go "
                               f"({self.committed(ctx)})")
        run.fault_ms = now_ms()
        run.notes["read_twice"] = read_twice(before, run.notes["log_start"])
        ctx.say(f"'{self.group}' has no committed offsets ({self.how}); starting it again in "
                f"{self.restart_after_s:.0f}s with auto.offset.reset=earliest")
        ctx.sleep(self.restart_after_s)
        ctx.workload.start_consumer(ConsumerSpec(self.group, (self.topic,), "earliest"))
        run.notes["restarted_ms"] = now_ms()
        after: dict[int, int] = {}

        def caught_up() -> bool:
            after.update(self.committed(ctx))
            return all(after.get(p, -1) >= o for p, o in before.items())
        run.notes["caught_up"] = wait_for(f"{self.group} back past where it was", caught_up,
                                          90, ctx)
        run.notes["offsets"] = moved(before, after)

    def heal(self, ctx: FaultContext) -> None:
        ctx.workload.stop_consumer(self.group)
        if self.producer:
            stop_producer(ctx, self.producer)
            self.producer = None


class OffsetsDeleted(VanishedOffsets):
    name = "offsets_deleted"
    title = "an operator deletes a stopped group's offsets; it re-reads from the start"
    how = "deleted"
    causes = ("offsets_deleted", "operator_reset", "unknown")

    def __init__(self, topic: str = "vo-deleted", group: str = "vo-deleted-g", **kw):
        super().__init__(topic, group, **kw)

    def vanish(self, ctx: FaultContext, run: FaultRun) -> bool:
        ctx.say(f"operator: deletes group '{self.group}' (DeleteGroups)")
        ctx.admin().delete_consumer_groups([self.group])[self.group].result(30)
        run.notes["deleted_ms"] = now_ms()
        return wait_for(f"{self.group}'s offsets gone", lambda: vanished(self.committed(ctx)),
                        30, ctx)


class OffsetsExpired(VanishedOffsets):
    """Needs brokers with a short offsets.retention.minutes (scenarios.EXPIRING)."""
    name = "offsets_expired"
    title = "a stopped group's offsets expire; it re-reads from the start"
    how = "expired"
    causes = ("offsets_expired", "unknown")

    def __init__(self, topic: str = "vo-expired", group: str = "vo-expired-g",
                 expire_within_s: float = 180.0, **kw):
        super().__init__(topic, group, **kw)
        self.expire_within_s = expire_within_s

    def vanish(self, ctx: FaultContext, run: FaultRun) -> bool:
        ctx.say(f"waiting up to {self.expire_within_s:.0f}s for the coordinator to expire "
                f"'{self.group}''s offsets")
        return wait_for(f"{self.group}'s offsets expired", lambda: vanished(self.committed(ctx)),
                        self.expire_within_s, ctx, interval_s=1.0)

    def heal(self, ctx: FaultContext) -> None:
        # The stopped group's new offsets would expire again a minute later, in the next
        # scenario's time (a real expiry kmon reports): its topic goes, and its offsets
        # with it, as an operator retires a test group.
        super().heal(ctx)
        delete_topic(ctx.bootstrap, self.topic)
