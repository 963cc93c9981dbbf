"""Automatic resets after an out-of-range fetch: which are rewinds, which forward skips.

A consumer whose committed offset no longer exists in the log is answered
OFFSET_OUT_OF_RANGE and resets itself by auto.offset.reset (librdkafka logs it at warning
level, facility OFFSET: "offset reset (at offset N ...) to offset BEGINNING ...: Offset
out of range"). Whether that is a rewind depends only on where the committed offset was:

- past the log end (direction="rewind"): every reset goes back, to the log start
  (earliest: re-reads the whole log) or to the end (latest: re-reads nothing, but the
  group's position drops by the offsets that did not exist). A real cluster's log end
  never moves back without a truncation (the unclean_election class), so the offsets get
  there the way they do in practice: restored from elsewhere, here an operator (offsets
  translated from another cluster, or restored from a backup taken before the topic was
  recreated) sets the empty group 1000 past the end. That commit is itself a forward
  operator reset (offset_reset operator_reset_forward, explained); the member then starts,
  is out of range, resets and commits lower. Expected: offset_rewind on the group's
  partitions, cause auto_reset_after_out_of_range; explained: the offset_reset of the
  same cause (the client's reset line) and the operator's forward reset.
- before the log start (direction="forward"): the member stops, the producer goes on,
  delete_records (what retention does, sooner) moves the log start to the high watermark,
  once that is past the committed offset on every partition; the member starts again, is out of range and resets to the
  log start (earliest) or the end (latest), both ahead of its committed offset: it skips
  the deleted messages and re-reads none. Expected: offset_reset on the group's
  partitions, cause auto_reset_after_out_of_range, and no offset_rewind.

The forward case's member is a workload consumer (ctx.workload.start_consumer); the rewind
case's is a `SeekingConsumer` committing its positions explicitly every second (as the Java
consumer's auto-commit does), entered in ctx.workload.consumer_specs in prepare() and
logging to the same file. Both log to ctx.workload.consumer_log(group), which the runner's
client-log agent follows. Why not librdkafka's auto-commit for the rewind: it commits a
stored offset only when it is above the committed one (measured on 2.16.0: after the
reset to BEGINNING the group's committed offset stayed at 1130, past the end, for 60 s
while the member re-read offsets 0..130). With it the rewind never shows in
__consumer_offsets until the member reads past the restored offset; only the client's reset
line shows it.
"""

from __future__ import annotations

import re

from demo.faults.base import FaultContext, FaultRun, now_ms, wait_for
from matrix.mechanisms.rewind_clients import (
    SeekingConsumer, alter_offsets, reset_direction, wait_group_empty, watermarks)
from matrix.mechanisms.rewinds import OwnTopicRewind, group_partitions, moved
from matrix.truth import Expect

OUT_OF_RANGE = "auto_reset_after_out_of_range"


class AutoResetOutOfRange(OwnTopicRewind):
    name = "auto_reset_out_of_range"
    title = "a committed offset out of range, reset by the client"

    def __init__(self, direction: str = "rewind", reset: str = "earliest", ahead: int = 1000,
                 topic: str | None = None, group: str | None = None, **kw):
        if direction not in ("rewind", "forward") or reset not in ("earliest", "latest"):
            raise ValueError(f"direction rewind|forward, reset earliest|latest: "
                             f"{direction}, {reset}")
        super().__init__(topic or f"rw-oor-{direction}-{reset}",
                         group or f"rw-oor-{direction}-{reset}-g", **kw)
        self.direction, self.reset, self.ahead = direction, reset, ahead
        self.name = f"auto_reset_out_of_range_{direction}_{reset}"

    member = None

    def start_member(self, ctx: FaultContext) -> None:
        from demo.workload import ConsumerSpec, _file_logger

        spec = ConsumerSpec(self.group, (self.topic,), self.reset)
        if self.direction == "forward":
            ctx.workload.start_consumer(spec)
            return
        ctx.workload.consumer_specs[self.group] = spec   # the client-log agent's list
        logger = _file_logger(ctx.workload.consumer_log(self.group), self.group)
        self.member = SeekingConsumer(ctx.bootstrap, self.group, self.topic, logger,
                                      auto_offset_reset=self.reset).start()

    def stop_member(self, ctx: FaultContext) -> None:
        ctx.workload.stop_consumer(self.group)
        if self.member is not None:
            self.member.stop()
            self.member = None

    def heal(self, ctx: FaultContext) -> None:
        self.stop_member(ctx)
        super().heal(ctx)

    def prepare(self, ctx: FaultContext) -> None:
        super().prepare(ctx)
        self.start_member(ctx)

    def _reset(self) -> Expect:
        entity = rf"(group:{re.escape(self.group)}/)?{re.escape(self.topic)}-\d+"
        return Expect(f"reset of {self.group}", "offset_reset", entity, (OUT_OF_RANGE,))

    def expect(self):
        if self.direction == "forward":
            return (self._reset(),)
        return (Expect(f"rewind of {self.group}", "offset_rewind",
                       group_partitions(self.group, self.topic), (OUT_OF_RANGE,)),)

    def explained(self):
        if self.direction == "forward":
            return ()
        return (self._reset(),
                Expect(f"operator restores {self.group} past the end", "offset_reset",
                       group_partitions(self.group, self.topic), ("operator_reset_forward",)))

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        self.wait_committed(ctx)
        self.stop_member(ctx)
        wait_group_empty(ctx, self.group)
        before = self.committed(ctx)
        if self.direction == "rewind":
            marks = watermarks(ctx.bootstrap, self.topic, self.partitions)
            placed = {p: marks[p][1] + self.ahead for p in before}
            ctx.say(f"operator: restores '{self.group}' {self.ahead} past the log end")
            alter_offsets(ctx.admin(), self.group, self.topic, placed)
        else:
            # The producer must append past the committed offset on every partition, or
            # delete_records up to the high watermark leaves that partition's commit in
            # range (its sticky partitioner can leave one partition without a record for
            # seconds: CI saw committed 162 and log start 162 after a fixed 3-s wait).
            wait_for(f"{self.topic} appended past {self.group}'s commits",
                     lambda: all(hw > before[p] for p, (_, hw) in watermarks(
                         ctx.bootstrap, self.topic, self.partitions).items()), 60, ctx, 0.5)
            placed = before
            ctx.say(f"delete_records: the log start of {self.topic} moves past "
                    f"'{self.group}''s committed offsets")
            run.notes["log_start"] = self.delete_all(ctx)
        run.notes.update(group=self.group, topic=self.topic, direction=self.direction,
                         reset=self.reset, committed_before=before, placed=placed)
        started_ms = now_ms()
        self.start_member(ctx)
        after: dict[int, int] = {}

        def reset_committed() -> bool:
            nonlocal after
            after = self.committed(ctx)
            return all(reset_direction(placed[p], after[p]) == self.direction
                       for p in placed if after.get(p, -1) >= 0) and all(
                after.get(p, -1) >= 0 for p in placed)
        wait_for(f"{self.group} reset and committed", reset_committed, 60, ctx, 0.2)
        run.fault_ms = now_ms() if self.direction == "rewind" else started_ms
        run.notes["offsets"] = moved(placed, after)

    def delete_all(self, ctx: FaultContext) -> dict[str, int]:
        """delete_records up to each partition's high watermark; the new log starts."""
        from confluent_kafka import TopicPartition

        futures = ctx.admin().delete_records(
            [TopicPartition(self.topic, p, -1) for p in range(self.partitions)])
        return {str(tp.partition): f.result(30).low_watermark for tp, f in futures.items()}
