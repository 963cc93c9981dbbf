"""A broker starved in its own request queue: too few request-handler threads for its load.

Every request a broker reads waits in its request queue for a free handler thread
(num.io.threads, 8 by default); with too few for the load it serves, requests queue for
seconds while the broker's CPU, disk and followers are fine. In production: a handler
pool sized for a smaller cluster, a dynamic config change gone wrong, or handlers held by
slow work (KAFKA-14694: InitProducerId waits that held every handler; the
RequestHandlerAvgIdlePercent gauge near 0 is Kafka's documented sign). The queue wait is
the broker's own stage (RequestQueue): a correct monitor blames the broker by it, not as a
slow follower, even when its late answers also hold others back.

How: handlers held by slow work and too few of them. The load topic asks for gzip at its
highest level (compression.type, compression.gzip.level: KIP-390) while its producers send
uncompressed, so the broker recompresses every batch in the handler thread that appends it
(a topic codec its clients do not use is a known cause of broker CPU load), and it
flushes every append (flush.messages=1: an fsync in that thread, a durability setting
sites copy from old advice); the broker's handler pool is cut to one. Per-broker
dynamic configs (incremental_alter_configs on the broker resource, as
kafka-configs --entity-type brokers --entity-name <id> does). A broker refuses a new
thread count below half or above double its current one (DynamicThreadPool), so the
count goes down in halving steps, each applied by the broker before the next, and back
up in doubling steps in `heal`, before the dynamic entry is deleted. The load: producers
of varied text values (about 14 MB/s in all: more than a core recompresses at gzip's
highest level) to a topic the broker leads, on top of the workload. The fault holds
until the finding arrives or duration_s. run.notes: the thread counts, the load, and the
request queue read from the broker's JMX exporter every 2 s while it lasted (the
RequestQueueSize gauge: requests read and waiting for a handler, now) and the lowest
handler idle share (a one-minute moving average, kept as a note only: it lags the
present by a minute). A broker whose queue held requests in less than STARVED_SHARE of
the samples was not starved: the run is not caused (an error), not a miss of the
detector. With fsync and small uncompressed requests alone, the 2-core development VM
left the one handler 35-57% idle: the load generator could not send enough requests.

Expected: slow_broker on the broker by its own handler stages: request_handlers_saturated
(the wait for the handler) or local_disk_or_page_cache (the handler's own slow work, here
the recompression, which is what holds it), or network_threads_saturated when the
network threads are cut too; never slow_follower or unattributed. Explained: its victims
(leaders waiting on it, if it falls behind as a follower), retried commits, and the
partners loaded if it is fenced and its leaderships move.
"""

from __future__ import annotations

import logging
import time
import urllib.request

from demo.faults.base import FaultContext, FaultRun, now_ms, wait_for
from demo.workload import ProducerSpec
from matrix.fault import COMMITS_RETRIED, PARTNERS_LOADED, MatrixFault
from matrix.mechanisms.compaction import delete_topic, stop_producer
from matrix.mechanisms.demo_faults import victims
from matrix.truth import Expect

log = logging.getLogger(__name__)

IO_THREADS = "num.io.threads"
NETWORK_THREADS = "num.network.threads"
QUEUE_SIZE = "kafka_network_requestchannel_requestqueuesize"
HANDLER_IDLE = "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent"
# Every batch recompressed at gzip's highest level and flushed, in the handler thread.
TOPIC_CONFIG = {"compression.type": "gzip", "compression.gzip.level": "9",
                "flush.messages": "1"}
# Requests wait in the request queue only while every handler is busy: a broker whose
# queue held requests in fewer of the samples than this was not starved.
STARVED_SHARE = 0.5


def thread_steps(current: int, target: int) -> list[int]:
    """The counts to set one after another from `current` to `target`: each at least half
    and at most double the one before it (a broker refuses bigger jumps)."""
    if current < 1 or target < 1:
        raise ValueError(f"thread counts are at least 1: {current} -> {target}")
    steps, n = [], current
    while n != target:
        n = max(target, n // 2) if target < n else min(target, n * 2)
        steps.append(n)
    return steps


def led_by(broker: int, brokers: list[int], partitions: int, rf: int) -> list[list[int]]:
    """Replica lists with `broker` first (the preferred leader), followers rotating over
    the others."""
    others = [b for b in sorted(brokers) if b != broker]
    followers = min(rf - 1, len(others))
    return [[broker] + [others[(i + k) % len(others)] for k in range(followers)]
            for i in range(partitions)]


def metric_value(text: str, name: str) -> float | None:
    """The first sample of `name` on a Prometheus exposition page, if any."""
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            if head.split("{", 1)[0] == name:
                try:
                    return float(value)
                except ValueError:
                    return None
    return None


def starved(worst: dict) -> bool:
    """Requests waited for a handler in at least STARVED_SHARE of the queue samples (a
    broker never sampled is not known to be starved)."""
    n = worst.get("samples", 0)
    return n > 0 and worst.get("queued_samples", 0) >= STARVED_SHARE * n


class StarvedRequestHandlers(MatrixFault):
    name = "starved_request_handlers"
    title = "slow broker (request-handler threads cut to one under load)"
    fault_class = "slow_broker"
    runs_until_detected = True

    def __init__(self, broker: int = 1, io_threads: int = 1, network_threads: int | None = None,
                 topic: str = "starve-load", partitions: int = 6, producers: int = 6,
                 rate_per_s: float = 300, value_bytes: int = 8000, duration_s: float = 240.0):
        self.broker, self.io_threads, self.network_threads = broker, io_threads, network_threads
        self.topic, self.partitions, self.duration_s = topic, partitions, duration_s
        self.load = [ProducerSpec(f"{topic}-producer-{i}", topic, rate_per_s, acks="all",
                                  value_bytes=value_bytes, varied_values=True)
                     for i in range(producers)]
        self.original: dict[str, int] = {}     # the counts before, to go back to
        self._created = False

    def targets(self) -> dict[str, int]:
        out = {IO_THREADS: self.io_threads}
        if self.network_threads is not None:
            out[NETWORK_THREADS] = self.network_threads
        return out

    def expect(self) -> tuple[Expect, ...]:
        causes = ("request_handlers_saturated", "local_disk_or_page_cache") + (
            ("network_threads_saturated",) if self.network_threads is not None else ())
        return (Expect(f"broker {self.broker} starved in its request queue", "slow_broker",
                       f"broker:{self.broker}", causes),)

    def explained(self) -> tuple[Expect, ...]:
        return (victims(self.broker), COMMITS_RETRIED, PARTNERS_LOADED)

    def prepare(self, ctx: FaultContext) -> None:
        from confluent_kafka.admin import NewTopic

        from demo.workload import create_topics
        brokers = [n.node_id for n in ctx.cluster.broker_nodes]
        assignment = led_by(self.broker, brokers, self.partitions, min(3, len(brokers)))
        create_topics(ctx.bootstrap, [NewTopic(self.topic, self.partitions,
                                               replica_assignment=assignment,
                                               config=TOPIC_CONFIG)])
        self._created = True

    # ---- the broker's dynamic configs ------------------------------------------------------
    def _resource(self, entries):
        from confluent_kafka.admin import ConfigResource, ResourceType
        return ConfigResource(ResourceType.BROKER, str(self.broker), incremental_configs=entries)

    def current(self, ctx: FaultContext, key: str) -> int:
        """The count the broker runs with now (it answers describe for itself)."""
        res = self._resource([])
        configs = ctx.admin().describe_configs([res])[res].result(30)
        return int(configs[key].value)

    def _set(self, ctx: FaultContext, key: str, value: int | None) -> None:
        """Set a count (None: delete the dynamic entry) and wait until the broker runs it."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        res = self._resource([ConfigEntry(key, "" if value is None else str(value),
                                          incremental_operation=op)])
        for f in ctx.admin().incremental_alter_configs([res]).values():
            f.result(30)
        if value is not None:
            wait_for(f"broker {self.broker} {key}={value}",
                     lambda: self.current(ctx, key) == value, 60, ctx)

    def step_to(self, ctx: FaultContext, key: str, target: int) -> list[int]:
        steps = thread_steps(self.current(ctx, key), target)
        for n in steps:
            self._set(ctx, key, n)
        return steps

    # ---- the fault -------------------------------------------------------------------------
    def sample(self, ctx: FaultContext, worst: dict) -> None:
        """Count the samples and those with requests waiting for a handler; keep the
        largest request queue and the lowest handler idle share seen."""
        try:
            with urllib.request.urlopen(ctx.cluster.node(self.broker).metrics_url,
                                        timeout=5) as r:
                text = r.read().decode(errors="replace")
        except OSError:
            return
        q, idle = metric_value(text, QUEUE_SIZE), metric_value(text, HANDLER_IDLE)
        if q is not None:
            worst["samples"] = worst.get("samples", 0) + 1
            worst["queued_samples"] = worst.get("queued_samples", 0) + (q >= 1)
            worst["request_queue_max"] = max(worst.get("request_queue_max", 0.0), q)
        if idle is not None:
            worst["handler_idle_min"] = min(worst.get("handler_idle_min", 1.0), idle)

    def inject(self, ctx: FaultContext, run: FaultRun, until=None) -> None:
        self.original = {key: self.current(ctx, key) for key in self.targets()}
        run.notes.update(broker=self.broker, threads_before=dict(self.original),
                         threads=self.targets(), load_producers=len(self.load),
                         load_rate_per_s=sum(p.rate_per_s for p in self.load))
        try:
            for key, target in self.targets().items():
                ctx.say(f"broker {self.broker}: {key} {self.original[key]} -> {target}")
                run.notes.setdefault("steps", {})[key] = self.step_to(ctx, key, target)
            for spec in self.load:
                ctx.workload.start_producer(spec)
            run.fault_ms = now_ms()
            worst: dict = {}
            run.notes["worst"] = worst
            deadline = time.monotonic() + self.duration_s
            while time.monotonic() < deadline and not ctx.stopping():
                if until is not None and until():
                    break
                self.sample(ctx, worst)
                ctx.sleep(2.0)
            run.notes["starved_s"] = round((now_ms() - run.fault_ms) / 1000, 1)
            # Whatever was found: a broker whose requests did not wait for its handlers
            # was not starved, and the run does not test what the scenario is about.
            if not ctx.stopping() and not starved(worst):
                raise RuntimeError(
                    f"broker {self.broker} was not starved: requests waited for its "
                    f"handlers in {worst.get('queued_samples', 0)} of "
                    f"{worst.get('samples', 0)} samples (starved: at least "
                    f"{STARVED_SHARE:.0%})")
        finally:
            self.heal(ctx)

    def heal(self, ctx: FaultContext) -> None:
        """Stop the load, give the threads back step by step, drop the dynamic entries.
        Idempotent."""
        for spec in self.load:
            stop_producer(ctx.workload, spec.name)
        for key, before in list(self.original.items()):
            try:
                self.step_to(ctx, key, before)
                self._set(ctx, key, None)
            except Exception:  # noqa: BLE001 - logged; the next heal tries again
                log.exception("could not give broker %d its %s back", self.broker, key)
                continue
            self.original.pop(key)
        if self._created and not ctx.stopping():
            delete_topic(ctx.bootstrap, self.topic)
            self._created = False
