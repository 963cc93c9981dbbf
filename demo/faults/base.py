"""What every fault has: a name, how to cause it, how to undo it, what detects it."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger(__name__)


@dataclass
class FaultRun:
    """What happened when a fault was caused: wall-clock times and what the fault did."""
    name: str
    started_ms: int
    injected_ms: int | None = None
    # When the damage was done (the reset commit, the unclean election): time to detect
    # runs from here. None: from started_ms (the fault is in place as soon as it starts).
    fault_ms: int | None = None
    notes: dict = field(default_factory=dict)


class Fault:
    """Subclasses set `name`, `title` and implement `inject`, `part_of`, `heal`.

    A fault is detected when a finding has been seen for every one of its `parts` (the
    rewinds fault has two: one per group); `part_of` maps a finding to the part it shows.
    """

    name = "fault"
    title = "a fault"
    parts: tuple[str, ...] = ("finding",)
    # Parts that show the fault's effects (its chain): once the fault is detected the demo
    # waits a while for them too, so its summary shows the whole incident; they do not
    # count in the time to detect.
    effects: tuple[str, ...] = ()

    def prepare(self, ctx: "FaultContext") -> None:
        """Before the workload starts: create topics, set configs."""

    def inject(self, ctx: "FaultContext", run: FaultRun) -> None:
        raise NotImplementedError

    def part_of(self, finding) -> str | None:
        """Which of `parts` or `effects` this finding (a core.findings.Finding) shows,
        if any."""
        raise NotImplementedError

    def heal(self, ctx: "FaultContext") -> None:
        """Undo what `inject` left in place (resume a broker, restore a config)."""


@dataclass
class FaultContext:
    """What faults act on. `say` prints a progress line; `stop` is set on Ctrl-C."""
    cluster: object                      # infra.local_cluster.LocalCluster
    workload: object                     # demo.workload.Workload
    say: Callable[[str], None] = print
    stop: object = None                  # threading.Event
    _admins: dict = field(default_factory=dict, repr=False)

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def admin(self, bootstrap: str | None = None):
        """One AdminClient per bootstrap list, kept: faults poll the cluster every half
        second, and a new client each time left hundreds of librdkafka handles retrying
        connections to the stopped brokers. No automatic topic creation: a kept client
        refreshes the metadata of every topic it was asked about, and with librdkafka's
        default it re-created topic-churn's deleted topics (one replica each; when broker 3
        was killed in the next scenario the controller logged their unclean elections)."""
        from confluent_kafka.admin import AdminClient

        key = bootstrap or self.bootstrap
        if key not in self._admins:
            self._admins[key] = AdminClient({"bootstrap.servers": key,
                                             "allow.auto.create.topics": False})
        return self._admins[key]

    def close(self) -> None:
        """Let go of the kept AdminClients before the cluster stops (AdminClient has no
        close(): dropping the last reference ends its threads, which would otherwise log
        "Connection refused" for every broker until the process exits)."""
        self._admins.clear()

    def sleep(self, seconds: float) -> None:
        """Sleep, but return at once when stopping."""
        if self.stop is not None:
            self.stop.wait(seconds)
        else:
            time.sleep(seconds)

    def stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set()


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, ctx: FaultContext | None = None,
             interval_s: float = 0.5) -> bool:
    """Poll `check` until true; False (logged) after the timeout or when stopping."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        if ctx is not None and ctx.stopping():
            return False
        try:
            if check():
                return True
            last_error = None
        except Exception as e:  # noqa: BLE001 - brokers come and go during faults
            last_error = e
            log.debug("waiting for %s: %s", what, e)
        time.sleep(interval_s)
    log.warning("gave up waiting for %s after %.0fs%s", what, timeout_s,
                f" (the last check failed: {last_error})" if last_error else "")
    return False


def wait_committed_past(ctx: FaultContext, bootstrap: str, group: str, topic: str,
                        target: int, partition: int = 0, timeout_s: float = 120) -> bool:
    """Wait until `group` has committed `topic`/`partition` at `target` or beyond.

    Read through a consumer that never joins the group, not
    AdminClient.list_consumer_group_offsets: with brokers stopping, that call's coordinator
    requests aborted the process inside librdkafka 2.16.0 (rd_kafka_enq_once_del_source_return:
    Assertion `eonce->refcnt > 0' failed)."""
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "enable.auto.commit": False})
    try:
        return wait_for(f"{group} committed past offset {target}",
                        lambda: reader.committed([TopicPartition(topic, partition)],
                                                 timeout=5)[0].offset >= target,
                        timeout_s, ctx)
    finally:
        reader.close()


def leader_and_isr(admin, topic: str, partition: int = 0) -> tuple[int, list[int]]:
    """The partition's leader and ISR; (-1, []) (Kafka's "no leader") while the metadata
    does not have the partition yet: a topic just created on a loaded cluster came back
    with no partitions for a moment (a KeyError failed a CI run)."""
    md = admin.list_topics(topic=topic, timeout=5)
    t = md.topics.get(topic)
    p = None if t is None else t.partitions.get(partition)
    if p is None:
        return -1, []
    return p.leader, sorted(p.isrs)

