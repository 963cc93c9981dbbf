"""Remediation against a real cluster: findings -> decisions -> the Kafka queue -> the executor
-> the watched cluster (the same 3-broker KRaft cluster plays both the monitoring Kafka and
the watched one). Each test uses its own queue topic, executor group, data topic and groups.

- an empty group whose offsets were rewound is restored to its last good commit;
- a group with an active member is left alone, and the result says why;
- a slow broker's leadership moves off it (dry run first: logged, nothing changes);
- the same action delivered twice (a decision step that crashed before recording, then
  ran again) is carried out once;
- a reassignment in progress is cancelled (the executor supports it for completeness);
- a page reaches a real Alertmanager (the Debian binary).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from core.findings import (
    ActionKind,
    AnomalyType,
    EntityKind,
    Finding,
    Severity,
    Status,
    broker_entity,
    group_partition_entity,
)
from kmon.config import Config
from remediation.actions import Outcome, ResultStatus
from remediation.config import RemediationSection
from remediation.executor import Executor, build_executor
from remediation.live_cluster import LiveCluster
from remediation.queue import ActionPublisher, DecisionStep, ensure_queue_topic
from remediation.reassignments import JavaReassignments
from remediation.stores import JsonLinesDecisionStore, JsonLinesResultStore
from tests.conftest import wait_until

CLUSTER = "local"   # [watch].cluster of the default configuration


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass
class Env:
    config: Config
    bootstrap: str
    admin: AdminClient
    live: LiveCluster
    tmp: Path
    tag: str

    def section(self, **overrides) -> RemediationSection:
        base = {"topic": f"kmon.remediation.test-{self.tag}",
                "executor_group": f"kmon-executor-test-{self.tag}", "action_timeout_s": 60.0}
        return RemediationSection(**{**base, **overrides})

    def step(self, section: RemediationSection, results: JsonLinesResultStore,
             decisions: str = "decisions.jsonl") -> DecisionStep:
        ensure_queue_topic({"bootstrap.servers": self.bootstrap}, section.topic)
        return DecisionStep(section, ActionPublisher({"bootstrap.servers": self.bootstrap},
                                                     section.topic),
                            JsonLinesDecisionStore(self.tmp / decisions), results)

    def executor(self, section: RemediationSection, results: JsonLinesResultStore) -> Executor:
        return Executor(section, watch_cluster=CLUSTER, cluster=self.live, results=results,
                        consumer_config={"bootstrap.servers": self.bootstrap})

    def topic(self, name: str, partitions: int, messages: int = 0) -> str:
        topic = f"{name}-{self.tag}"
        self.admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(120)
        wait_until(lambda: all(p.leader >= 0 for p in self.live.partitions([topic]))
                   and len(self.live.partitions([topic])) == partitions, 60,
                   f"leaders for {topic}")
        if messages:
            producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all"})
            for p in range(partitions):
                for i in range(messages):
                    producer.produce(topic, value=f"m{i}".encode(), partition=p)
            assert producer.flush(60) == 0
        return topic

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit as an admin tool does (the group must be empty). On a fresh cluster the
        first commits may fail per partition while __consumer_offsets is still loading."""
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]

        def committed() -> bool:
            try:
                res = self.admin.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group, tps)])[group].result(30)
            except (KafkaException, TimeoutError):
                return False   # asked again: setting offsets to values is idempotent
            return all(x.error is None for x in res.topic_partitions)
        wait_until(committed, 120, f"offsets committed for {group}")
        assert self.committed(group, list(offsets)) == offsets

    def committed(self, group: str, parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return self.live.committed(group, parts)


@pytest.fixture()
def env(kafka_cluster, kmon_config, tmp_path) -> Env:
    bs = kafka_cluster.bootstrap_servers
    live = LiveCluster({"bootstrap.servers": bs},
                       JavaReassignments.for_watched_cluster(kmon_config, bs))
    return Env(kmon_config, bs, AdminClient({"bootstrap.servers": bs}), live, tmp_path,
               uuid.uuid4().hex[:8])


def drive(ex: Executor, results: JsonLinesResultStore, action_id: str, timeout: float = 240):
    """Run the executor until the action has a final result."""
    def finished():
        ex.run_once(1.0)
        r = results.get(action_id)
        return r if r is not None and r.status.is_terminal else None
    return wait_until(finished, timeout, f"a final result for action {action_id}", interval=0.1)


def rewind_finding(group: str, topic: str, partition: int, good: int, rewound: int) -> Finding:
    """What the offset-rewind detector writes for a spurious automatic reset."""
    return Finding(
        finding_id=f"rewind-{group}-{partition}", cluster=CLUSTER, type=AnomalyType.OFFSET_REWIND,
        severity=Severity.HIGH, entity_kind=EntityKind.GROUP,
        entity=group_partition_entity(group, topic, partition), first_seen_ms=now_ms() - 60_000,
        last_seen_ms=now_ms(), status=Status.OPEN, cause="auto_reset_after_out_of_range",
        explanation=f"Group {group} moved back on {topic}-{partition} from {good} to {rewound}",
        suggested_action=ActionKind.RESTORE_GROUP_OFFSETS,
        evidence={"group": group, "topic": topic, "partition": partition,
                  "old_position": good, "new_position": rewound, "restore_to": good,
                  "active": True})


RESTORE_LIVE = {"enabled_actions": ["restore_group_offsets"], "dry_run": False}


def test_an_empty_groups_rewound_offsets_are_restored_to_the_last_good_commit(env):
    topic = env.topic("orders", 2, messages=100)
    group = f"app-{env.tag}"
    env.commit(group, {(topic, 0): 60, (topic, 1): 70})   # the last good commits
    env.commit(group, {(topic, 0): 5, (topic, 1): 7})     # the rewind
    findings = [rewind_finding(group, topic, 0, 60, 5), rewind_finding(group, topic, 1, 70, 7)]

    section = env.section(**RESTORE_LIVE)
    results = JsonLinesResultStore(env.tmp / "results.jsonl")
    decisions = env.step(section, results).run(findings, now_ms())
    assert [d.outcome for d in decisions] == [Outcome.ACT, Outcome.ACT], decisions
    action = decisions[0].action
    assert decisions[1].action_id == action.action_id   # one action for the group

    ex = env.executor(section, results)
    try:
        result = drive(ex, results, action.action_id)
    finally:
        ex.close()
    assert result.status is ResultStatus.DONE, result.reason
    assert env.committed(group, [(topic, 0), (topic, 1)]) == {(topic, 0): 60, (topic, 1): 70}
    assert result.details["plan"]["offsets"][0]["committed_before"] == 5
    recorded = JsonLinesDecisionStore(env.tmp / "decisions.jsonl").load(
        finding_ids=[f.finding_id for f in findings], since_ms=0)
    assert {d.decision_key for d in recorded} == {d.decision_key for d in decisions}


def test_a_group_with_an_active_member_is_left_alone(env):
    topic = env.topic("payments", 1, messages=50)
    group = f"live-app-{env.tag}"
    env.commit(group, {(topic, 0): 40})
    env.commit(group, {(topic, 0): 3})
    member = Consumer({"bootstrap.servers": env.bootstrap, "group.id": group,
                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    member.subscribe([topic])
    try:
        def joined():
            member.poll(0.5)
            return member.assignment()
        wait_until(joined, 60, "the consumer to join its group")
        section = env.section(**RESTORE_LIVE)
        results = JsonLinesResultStore(env.tmp / "results.jsonl")
        [d] = env.step(section, results).run([rewind_finding(group, topic, 0, 40, 3)], now_ms())
        assert d.outcome is Outcome.ACT
        ex = env.executor(section, results)
        try:
            def handled():
                member.poll(0.1)   # stay an active member meanwhile
                ex.run_once(1.0)
                r = results.get(d.action_id)
                return r if r is not None and r.status.is_terminal else None
            result = wait_until(handled, 240, "the executor's result", interval=0.1)
        finally:
            ex.close()
        assert result.status is ResultStatus.SKIPPED
        assert "1 active member(s)" in result.reason, result.reason
        assert env.committed(group, [(topic, 0)]) == {(topic, 0): 3}
    finally:
        member.close()


def slow_broker_finding(broker: int) -> Finding:
    return Finding(
        finding_id=f"slow-broker-{broker}-{uuid.uuid4().hex[:6]}", cluster=CLUSTER,
        type=AnomalyType.SLOW_BROKER, severity=Severity.HIGH, entity_kind=EntityKind.BROKER,
        entity=broker_entity(broker), first_seen_ms=now_ms() - 30_000, last_seen_ms=now_ms(),
        status=Status.OPEN, cause="local_disk_or_page_cache",
        explanation=f"Broker {broker} Produce TP99 900 ms, mostly Local",
        suggested_action=ActionKind.MOVE_LEADERSHIP,
        evidence={"broker": broker, "role": "culprit", "stage": "local"})


def test_a_slow_brokers_leadership_moves_off_it_after_a_dry_run(env, caplog):
    topic = env.topic("clicks", 3)
    before = {(p.topic, p.partition): p for p in env.live.partitions([topic])}
    slow = before[(topic, 0)].leader
    finding = slow_broker_finding(slow)
    results = JsonLinesResultStore(env.tmp / "results.jsonl")
    # One slow broker of three is a third of this cluster: over the default share (0.2).
    move = {"enabled_actions": ["move_leadership"], "max_cluster_share": 0.5}

    dry = env.section(**move, dry_run=True)
    [rehearsal] = env.step(dry, results).run([finding], now_ms(), cluster_sizes={CLUSTER: 3})
    assert rehearsal.outcome is Outcome.ACT and rehearsal.action.dry_run
    ex = env.executor(dry, results)
    try:
        with caplog.at_level(logging.WARNING, logger="remediation.executor"):
            logged = drive(ex, results, rehearsal.action_id)
    finally:
        ex.close()
    assert logged.status is ResultStatus.DRY_RUN, logged.reason
    assert f"so broker {slow} is last" in logged.reason
    assert any("DRY RUN" in r.getMessage() for r in caplog.records)
    assert env.live.partitions([topic]) and all(
        (p.leader, p.replicas) == (before[(p.topic, p.partition)].leader,
                                   before[(p.topic, p.partition)].replicas)
        for p in env.live.partitions([topic])), "a dry run changed the cluster"

    # Dry runs switched off: the open finding is decided again, under a new action id.
    live = env.section(**move, dry_run=False)
    [real] = env.step(live, results).run([finding], now_ms(), cluster_sizes={CLUSTER: 3})
    assert real.outcome is Outcome.ACT and real.action_id != rehearsal.action_id
    ex = env.executor(live, results)
    try:
        result = drive(ex, results, real.action_id)
    finally:
        ex.close()
    assert result.status is ResultStatus.DONE, result.reason
    after = env.live.partitions([topic])
    assert [p.partition for p in after if p.leader == slow] == []
    # the broker is nobody's preferred leader any more, and no replica moved
    assert [p.partition for p in after if p.replicas[0] == slow] == []
    assert all(sorted(p.replicas) == sorted(before[(p.topic, p.partition)].replicas)
               for p in after), after
    moved = {m["partition"]: m for m in result.details["plan"]["moves"] if m["topic"] == topic}
    assert moved[0]["elect"] and moved[0]["new_replicas"][-1] == slow
    # ... and a preferred election (what auto leader rebalancing does) keeps it off the broker
    assert all(err is None for err in env.live.elect_preferred(
        [(topic, p) for p in range(3)]).values())
    assert [p.partition for p in env.live.partitions([topic]) if p.leader == slow] == []


def test_the_same_action_delivered_twice_is_carried_out_once(env):
    topic = env.topic("ledger", 1, messages=80)
    group = f"ledger-app-{env.tag}"
    env.commit(group, {(topic, 0): 70})
    env.commit(group, {(topic, 0): 4})
    finding = rewind_finding(group, topic, 0, 70, 4)
    section = env.section(**RESTORE_LIVE)
    results = JsonLinesResultStore(env.tmp / "results.jsonl")

    # The decision step published, then crashed before recording its decisions: the next
    # run decides the same thing again and publishes the same action id a second time.
    [first] = env.step(section, results, "decisions-lost.jsonl").run([finding], now_ms())
    [again] = env.step(section, results, "decisions.jsonl").run([finding], now_ms())
    assert again.action_id == first.action_id

    # built the way `kmon` builds it: [watch], [telemetry] and [remediation] of the config
    config = env.config.with_overrides(remediation=dataclasses.asdict(section),
                                       watch={"bootstrap_servers": env.bootstrap},
                                       telemetry={"bootstrap_servers": env.bootstrap})
    ex = build_executor(config, results=results)
    try:
        result = drive(ex, results, first.action_id)
        assert result.status is ResultStatus.DONE, result.reason
        assert env.committed(group, [(topic, 0)]) == {(topic, 0): 70}
        # The group rewinds once more; a second execution would restore it again.
        env.commit(group, {(topic, 0): 4})

        def queue_consumed():
            ex.run_once(1.0)
            pos = env.live.committed(section.executor_group, [(section.topic, 0)])
            return pos.get((section.topic, 0)) == 2
        wait_until(queue_consumed, 120, "the executor to consume both messages", interval=0.1)
    finally:
        ex.close()
    assert env.committed(group, [(topic, 0)]) == {(topic, 0): 4}
    lines = [ln for ln in (env.tmp / "results.jsonl").read_text().splitlines()
             if first.action_id in ln]
    assert [ResultStatus(x) for x in ("running", "done")] == [
        ResultStatus(ln.split('"status":"')[1].split('"')[0]) for ln in lines]


def test_a_reassignment_in_progress_is_cancelled(env, kafka_cluster):
    """Throttled to a crawl, a reassignment that adds a replica stays in progress until the
    executor cancels it; the partition keeps its original replicas."""
    from remediation.actions import Action

    topic = f"stuck-{env.tag}"
    # one partition, its only replica on broker 1 (librdkafka wants the count with an
    # explicit assignment)
    env.admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1]])])[topic].result(120)
    producer = Producer({"bootstrap.servers": env.bootstrap, "acks": "all"})
    for i in range(2000):
        producer.produce(topic, value=b"x" * 1000, partition=0)
    assert producer.flush(60) == 0
    throttle = {"leader.replication.throttled.replicas": "*",
                "follower.replication.throttled.replicas": "*"}
    set_configs(env.admin, [ConfigResource("topic", topic)], throttle)
    brokers = [ConfigResource("broker", str(n.node_id)) for n in kafka_cluster.nodes]
    set_configs(env.admin, brokers, {"leader.replication.throttled.rate": "1",
                                     "follower.replication.throttled.rate": "1"})
    try:
        assert env.live.reassignments_client.alter({(topic, 0): (1, 2)}) == {(topic, 0): None}
        wait_until(lambda: (topic, 0) in env.live.reassignments(), 120,
                   "the reassignment to show as in progress")
        section = env.section(enabled_actions=["cancel_reassignment"], dry_run=False)
        results = JsonLinesResultStore(env.tmp / "results.jsonl")
        t = now_ms()
        action = Action.build(
            finding_ids=(f"operator-{env.tag}",), cluster=CLUSTER, target=f"{topic}-0",
            kind=ActionKind.CANCEL_REASSIGNMENT,
            operation={"op": "cancel_reassignment", "partitions": [{"topic": topic,
                                                                    "partition": 0}]},
            preconditions={"reassignment_in_progress": True}, decided_ms=t,
            deadline_ms=t + 600_000, dry_run=False)
        env.step(section, results).publisher.publish([action])
        ex = env.executor(section, results)
        try:
            result = drive(ex, results, action.action_id)
        finally:
            ex.close()
        assert result.status is ResultStatus.DONE, result.reason
        assert (topic, 0) not in env.live.reassignments()
        [p] = env.live.partitions([topic])
        assert p.replicas == (1,)
    finally:
        set_configs(env.admin, brokers, {"leader.replication.throttled.rate": None,
                                         "follower.replication.throttled.rate": None})


def set_configs(admin: AdminClient, resources: list[ConfigResource],
                values: dict[str, str | None]) -> None:
    """Incremental config changes (None deletes the key), one resource per call (a call
    may hold only one broker resource)."""
    for r in resources:
        r.incremental_configs = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.DELETE if v is None
                        else AlterConfigOpType.SET) for k, v in values.items()]
        for f in admin.incremental_alter_configs([r]).values():
            f.result(120)


def test_a_page_reaches_a_real_alertmanager(env, tmp_path):
    """An unclean election pages a human: one alert in Alertmanager with the finding's
    labels, routed like the finding alerts (severity="page")."""
    from tests.support.prom_tools import alertmanager_config, start_alertmanager

    # the shipped routing; its webhooks point nowhere (the alert list is what is checked)
    am = start_alertmanager(alertmanager_config("http://127.0.0.1:9/"), tmp_path / "am")
    try:
        finding = Finding(
            finding_id=f"ue-{env.tag}", cluster=CLUSTER, type=AnomalyType.UNCLEAN_ELECTION,
            severity=Severity.CRITICAL, entity_kind=EntityKind.PARTITION, entity="orders-0",
            first_seen_ms=now_ms() - 60_000, last_seen_ms=now_ms(), status=Status.OPEN,
            cause="unclean_election", explanation="orders-0: broker 3 became leader out of sync",
            suggested_action=ActionKind.PAGE_HUMAN, evidence={"topic": "orders", "partition": 0})
        section = env.section(enabled_actions=["page_human"], dry_run=False,
                              alertmanager_url=am.url)
        results = JsonLinesResultStore(env.tmp / "results.jsonl")
        [d] = env.step(section, results).run([finding], now_ms())
        assert d.outcome is Outcome.ACT and d.action.kind is ActionKind.PAGE_HUMAN
        ex = env.executor(section, results)
        try:
            result = drive(ex, results, d.action_id)
        finally:
            ex.close()
        assert result.status is ResultStatus.DONE, result.reason
        alerts = wait_until(lambda: [a for a in am.get_json("/api/v2/alerts")
                                     if a["labels"].get("finding") == finding.finding_id],
                            60, "the page in Alertmanager")
        labels = alerts[0]["labels"]
        assert labels["alertname"] == "KmonRemediationPage" and labels["severity"] == "page"
        assert labels["cluster"] == CLUSTER and labels["type"] == "unclean_election"
        assert "out of sync" in alerts[0]["annotations"]["description"]
    finally:
        am.stop()
