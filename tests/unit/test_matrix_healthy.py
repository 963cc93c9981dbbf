"""The healthy mechanisms' pure parts: ground truth (nothing expected, only retried commits
explained, and the load an outage leaves on its partners where a broker is taken out),
the rolling-restart order, the join/leave schedule, reading ISRs and the active controller."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from demo.faults.base import FaultRun
from matrix.fault import COMMITS_RETRIED, PARTNERS_LOADED
from matrix.mechanisms import healthy
from matrix.mechanisms.cluster_ops import is_active, isr_without, under_replicated

pytestmark = pytest.mark.unit

ALL = [healthy.BrokerCrashRestart(), healthy.RollingRestart(), healthy.ControllerFailover(),
       healthy.Rebalances(), healthy.TopicChurn(), healthy.BurstyLoad()]
# the mechanisms that take a broker out
OUTAGES = (healthy.BrokerCrashRestart, healthy.RollingRestart, healthy.ControllerFailover)


@pytest.mark.parametrize("fault", ALL, ids=lambda f: f.name)
def test_healthy_ground_truth_expects_nothing_and_explains_only_retried_commits(fault):
    assert fault.fault_class == "healthy" and not fault.runs_until_detected
    explained = ((COMMITS_RETRIED, PARTNERS_LOADED) if isinstance(fault, OUTAGES)
                 else (COMMITS_RETRIED,))
    assert fault.expect() == () and fault.explained() == explained
    assert fault.parts == ()
    assert fault.observe_s >= 90      # late false findings are caught
    run = FaultRun(fault.name, 1_000, fault_ms=5_000, notes={"broker": 2})
    truth = fault.truth(run, f"{fault.name}-3b")
    assert truth.fault_class == "healthy" and truth.fault_ms == 5_000
    assert truth.expect == () and truth.explained == explained
    assert truth.notes == {"broker": 2}
    reordered = {"type": "offset_rewind", "entity": "group:billing/orders-2",
                 "cause": "commit_reordered", "severity": "info"}
    assert truth.explains(reordered)
    assert not truth.explains({**reordered, "cause": "member_commit", "severity": "warning"})
    loaded = {"type": "slow_broker", "entity": "broker:1", "severity": "warning",
              "cause": "request_handlers_saturated"}
    assert truth.explains(loaded) == isinstance(fault, OUTAGES)
    for finding in ({"type": "log_truncation", "entity": "orders-0", "severity": "critical"},
                    {"type": "slow_broker", "entity": "broker:2", "severity": "warning"},
                    {**loaded, "severity": "high"},
                    {**loaded, "cause": "slow_follower"}):
        assert not truth.explains(finding)


def test_names_are_unique():
    assert len({f.name for f in ALL}) == len(ALL)


def test_rolling_restart_order_brokers_then_controllers_active_last():
    order = healthy.RollingRestart.order
    assert order([1, 2, 3], [3], 3) == [1, 2, 3]
    assert order([1, 2, 3, 4, 5], [3, 4, 5], 4) == [1, 2, 3, 5, 4]
    assert order([1, 2, 3], [1, 2, 3], None) == [1, 2, 3]
    assert order([1, 2, 3, 4, 5, 6], [4, 5, 6], 6) == [1, 2, 3, 4, 5, 6]


def test_rebalance_schedule_two_joins_two_leaves():
    steps = ["join" if healthy.joins_at(k, 2) else "leave" for k in range(8)]
    assert steps == ["join", "join", "leave", "leave"] * 2
    assert [healthy.joins_at(k, 1) for k in range(4)] == [True, False, True, False]


def metadata(brokers, parts):
    """An AdminClient stand-in whose list_topics answers `parts`:
    {topic: [(leader, replicas, isrs), ...]}."""
    topics = {t: NS(topic=t, error=None, partitions={
        i: NS(id=i, leader=l, replicas=r, isrs=s) for i, (l, r, s) in enumerate(ps)})
        for t, ps in parts.items()}
    md = NS(brokers={b: None for b in brokers}, topics=topics)
    return NS(list_topics=lambda timeout=None: md)


def test_under_replicated_and_isr_without():
    whole = metadata([1, 2, 3], {"orders": [(1, [1, 2, 3], [3, 1, 2]), (2, [2, 3, 1], [1, 2, 3])]})
    assert under_replicated(whole, {1, 2, 3}) == []
    assert isr_without(whole, 2) == []
    short = metadata([1, 3], {"orders": [(1, [1, 2, 3], [1, 3]), (3, [2, 3, 1], [3, 1])],
                              "__consumer_offsets": [(-1, [2], [])]})
    got = under_replicated(short, {1, 2, 3})
    assert got[0] == "broker 2 not in metadata" and len(got) == 4
    assert any(g.startswith("__consumer_offsets-0 leader -1") for g in got)
    assert isr_without(short, 2) == ["orders-0", "orders-1", "__consumer_offsets-0"]


def test_active_controller_from_exporter_page():
    page = ("# HELP kafka_controller_kafkacontroller_activecontrollercount x\n"
            "# TYPE kafka_controller_kafkacontroller_activecontrollercount gauge\n"
            "kafka_controller_kafkacontroller_activecontrollercount 1.0\n")
    assert is_active(page)
    assert not is_active(page.replace(" 1.0", " 0.0"))
    assert not is_active("kafka_network_requestmetrics_totaltimems 3.0\n")


def test_producer_churn_expects_nothing():
    from matrix.mechanisms.producer_churn import ProducerChurn

    fault = ProducerChurn()
    assert fault.fault_class == "healthy" and fault.expect() == ()
    assert fault.explained() == (COMMITS_RETRIED,) and fault.observe_s >= 90


def test_a_group_member_logs_where_the_client_log_agent_looks_and_takes_more_settings():
    from matrix.mechanisms.healthy_clients import GroupMember

    m = GroupMember("b:9092", "g", ("t",), "g-consumer", "/tmp", log_name="g",
                    conf={"topic.metadata.refresh.interval.ms": 5000})
    assert m.log_name == "g" and m.conf == {"topic.metadata.refresh.interval.ms": 5000}
    assert GroupMember("b:9092", "g", ("t",), "g-extra-1", "/tmp").log_name == "g-extra-1"
