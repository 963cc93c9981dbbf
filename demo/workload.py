"""A steady, realistic workload on the local cluster, in background threads.

Producers send at a fixed rate (acks=all or acks=1), consumer groups read and commit
every second, each consumer logging through librdkafka into ``<log_dir>/<group>.log``
(``yyyy-MM-dd HH:mm:ss,SSS`` UTC stamp, then librdkafka's ``FAC [client] ...`` message)
for the client-log agent to follow. Faults stop and start consumers, and add topics
with their own producers and groups.

Every client survives brokers being paused, stopped and restarted: errors are counted
and logged, never raised into the caller.

With a `stats_cb` (an `ingest.client_stats_hook.ClientStatsHook`, as an application would
install it), every client emits its librdkafka statistics every
`statistics_interval_ms` into it: the slow-link rule judges producers by their own round
trips (detectors/slow_client/links.py).

Producers are not idempotent unless their spec asks (librdkafka's default). librdkafka
2.16.0's idempotent producer busy-loops its broker threads while a replica of its
partitions is frozen: with the slow-broker fault's freezes (1.5 s of every 2 s) one
acks=all producer at 100 messages/s took 1.04 cores on this 2-core machine, and 0.00
cores without idempotence (0.50 with linger.ms 300, 0.03 with 1000). In a real fleet the
applications run on their own machines; here they share two cores with the brokers and
the pipeline, and that spin came out of the pipeline's share during the fault.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProducerSpec:
    name: str                 # client.id
    topic: str
    rate_per_s: float
    acks: str = "all"
    value_bytes: int = 200
    key_space: int | None = None   # keys k0..k<n-1> (a compacted topic), else unkeyed
    idempotent: bool = False       # enable.idempotence (acks=all only); see the module doc
    bootstrap: str | None = None   # its own path to the cluster (a proxy); None: the workload's
    linger_ms: int = 100           # 0: each send goes out at once (a request-heavy load)
    varied_values: bool = False    # each value another slice of word-like text (what a codec
                                   # works on), not one byte repeated
    metadata_refresh_ms: int | None = None   # topic.metadata.refresh.interval.ms; None: 5 min


def text_corpus(size: int, seed: int = 0) -> bytes:
    """`size` bytes of word-like text (field names, ids, amounts), the same for a seed: it
    compresses about 3x with gzip, as event payloads do, and costs a codec real work."""
    r = random.Random(seed)
    words = [b"order", b"customer", b"amount", b"status", b"shipped", b"region", b"EUR",
             b"sku", b"quantity", b"created"]
    parts, n = [], 0
    while n < size:
        w = r.choice(words) + b"=" + str(r.randrange(100_000)).encode() + b" "
        parts.append(w)
        n += len(w)
    return b"".join(parts)[:size]


class VariedValues:
    """Values of `size` bytes, each a slice of one text corpus at a random offset."""

    def __init__(self, size: int, corpus_bytes: int = 4 << 20, seed: int = 0):
        self.size, self.corpus = size, text_corpus(max(corpus_bytes, 2 * size), seed)
        self.random = random.Random(seed)

    def __call__(self) -> bytes:
        at = self.random.randrange(len(self.corpus) - self.size + 1)
        return self.corpus[at:at + self.size]


def producer_config(spec: ProducerSpec, bootstrap: str) -> dict:
    """librdkafka settings of a workload producer (its logger aside)."""
    conf = {"bootstrap.servers": spec.bootstrap or bootstrap, "client.id": spec.name,
            "acks": spec.acks, "linger.ms": spec.linger_ms, "message.timeout.ms": 30000}
    if spec.metadata_refresh_ms is not None:
        conf["topic.metadata.refresh.interval.ms"] = spec.metadata_refresh_ms
    if spec.idempotent:
        if spec.acks != "all":
            raise ValueError(f"producer {spec.name}: an idempotent producer needs acks=all, "
                             f"got acks={spec.acks}")
        conf["enable.idempotence"] = True
    return conf


@dataclass(frozen=True)
class ConsumerSpec:
    group: str
    topics: tuple[str, ...]
    auto_offset_reset: str = "earliest"

    @property
    def client_id(self) -> str:
        return f"{self.group}-consumer"


@dataclass
class _Running:
    thread: threading.Thread
    stop: threading.Event
    counts: dict = field(default_factory=lambda: {"messages": 0, "errors": 0})


def _is_fatal(e: Exception) -> bool:
    """A KafkaException whose error librdkafka marks fatal: that client is unusable."""
    err = e.args[0] if e.args else None
    return bool(getattr(err, "fatal", lambda: False)())


def _file_logger(path: Path, name: str) -> logging.Logger:
    lg = logging.getLogger(f"kmon.workload.{name}")
    lg.propagate = False
    lg.setLevel(logging.INFO)
    if not lg.handlers:
        handler = logging.FileHandler(path)
        fmt = logging.Formatter("%(asctime)s %(message)s")
        fmt.converter = time.gmtime
        handler.setFormatter(fmt)
        lg.addHandler(handler)
    return lg


class Workload:
    """Start producers and consumers; stop them one by one or all together."""

    def __init__(self, bootstrap: str, log_dir: Path, *,
                 stats_cb: Callable[[str], None] | None = None,
                 statistics_interval_ms: int = 5000):
        self.bootstrap = bootstrap
        self.log_dir = Path(log_dir)
        self.stats_cb, self.statistics_interval_ms = stats_cb, statistics_interval_ms
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.producers: dict[str, _Running] = {}
        self.consumers: dict[str, _Running] = {}
        self.consumer_specs: dict[str, ConsumerSpec] = {}

    def _stats(self) -> dict:
        """The statistics settings of every client (none without a stats_cb)."""
        if self.stats_cb is None:
            return {}
        return {"statistics.interval.ms": self.statistics_interval_ms,
                "stats_cb": self.stats_cb}

    # ---- producers ---------------------------------------------------------------------

    def start_producer(self, spec: ProducerSpec) -> None:
        stop = threading.Event()
        run = _Running(threading.Thread(target=self._produce, args=(spec, stop), daemon=True,
                                        name=f"producer-{spec.name}"), stop)
        self.producers[spec.name] = run
        run.thread.start()

    def _produce(self, spec: ProducerSpec, stop: threading.Event) -> None:
        from confluent_kafka import KafkaException, Producer

        counts = self.producers[spec.name].counts
        conf = {**producer_config(spec, self.bootstrap), **self._stats(),
                "logger": _file_logger(self.log_dir / f"{spec.name}.log", spec.name)}

        def delivered(err, _msg):
            if err is not None:
                counts["errors"] += 1

        p = Producer(conf)
        value = b"v" * spec.value_bytes
        varied = VariedValues(spec.value_bytes) if spec.varied_values else None
        tick_s = 0.1   # produce in ticks of this length: few wake-ups, a steady rate
        i, owed = 0, 0.0
        while not stop.is_set():
            owed += spec.rate_per_s * tick_s
            while owed >= 1:
                owed -= 1
                key = f"k{i % spec.key_space}".encode() if spec.key_space else None
                try:
                    p.produce(spec.topic, key=key, value=varied() if varied else value,
                              on_delivery=delivered)
                    counts["messages"] += 1
                except BufferError:   # a paused broker: drop this tick's rest, do not burst
                    owed = 0
                except KafkaException as e:
                    if not _is_fatal(e):
                        raise
                    p = self._restart_producer(spec, conf, counts, e)
                except Exception as e:  # noqa: BLE001 - keep producing through faults
                    counts["errors"] += 1
                    log.debug("%s: %s", spec.name, e)
                i += 1
            try:
                p.poll(0)
            except KafkaException as e:
                if not _is_fatal(e):
                    raise
                p = self._restart_producer(spec, conf, counts, e)
            stop.wait(tick_s)
        p.flush(10)

    @staticmethod
    def _restart_producer(spec: ProducerSpec, conf: dict, counts: dict, error: Exception):
        """A producer can fail for good (an idempotent one whose brokers were stopped
        mid-batch: librdkafka's "unable to guarantee consistency"); an application then
        starts a new one, and so does the workload, so the faults after it still have
        traffic."""
        from confluent_kafka import Producer

        counts["errors"] += 1
        counts["restarts"] = counts.get("restarts", 0) + 1
        log.warning("%s: fatal producer error (%s): starting a new producer", spec.name, error)
        return Producer(conf)

    # ---- consumers ---------------------------------------------------------------------

    def start_consumer(self, spec: ConsumerSpec) -> None:
        self.consumer_specs[spec.group] = spec
        stop = threading.Event()
        run = _Running(threading.Thread(target=self._consume, args=(spec, stop), daemon=True,
                                        name=f"consumer-{spec.group}"), stop)
        self.consumers[spec.group] = run
        run.thread.start()

    def consumer_log(self, group: str) -> Path:
        return self.log_dir / f"{group}.log"

    def _consume(self, spec: ConsumerSpec, stop: threading.Event) -> None:
        from confluent_kafka import Consumer

        counts = self.consumers[spec.group].counts
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": spec.group,
                      "client.id": spec.client_id, "auto.offset.reset": spec.auto_offset_reset,
                      "enable.auto.commit": True, "auto.commit.interval.ms": 1000,
                      "logger": _file_logger(self.consumer_log(spec.group), spec.group),
                      **self._stats()})
        c.subscribe(list(spec.topics))
        try:
            while not stop.is_set():
                for m in c.consume(500, timeout=0.5):
                    if m.error() is None:
                        counts["messages"] += 1
                    else:
                        counts["errors"] += 1
        finally:
            try:
                c.close()   # commits the position and leaves the group
            except Exception as e:  # noqa: BLE001
                log.debug("closing %s: %s", spec.group, e)

    def stop_consumer(self, group: str, timeout_s: float = 30) -> None:
        run = self.consumers.pop(group, None)
        if run:
            run.stop.set()
            run.thread.join(timeout_s)

    def restart_consumer(self, group: str) -> None:
        self.stop_consumer(group)
        self.start_consumer(self.consumer_specs[group])

    # ---- all ---------------------------------------------------------------------------

    def counts(self) -> dict[str, dict]:
        return {**{f"producer {k}": dict(v.counts) for k, v in self.producers.items()},
                **{f"group {k}": dict(v.counts) for k, v in self.consumers.items()}}

    def stop(self, timeout_s: float = 30) -> None:
        for run in [*self.consumers.values(), *self.producers.values()]:
            run.stop.set()
        for run in [*self.consumers.values(), *self.producers.values()]:
            run.thread.join(timeout_s)
        self.consumers.clear()
        self.producers.clear()


def create_topics(bootstrap: str, topics: list, timeout_s: float = 60) -> None:
    """Create topics (confluent_kafka NewTopic); ones that exist already are fine."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, f in admin.create_topics(topics, operation_timeout=timeout_s).items():
        try:
            f.result(timeout_s)
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
    # The controller has the topics now; the brokers learn of them a moment later. Until
    # then a metadata request can still answer without them (or with no leaders), and a
    # caller that counts replicas at once would count none.
    deadline = time.monotonic() + timeout_s
    while not _topics_served(admin, topics):
        if time.monotonic() > deadline:
            raise TimeoutError(f"created topics not in the brokers' metadata after {timeout_s}s: "
                               f"{sorted(t.topic for t in topics)}")
        time.sleep(0.2)


def _topics_served(admin, topics: list) -> bool:
    """Every topic listed with its partitions, each with a leader; False while a metadata
    request times out (a loaded broker), so the caller asks again until its deadline."""
    from confluent_kafka import KafkaException

    try:
        md = admin.list_topics(timeout=5)
    except KafkaException:
        return False
    for t in topics:
        got = md.topics.get(t.topic)
        if got is None or got.error is not None:
            return False
        want = t.num_partitions if t.num_partitions > 0 else len(t.replica_assignment or [1])
        if len(got.partitions) < want or any(p.leader < 0 for p in got.partitions.values()):
            return False
    return True
