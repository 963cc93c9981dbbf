"""An offline partition elected uncleanly by an operator: a critical, data-losing election
of that partition, its chain explained, nothing else."""

from __future__ import annotations

import pytest

from demo.faults.base import FaultRun
from matrix.mechanisms.forced_elections import ForcedUncleanElection, UncleanEnabledByOperator

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("cls", [ForcedUncleanElection, UncleanEnabledByOperator])
def test_the_operators_election_is_a_data_loss_page(cls):
    fault = cls()
    assert fault.fault_class == "unclean_election"
    topic, group = fault.topic, fault.group
    [e] = fault.expect()
    election = {"type": "unclean_election", "entity": f"{topic}-0",
                "cause": "unclean_leader_election", "severity": "critical"}
    assert e.matches(election)
    assert not e.matches({**election, "severity": "warning"})
    assert not e.matches({**election, "cause": "last_in_sync_replica_elected"})
    fault.collateral = ["solo-1"]
    truth = fault.truth(FaultRun(fault.name, 1_000, fault_ms=2_000), "x")
    assert truth.explains({"type": "log_truncation", "entity": f"{topic}-0",
                           "cause": "truncated_below_high_watermark", "severity": "critical"})
    assert truth.explains({"type": "offset_reset", "entity": f"group:{group}/{topic}-0",
                           "cause": "auto_reset_after_truncation", "severity": "high"})
    assert truth.explains({"type": "unclean_election", "entity": "solo-1",
                           "cause": "last_in_sync_replica_elected", "severity": "warning"})
    assert not truth.explains({"type": "unclean_election", "entity": "ledger3-0",
                               "cause": "unclean_leader_election", "severity": "critical"})


def test_the_two_ways_are_two_topics():
    assert ForcedUncleanElection().topic != UncleanEnabledByOperator().topic
