"""Compaction faults other than the demo's throttled cleaner (fault_class "compaction").

`CleanerStopped`: one replica of a compacted partition has a corrupt segment, the way a
bad disk, a torn write or a broker bug leaves one. Kafka's cleaner (4.3.1,
org.apache.kafka.storage.internals.log.LogCleaner) reads every closed segment of the log
at each pass; reading the corrupt batch throws CorruptRecordException, the cleaner thread
catches it, logs "Unexpected exception thrown when cleaning log ... Marking its partition
(<tp>) as uncleanable" in log-cleaner.log and never cleans that partition again on that
broker (the thread lives on; LogCleanerManager's uncleanable-partitions-count gauge goes
to 1) until the broker restarts or the partition is deleted. The partition then grows
without bound there. The corruption is a batch header whose length field is below the
smallest possible batch (FileLogInputStream refuses it), written into the oldest closed
segment of a *follower* replica: clients read from the leader and never touch it, and the
follower only appends, so nothing but the cleaner notices. Expected: compaction_lag on
that broker with cause uncleanable_partitions (warning). `heal` deletes the topic: the
cleaner drops deleted partitions from its uncleanable set (maintainUncleanablePartitions)
at its next look, and the gauge returns to 0.

`GrowingCompactedPartition`: a compacted topic whose producer never repeats a key (a
session or request id in the key: a common application mistake), so compaction has
nothing to remove and the partition only grows. Expected: compaction_lag on the partition
"<topic>-0" with cause compacted_partition_growing (warning). What the detector needs to
see it (detectors/compaction_lag.py rule 5, evaluation/inputs/compaction.py):
- the size series kafka_log_log_size, one point per partition per minute, over
  growth_window_s (default 7200 s: never within a scenario) with growth_min_samples
  (default 6) points; a scenario must set [compaction_lag] growth_window_s = 120 and
  growth_min_samples = 3, say, and then needs about three minutes of growth;
- the topic known as compacted: topic configs are fetched every 300 s, so the topic is
  created in `prepare`, before the monitor's first fetch;
- no cleaner run on the partition in the window: rule 5 deliberately reads a cleaned but
  growing partition as a growing key space, not lag. With the broker's default segments
  (1 GB, 7 days) the active segment never rolls within a scenario and the cleaner never
  visits the partition. With `segment_ms` set, segments roll, the cleaner cleans them
  (0% reduction) and kmon stays silent by design: whether a correct monitor should then
  still report the growth is the open question this variant asks.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from demo.faults.base import FaultContext, FaultRun, now_ms, wait_for
from demo.workload import ProducerSpec
from matrix.fault import MatrixFault
from matrix.truth import Expect

UNCLEANABLE_LINE = "as uncleanable"
BATCH_LENGTH_AT = 8     # a record batch header: baseOffset int64, then batchLength int32
BAD_LENGTH = 1          # below the smallest batch (14 bytes): CorruptRecordException


def stop_producer(workload, name: str, timeout_s: float = 15) -> None:
    """Stop one workload producer (the Workload has no call for it)."""
    run = workload.producers.pop(name, None)
    if run is not None:
        run.stop.set()
        run.thread.join(timeout_s)


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics([topic], operation_timeout=30).values():
        try:
            f.result(30)
        except Exception as e:
            if "UNKNOWN_TOPIC" not in str(e):
                raise


def closed_segments(partition_dir: Path) -> list[Path]:
    """The partition's segment files but the active (last) one, oldest first."""
    logs = sorted(partition_dir.glob("*.log"), key=lambda p: int(p.stem))
    return logs[:-1]


def corrupt_first_batch(segment: Path) -> int:
    """Overwrite the first batch's length with one no batch can have; returns the old."""
    with open(segment, "r+b") as f:
        f.seek(BATCH_LENGTH_AT)
        (old,) = struct.unpack(">i", f.read(4))
        f.seek(BATCH_LENGTH_AT)
        f.write(struct.pack(">i", BAD_LENGTH))
        f.flush()
    return old


def marked_uncleanable(cleaner_log: Path, mark: int, tp: str) -> bool:
    """Whether log-cleaner.log, past `mark`, says the partition was marked uncleanable."""
    try:
        with open(cleaner_log, "rb") as f:
            f.seek(mark if f.seek(0, 2) >= mark else 0)
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return False
    return any(UNCLEANABLE_LINE in line and f"({tp})" in line for line in text.splitlines())


def compacted_config(**extra: str) -> dict[str, str]:
    return {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", **extra}


class CleanerStopped(MatrixFault):
    name = "compaction_uncleanable_partition"
    title = "a corrupt segment makes a compacted partition uncleanable"
    fault_class = "compaction"

    def __init__(self, topic: str = "profiles", leader: int = 1, broker: int = 2,
                 rate_per_s: float = 50, keys: int = 50, attempts: int = 5):
        self.topic, self.leader, self.broker, self.attempts = topic, leader, broker, attempts
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="all",
                                     value_bytes=200, key_space=keys)
        self._created = False

    @property
    def tp(self) -> str:
        return f"{self.topic}-0"

    def expect(self) -> tuple[Expect, ...]:
        return (Expect("uncleanable partition", "compaction_lag", f"broker:{self.broker}",
                       ("uncleanable_partitions",), ("warning",)),)

    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        # Segments roll every 2 s and any dirt is cleanable: the cleaner passes over the
        # log every few seconds, so the corruption is read soon after it is written.
        create_topics(ctx.bootstrap, [NewTopic(
            self.topic, 1, replica_assignment=[[self.leader, self.broker]],
            config=compacted_config(**{"segment.ms": "2000",
                                       "min.cleanable.dirty.ratio": "0.01"}))])
        self._created = True
        ctx.workload.start_producer(self.producer)

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        node = ctx.cluster.node(self.broker)
        pdir, cleaner_log = node.data_dir / self.tp, node.log_dir / "log-cleaner.log"
        run.notes.update(topic=self.topic, broker=self.broker, leader=self.leader)
        wait_for(f"closed segments of {self.tp} on broker {self.broker}",
                 lambda: len(closed_segments(pdir)) >= 2, 60, ctx)
        # The cleaner rewrites segments as it cleans them: a write into a file it is
        # replacing is lost with the old file, so try again until the cleaner says so.
        for attempt in range(1, self.attempts + 1):
            mark = cleaner_log.stat().st_size if cleaner_log.exists() else 0
            segment = closed_segments(pdir)[0]
            old = corrupt_first_batch(segment)
            ctx.say(f"corrupted {segment.name} of {self.tp} on broker {self.broker} (batch "
                    f"length {old} -> {BAD_LENGTH}), attempt {attempt}")
            if wait_for(f"broker {self.broker} to mark {self.tp} uncleanable",
                        lambda m=mark: marked_uncleanable(cleaner_log, m, self.tp), 20, ctx):
                run.fault_ms = now_ms()
                run.notes.update(segment=segment.name, attempts=attempt, marked=True)
                return
            if ctx.stopping():
                break
        run.notes["marked"] = False
        ctx.say(f"broker {self.broker} never marked {self.tp} uncleanable")

    def heal(self, ctx: FaultContext) -> None:
        stop_producer(ctx.workload, self.producer.name)
        if self._created:
            delete_topic(ctx.bootstrap, self.topic)
            self._created = False


class GrowingCompactedPartition(MatrixFault):
    name = "compaction_growing_partition"
    title = "a compacted topic whose keys never repeat keeps growing"
    fault_class = "compaction"
    observe_s = 60.0

    def __init__(self, topic: str = "sessions", rate_per_s: float = 100,
                 value_bytes: int = 500, segment_ms: int | None = None,
                 visible_after_s: float = 0.0):
        # visible_after_s: the growth is a fault only once it has lasted the detector's
        # growth window, and kmon reads a partition's size once a minute: the ground
        # truth's fault time is the producer's start plus this.
        self.topic, self.segment_ms, self.visible_after_s = topic, segment_ms, visible_after_s
        # key_space far beyond what a scenario writes: every key is new.
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="all",
                                     value_bytes=value_bytes, key_space=10 ** 12)
        self._created = False

    def expect(self) -> tuple[Expect, ...]:
        # New keys only: the cleaner runs (once segments roll) and removes nothing, so the
        # finding is the growing key space (rule 5b); with segments that never roll within
        # the window nothing is past the active segment and nothing is due.
        return (Expect("growing partition", "compaction_lag", re.escape(f"{self.topic}-0"),
                       ("compacted_key_space_growing",), ("warning",)),)

    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        extra = {} if self.segment_ms is None else {"segment.ms": str(self.segment_ms)}
        create_topics(ctx.bootstrap, [NewTopic(self.topic, 1, 3,
                                               config=compacted_config(**extra))])
        self._created = True

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        ctx.say(f"writing {self.producer.rate_per_s:.0f} records/s with never-repeated keys "
                f"to compacted '{self.topic}'")
        ctx.workload.start_producer(self.producer)
        run.notes["producer_started_ms"] = now_ms()
        run.fault_ms = run.notes["producer_started_ms"] + int(self.visible_after_s * 1000)
        run.notes.update(topic=self.topic, segment_ms=self.segment_ms,
                         bytes_per_s=self.producer.rate_per_s * self.producer.value_bytes)

    def heal(self, ctx: FaultContext) -> None:
        stop_producer(ctx.workload, self.producer.name)
        if self._created:
            delete_topic(ctx.bootstrap, self.topic)
            self._created = False
