"""Compaction that never happens: whom the ground truth blames (the broker whose cleaner is
off; the partition an open transaction holds, never a broker's cleaner)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from demo.faults.base import FaultRun
from matrix.mechanisms.cleaning_blocked import (CleanerDisabled, OpenTransaction, any_of,
                                                partitions_on)

pytestmark = pytest.mark.unit


def test_partitions_on_a_broker_and_a_regex_of_exactly_them():
    topics = {"accounts": NS(topic="accounts", error=None, partitions={
                  0: NS(id=0, replicas=[3, 1, 4])}),
              "__consumer_offsets": NS(topic="__consumer_offsets", error=None, partitions={
                  0: NS(id=0, replicas=[2, 3, 4]), 1: NS(id=1, replicas=[1, 2, 3])}),
              "gone": NS(topic="gone", error="UNKNOWN", partitions={})}
    admin = NS(list_topics=lambda timeout=None: NS(topics=topics))
    on_one = partitions_on(admin, 1)
    assert on_one == ["__consumer_offsets-1", "accounts-0"]
    import re
    rx = any_of(on_one)
    assert re.fullmatch(rx, "accounts-0") and re.fullmatch(rx, "__consumer_offsets-1")
    assert not re.fullmatch(rx, "__consumer_offsets-0") and not re.fullmatch(rx, "accounts-01")


def test_cleaner_disabled_blames_the_broker_and_explains_its_partitions():
    fault = CleanerDisabled(broker=1)
    fault.hosted = ["__consumer_offsets-1", "accounts-0"]
    truth = fault.truth(FaultRun(fault.name, 1_000, fault_ms=5_000), "cleaner-disabled-5b")
    [e] = truth.expect
    assert e.matches({"type": "compaction_lag", "entity": "broker:1", "cause": "cleaner_stalled",
                      "severity": "high"})
    assert not e.matches({"type": "compaction_lag", "entity": "broker:1",
                          "cause": "cleaner_dead", "severity": "high"})
    assert truth.explains({"type": "compaction_lag", "entity": "__consumer_offsets-1",
                           "cause": "consumer_offsets_not_compacted", "severity": "high"})
    assert not truth.explains({"type": "compaction_lag", "entity": "__consumer_offsets-0",
                               "cause": "consumer_offsets_not_compacted", "severity": "high"})
    # another broker's cleaner is not this fault
    assert not truth.explains({"type": "compaction_lag", "entity": "broker:3",
                               "cause": "cleaner_stalled", "severity": "high"})


def test_cleaner_disabled_needs_a_replica_on_its_broker():
    with pytest.raises(ValueError, match="holds no replica"):
        CleanerDisabled(broker=2, replicas=(3, 1, 4)).prepare(NS(bootstrap="b:9092"))


def test_an_open_transaction_is_the_partitions_fault_not_a_brokers():
    fault = OpenTransaction(topic="carts")
    assert fault.explained() == ()
    [e] = fault.expect()
    assert e.matches({"type": "compaction_lag", "entity": "carts-0",
                      "cause": "compacted_partition_growing", "severity": "warning"})
    assert not e.matches({"type": "compaction_lag", "entity": "carts-0",
                          "cause": "compacted_key_space_growing", "severity": "warning"})
    truth = fault.truth(FaultRun(fault.name, 1_000, fault_ms=61_000), "open-transaction-5b")
    assert not truth.explains({"type": "compaction_lag", "entity": "broker:2",
                               "cause": "cleaner_falling_behind", "severity": "warning"})
