"""Compaction lag: a compacted topic written faster than a throttled log cleaner can clean.

The topic ``customers`` rolls a segment every few seconds and promises (its
max.compaction.lag.ms) that no dirty record waits longer than a few seconds. The fault
throttles every broker's cleaner I/O (the dynamic broker config
log.cleaner.io.max.bytes.per.second) to a trickle while a producer keeps updating keys:
each cleaning pass takes longer than the last, the dirty share rises pass after pass,
and records wait past the topic's limit. Expected: a compaction_lag finding (falling
behind). `heal` removes the throttle.
"""

from __future__ import annotations

from faults.base import Fault, FaultContext, FaultRun
from faults.workload import ProducerSpec

THROTTLE_KEY = "log.cleaner.io.max.bytes.per.second"


def topic_config(max_compaction_lag_ms: int) -> dict[str, str]:
    return {"cleanup.policy": "compact", "segment.ms": "3000",
            "min.cleanable.dirty.ratio": "0.1", "min.compaction.lag.ms": "0",
            "max.compaction.lag.ms": str(max_compaction_lag_ms),
            "delete.retention.ms": "1000"}


def _set_broker_config(bootstrap: str, brokers: list[int], key: str, value: str | None) -> None:
    """Set (or delete, value None) a dynamic config on each broker (the cluster-wide default,
    kafka-configs --entity-default, has an empty resource name that confluent-kafka refuses)."""
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ResourceType)

    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for b in brokers:   # one BROKER resource per call: the admin API allows no more
        res = ConfigResource(ResourceType.BROKER, str(b),
                             incremental_configs=[ConfigEntry(key, value or "",
                                                              incremental_operation=op)])
        for f in admin.incremental_alter_configs([res]).values():
            f.result(30)


class CompactionLag(Fault):
    name = "compaction_lag"
    title = "compaction lag (throttled cleaner)"

    def __init__(self, topic: str = "customers", partitions: int = 3,
                 max_compaction_lag_ms: int = 5000, throttle_bytes_per_s: int = 20_000,
                 rate_per_s: float = 400, value_bytes: int = 500, keys: int = 500):
        self.topic, self.partitions = topic, partitions
        self.max_compaction_lag_ms = max_compaction_lag_ms
        self.throttle = throttle_bytes_per_s
        self.producer = ProducerSpec(f"{topic}-producer", topic, rate_per_s, acks="all",
                                     value_bytes=value_bytes, key_space=keys)
        self._throttled = False

    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from faults.workload import create_topics
        create_topics(ctx.bootstrap, [NewTopic(self.topic, self.partitions, 3,
                                               config=topic_config(self.max_compaction_lag_ms))])
        ctx.workload.start_producer(self.producer)

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        ctx.say(f"throttling every broker's log cleaner to {self.throttle:,} bytes/s while "
                f"'{self.topic}' takes {self.producer.rate_per_s:.0f} updates/s "
                f"(max.compaction.lag.ms={self.max_compaction_lag_ms})")
        self._brokers = [n.node_id for n in ctx.cluster.nodes]
        _set_broker_config(ctx.bootstrap, self._brokers, THROTTLE_KEY, str(self.throttle))
        self._throttled = True
        run.notes.update(throttle_bytes_per_s=self.throttle, topic=self.topic)

    def part_of(self, finding) -> str | None:
        return "finding" if finding.type.value == "compaction_lag" else None

    def heal(self, ctx: FaultContext) -> None:
        if self._throttled:
            _set_broker_config(ctx.bootstrap, self._brokers, THROTTLE_KEY, None)
            self._throttled = False
