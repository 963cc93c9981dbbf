"""The remediation queue: actions published to a Kafka topic, and the step that fills it.

- `ActionPublisher`: an idempotent producer (acks=all) writing each action as canonical
  JSON to the queue topic, keyed by action_id; `publish` returns only when every action is
  acknowledged and raises `QueueError` otherwise.
- `ensure_queue_topic`: creates the topic when missing, with one partition: the queue is
  tiny (a few actions an hour), and one partition means one active executor in the
  consumer group at a time, in decision order, which is what "one action at a time" wants;
  other executors in the group stand by and take over on a rebalance.
- `DecisionStep`: loads the decisions so far, runs the pure `decide`, publishes the
  actions, then records the decisions. The order is what makes a crash harmless: a crash
  after publishing and before recording re-runs the same decisions (same keys) next time
  and publishes the same action ids again, which the executor acts on once; recording
  first could lose an action that was decided but never published.

Keys travel as text; the message value is `Action.to_json()`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol, Sequence

from core.findings import Finding
from remediation.actions import Action, Decision
from remediation.config import RemediationSection
from remediation.decide import actions_of, decide
from remediation.guards import HOUR_MS
from remediation.stores import DecisionStore, ResultStore

log = logging.getLogger(__name__)


class QueueError(RuntimeError):
    """Actions could not be published; the message says how many and why."""


class Publisher(Protocol):
    def publish(self, actions: Sequence[Action]) -> None: ...


class ActionPublisher:
    def __init__(self, producer_config: Mapping[str, object], topic: str,
                 flush_timeout_s: float = 60.0):
        from confluent_kafka import Producer

        self.topic = topic
        self.flush_timeout_s = flush_timeout_s
        self._producer = Producer({"enable.idempotence": True, "acks": "all",
                                   "linger.ms": 5, "delivery.timeout.ms": 60_000,
                                   **producer_config})
        self._errors: list[str] = []

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.key().decode() if msg.key() else '?'}: {err}")

    def publish(self, actions: Sequence[Action]) -> None:
        if not actions:
            return
        self._errors = []
        for a in actions:
            self._producer.produce(self.topic, key=a.action_id.encode(),
                                   value=a.to_json().encode(), on_delivery=self._on_delivery)
            self._producer.poll(0)
        remaining = self._producer.flush(self.flush_timeout_s)
        if remaining or self._errors:
            raise QueueError(f"{remaining} action(s) still queued and {len(self._errors)} "
                             f"failed on {self.topic} (first error: "
                             f"{self._errors[0] if self._errors else 'timeout'})")
        log.info("published %d action(s) to %s", len(actions), self.topic)

    def close(self) -> None:
        """Deliver what is queued, then shut the producer down (it would otherwise go on
        reconnecting to a cluster that is gone). Safe to repeat."""
        if self._producer is not None:
            self._producer.flush(self.flush_timeout_s)
            self._producer.close()
            self._producer = None


def queue_client_config(config, local_bootstrap: str | None = None) -> dict:
    """The Kafka client settings of the action queue, the same for the decision step that
    publishes and the executor that consumes: the monitoring Kafka (`[telemetry]`) when it
    is configured, else the watched cluster (`[watch]`, or the local cluster's
    `local_bootstrap` in the embedded mode)."""
    from infra.kafka_clients import librdkafka_config

    if config.telemetry.bootstrap_servers:
        return librdkafka_config(config.telemetry, "telemetry")
    return librdkafka_config(config.watch, "watch", local_bootstrap)


def ensure_queue_topic(admin_config: Mapping[str, object], topic: str,
                       timeout_s: float = 30.0) -> bool:
    """Create the queue topic (1 partition, replication min(3, brokers)) if it is missing;
    True when this call created it."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(dict(admin_config))
    md = admin.list_topics(timeout=timeout_s)
    if topic in md.topics and md.topics[topic].error is None:
        return False
    rf = min(3, max(1, len(md.brokers)))
    try:
        admin.create_topics([NewTopic(topic, 1, rf)],
                            request_timeout=timeout_s)[topic].result(timeout_s)
    except KafkaException as e:
        if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise QueueError(f"cannot create the remediation topic {topic}: {e}") from e
    log.info("created remediation topic %s (1 partition, replication %d)", topic, rf)
    return True


@dataclass
class DecisionStep:
    """Findings in, actions on the queue, decisions recorded."""
    config: RemediationSection
    publisher: Publisher
    decisions: DecisionStore
    results: ResultStore | None = None

    def history_since_ms(self, now_ms: int) -> int:
        return now_ms - max(self.config.cooldown_ms, HOUR_MS, self.config.deadline_ms)

    def run(self, findings: Iterable[Finding], now_ms: int,
            cluster_sizes: Mapping[str, int] | None = None) -> list[Decision]:
        findings = list(findings)
        since = self.history_since_ms(now_ms)
        previous = self.decisions.load(finding_ids=[f.finding_id for f in findings],
                                       since_ms=since)
        results = self.results.recent(since) if self.results is not None else ()
        decisions = decide(findings, previous, self.config, now_ms, results=results,
                           cluster_sizes=cluster_sizes)
        self.publisher.publish(actions_of(decisions))
        self.decisions.record(decisions)
        return decisions
