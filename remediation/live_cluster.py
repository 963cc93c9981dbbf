"""The watched cluster as the executor sees and changes it, through the Admin API.

Reads (just before acting): registered brokers and every partition's leader, replicas and
ISR (metadata), reassignments in progress, a group's state and member count
(describe_consumer_groups), its committed offsets (list_consumer_group_offsets), the log
start and end offsets (list_offsets). Changes: replica order and reassignment cancels
(remediation/reassignments.py: confluent-kafka has no reassignment API), preferred
leader elections (elect_leaders), committed offsets (alter_consumer_group_offsets).

Every call has a timeout; a group coordinator that is still loading (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS) is asked again until the timeout.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Mapping, TypeVar

from remediation.plans import GroupState, PartitionState, Reassignment, TopicPartition
from remediation.reassignments import JavaReassignments

log = logging.getLogger(__name__)

T = TypeVar("T")
_RETRIABLE = ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE")


class LiveClusterError(RuntimeError):
    """A read or change of the watched cluster failed; the message says which and why."""


def _error_name(e: BaseException) -> str:
    err = e.args[0] if e.args else None
    return err.name() if hasattr(err, "name") else ""


class LiveCluster:
    def __init__(self, admin_config: Mapping[str, object],
                 reassignments: JavaReassignments | None = None, timeout_s: float = 30.0):
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient(dict(admin_config))
        self.reassignments_client = reassignments
        self.timeout_s = timeout_s

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return call()
            except KafkaException as e:
                if _error_name(e) not in _RETRIABLE or time.monotonic() > deadline:
                    raise LiveClusterError(f"{what}: {e}") from e
                time.sleep(0.5)

    # ---- reads ------------------------------------------------------------------------
    def registered_brokers(self) -> set[int]:
        md = self._retrying("metadata", lambda: self.admin.list_topics(timeout=self.timeout_s))
        return set(md.brokers)

    def partitions(self, topics: Iterable[str] | None = None) -> list[PartitionState]:
        wanted = set(topics) if topics is not None else None
        md = self._retrying("metadata", lambda: self.admin.list_topics(timeout=self.timeout_s))
        out = []
        for name, t in md.topics.items():
            if t.error is not None or (wanted is not None and name not in wanted):
                continue
            for p in t.partitions.values():
                out.append(PartitionState(name, p.id, p.leader, tuple(p.replicas), tuple(p.isrs)))
        return out

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        if self.reassignments_client is None:
            raise LiveClusterError("reassignments: this LiveCluster was built without a "
                                   "reassignments client (reads of groups and offsets only)")
        return self.reassignments_client.list()

    def group_state(self, group: str) -> GroupState:
        def call() -> GroupState:
            d = self.admin.describe_consumer_groups(
                [group], request_timeout=self.timeout_s)[group].result()
            state = getattr(d.state, "name", str(d.state))
            return GroupState(group, state, len(d.members or ()))
        return self._retrying(f"describe group {group}", call)

    def committed(self, group: str, parts: Iterable[TopicPartition]
                  ) -> dict[TopicPartition, int | None]:
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
        from confluent_kafka import TopicPartition as TP

        req = [ConsumerGroupTopicPartitions(group, [TP(t, p) for t, p in parts])]

        def call() -> dict[TopicPartition, int | None]:
            res = self.admin.list_consumer_group_offsets(
                req, request_timeout=self.timeout_s)[group].result()
            for x in res.topic_partitions:
                # A partition-level error (a coordinator still loading) is not "no commit".
                if x.error is not None:
                    raise KafkaException(x.error)
            return {(x.topic, x.partition): (x.offset if x.offset >= 0 else None)
                    for x in res.topic_partitions}
        return self._retrying(f"committed offsets of {group}", call)

    def log_bounds(self, parts: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start, log end) of each partition that exists."""
        from confluent_kafka import KafkaException, TopicPartition as TP
        from confluent_kafka.admin import OffsetSpec

        parts = list(parts)
        out: dict[TopicPartition, tuple[int, int]] = {}
        try:
            starts = self.admin.list_offsets({TP(t, p): OffsetSpec.earliest() for t, p in parts},
                                             request_timeout=self.timeout_s)
            ends = self.admin.list_offsets({TP(t, p): OffsetSpec.latest() for t, p in parts},
                                           request_timeout=self.timeout_s)
            s = {(k.topic, k.partition): f for k, f in starts.items()}
            e = {(k.topic, k.partition): f for k, f in ends.items()}
            for tp in parts:
                try:
                    out[tp] = (s[tp].result().offset, e[tp].result().offset)
                except KafkaException as err:
                    if _error_name(err) != "UNKNOWN_TOPIC_OR_PART":
                        raise
        except KafkaException as err:
            raise LiveClusterError(f"log offsets: {err}") from err
        return out

    # ---- changes ----------------------------------------------------------------------
    def reorder_replicas(self, plan: Mapping[TopicPartition, tuple[int, ...]]
                         ) -> dict[TopicPartition, str | None]:
        return self.reassignments_client.alter(dict(plan))

    def cancel_reassignments(self, parts: Iterable[TopicPartition]
                             ) -> dict[TopicPartition, str | None]:
        return self.reassignments_client.alter({tp: None for tp in parts})

    def elect_preferred(self, parts: Iterable[TopicPartition]) -> dict[TopicPartition, str | None]:
        """The error per partition, None where the preferred replica leads (already or now)."""
        from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition as TP

        parts = list(parts)
        if not parts:
            return {}
        try:
            # No keyword arguments: confluent-kafka 2.16.1's C binding of elect_leaders
            # rejects request_timeout and operation_timeout (a TypeError or SystemError
            # from its argument parser); the wait is bounded by the future instead.
            res = self.admin.elect_leaders(ElectionType.PREFERRED,
                                           [TP(t, p) for t, p in parts]).result(self.timeout_s)
        except (KafkaException, TimeoutError) as e:
            raise LiveClusterError(f"elect_leaders: {e!r}") from e
        out: dict[TopicPartition, str | None] = {}
        for tp, err in res.items():
            # The value is a KafkaError (the docs say KafkaException): accept both.
            err = err.args[0] if isinstance(err, KafkaException) else err
            ok = err is None or err.code() == KafkaError.ELECTION_NOT_NEEDED
            out[(tp.topic, tp.partition)] = None if ok else f"{err.name()}: {err.str()}"
        return out

    def alter_group_offsets(self, group: str, offsets: Iterable[tuple[str, int, int]]
                            ) -> dict[TopicPartition, str | None]:
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
        from confluent_kafka import TopicPartition as TP

        req = [ConsumerGroupTopicPartitions(group, [TP(t, p, o) for t, p, o in offsets])]
        try:
            res = self.admin.alter_consumer_group_offsets(
                req, request_timeout=self.timeout_s)[group].result()
        except KafkaException as e:
            raise LiveClusterError(f"alter offsets of {group}: {e}") from e
        return {(x.topic, x.partition): (None if x.error is None else str(x.error))
                for x in res.topic_partitions}

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout_s: float,
                 reads: int = 1) -> bool:
        """Poll until `predicate` holds on `reads` polls in a row (poll_until_held)."""
        return poll_until_held(what, predicate, timeout_s, reads)


def poll_until_held(what: str, predicate: Callable[[], bool], timeout_s: float, reads: int = 1,
                    *, interval_s: float = 0.5,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> bool:
    """Poll until `predicate` holds on `reads` polls in a row; False (not an exception) at
    the timeout.

    More than one read where the predicate looks at metadata: each read is answered by
    whichever broker the Admin client picks, and a broker still replaying the metadata log
    answers with the state before the change (a CI run saw a leadership move hold on one
    read and not on the next, 29 partitions at once, on a loaded machine)."""
    deadline = clock() + timeout_s
    held = 0
    while True:
        held = held + 1 if predicate() else 0
        if held >= reads:
            return True
        if clock() > deadline:
            log.warning("gave up waiting for %s after %.0f s", what, timeout_s)
            return False
        sleep(interval_s)
