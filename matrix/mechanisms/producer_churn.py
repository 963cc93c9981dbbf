"""Many short-lived idempotent producers: a client pattern brokers must sit through.

Serverless functions, batch jobs and request handlers that create a producer per call
each open connections, ask for a producer id (InitProducerId) and leave producer state on
the partitions they wrote, then go away. At scale that exhausts brokers (KIP-936: many
short-lived producer ids filling the brokers' memory; KAFKA-14694: producer-id requests
holding the request handlers); at a rate a cluster handles it is only noise: connection
and request-rate spikes, new client ids every second. Fault class healthy: a correct
monitor reports nothing.

How: for `duration_s`, `per_s` new producers a second, one after another, each with
enable.idempotence (acks=all), writing `records` records to a topic of its own, flushing
and closing. They log through librdkafka into one file of the workload's log folder.
run.notes: how many producers, records delivered, errors, each producer's life (p50, max).
"""

from __future__ import annotations

import statistics
import time

from demo.faults.base import FaultContext, FaultRun, now_ms
from matrix.fault import COMMITS_RETRIED, MatrixFault
from matrix.mechanisms.cluster_ops import rf
from matrix.mechanisms.compaction import delete_topic
from matrix.mechanisms.healthy_clients import client_logger


class ProducerChurn(MatrixFault):
    name = "producer_churn"
    title = "short-lived idempotent producers, several a second"
    fault_class = "healthy"
    observe_s = 90.0

    def __init__(self, topic: str = "churn-writes", per_s: float = 4.0, duration_s: float = 60.0,
                 records: int = 5):
        self.topic, self.per_s, self.duration_s, self.records = topic, per_s, duration_s, records
        self._created = False

    def explained(self):
        return (COMMITS_RETRIED,)

    def one_producer(self, ctx: FaultContext, i: int, logger) -> dict:
        """Create, write, flush, close; what it delivered and how long it lived."""
        from confluent_kafka import Producer

        counts = {"delivered": 0, "errors": 0}

        def delivered(err, _msg):
            counts["errors" if err is not None else "delivered"] += 1

        born = time.monotonic()
        p = Producer({"bootstrap.servers": ctx.bootstrap, "client.id": f"churn-{i}",
                      "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                      "allow.auto.create.topics": False, "logger": logger})
        for k in range(self.records):
            p.produce(self.topic, key=f"{i}-{k}".encode(), value=b"c" * 100,
                      on_delivery=delivered)
        left = p.flush(15)
        del p
        return {**counts, "undelivered": left, "life_ms": (time.monotonic() - born) * 1000}

    def inject(self, ctx: FaultContext, run: FaultRun) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        create_topics(ctx.bootstrap, [NewTopic(self.topic, 3, rf(ctx.cluster))])
        self._created = True
        logger = client_logger(ctx.workload.log_dir, "churn-producers")
        ctx.say(f"{self.per_s:.0f} short-lived idempotent producers a second for "
                f"{self.duration_s:.0f}s")
        run.fault_ms = now_ms()
        lives: list[dict] = []
        end, gap = time.monotonic() + self.duration_s, 1.0 / self.per_s
        while time.monotonic() < end and not ctx.stopping():
            due = time.monotonic() + gap
            lives.append(self.one_producer(ctx, len(lives), logger))
            ctx.sleep(max(0.0, due - time.monotonic()))
        ms = [x["life_ms"] for x in lives] or [0.0]
        run.notes.update(topic=self.topic, producers=len(lives),
                         delivered=sum(x["delivered"] for x in lives),
                         errors=sum(x["errors"] + x["undelivered"] for x in lives),
                         life_ms_p50=round(statistics.median(ms)), life_ms_max=round(max(ms)))

    def heal(self, ctx: FaultContext) -> None:
        if self._created:
            delete_topic(ctx.bootstrap, self.topic)
            self._created = False
