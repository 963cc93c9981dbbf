"""Clients the healthy mechanisms run beside the workload: a group member that can join
and leave, a producer that sends in bursts, one create-write-delete cycle of a topic.

Each logs through librdkafka into the workload's log folder (``<client.id>.log``, the
workload's stamp), as the workload's own clients do, so the client-log agent sees them.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from demo.faults.base import FaultContext, now_ms, wait_for

log = logging.getLogger(__name__)


def client_logger(log_dir: Path, name: str) -> logging.Logger:
    lg = logging.getLogger(f"kmon.workload.{name}")
    lg.propagate = False
    lg.setLevel(logging.INFO)
    if not lg.handlers:
        handler = logging.FileHandler(Path(log_dir) / f"{name}.log")
        fmt = logging.Formatter("%(asctime)s %(message)s")
        fmt.converter = time.gmtime
        handler.setFormatter(fmt)
        lg.addHandler(handler)
    return lg


class GroupMember:
    """One consumer in a group, in its own thread: joins on start, leaves (LeaveGroup,
    its position committed) on stop. Counts the assignments it was handed. It logs to
    ``<log_name>.log`` (its client.id by default); `conf` adds librdkafka settings."""

    def __init__(self, bootstrap: str, group: str, topics: tuple[str, ...], client_id: str,
                 log_dir: Path, log_name: str | None = None, conf: dict | None = None):
        self.bootstrap, self.group, self.topics = bootstrap, group, topics
        self.client_id, self.log_dir = client_id, log_dir
        self.log_name, self.conf = log_name or client_id, dict(conf or {})
        self.assignments = 0
        self.messages = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=client_id)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _on_assign(self, _consumer, _partitions) -> None:
        self.assignments += 1

    def _run(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "client.id": self.client_id, "auto.offset.reset": "earliest",
                      "enable.auto.commit": True, "auto.commit.interval.ms": 1000,
                      "logger": client_logger(self.log_dir, self.log_name), **self.conf})
        c.subscribe(list(self.topics), on_assign=self._on_assign)
        try:
            while not self._stop.is_set():
                self.messages += sum(m.error() is None for m in c.consume(500, timeout=0.5))
        except Exception as e:  # noqa: BLE001 - a member survives what the cluster does
            log.warning("%s: %s", self.client_id, e)
        finally:
            try:
                c.close()
            except Exception as e:  # noqa: BLE001
                log.debug("closing %s: %s", self.client_id, e)


class BurstProducer:
    """acks=all producer whose sends come in bursts; each burst is flushed before it is
    reported, so its delivered count is final."""

    def __init__(self, bootstrap: str, topic: str, client_id: str, value_bytes: int = 200):
        from confluent_kafka import Producer

        self.topic = topic
        self.value = b"b" * value_bytes
        self._counts = {"delivered": 0, "errors": 0}
        # No automatic topic creation (librdkafka's producer default is on): a producer
        # still alive after its topic is deleted would create it again at its next
        # metadata refresh, with the broker's defaults. topic-churn-3b's five deleted
        # topics did come back so (one replica each; broker 3's restart in the next
        # scenario then logged their unclean elections), but the request log shows the
        # matrix's kept AdminClient asked (FaultContext.admin turns it off too).
        self.p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                           "acks": "all", "linger.ms": 20, "message.timeout.ms": 30000,
                           "allow.auto.create.topics": False})

    def _delivered(self, err, _msg) -> None:
        self._counts["errors" if err is not None else "delivered"] += 1

    def burst(self, rate_per_s: float, seconds: float) -> dict:
        self._counts.update(delivered=0, errors=0)
        start, tick, sent, owed = now_ms(), 0.05, 0, 0.0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            owed += rate_per_s * tick
            while owed >= 1:
                owed -= 1
                try:
                    self.p.produce(self.topic, value=self.value, on_delivery=self._delivered)
                    sent += 1
                except BufferError:
                    self.p.poll(0.05)
            self.p.poll(0)
            time.sleep(tick)
        sent_ms = now_ms()
        self.p.flush(30)
        return {"start_ms": start, "sent_ms": sent_ms, "flushed_ms": now_ms(), "sent": sent,
                **self._counts}

    def close(self) -> None:
        self.p.flush(30)


def churn_cycle(ctx: FaultContext, topic: str, replication: int, produce_s: float,
                rate_per_s: float, partitions: int = 3) -> dict:
    """Create `topic`, write to it for `produce_s`, delete it and wait until it is gone."""
    from confluent_kafka.admin import NewTopic

    from demo.workload import create_topics

    admin = ctx.admin()
    out: dict = {"topic": topic}
    create_topics(ctx.bootstrap, [NewTopic(topic, partitions, replication)])
    out["created_ms"] = now_ms()

    def led() -> bool:
        t = admin.list_topics(topic=topic, timeout=5).topics[topic]
        return (t.error is None and len(t.partitions) == partitions
                and all(p.leader >= 0 for p in t.partitions.values()))

    out["led"] = wait_for(f"{topic} led", led, 30, ctx)
    producer = BurstProducer(ctx.bootstrap, topic, "churn-producer", 100)
    out.update({k: v for k, v in producer.burst(rate_per_s, produce_s).items()
                if k in ("sent", "delivered", "errors")})
    producer.close()
    del producer
    for f in admin.delete_topics([topic], operation_timeout=30).values():
        f.result(30)
    out["deleted_ms"] = now_ms()
    out["gone"] = wait_for(f"{topic} gone", lambda: topic not in admin.list_topics(
        timeout=5).topics, 30, ctx)
    return out
