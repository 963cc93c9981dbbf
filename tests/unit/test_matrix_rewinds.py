"""The rewind mechanisms' pure parts: group hashing, seek targets, reset directions, and
the ground truth each states (no cluster)."""

from __future__ import annotations

import pytest

from matrix.mechanisms.rewind_clients import (
    coordinator_partition, java_string_hash, killable, reset_direction, seek_back_targets)
from matrix.mechanisms.rewinds import (
    ApplicationSeekCommit, CoordinatorFailover, OperatorResetEmptyGroup, StaleProcessCommit)
from matrix.mechanisms.rewinds_out_of_range import AutoResetOutOfRange


def finding(type_, entity, cause):
    return {"type": type_, "entity": entity, "cause": cause, "severity": "high"}


def test_java_string_hash_matches_java():
    # Values of java.lang.String.hashCode.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)   # Integer.MIN_VALUE
    assert java_string_hash("é") == 233


def test_coordinator_partition_maps_min_value_to_zero():
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    assert all(0 <= coordinator_partition(f"g{i}", 7) < 7 for i in range(100))


def test_seek_back_targets_stop_at_log_start_and_never_go_forward():
    assert seek_back_targets({0: 500, 1: 120, 2: 0}, 300, {0: 0, 1: 50, 2: 0}) == \
        {0: 200, 1: 50, 2: 0}


def test_reset_direction():
    assert reset_direction(1000, 0) == "rewind"      # committed past the end, to earliest
    assert reset_direction(1000, 700) == "rewind"    # ... to latest
    assert reset_direction(100, 400) == "forward"    # log start moved past it
    assert reset_direction(5, 5) == "none"


def test_killable_keeps_the_quorum():
    assert killable(1, [3]) and not killable(3, [3])
    assert killable(3, [1, 2, 3]) and not killable(2, [1, 2])
    assert killable(1, [3, 4, 5])


def test_member_rewinds_expect_their_group_only():
    seek = ApplicationSeekCommit()
    assert seek.fault_class == "rewind"
    (e,) = seek.expect()
    assert e.matches(finding("offset_rewind", "group:rw-seek-g/rw-seek-2", "application_seek"))
    assert not e.matches(finding("offset_rewind", "group:billing/orders-2", "application_seek"))
    assert not e.matches(finding("offset_rewind", "group:rw-seek-g/rw-seek-2", "operator_reset"))
    (s,) = StaleProcessCommit().expect()
    assert s.matches(finding("offset_rewind", "group:rw-stale-g/rw-stale-0", "stale_process"))
    (r,) = OperatorResetEmptyGroup("shift").expect()
    assert r.matches(finding("offset_rewind", "group:rw-reset-shift-g/rw-reset-shift-1",
                             "operator_reset"))


def test_out_of_range_rewind_expects_a_rewind_and_explains_the_resets():
    m = AutoResetOutOfRange("rewind", "earliest")
    (e,) = m.expect()
    assert e.type == "offset_rewind" and e.causes == ("auto_reset_after_out_of_range",)
    g = "group:rw-oor-rewind-earliest-g/rw-oor-rewind-earliest-0"
    assert any(x.matches(finding("offset_reset", g, "auto_reset_after_out_of_range"))
               for x in m.explained())
    assert any(x.matches(finding("offset_reset", g, "operator_reset_forward"))
               for x in m.explained())


def test_out_of_range_forward_expects_a_reset_and_no_rewind():
    m = AutoResetOutOfRange("forward")
    (e,) = m.expect()
    assert e.type == "offset_reset"
    assert e.matches(finding("offset_reset", "rw-oor-forward-earliest-1",
                             "auto_reset_after_out_of_range"))
    assert not m.explained()
    assert m.name != AutoResetOutOfRange("rewind").name


def test_coordinator_failover_expects_nothing_and_explains_only_rewinds_after_the_move():
    m = CoordinatorFailover()
    assert m.fault_class == "rewind_healthy" and m.expect() == ()
    assert m.parts == ()
    e, retried, loaded = m.explained()
    assert loaded.matches({"type": "slow_broker", "entity": "broker:1", "severity": "warning",
                           "cause": "network_threads_saturated"})
    assert retried.matches({"type": "offset_rewind", "entity": "group:billing/orders-2",
                            "cause": "commit_reordered", "severity": "info"})
    moved = {"type": "offset_rewind", "entity": "group:billing/orders-0",
             "cause": "stale_offset_after_coordinator_move", "severity": "high"}
    assert e.matches(moved)
    assert not e.matches({**moved, "cause": "member_commit"})
    assert not e.matches({**moved, "type": "unclean_election", "entity": "orders-0"})


def test_group_state_asks_again_while_the_coordinator_moves():
    """Seen in CI: describe 6 s after a kill -9 of the coordinator answered NOT_COORDINATOR
    (the broker not fenced yet). The admin here is a stand-in for the answers, not Kafka."""
    from concurrent.futures import Future

    from confluent_kafka import KafkaError, KafkaException

    from matrix.mechanisms import rewind_clients

    class Desc:
        members = [1, 2]

        class coordinator:
            id = 2

    answers = [KafkaException(KafkaError(KafkaError.NOT_COORDINATOR)), TimeoutError(), Desc()]

    class Admin:
        def describe_consumer_groups(self, groups):
            f = Future()
            a = answers.pop(0)
            f.set_exception(a) if isinstance(a, Exception) else f.set_result(a)
            return {groups[0]: f}

    assert rewind_clients.group_state(Admin(), "g", retry_s=5) == (2, 2)
    answers[:] = [KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))]
    with pytest.raises(KafkaException):
        rewind_clients.group_state(Admin(), "g", retry_s=5)
    # A function for the admin: a new client each attempt (a kept one may wait for ever
    # on the dead coordinator it has cached).
    made = []

    def new_admin():
        made.append(Admin())
        return made[-1]

    answers[:] = [TimeoutError(), TimeoutError(), Desc()]
    assert rewind_clients.group_state(new_admin, "g", retry_s=5) == (2, 2)
    assert len(made) == 3 and len({id(a) for a in made}) == 3
