"""Compaction lag: a compacted topic written faster than a throttled log cleaner can clean.

The topic ``customers`` rolls a segment every few seconds and promises (its
max.compaction.lag.ms) that no dirty record waits longer than a few seconds. The fault
throttles every broker's cleaner I/O (the dynamic broker config
log.cleaner.io.max.bytes.per.second) to a trickle while a producer keeps updating keys:
each cleaning pass takes longer than the last, the dirty share rises pass after pass,
and records wait past the topic's limit. Expected: a compaction_lag finding (falling
behind). `heal` removes the throttle.

Only one broker is throttled, and healing waits for it, because of how Kafka applies the
throttle (seen in the demo's broker logs, Kafka 4.3.1): a change of a log.cleaner.*
dynamic config restarts the cleaner threads from the broker's metadata thread, and a
thread stops only after its current sleep in the throttler, which is sized for the old
rate (a 1.8 MB pass at 20 kB/s: 90 s; up to 9 minutes seen). Until then that broker
applies no metadata at all: no ISR or leader change, so high watermarks freeze and a
later fault (the unclean election) does not happen as planned. So the fault throttles
the one broker outside the election's replicas, and `heal` waits for that broker's
cleaner to start again ("Starting the log cleaner" in its log-cleaner.log); past
`restart_after_s` it restarts the broker instead, which applies the metadata at once.
"""

from __future__ import annotations

from pathlib import Path

from core.findings import AnomalyType, broker_entity
from demo.faults.base import Fault, FaultContext, FaultRun, wait_for
from demo.workload import ProducerSpec

THROTTLE_KEY = "log.cleaner.io.max.bytes.per.second"
CLEANER_STARTED = "Starting the log cleaner"


def topic_config(max_compaction_lag_ms: int) -> dict[str, str]:
    return {"cleanup.policy": "compact", "segment.ms": "3000",
            "min.cleanable.dirty.ratio": "0.1", "min.compaction.lag.ms": "0",
            "max.compaction.lag.ms": str(max_compaction_lag_ms),
            "delete.retention.ms": "1000"}


def _set_broker_config(bootstrap: str, brokers: list[int], key: str, value: str | None) -> None:
    """Set (or delete, value None) a dynamic config on each broker (the cluster-wide default,
    kafka-configs --entity-default, has an empty resource name that confluent-kafka refuses)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for b in brokers:   # one BROKER resource per call: the admin API allows no more
        res = ConfigResource(ResourceType.BROKER, str(b),
                             incremental_configs=[ConfigEntry(key, value or "",
                                                              incremental_operation=op)])
        for f in admin.incremental_alter_configs([res]).values():
            f.result(30)


def cleaner_log_mark(log_file: Path) -> int:
    """Where the broker's log-cleaner.log ends now (0 when there is none yet)."""
    try:
        return log_file.stat().st_size
    except FileNotFoundError:
        return 0


def cleaner_started_since(log_file: Path, mark: int) -> bool:
    """Whether the cleaner logged a (re)start after `mark` (a file rolled since is read
    whole)."""
    try:
        with open(log_file, "rb") as f:
            if f.seek(0, 2) >= mark:
                f.seek(mark)
            else:
                f.seek(0)
            return CLEANER_STARTED.encode() in f.read()
    except FileNotFoundError:
        return False


class CompactionLag(Fault):
    name = "compaction_lag"
    title = "compaction lag (throttled cleaner)"

    def __init__(self, topic: str = "customers", partitions: int = 3,
                 max_compaction_lag_ms: int = 5000, throttle_bytes_per_s: int = 20_000,
                 rate_per_s: float = 400, value_bytes: int = 500, keys: int = 500,
                 broker: int = 3, restart_after_s: float = 60):
        self.topic, self.partitions = topic, partitions
        self.max_compaction_lag_ms = max_compaction_lag_ms
        self.throttle = throttle_bytes_per_s
        self.broker, self.restart_after_s = broker, restart_after_s
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="all",
                                     value_bytes=value_bytes, key_space=keys)
        self._throttled = False

    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        create_topics(ctx.bootstrap, [NewTopic(self.topic, self.partitions, 3,
                                               config=topic_config(self.max_compaction_lag_ms))])
        ctx.workload.start_producer(self.producer)

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        ctx.say(f"throttling broker {self.broker}'s log cleaner to {self.throttle:,} bytes/s "
                f"while '{self.topic}' takes {self.producer.rate_per_s:.0f} updates/s "
                f"(max.compaction.lag.ms={self.max_compaction_lag_ms})")
        _set_broker_config(ctx.bootstrap, [self.broker], THROTTLE_KEY, str(self.throttle))
        self._throttled = True
        run.notes.update(throttle_bytes_per_s=self.throttle, topic=self.topic,
                         broker=self.broker)

    def part_of(self, finding) -> str | None:
        # The throttled broker's own finding: another broker's cleaner (one frozen by the
        # slow-broker fault, say) is not this fault.
        return ("finding" if finding.type is AnomalyType.COMPACTION_LAG
                and finding.entity == broker_entity(self.broker) else None)

    def heal(self, ctx: FaultContext) -> None:
        if not self._throttled:
            return
        cleaner_log = ctx.cluster.node(self.broker).log_dir / "log-cleaner.log"
        mark = cleaner_log_mark(cleaner_log)
        _set_broker_config(ctx.bootstrap, [self.broker], THROTTLE_KEY, None)
        self._throttled = False
        if ctx.stopping():
            return   # the demo is ending: stopping the cluster ends the sleep too
        ctx.say(f"throttle removed; waiting for broker {self.broker}'s log cleaner to start "
                f"again (it first sleeps out the throttle, and the broker applies no metadata "
                f"until then)")
        if wait_for(f"broker {self.broker}'s log cleaner to restart",
                    lambda: cleaner_started_since(cleaner_log, mark), self.restart_after_s,
                    ctx, interval_s=1.0):
            return
        if ctx.stopping():
            return
        ctx.say(f"broker {self.broker}'s cleaner still sleeps in the throttle after "
                f"{self.restart_after_s:.0f} s: restarting broker {self.broker} so it applies "
                f"metadata again")
        ctx.cluster.kill(self.broker)
        ctx.cluster.restart(self.broker)
        admin = ctx.admin()

        def fully_replicated() -> bool:
            md = admin.list_topics(timeout=5)
            return all(sorted(p.isrs) == sorted(p.replicas)
                       for t in md.topics.values() for p in t.partitions.values())

        if not wait_for("every partition back in sync", fully_replicated, 180, ctx):
            ctx.say(f"broker {self.broker} is back but some partitions are still "
                    f"under-replicated after 180 s; going on")
