"""What the executor would do to the cluster as it is: plans and precondition checks over
snapshots of live state, and the plumbing around the Java reassignment call."""

from __future__ import annotations

import pytest

from remediation.config import RemediationSection
from remediation.plans import (GroupState, LeadershipPlan, PartitionState, Reassignment,
                               Refused, RestorePlan, new_replica_order, plan_cancel,
                               plan_leadership_move, plan_restore, unknown_preconditions)
from remediation.reassignments import (ReassignmentError, java_client_properties,
                                       parse_alter_output, parse_list_output, plan_text,
                                       properties_text)

MOVE_PRE = {"broker_registered": 2, "no_reassignment_in_progress": True,
            "other_in_sync_replica": True, "implicated_brokers": 1}
WIDE = RemediationSection(max_cluster_share=0.5)


def p(topic, part, leader, replicas, isr=None):
    return PartitionState(topic, part, leader, tuple(replicas), tuple(isr or replicas))


@pytest.mark.parametrize("replicas,isr,broker,expected", [
    ((2, 3, 1), (2, 3, 1), 2, (3, 1, 2)),      # next replica in order takes over
    ((2, 3, 1), (2, 1), 2, (1, 3, 2)),         # an out-of-sync replica is not made preferred
    ((3, 2, 1), (3, 2, 1), 2, (3, 1, 2)),      # B not first: only moved last
    ((2,), (2,), 2, None),                     # replication factor 1: nowhere to go
    ((2, 3), (2,), 2, None),                   # the only other replica is out of sync
], ids=["in_sync_follower", "skips_out_of_sync", "b_in_the_middle", "rf1", "no_other_isr"])
def test_new_replica_order(replicas, isr, broker, expected):
    assert new_replica_order(replicas, isr, broker) == expected


def test_leadership_plan_covers_led_and_preferred_partitions_and_says_what_it_leaves():
    parts = [p("t", 0, 2, (2, 3, 1)),               # led and preferred: reorder + elect
             p("t", 1, 3, (2, 3, 1)),               # preferred, not leading: reorder only
             p("t", 2, 1, (1, 2, 3)),               # neither: untouched
             p("t", 3, 2, (3, 2, 1)),               # led, not preferred: reorder + elect
             p("solo", 0, 2, (2,)),                 # RF 1: left alone
             p("busy", 0, 2, (2, 3, 1))]            # reassignment in progress: left alone
    busy = {("busy", 0): Reassignment("busy", 0, (2, 3, 1), (3,), ())}
    plan = plan_leadership_move(2, parts, busy, {1, 2, 3}, MOVE_PRE, WIDE)
    assert isinstance(plan, LeadershipPlan)
    assert [(m.topic, m.partition, m.new_replicas, m.elect) for m in plan.moves] == [
        ("t", 0, (3, 1, 2), True), ("t", 1, (3, 1, 2), False), ("t", 3, (3, 1, 2), True)]
    assert [(t, q) for t, q, _ in plan.left_alone] == [("busy", 0), ("solo", 0)]
    assert "2 it leads" in plan.describe() and "2 left alone" in plan.describe()
    assert plan.details()["moves"][0]["new_replicas"] == [3, 1, 2]


@pytest.mark.parametrize("broker,registered,pre,config,reason", [
    (2, {1, 3}, MOVE_PRE, WIDE, "not in the cluster metadata"),
    (2, {1, 2, 3}, {**MOVE_PRE, "implicated_brokers": 2}, WIDE,
     "over remediation.max_cluster_share"),
    (2, {1, 2, 3}, MOVE_PRE, RemediationSection(), "1 of 3 live brokers"),
    (4, {1, 2, 3, 4}, {**MOVE_PRE, "broker_registered": 4}, WIDE, "leads no partition"),
], ids=["broker_gone", "too_many_slow", "one_of_three_over_default_share", "leads_nothing"])
def test_leadership_plan_refusals(broker, registered, pre, config, reason):
    parts = [p("t", 0, 2, (2, 3, 1)), p("t", 1, 3, (3, 1, 2))]
    out = plan_leadership_move(broker, parts, {}, registered, pre, config)
    assert isinstance(out, Refused) and reason in out.reason, out


OP = {"op": "restore_group_offsets", "group": "g",
      "partitions": [{"topic": "t", "partition": 0, "offset": 60, "direction": "forward"},
                     {"topic": "t", "partition": 1, "offset": 60, "direction": "forward"}]}
RESTORE_PRE = {"group_has_no_members": True, "offset_within_log": True, "still_displaced": True}
EMPTY = GroupState("g", "EMPTY", 0)
BOUNDS = {("t", 0): (0, 100), ("t", 1): (0, 100)}


def test_restore_plan_for_an_empty_group_still_rewound():
    plan = plan_restore(OP, RESTORE_PRE, EMPTY, {("t", 0): 10, ("t", 1): 10}, BOUNDS)
    assert isinstance(plan, RestorePlan)
    assert plan.offsets == (("t", 0, 60), ("t", 1, 60))
    assert plan.details()["offsets"][0]["committed_before"] == 10


@pytest.mark.parametrize("group,committed,bounds,left_or_reason", [
    (GroupState("g", "STABLE", 2), {("t", 0): 10, ("t", 1): 10}, BOUNDS, "2 active member(s)"),
    (EMPTY, {("t", 0): 60, ("t", 1): 75}, BOUNDS, "already at or past"),
    (EMPTY, {("t", 0): 10, ("t", 1): 10}, {("t", 0): (70, 100), ("t", 1): (0, 50)},
     "no longer in the log"),
    (EMPTY, {("t", 0): 10, ("t", 1): 10}, {}, "partition not found"),
], ids=["active_members", "recovered_by_itself", "good_offset_gone", "topic_deleted"])
def test_restore_plan_refusals(group, committed, bounds, left_or_reason):
    out = plan_restore(OP, RESTORE_PRE, group, committed, bounds)
    assert isinstance(out, Refused) and left_or_reason in out.reason, out


def test_restore_plan_leaves_the_partitions_that_recovered_and_restores_the_rest():
    plan = plan_restore(OP, RESTORE_PRE, EMPTY, {("t", 0): 80, ("t", 1): None}, BOUNDS)
    assert plan.offsets == (("t", 1, 60),)   # no commit at all counts as displaced
    assert plan.left_alone[0][:2] == ("t", 0)


def test_a_backward_restore_is_done_once_the_group_is_at_or_below_the_good_offset():
    op = {**OP, "partitions": [{"topic": "t", "partition": 0, "offset": 60,
                                "direction": "backward"}]}
    assert isinstance(plan_restore(op, RESTORE_PRE, EMPTY, {("t", 0): 90}, BOUNDS), RestorePlan)
    assert isinstance(plan_restore(op, RESTORE_PRE, EMPTY, {("t", 0): 60}, BOUNDS), Refused)


def test_cancel_plan_keeps_only_reassignments_still_in_progress():
    op = {"op": "cancel_reassignment", "partitions": [{"topic": "t", "partition": 0},
                                                      {"topic": "t", "partition": 1}]}
    busy = {("t", 1): Reassignment("t", 1, (1, 2), (2,), ())}
    plan = plan_cancel(op, {"reassignment_in_progress": True}, busy)
    assert plan.partitions == (("t", 1),) and plan.left_alone[0][:2] == ("t", 0)
    assert isinstance(plan_cancel(op, {"reassignment_in_progress": True}, {}), Refused)


def test_unknown_preconditions_and_operations_are_refused():
    assert unknown_preconditions("reorder_and_elect", MOVE_PRE) is None
    bad = unknown_preconditions("reorder_and_elect", {**MOVE_PRE, "moon_is_full": True})
    assert "moon_is_full" in bad.reason
    assert "unknown operation" in unknown_preconditions("reboot", {}).reason


# --- the Java reassignment bridge's text formats ----------------------------------------

def test_properties_are_escaped_for_java():
    text = properties_text({"sasl.jaas.config": 'M required username="a" password="p\\w";',
                            "bootstrap.servers": "h:9092"})
    assert "bootstrap.servers=h:9092\n" in text
    assert 'password="p\\\\w"' in text


def test_java_properties_come_from_the_spark_option_spelling():
    props = java_client_properties({"kafka.bootstrap.servers": "h:1",
                                    "kafka.security.protocol": "SASL_SSL", "startingOffsets": "x"})
    assert props == {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
                     "client.id": "kmon-remediation"}


def test_plan_and_output_lines():
    assert plan_text({("t", 0): (3, 1, 2), ("t", 1): None}) == "t\t0\t3,1,2\nt\t1\t-\n"
    assert parse_alter_output("ok\tt\t0\nerror\tt\t1\tNoReassignmentInProgressException: x\n") == {
        ("t", 0): None, ("t", 1): "NoReassignmentInProgressException: x"}
    assert parse_list_output("t\t3\t1,2,3\t3\t\n") == {
        ("t", 3): Reassignment("t", 3, (1, 2, 3), (3,), ())}
    with pytest.raises(ReassignmentError):
        parse_list_output("garbage\n")
