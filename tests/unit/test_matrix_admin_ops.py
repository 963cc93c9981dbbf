"""Administrative operations: the reassignment plans (pure) and a healthy ground truth that
allows a cluster-wide finding and never one broker."""

from __future__ import annotations

from collections import Counter

import pytest

from demo.faults.base import FaultRun
from matrix.mechanisms.admin_ops import (BrokerDecommission, PartitionIncrease,
                                         ReassignmentUnderLoad, rotated, spread, without_broker)

pytestmark = pytest.mark.unit

BROKERS = [1, 2, 3, 4, 5]


def test_spread_rotates_over_the_brokers():
    assert spread(3, BROKERS, 3) == [[1, 2, 3], [2, 3, 4], [3, 4, 5]]
    assert spread(2, [1, 2], 3) == [[1, 2], [2, 1]]


def test_rotation_moves_every_list_and_keeps_replicas_distinct():
    before = spread(12, BROKERS, 3)
    after = [rotated(r, BROKERS, 2) for r in before]
    assert after[0] == [3, 4, 5] and after[3] == [1, 2, 3]
    for b, a in zip(before, after):
        assert len(set(a)) == 3 and a != b
        assert len(set(a) - set(b)) == 2      # two new replicas to copy each


def test_without_broker_replaces_it_in_place_on_the_least_loaded():
    assignment = {("t", p): r for p, r in enumerate(spread(10, BROKERS, 3))}
    assignment[("solo", 0)] = [1]
    plan = without_broker(assignment, 1, BROKERS)
    assert set(plan) == {tp for tp, r in assignment.items() if 1 in r}
    for tp, reps in plan.items():
        old = assignment[tp]
        assert 1 not in reps and len(set(reps)) == len(reps) == len(old)
        assert [b for b in reps if b in old] == [b for b in old if b != 1]   # order kept
    load = Counter(b for tp, r in {**assignment, **plan}.items() for b in r)
    assert load[1] == 0 and max(load.values()) - min(load[b] for b in (2, 3, 4, 5)) <= 1


def test_without_broker_refuses_when_no_broker_is_left():
    with pytest.raises(ValueError, match="no broker left"):
        without_broker({("t", 0): [1, 2]}, 1, [1, 2])


@pytest.mark.parametrize("fault", [ReassignmentUnderLoad(), BrokerDecommission(),
                                   PartitionIncrease()], ids=lambda f: f.name)
def test_an_operation_expects_nothing_and_never_blames_one_broker(fault):
    assert fault.fault_class == "healthy" and fault.expect() == () and fault.parts == ()
    assert fault.observe_s >= 60
    truth = fault.truth(FaultRun(fault.name, 1_000, fault_ms=2_000), f"{fault.name}-5b")
    cluster_wide = {"type": "cluster_wide_slowness", "entity": "cluster:local",
                    "cause": "cluster_wide_slowness", "severity": "high"}
    assert truth.explains(cluster_wide) == (not isinstance(fault, PartitionIncrease))
    for one_broker in ("request_handlers_saturated", "slow_follower",
                       "remote_produce_slow_follower"):
        assert not truth.explains({"type": "slow_broker", "entity": "broker:2",
                                   "cause": one_broker, "severity": "warning"})
    assert truth.explains({"type": "offset_rewind", "entity": "group:g/t-0",
                           "cause": "commit_reordered", "severity": "info"})


def test_a_move_is_over_when_the_metadata_lists_the_new_replicas_all_in_sync():
    from types import SimpleNamespace as NS

    from matrix.mechanisms.admin_ops import reassigned

    def admin(replicas, isrs):
        md = NS(topics={"t": NS(partitions={0: NS(replicas=replicas, isrs=isrs)})})
        return NS(list_topics=lambda timeout=None: md)

    plan = {("t", 0): [3, 4, 5]}
    assert not reassigned(admin([1, 2, 3, 4, 5], [1, 2, 3]), plan)   # adding 4, 5
    assert not reassigned(admin([3, 4, 5], [3, 4]), plan)            # 5 not caught up
    assert reassigned(admin([3, 4, 5], [5, 3, 4]), plan)
    assert not reassigned(admin([3, 4, 5], [3, 4, 5]), {("gone", 0): [1]})
